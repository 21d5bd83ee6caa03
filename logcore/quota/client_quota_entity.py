"""A client quota entity and its settings, as Kafka has them (KIP-13, KIP-55, KIP-124, KIP-546).

An entity names a user (the authenticated principal's name: "alice" for User:alice, ANONYMOUS
without authentication), a client id, or both; either part may be the default (Kafka's
<default>, here None). Its settings are producer_byte_rate and consumer_byte_rate (bytes per
second) and request_percentage (percent of one request handler's time per quota window).

Which entity applies to a connection is Kafka's order, most precise first, decided per setting:

    users/<user>/clients/<client-id>, users/<user>/clients/<default>, users/<user>,
    users/<default>/clients/<client-id>, users/<default>/clients/<default>, users/<default>,
    clients/<client-id>, clients/<default>

Where the entity is kept it is named by its path: "users/<user>/clients/<client-id>" with both
names sanitized as Kafka's Sanitizer does (UTF-8 bytes other than ASCII letters, digits and
".-_" percent-encoded), "<default>"
for a default part: the ZooKeeper path below /config, and the key of the single broker's file.
"""
from __future__ import annotations

import math
import urllib.parse
from dataclasses import dataclass

from logcore.errors import InvalidConfigError

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
DEFAULT = "<default>"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
# quota key -> whether its value is a whole number (Kafka's LONG) rather than a DOUBLE
QUOTA_KEYS: dict[str, bool] = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}
# Kafka's other quota keys, refused by name (what seglog does not enforce is not accepted)
UNENFORCED_KEYS = {"controller_mutation_rate": "seglog does not throttle topic and partition mutations",
                   "connection_creation_rate": "seglog does not limit connection creation per IP"}


class QuotaEntityError(InvalidConfigError):
    """An entity or a setting Kafka's AlterClientQuotas / DescribeClientQuotas would refuse."""


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """`user`, `client_id`: absent (False), the default (None) or a name."""
    user: str | None | bool = False
    client_id: str | None | bool = False

    @classmethod
    def from_parts(cls, parts) -> "ClientQuotaEntity":
        """From (entity_type, entity_name) pairs as the requests carry them (name None: default)."""
        found: dict[str, str | None] = {}
        for kind, name in parts:
            if kind in found:
                raise QuotaEntityError(f"Duplicate {kind} entity type in the quota entity")
            if kind == IP:
                raise QuotaEntityError("seglog does not keep IP quotas (connection_creation_rate)")
            if kind not in (USER, CLIENT_ID):
                raise QuotaEntityError(f"Unhandled client quota entity type: {kind}")
            if name is not None and name == "" and kind == USER:
                raise QuotaEntityError("The user entity name must not be empty")
            found[kind] = name
        if not found:
            raise QuotaEntityError("The quota entity names no user and no client-id")
        return cls(found.get(USER, False), found.get(CLIENT_ID, False))

    @classmethod
    def from_path(cls, path: str) -> "ClientQuotaEntity":
        """From its path: "users/<u>", "users/<u>/clients/<c>" or "clients/<c>"."""
        parts = path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "users":
            return cls(_desanitized(parts[1]), False)
        if len(parts) == 2 and parts[0] == "clients":
            return cls(False, _desanitized(parts[1]))
        if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
            return cls(_desanitized(parts[1]), _desanitized(parts[3]))
        raise QuotaEntityError(f"{path!r} is not a client quota entity path")

    @property
    def path(self) -> str:
        if self.user is False:
            return f"clients/{_sanitized(self.client_id)}"
        if self.client_id is False:
            return f"users/{_sanitized(self.user)}"
        return f"users/{_sanitized(self.user)}/clients/{_sanitized(self.client_id)}"

    def parts(self) -> list[tuple[str, str | None]]:
        """(entity_type, entity_name) pairs as the responses carry them."""
        out = []
        if self.user is not False:
            out.append((USER, self.user))
        if self.client_id is not False:
            out.append((CLIENT_ID, self.client_id))
        return out

    def __str__(self) -> str:
        return self.path


def candidates(user: str, client_id: str) -> list[tuple[ClientQuotaEntity, tuple[str, str]]]:
    """The entities that may apply to (user, client_id), most precise first, each with the key
    of the rate it limits (Kafka's metric tags): the user's and the client id's own names where
    the entity names them, specifically or by default, "" where it does not."""
    return [
        (ClientQuotaEntity(user, client_id), (user, client_id)),
        (ClientQuotaEntity(user, None), (user, client_id)),
        (ClientQuotaEntity(user, False), (user, "")),
        (ClientQuotaEntity(None, client_id), (user, client_id)),
        (ClientQuotaEntity(None, None), (user, client_id)),
        (ClientQuotaEntity(None, False), (user, "")),
        (ClientQuotaEntity(False, client_id), ("", client_id)),
        (ClientQuotaEntity(False, None), ("", client_id)),
    ]


def check_quota_value(key: str, value: float) -> str:
    """The value of quota `key` as it is stored (Kafka's: "1024" for the byte rates, "200.0"
    for request_percentage); QuotaEntityError for an unknown key or a value that is not one."""
    if key in UNENFORCED_KEYS:
        raise QuotaEntityError(f"{key}: {UNENFORCED_KEYS[key]}")
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise QuotaEntityError(f"Invalid configuration key {key} (client quotas are"
                               f" {', '.join(QUOTA_KEYS)})")
    value = float(value)
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise QuotaEntityError(f"Configuration {key} must be a positive number, not {value}")
    if whole:
        rounded = int(value + 1e-6)
        if abs(rounded - value) > 1e-6:
            raise QuotaEntityError(f"{key} cannot be a fractional value.")
        return str(rounded)
    return repr(value)


def parse_quota_config(config: dict[str, str]) -> dict[str, float]:
    """The quota settings of an entity's stored config map (other keys, such as the SCRAM
    credentials kept in the same user znode, left out); a value that is not a number is dropped."""
    out = {}
    for key, raw in config.items():
        if key in QUOTA_KEYS:
            try:
                value = float(raw)
            except (TypeError, ValueError):
                continue
            if value > 0 and not math.isinf(value):
                out[key] = value
    return out


def principal_user(principal: str) -> str:
    """The user of a principal ("User:alice" -> "alice"), the name Kafka's user quotas use."""
    kind, sep, name = principal.partition(":")
    return name if sep else principal


def _sanitized(name: str | None) -> str:
    if name is None:
        return DEFAULT
    # Java's URLEncoder keeps ASCII letters, digits and ".-_*"; Kafka then writes "*" as %2A
    return "".join(chr(b) if chr(b) in _KEPT else f"%{b:02X}" for b in name.encode())


_KEPT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def _desanitized(name: str) -> str | None:
    if name == DEFAULT:
        return None
    return urllib.parse.unquote(name)
