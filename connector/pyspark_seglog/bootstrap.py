"""The kafka.bootstrap.servers option, parsed without loading the Kafka protocol package.

Option parsing runs in every Spark task that unpickles a reader or writer; the broker client
(and its protocol schemas) loads only when a broker is used.
"""
from __future__ import annotations

from logcore.errors import InvalidConfigError


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` (IPv6 as `[addr]:port`), as Kafka's bootstrap.servers."""
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
            raise InvalidConfigError(
                f"option kafka.bootstrap.servers={servers!r}: {item!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise InvalidConfigError(
            f"option kafka.bootstrap.servers={servers!r}: give at least one host:port")
    return out
