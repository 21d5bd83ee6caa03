"""The HTTP endpoint Prometheus scrapes: `metrics.listener=http://host:port` (port 0 picks a free
one), served by prometheus_client's WSGI server in a daemon thread, on the broker's own registry.
Any path answers the exposition text (/metrics is what Prometheus asks by default)."""
from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, start_http_server

from logcore.errors import InvalidConfigError

_ADDRESS = re.compile(r"^http://(?P<host>\[[^\]]+\]|[^:/\[\]]+):(?P<port>\d{1,5})/?$")


def parse_listener(value: str) -> tuple[str, int]:
    """(host, port) of a `metrics.listener` value; a clear error for anything else."""
    m = _ADDRESS.match(value.strip())
    if m is None or int(m["port"]) > 65535:
        raise InvalidConfigError(
            f"metrics.listener={value!r} is not http://host:port (e.g. http://127.0.0.1:9404; port 0"
            f" picks a free port)")
    return m["host"].strip("[]"), int(m["port"])


def valid_listener(value: str) -> bool:
    """For the config's validator: empty (no endpoint) or http://host:port."""
    if not value:
        return True
    try:
        parse_listener(value)
    except InvalidConfigError:
        return False
    return True


class MetricsEndpoint:
    """The running endpoint: `address` is where it listens (the bound port when 0 was asked)."""

    def __init__(self, registry: CollectorRegistry, listener: str):
        host, port = parse_listener(listener)
        try:
            self._server, self._thread = start_http_server(port, host, registry)
        except OSError as exc:
            raise InvalidConfigError(
                f"metrics.listener={listener}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        bound = self._server.server_address
        self.address: tuple[str, int] = (bound[0], bound[1])

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
