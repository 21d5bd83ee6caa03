"""The connector's Kafka protocol client (`kafka.bootstrap.servers`): the APIs the source and the
sink use, on top of logcore.wire.client's KafkaConnection.

It speaks to one broker that leads every partition (a `seglog broker`, or a single-node Apache
Kafka: tests/connector/test_connector_on_kafka.py) over one TCP connection, each API at the
highest version both sides know within CLIENT_WINDOWS. Requests can be pipelined (`send`
several, then `receive` their responses in order), which the idempotent producer of
`broker_sink` uses.

Every failure is a KafkaError (KafkaConnectionError when the connection broke: retriable) whose
message names the broker and kafka.bootstrap.servers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from logcore.errors import TopicNotFoundError
from logcore.wire.client import KafkaConnection, KafkaConnectionError, KafkaError, bootstrap, error_name

PRODUCE, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS = \
    0, 2, 3, 18, 19, 22, 32
# The versions this client can build and read (ListOffsets from v2: isolation_level; Produce
# from v3: RecordBatch v2 and up to v9, the last one that names topics).
CLIENT_WINDOWS = {PRODUCE: (3, 9), LIST_OFFSETS: (2, 7), METADATA: (1, 12), CREATE_TOPICS: (2, 5),
                  INIT_PRODUCER_ID: (0, 4), DESCRIBE_CONFIGS: (1, 4)}

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
ISOLATION_LEVEL = {"read_uncommitted": 0, "read_committed": 1}
TOPIC_RESOURCE = 2                    # DescribeConfigs resource type of a topic

# Kafka error codes the connector acts on.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
TOPIC_ALREADY_EXISTS = 36
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
KAFKA_STORAGE_ERROR = 56
# Errors after which the same request may succeed when sent again.
# (An unknown partition too, as Kafka's producer: it may be a broker still starting; the
# delivery timeout bounds the wait for one that is really gone.)
RETRIABLE = frozenset({UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
                       KAFKA_STORAGE_ERROR, 14, 15, 16, 19, 20})   # 14-16 coordinator, 19-20 replicas

DEFAULT_TIMEOUT_S = 30.0
OPTION = "kafka.bootstrap.servers"

@dataclass(frozen=True)
class PartitionOffset:
    offset: int
    error: int


class BrokerClient:
    """One connection to the first bootstrap server that answers (again after it broke); not
    thread-safe."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "seglog-spark",
                 timeout: float = DEFAULT_TIMEOUT_S):
        self.bootstrap = str(bootstrap_servers)
        self.client_id = client_id
        self.timeout = timeout
        self._conn: KafkaConnection | None = None

    def where(self) -> str:
        if self._conn is not None:
            return self._conn.where()
        return f"the broker at {OPTION}={self.bootstrap}"

    def connect(self) -> KafkaConnection:
        if self._conn is None or not self._conn.connected:
            self._conn = None
            self._conn = bootstrap(self.bootstrap, timeout_s=self.timeout, client_id=self.client_id,
                                   windows=CLIENT_WINDOWS, option=OPTION)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def __enter__(self) -> "BrokerClient":
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, api_key: int, values: dict) -> int:
        """Send one request (built from Kafka field names); returns its correlation id."""
        return self.connect().send(api_key, values)

    def receive(self) -> Any:
        """The response (kio dataclass) to the oldest request still waiting for one."""
        if self._conn is None or not self._conn.connected:
            raise KafkaConnectionError(f"lost the connection to {self.where()} before its responses came")
        return self._conn.receive()

    def request(self, api_key: int, values: dict) -> Any:
        return self.connect().request(api_key, values)

    @property
    def in_flight(self) -> int:
        return 0 if self._conn is None else self._conn.in_flight

    # ---------------------------------------------------------------- the APIs the connector uses
    def partition_counts(self, topics: list[str]) -> dict[str, int | None]:
        """Partitions of each topic (None: the broker does not have it); never creates topics."""
        body = self.request(METADATA, {"topics": [{"name": t} for t in topics],
                                       "allow_auto_topic_creation": False})
        out: dict[str, int | None] = {t: None for t in topics}
        for t in body.topics:
            if t.error_code == NONE:
                out[t.name] = len(t.partitions)
            elif t.error_code != UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(f"{self.where()}: Metadata for topic {t.name!r} failed:"
                                  f" {error_name(t.error_code)}", int(t.error_code))
        return out

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> bool:
        """Create a topic; False if it already existed."""
        body = self.request(CREATE_TOPICS, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout": 30_000, "validate_only": False})
        result = body.topics[0]
        if result.error_code == TOPIC_ALREADY_EXISTS:
            return False
        if result.error_code != NONE:
            raise KafkaError(f"{self.where()} could not create topic {name!r}:"
                              f" {error_name(result.error_code)} {getattr(result, 'error_message', '') or ''}".rstrip(),
                              int(result.error_code))
        return True

    def topic_config(self, topic: str, names: list[str]) -> dict[str, str]:
        body = self.request(DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": names}],
            "include_synonyms": False, "include_documentation": False})
        result = body.results[0]
        if result.error_code != NONE:
            raise KafkaError(f"{self.where()}: DescribeConfigs of topic {topic!r} failed:"
                              f" {error_name(result.error_code)} {result.error_message or ''}".rstrip(),
                              int(result.error_code))
        return {c.name: c.value for c in result.configs}

    def list_offsets(self, partitions: list[tuple[str, int]], *, timestamp: int = LATEST_TIMESTAMP,
                     isolation: str = "read_committed") -> dict[tuple[str, int], int]:
        """The offset of each partition for `timestamp` (-1 latest: the LSO with read_committed,
        the HW with read_uncommitted; -2 earliest). Unknown partitions raise TopicNotFoundError."""
        if not partitions:
            return {}
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        body = self.request(LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": ISOLATION_LEVEL[isolation],
            "topics": [{"name": t, "partitions": [{"partition_index": p, "timestamp": timestamp,
                                                   "current_leader_epoch": -1, "max_num_offsets": 1}
                                                  for p in ps]}
                       for t, ps in by_topic.items()]})
        out = {}
        for t in body.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if p.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                    raise TopicNotFoundError(
                        f"{self.where()} has no partition {t.name}-{p.partition_index}: is it serving"
                        " the log root given as the path?")
                if p.error_code != NONE:
                    raise KafkaError(f"{self.where()}: ListOffsets of {t.name}-{p.partition_index}"
                                      f" failed: {error_name(p.error_code)}", int(p.error_code))
                out[tp] = int(p.offset)
        missing = [tp for tp in partitions if tp not in out]
        if missing:
            raise KafkaError(f"{self.where()} gave no offset for {missing[0][0]}-{missing[0][1]}")
        return out

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and its epoch."""
        body = self.request(INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60_000,
                                               "producer_id": -1, "producer_epoch": -1})
        if body.error_code != NONE:
            raise KafkaError(f"{self.where()} refused InitProducerId: {error_name(body.error_code)}",
                              int(body.error_code))
        return int(body.producer_id), int(body.producer_epoch)
