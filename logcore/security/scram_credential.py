"""SCRAM credentials as Kafka stores them (ZooKeeper /config/users/<user>, config key the
mechanism name): `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>` (RFC 5802's
StoredKey and ServerKey; the password itself is never stored).

AlterUserScramCredentials sends the salted password (the client salted and hashed it), from
which the broker derives the stored and server keys here.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

SCRAM_SHA_256, SCRAM_SHA_512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
# mechanism -> (hash name, Kafka's ScramMechanism type id in AlterUserScramCredentials)
MECHANISMS = {SCRAM_SHA_256: ("sha256", 1), SCRAM_SHA_512: ("sha512", 2)}
MECHANISM_BY_TYPE = {type_id: name for name, (_, type_id) in MECHANISMS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384       # Kafka's bounds for both mechanisms
DEFAULT_ITERATIONS = 4096


def _hmac(key: bytes, data: bytes, hash_name: str) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def salted_password(password: str, salt: bytes, iterations: int, mechanism: str) -> bytes:
    """RFC 5802's Hi(Normalize(password), salt, i) (the password taken as UTF-8, as Kafka does)."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted(cls, mechanism: str, salt: bytes, salted: bytes, iterations: int) -> "ScramCredential":
        h = MECHANISMS[mechanism][0]
        client_key = _hmac(salted, b"Client Key", h)
        return cls(mechanism, salt, hashlib.new(h, client_key).digest(), _hmac(salted, b"Server Key", h), iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                      salt: bytes | None = None) -> "ScramCredential":
        salt = os.urandom(24) if salt is None else salt
        return cls.from_salted(mechanism, salt, salted_password(password, salt, iterations, mechanism), iterations)

    def to_config(self) -> str:
        b64 = lambda b: base64.b64encode(b).decode()      # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},server_key={b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_config(cls, mechanism: str, text: str) -> "ScramCredential":
        """ValueError when `text` is not Kafka's credential string."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(mechanism, base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a {mechanism} credential (salt=..,stored_key=..,server_key=..,iterations=..):"
                             f" {type(exc).__name__} {exc}") from None


def credentials_of(config: dict[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a user's config znode ({mechanism: credential}); entries that
    are not SCRAM (quotas) or cannot be read are left out."""
    out = {}
    for name, value in config.items():
        if name in MECHANISMS:
            try:
                out[name] = ScramCredential.from_config(name, value)
            except ValueError:
                continue
    return out
