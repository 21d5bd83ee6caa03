"""The config operations of Kafka's admin client over the Kafka protocol (logcore.wire.client),
for `seglog configs --bootstrap-server` and `seglog topics --alter --config`: DescribeConfigs
(with synonyms) and IncrementalAlterConfigs of a topic, a broker or the brokers' default.

A broker resource goes to that broker (Kafka's AdminClient does the same: its configs are its
own); a topic or the default to the bootstrap broker. Errors raise KafkaError
`NAME: message` (tools.kafka_admin.broker_error).
"""
from __future__ import annotations

from dataclasses import dataclass

from logcore.tools.kafka_admin import broker_error
from logcore.wire.api_keys import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, METADATA
from logcore.wire.client import KafkaConnection, bootstrap
from logcore.wire.config_resources import BROKER_RESOURCE
from logcore.wire.error_codes import NONE

WINDOWS = {METADATA: (1, 12), DESCRIBE_CONFIGS: (1, 4), INCREMENTAL_ALTER_CONFIGS: (0, 1)}
SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class DescribedConfig:
    name: str
    value: str | None
    source: int
    sensitive: bool
    read_only: bool
    synonyms: tuple[Synonym, ...]


class ConfigAdmin:
    def __init__(self, servers: str, *, timeout_s: float = 35.0, option: str = "--bootstrap-server",
                 client_id: str = "seglog-configs", security=None):
        """`security`: a ClientSecurity (TLS, SASL) for this connection and those to the brokers."""
        self.conn: KafkaConnection = bootstrap(servers, timeout_s=timeout_s, client_id=client_id,
                                               windows=WINDOWS, option=option, security=security)
        self._nodes: dict[int, KafkaConnection] = {}

    def close(self) -> None:
        for conn in [*self._nodes.values(), self.conn]:
            conn.close()

    def __enter__(self) -> "ConfigAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _conn_for(self, kind: int, name: str) -> KafkaConnection:
        if kind != BROKER_RESOURCE or name == "":
            return self.conn
        node = int(name)
        if node not in self._nodes:
            self._nodes[node] = self.conn.connection_to(node)
        return self._nodes[node]

    def describe(self, kind: int, name: str, keys: list[str] | None = None) -> list[DescribedConfig]:
        body = self._conn_for(kind, name).request(DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": False})
        r = body.results[0]
        if r.error_code != NONE:
            raise broker_error(r.error_code, r.error_message)
        return [DescribedConfig(c.name, None if c.is_sensitive else c.value, int(c.config_source),
                                bool(c.is_sensitive), bool(c.read_only),
                                tuple(Synonym(s.name, s.value, int(s.source)) for s in c.synonyms))
                for c in r.configs]

    def incremental_alter(self, kind: int, name: str, changes: list[tuple[str, int, str | None]],
                          validate_only: bool = False) -> None:
        """`changes`: (name, operation, value), operation SET 0, DELETE 1, APPEND 2, SUBTRACT 3."""
        body = self._conn_for(kind, name).request(INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": kind, "resource_name": name,
                           "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in changes]}],
            "validate_only": validate_only})
        r = body.responses[0]
        if r.error_code != NONE:
            raise broker_error(r.error_code, r.error_message)
