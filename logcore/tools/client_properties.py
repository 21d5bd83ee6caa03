"""Kafka client properties for the commands that talk to brokers: `--command-config FILE` (the
.properties file Kafka's tools take) and `--producer-property` / `--consumer-property` items.

Each command names the keys it applies; a key it does not apply is refused with the list of
those it does, never silently ignored. Every command applies the security settings, Kafka's
client names (`security.protocol` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, `ssl.*` stores,
`sasl.mechanism` PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512 with `sasl.jaas.config`), checked when
read (logcore.security.client_security); `client_security(props)` is what the connections use.
"""
from __future__ import annotations

from typing import Sequence

from logcore.errors import InvalidConfigError
from logcore.log.properties_file import load_properties
from logcore.security.client_security import CLIENT_SECURITY_KEYS, ClientSecurity
from logcore.tools.arguments import _configs, _properties_file

# Keys every broker command applies.
COMMON = ("client.id", "request.timeout.ms") + CLIENT_SECURITY_KEYS


def client_properties(path: str | None, items: Sequence[str] | None, applied: Sequence[str], *,
                      command: str, item_option: str) -> dict[str, str]:
    """The properties of `--command-config path`, then the `item_option k=v` items over them
    (as Kafka's tools give the command line the last word), checked against `applied`."""
    props: dict[str, str] = {}
    if path is not None:
        for name, value in load_properties(_properties_file(path, "--command-config")).items():
            props[name] = value
            _check(name, value, applied, command, f"--command-config {path}")
    for name, value in _configs(items, item_option).items():
        _check(name, value, applied, command, item_option)
        props[name] = value
    where = f"--command-config {path}" if path is not None else item_option
    ClientSecurity.from_properties(props, where)         # a bad setting fails now, naming it
    return props


def client_security(props: dict[str, str]) -> ClientSecurity | None:
    """The connections' TLS and SASL from checked properties (None: PLAINTEXT)."""
    return ClientSecurity.from_properties(props, "client properties")


def _check(name: str, value: str, applied: Sequence[str], command: str, where: str) -> None:
    if name.startswith(("ssl.", "sasl.")) and name not in CLIENT_SECURITY_KEYS:
        raise InvalidConfigError(f"{where}: {name} is not supported by seglog's clients; the security settings"
                                 f" they apply: {', '.join(CLIENT_SECURITY_KEYS)}")
    if name == "bootstrap.servers":
        raise InvalidConfigError(f"{where}: bootstrap.servers is taken from --bootstrap-server; leave it out")
    if name not in applied and name not in COMMON:
        raise InvalidConfigError(f"{where}: {name} is unknown to or not supported by {command}; it applies "
                                 + ", ".join(sorted(set(applied) | set(COMMON))))


def int_property(props: dict[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    if name not in props:
        return default
    try:
        value = int(props[name])
    except ValueError:
        raise InvalidConfigError(f"{name} must be a whole number, got {props[name]!r}") from None
    if value < minimum:
        raise InvalidConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def timeout_s(props: dict[str, str], default_ms: int = 30_000) -> float:
    """The request timeout the properties give (request.timeout.ms), in seconds."""
    return int_property(props, "request.timeout.ms", default_ms, minimum=1) / 1000
