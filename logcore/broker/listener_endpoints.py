"""Which address names a broker for a client: the endpoint of the listener the client came in
on (Kafka's rule: a client on the SSL listener is sent to every broker's SSL endpoint; a broker
without that listener is left out of Metadata).

The handlers answer with each broker's registered host and port, the inter-broker listener's;
`rewrite` maps the brokers named in Metadata, FindCoordinator and DescribeCluster answers to the
client's listener: this broker's from its own advertised endpoints, the others' from the
endpoints of their registrations (/brokers/ids/<id>).
"""
from __future__ import annotations

import re

from logcore.wire.api_keys import METADATA

FIND_COORDINATOR, DESCRIBE_CLUSTER = 10, 60
_ENDPOINT = re.compile(r"^(?P<name>[^:/]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


def endpoint_map(endpoints) -> dict[str, tuple[str, int]]:
    """{listener name: (host, port)} of a registration's "NAME://host:port" endpoints."""
    out = {}
    for ep in endpoints or ():
        m = _ENDPOINT.match(ep)
        if m is not None:
            out[m["name"].upper()] = (m["host"].strip("[]"), int(m["port"]))
    return out


class ListenerEndpoints:
    rewritten = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})

    def __init__(self, node_id: int, own: dict[str, tuple[str, int]], registered: tuple[str, int]):
        self.node_id = node_id
        self.own = own                     # this broker's advertised (host, port) by listener
        self.registered = registered       # what it registers as its host and port
        self.registrations = dict          # () -> {node id: BrokerRegistration}: a cluster's
        self._parsed: dict[tuple, dict[str, tuple[str, int]]] = {}

    def registered_endpoints(self, config) -> list[str]:
        """This broker's advertised endpoints, NAME://host:port, as its registration lists them."""
        out = []
        for listener in config.listeners:
            host, port = self.own[listener.name]
            out.append(listener.endpoint(host, port))
        return out

    def address(self, node_id: int, listener: str) -> tuple[str, int] | None:
        if node_id == self.node_id:
            return self.own.get(listener)
        reg = self.registrations().get(node_id)
        if reg is None:
            return None
        key = tuple(reg.endpoints)
        parsed = self._parsed.get(key)
        if parsed is None:
            if len(self._parsed) > 1024:
                self._parsed.clear()
            parsed = self._parsed[key] = endpoint_map(key)
        return parsed.get(listener)

    def rewrite(self, request, result):
        """`result` (a response dict) with the brokers it names at the client's listener."""
        if not isinstance(result, dict):
            return result
        listener = request.listener
        if request.api_key in (METADATA, DESCRIBE_CLUSTER) and "brokers" in result:
            id_key = "node_id" if request.api_key == METADATA else "broker_id"
            brokers = []
            for b in result["brokers"]:
                address = self.address(b[id_key], listener)
                if address is not None:
                    brokers.append({**b, "host": address[0], "port": address[1]})
            return {**result, "brokers": brokers}
        if request.api_key == FIND_COORDINATOR:
            if "coordinators" in result:
                return {**result, "coordinators": [self._coordinator(c, listener) for c in result["coordinators"]]}
            return self._coordinator(result, listener)
        return result

    def _coordinator(self, answer: dict, listener: str) -> dict:
        node = answer.get("node_id", -1)
        if node is None or node < 0:
            return answer
        address = self.address(node, listener)
        if address is None:
            return answer
        return {**answer, "host": address[0], "port": address[1]}
