"""Kafka's `bootstrap.servers` lists (`host:port[,host:port...]`), parsed without loading the
protocol schemas (option parsing runs in places that never talk to a broker)."""
from __future__ import annotations

from logcore.errors import InvalidConfigError


def parse_servers(servers: str, option: str = "bootstrap.servers") -> list[tuple[str, int]]:
    """`host:port[,host:port...]` (IPv6 as `[addr]:port`, a listener's `PROTOCOL://` prefix
    allowed), as Kafka's bootstrap.servers; errors name `option` and the bad item."""
    out = []
    for item in str(servers).split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:                 # a listener spelled with its protocol
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConfigError(f"option {option}={servers!r}: {item!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise InvalidConfigError(f"option {option}={servers!r}: give at least one host:port")
    return out
