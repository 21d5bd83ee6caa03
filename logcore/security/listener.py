"""Kafka's listeners: `listeners=NAME://host:port,...`, each name's security protocol from
`listener.security.protocol.map` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; the four protocol
names map to themselves by default), `advertised.listeners` (the addresses clients are given, by
listener name), and the inter-broker listener (`inter.broker.listener.name`, else the listener
named by `security.inter.broker.protocol`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from logcore.errors import InvalidConfigError

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)

_ENDPOINT = re.compile(r"^(?:(?P<name>[A-Za-z_][A-Za-z0-9_-]*)://)?(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)$")


@dataclass(frozen=True)
class Listener:
    name: str
    protocol: str
    host: str          # "" (every interface) as written
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    @property
    def bind_host(self) -> str:
        return self.host or "0.0.0.0"

    def endpoint(self, host: str | None = None, port: int | None = None) -> str:
        h = self.host if host is None else host
        h = f"[{h}]" if ":" in h else h
        return f"{self.name}://{h}:{self.port if port is None else port}"


def protocol_map(items: tuple[str, ...], where: str) -> dict[str, str]:
    """listener.security.protocol.map as {listener name: protocol}."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise InvalidConfigError(f"{where}: listener.security.protocol.map: {item!r} is not NAME:PROTOCOL"
                                     f" with PROTOCOL one of {', '.join(PROTOCOLS)}")
        if name in out:
            raise InvalidConfigError(f"{where}: listener.security.protocol.map names {name} twice")
        out[name] = protocol
    return out


def parse_listeners(values: tuple[str, ...], protocols: dict[str, str], setting: str, where: str) -> list[Listener]:
    """The listeners of `listeners` or `advertised.listeners` (`setting`): names unique, each
    name in the protocol map; an entry without a name is a PLAINTEXT listener."""
    out: list[Listener] = []
    for value in values:
        m = _ENDPOINT.match(value.strip())
        if m is None:
            raise InvalidConfigError(f"{where}: {setting}: {value!r} is not NAME://host:port")
        name = (m["name"] or PLAINTEXT).upper()
        if name not in protocols:
            raise InvalidConfigError(
                f"{where}: {setting}: listener {name} has no security protocol: add {name}:<protocol> to"
                f" listener.security.protocol.map (one of {', '.join(PROTOCOLS)})")
        if any(listener.name == name for listener in out):
            raise InvalidConfigError(f"{where}: {setting} names listener {name} twice")
        out.append(Listener(name, protocols[name], m["host"].strip("[]"), int(m["port"])))
    ports = [l.port for l in out if l.port]
    if setting == "listeners" and len(ports) != len(set(ports)):
        raise InvalidConfigError(f"{where}: listeners: two listeners on the same port ({','.join(values)})")
    return out
