"""The client quota operations of Kafka's admin client over the Kafka protocol, for
`seglog configs --entity-type users|clients --bootstrap-server`: DescribeClientQuotas and
AlterClientQuotas. Errors raise KafkaError `NAME: message` (tools.kafka_admin.broker_error)."""
from __future__ import annotations

from logcore.tools.kafka_admin import broker_error
from logcore.wire.api_keys import METADATA
from logcore.wire.client import bootstrap
from logcore.wire.error_codes import NONE

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
WINDOWS = {METADATA: (1, 12), DESCRIBE_CLIENT_QUOTAS: (0, 1), ALTER_CLIENT_QUOTAS: (0, 1)}


class ClientQuotaAdmin:
    def __init__(self, servers: str, *, timeout_s: float = 35.0):
        self.conn = bootstrap(servers, timeout_s=timeout_s, client_id="seglog-configs", windows=WINDOWS)

    def close(self) -> None:
        self.conn.close()

    def describe(self, components, strict: bool) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
        """(entity parts, {key: value}) of the entities matching (entity_type, match_type, match)."""
        r = self.conn.request(DESCRIBE_CLIENT_QUOTAS, {
            "components": [{"entity_type": k, "match_type": t, "match": m} for k, t, m in components],
            "strict": strict})
        if int(r.error_code) != NONE:
            raise broker_error(int(r.error_code), r.error_message)
        return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
                for entry in r.entries or ()]

    def alter(self, parts, ops) -> None:
        """(key, value or None to remove) `ops` on the entity of (entity_type, name) `parts`."""
        r = self.conn.request(ALTER_CLIENT_QUOTAS, {"entries": [{
            "entity": [{"entity_type": k, "entity_name": n} for k, n in parts],
            "ops": [{"key": k, "value": float(v) if v is not None else 0.0, "remove": v is None} for k, v in ops]}],
            "validate_only": False})
        for entry in r.entries:
            if int(entry.error_code) != NONE:
                raise broker_error(int(entry.error_code), entry.error_message)
