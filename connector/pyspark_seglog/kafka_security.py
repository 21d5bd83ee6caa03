"""Spark's Kafka security options on the connector's broker path: `kafka.security.protocol`
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `kafka.ssl.*` stores (PEM, PKCS12) and
`kafka.sasl.mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with `kafka.sasl.jaas.config`.

They are Kafka's client properties with Spark's `kafka.` prefix, so the translation is
logcore.security.client_security's, the one the CLI's --command-config uses. A `KafkaSecurity`
keeps the properties themselves (Spark ships the options to the executors; an SSL context does
not pickle) and builds the connections' ClientSecurity once per process. A kafka.ssl.* or
kafka.sasl.* setting outside what that translation applies (OAUTHBEARER's and GSSAPI's settings,
ssl.keymanager.algorithm, ...) is refused by name, never ignored.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from logcore.errors import InvalidConfigError
from logcore.security.client_security import CLIENT_SECURITY_KEYS, ClientSecurity

PREFIX = "kafka."
WHERE = "Spark's kafka.* security options"
_BUILT: dict[tuple, ClientSecurity | None] = {}
_LOCK = threading.Lock()


def _setting(name: str) -> str:
    key = name.lower()
    return key[len(PREFIX):] if key.startswith(PREFIX) else key


def is_security_option(name: str) -> bool:
    setting = _setting(name)
    return setting == "security.protocol" or setting.startswith(("ssl.", "sasl."))


def check_security_option(name: str, value) -> None:
    """InvalidConfigError for a kafka.* security option the connector cannot apply."""
    setting = _setting(name)
    if setting.startswith(("ssl.", "sasl.")) and setting not in CLIENT_SECURITY_KEYS:
        raise InvalidConfigError(
            f"option {name} is not supported by the connector's broker path (refused rather than"
            f" ignored); the security options it applies: "
            + ", ".join(PREFIX + k for k in CLIENT_SECURITY_KEYS))


@dataclass(frozen=True)
class KafkaSecurity:
    """The security properties (Kafka's names, without `kafka.`) of the broker connections."""
    props: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_options(cls, options, *, has_bootstrap: bool) -> "KafkaSecurity":
        """From the (lower-cased) options; checked now, so a bad setting fails on the driver,
        naming it (the stores are read, the JAAS line parsed)."""
        props = {}
        for name, value in options.items():
            if value is not None and is_security_option(name) and str(name).lower().startswith(PREFIX):
                check_security_option(name, value)
                props[_setting(name)] = str(value)
        security = cls(tuple(sorted(props.items())))
        if security.protocol != "PLAINTEXT" and not has_bootstrap:
            raise InvalidConfigError(
                f"option(s) {', '.join(PREFIX + k for k in sorted(props))} secure the connections through"
                " kafka.bootstrap.servers, which is not given; give it, or leave them out")
        security.client()
        return security

    @property
    def protocol(self) -> str:
        return (dict(self.props).get("security.protocol") or "PLAINTEXT").strip().upper()

    def client(self) -> ClientSecurity | None:
        """The connections' TLS and SASL (None: PLAINTEXT), built once per process."""
        with _LOCK:
            if self.props not in _BUILT:
                _BUILT[self.props] = ClientSecurity.from_properties(dict(self.props), WHERE)
            return _BUILT[self.props]

    def __repr__(self) -> str:          # never the passwords, in logs or plans
        return f"KafkaSecurity({self.protocol})"


PLAINTEXT = KafkaSecurity()
