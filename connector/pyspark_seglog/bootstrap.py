"""The kafka.bootstrap.servers option, parsed without loading the Kafka protocol package.

Option parsing runs in every Spark task that unpickles a reader or writer; the broker client
(and its protocol schemas) loads only when a broker is used.
"""
from __future__ import annotations

from logcore.wire.servers import parse_servers


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` (IPv6 as `[addr]:port`), as Kafka's bootstrap.servers."""
    return parse_servers(servers, "kafka.bootstrap.servers")
