"""The connector's Kafka protocol client (`kafka.bootstrap.servers`): the APIs the source and the
sink use, on top of logcore.wire.client's KafkaConnection.

Cluster-aware as Kafka's clients are: requests about the cluster (Metadata, CreateTopics,
DescribeConfigs, InitProducerId) go to the first bootstrap server that answers (or, when all of
them are down, to any broker the last Metadata listed); requests about partitions (ListOffsets,
Produce) go to each partition's leader, learnt from Metadata (leader id, leader epoch and the
brokers list), over one connection per broker. When a leader answers NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH or LEADER_NOT_AVAILABLE, or its connection breaks, the
client refreshes Metadata and sends again, for at most `retry_timeout` seconds (Kafka's
default.api.timeout.ms, 60 s); then the error names the partition and the broker. A single broker
(a standalone `seglog broker`, or a single-node Apache Kafka:
tests/connector/test_connector_on_kafka.py) leads every partition and is simply the one leader.

Each API goes out at the highest version both sides know within CLIENT_WINDOWS. Requests to a
leader can be pipelined (`leader_connection(node).send` several, then `receive` their responses
in order), which the idempotent producer of `broker_sink` uses.

Every failure is a KafkaError (KafkaConnectionError when the connection broke: retriable) whose
message names the broker and kafka.bootstrap.servers.

Every connection (bootstrap server, leader, coordinator) is secured alike by `security` (the
ClientSecurity of Spark's kafka.security.protocol / kafka.ssl.* / kafka.sasl.* options:
kafka_security.py); a failed SASL login is a KafkaError with SASL_AUTHENTICATION_FAILED.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from logcore.errors import TopicNotFoundError
from logcore.security.client_security import ClientSecurity
from logcore.wire.api_keys import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, CREATE_TOPICS, DESCRIBE_CONFIGS,
                                   END_TXN, FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID, LIST_OFFSETS, METADATA,
                                   OFFSET_FETCH, PRODUCE, TXN_OFFSET_COMMIT)
from logcore.wire.client import (BrokerAddress, KafkaConnection, KafkaConnectionError, KafkaError, bootstrap,
                                 error_name)
from logcore.wire.config_resources import TOPIC_RESOURCE
from logcore.wire.error_codes import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, FENCED_LEADER_EPOCH,
                                      KAFKA_STORAGE_ERROR, LEADER_NOT_AVAILABLE, NONE, NOT_COORDINATOR,
                                      NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER,
                                      OFFSET_NOT_AVAILABLE, REQUEST_TIMED_OUT, TOPIC_ALREADY_EXISTS,
                                      UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION)
from logcore.wire.list_offsets import LATEST_TIMESTAMP

# The versions this client can build and read (ListOffsets from v2: isolation_level; v4 adds
# current_leader_epoch; Produce from v3: RecordBatch v2 and up to v9, the last one that names
# topics; Metadata from v7 gives leader epochs). The transactional APIs stay at the versions of
# transaction version 1 (KIP-98 with KIP-360/447/890 part 1): EndTxn v5, AddPartitionsToTxn v4+
# (brokers only), TxnOffsetCommit v4+ and Produce v12+ belong to KIP-890 part 2. FindCoordinator
# below v4 (one key), OffsetFetch v7 (require_stable, one group).
CLIENT_WINDOWS = {PRODUCE: (3, 9), LIST_OFFSETS: (2, 7), METADATA: (1, 12), CREATE_TOPICS: (2, 5),
                  INIT_PRODUCER_ID: (0, 4), DESCRIBE_CONFIGS: (1, 4), FIND_COORDINATOR: (1, 3),
                  ADD_PARTITIONS_TO_TXN: (0, 3), ADD_OFFSETS_TO_TXN: (0, 3), END_TXN: (0, 3),
                  TXN_OFFSET_COMMIT: (0, 3), OFFSET_FETCH: (7, 7), FETCH: (11, 12)}
# Fetch from v11: a consumer names its rack (KIP-392) and may be served by a follower; up to
# v12, the last version that names topics (the hand-made encoder of logcore.wire.fetch_request).

ISOLATION_LEVEL = {"read_uncommitted": 0, "read_committed": 1}
# Errors that say the client's idea of the partition's leader is out of date: refresh Metadata,
# then send again (to the new leader).
STALE_LEADER = frozenset({UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
                          FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, KAFKA_STORAGE_ERROR})
# Errors after which the same request may succeed when sent again.
# (An unknown partition too, as Kafka's producer: it may be a broker still starting; the
# delivery timeout bounds the wait for one that is really gone.)
RETRIABLE = frozenset({REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                       NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND}) | STALE_LEADER

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRY_TIMEOUT_S = 60.0        # Kafka's default.api.timeout.ms
RETRY_BACKOFF_S = (0.1, 0.2, 0.5, 1.0)
OPTION = "kafka.bootstrap.servers"


@dataclass(frozen=True)
class PartitionOffset:
    offset: int
    error: int


@dataclass(frozen=True)
class PartitionInfo:
    """A partition as the last Metadata described it."""
    leader: int                       # -1: none (LEADER_NOT_AVAILABLE)
    leader_epoch: int                 # -1: not given (Metadata below v7)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class BrokerClient:
    """A client of one Kafka-protocol cluster: a connection to the first bootstrap server that
    answers (again after it broke) for cluster requests, one per leader for partition requests;
    not thread-safe."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "seglog-spark",
                 timeout: float = DEFAULT_TIMEOUT_S, retry_timeout: float = DEFAULT_RETRY_TIMEOUT_S,
                 security: ClientSecurity | None = None):
        self.bootstrap = str(bootstrap_servers)
        self.security = security                                # None: PLAINTEXT
        self.client_id = client_id
        self.timeout = timeout
        self.retry_timeout = retry_timeout
        self._conn: KafkaConnection | None = None
        self._nodes: dict[int, KafkaConnection] = {}
        self.brokers: dict[int, BrokerAddress] = {}          # from the last Metadata
        self.partitions: dict[tuple[str, int], PartitionInfo] = {}
        self._stale: set[str] = set()                           # topics whose leaders must be asked again
        self._topic_errors: dict[str, int] = {}                 # topic -> its error in the last Metadata
        # (key type, key) -> the node FindCoordinator named, kept while the client is pooled
        # (the next task of the same id asks no FindCoordinator); its user drops a moved one.
        self.coordinator_nodes: dict[tuple[int, str], int] = {}

    def where(self) -> str:
        if self._conn is not None:
            return self._conn.where()
        return f"the broker at {OPTION}={self.bootstrap}"

    def node_where(self, node: int) -> str:
        """`broker 2 at host:port (kafka.bootstrap.servers=...)`, for messages."""
        address = self.brokers.get(node)
        at = f" at {address.host}:{address.port}" if address is not None else ""
        return f"broker {node}{at} ({OPTION}={self.bootstrap})"

    def connect(self) -> KafkaConnection:
        """The connection for cluster requests: a bootstrap server, else any broker Metadata listed."""
        if self._conn is None or not self._conn.connected:
            self._conn = None
            try:
                self._conn = bootstrap(self.bootstrap, timeout_s=self.timeout, client_id=self.client_id,
                                       windows=CLIENT_WINDOWS, option=OPTION, security=self.security)
            except KafkaConnectionError:
                for node, address in sorted(self.brokers.items()):
                    conn = KafkaConnection(address.host, address.port, timeout_s=self.timeout,
                                           client_id=self.client_id, windows=CLIENT_WINDOWS,
                                           origin=f"broker {node}, {OPTION}={self.bootstrap}",
                                           security=self.security)
                    try:
                        self._conn = conn.connect()
                        break
                    except KafkaConnectionError:
                        continue
                else:
                    raise
        return self._conn

    def leader_connection(self, node: int) -> KafkaConnection:
        """The connection to broker `node` (its address from the last Metadata), opened if needed."""
        conn = self._nodes.get(node)
        if conn is None or not conn.connected:
            address = self.brokers.get(node)
            if address is None:
                raise KafkaConnectionError(f"Metadata from {self.where()} lists no broker {node}"
                                           f" (brokers: {sorted(self.brokers) or 'none'})")
            conn = KafkaConnection(address.host, address.port, timeout_s=self.timeout, client_id=self.client_id,
                                   windows=CLIENT_WINDOWS, origin=f"broker {node}, {OPTION}={self.bootstrap}",
                                   security=self.security)
            self._nodes[node] = conn
            conn.connect()
        return conn

    def open_connection(self, node: int) -> KafkaConnection | None:
        """The connection to broker `node` if it is open (never opens one)."""
        conn = self._nodes.get(node)
        return conn if conn is not None and conn.connected else None

    def close_control(self) -> None:
        """Close the connection for cluster requests only (the next one reconnects)."""
        if self._conn is not None:
            self._conn.close()

    def drop_connection(self, node: int) -> None:
        conn = self._nodes.pop(node, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        for conn in self._nodes.values():
            conn.close()
        self._nodes.clear()

    def idle(self) -> bool:
        """No response is awaited on any of its connections (it can serve another task)."""
        conns = [self._conn, *self._nodes.values()]
        return not any(c is not None and c.connected and c.in_flight for c in conns)

    def __enter__(self) -> "BrokerClient":
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, api_key: int, values: dict) -> Any:
        """One cluster request (to a bootstrap server); a broken connection is tried once more."""
        try:
            return self.connect().request(api_key, values)
        except KafkaConnectionError:
            if self._conn is not None:
                self._conn.close()
            return self.connect().request(api_key, values)

    # ---------------------------------------------------------------- metadata and leaders
    def metadata(self, topics: list[str] | None) -> dict[str, int]:
        """Ask Metadata about `topics` (None: all), remember the brokers and each partition's
        leader; the error code of each topic."""
        body = self.request(METADATA, {"topics": None if topics is None else [{"name": t} for t in topics],
                                       "allow_auto_topic_creation": False})
        brokers = {int(b.node_id): BrokerAddress(int(b.node_id), b.host, int(b.port), b.rack)
                   for b in body.brokers}
        for node, address in brokers.items():
            old = self.brokers.get(node)
            if old is not None and (old.host, old.port) != (address.host, address.port):
                self.drop_connection(node)          # the broker moved
        self.brokers = brokers
        out = {}
        for t in body.topics:
            out[t.name] = self._topic_errors[t.name] = int(t.error_code)
            for key in [k for k in self.partitions if k[0] == t.name]:
                del self.partitions[key]
            self._stale.discard(t.name)
            if t.error_code != NONE:
                continue
            for p in t.partitions:
                self.partitions[(t.name, int(p.partition_index))] = PartitionInfo(
                    int(p.leader_id), int(getattr(p, "leader_epoch", -1)),
                    tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes))
        return out

    def invalidate(self, topics=None) -> None:
        """Leaders of `topics` (all when None) are asked again before their next use."""
        self._stale.update({t for t, _p in self.partitions} if topics is None else topics)

    def partition_info(self, tp: tuple[str, int]) -> PartitionInfo | None:
        """What Metadata says of partition `tp` (asked when unknown or invalidated); None when
        the cluster has no such partition."""
        if tp not in self.partitions or tp[0] in self._stale:
            self.metadata([tp[0]])
        return self.partitions.get(tp)

    def leader_of(self, tp: tuple[str, int]) -> tuple[int, int]:
        """(leader id, leader epoch) of `tp`. A partition without a leader raises a KafkaError
        with LEADER_NOT_AVAILABLE, an unknown one UNKNOWN_TOPIC_OR_PARTITION (both retriable)."""
        info = self.partition_info(tp)
        if info is None and self._topic_errors.get(tp[0]) == LEADER_NOT_AVAILABLE:
            raise KafkaError(f"topic {tp[0]} has no leaders yet (LEADER_NOT_AVAILABLE in Metadata from"
                             f" {self.where()})", LEADER_NOT_AVAILABLE)
        if info is None:
            raise KafkaError(f"{self.where()}: Metadata has no partition {tp[0]}-{tp[1]}",
                             UNKNOWN_TOPIC_OR_PARTITION)
        if info.leader < 0:
            raise KafkaError(f"{tp[0]}-{tp[1]} has no leader now (LEADER_NOT_AVAILABLE in Metadata from"
                             f" {self.where()}; replicas {list(info.replicas)}, ISR {list(info.isr)})",
                             LEADER_NOT_AVAILABLE)
        return info.leader, info.leader_epoch

    # ---------------------------------------------------------------- the APIs the connector uses
    def partition_counts(self, topics: list[str]) -> dict[str, int | None]:
        """Partitions of each topic (None: the cluster does not have it); never creates topics."""
        codes = self.metadata(list(topics))
        out: dict[str, int | None] = {t: None for t in topics}
        for name, code in codes.items():
            if code == NONE:
                out[name] = sum(1 for t, _p in self.partitions if t == name)
            elif code != UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(f"{self.where()}: Metadata for topic {name!r} failed:"
                                 f" {error_name(code)}", code)
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
        the HW with read_uncommitted; -2 earliest), asked of its leader with the leader epoch
        Metadata gave (a deposed leader answers FENCED_LEADER_EPOCH). A stale leader or a broken
        leader connection refreshes Metadata and asks again, for at most `retry_timeout` seconds.
        When the connection for Metadata breaks too, every connection is closed and the question
        asked once more from the bootstrap servers, as a new client would; a second break raises
        KafkaConnectionError. A partition the cluster does not have raises TopicNotFoundError."""
        try:
            return self._list_offsets(partitions, timestamp, isolation)
        except KafkaConnectionError:
            self.close()
            self.invalidate()
            return self._list_offsets(partitions, timestamp, isolation)

    def _list_offsets(self, partitions: list[tuple[str, int]], timestamp: int,
                      isolation: str) -> dict[tuple[str, int], int]:
        pending = list(dict.fromkeys(partitions))
        out: dict[tuple[str, int], int] = {}
        started = time.monotonic()
        failures = 0
        while pending:
            reasons: dict[tuple[str, int], tuple[str, int]] = {}    # tp -> (why, error code)
            by_leader: dict[int, list[tuple[tuple[str, int], int]]] = {}
            for tp in pending:
                try:
                    leader, epoch = self.leader_of(tp)
                except KafkaConnectionError:
                    raise
                except KafkaError as exc:
                    if exc.code == UNKNOWN_TOPIC_OR_PARTITION:
                        raise TopicNotFoundError(
                            f"{self.where()} has no partition {tp[0]}-{tp[1]}: is it serving the log"
                            " root given as the path?") from None
                    reasons[tp] = (str(exc), exc.code)
                    continue
                by_leader.setdefault(leader, []).append((tp, epoch))
            for node, tps in sorted(by_leader.items()):
                self._list_offsets_at(node, tps, timestamp, isolation, out, reasons)
            pending = [tp for tp in pending if tp not in out]
            if not pending:
                break
            waited = time.monotonic() - started
            tp = pending[0]
            why, code = reasons.get(tp, ("no answer", -1))
            if waited > self.retry_timeout:
                raise KafkaError(f"ListOffsets of {tp[0]}-{tp[1]} failed for {waited:.0f} s"
                                 f" ({failures + 1} attempts): {why}", code)
            failures += 1
            self.invalidate({t for t, _p in pending})
            time.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1])
        return {tp: out[tp] for tp in partitions}

    def _list_offsets_at(self, node: int, tps: list, timestamp: int, isolation: str, out: dict,
                         reasons: dict) -> None:
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (t, p), epoch in tps:
            by_topic.setdefault(t, []).append((p, epoch))
        try:
            body = self.leader_connection(node).request(LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": ISOLATION_LEVEL[isolation],
                "topics": [{"name": t, "partitions": [{"partition_index": p, "timestamp": timestamp,
                                                       "current_leader_epoch": epoch, "max_num_offsets": 1}
                                                      for p, epoch in ps]}
                           for t, ps in by_topic.items()]})
        except KafkaConnectionError as exc:
            self.drop_connection(node)
            for tp, _epoch in tps:
                reasons[tp] = (f"its leader in Metadata, broker {node}: {exc}", -1)
            return
        for t in body.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                code = int(p.error_code)
                if code == NONE:
                    out[tp] = int(p.offset)
                elif code in STALE_LEADER or code in (REQUEST_TIMED_OUT, OFFSET_NOT_AVAILABLE):
                    reasons[tp] = (f"{self.node_where(node)}, its leader in Metadata, answered"
                                   f" {error_name(code)}", code)
                else:
                    raise KafkaError(f"{self.node_where(node)}: ListOffsets of {t.name}-{p.partition_index}"
                                     f" failed: {error_name(code)}", code)
        for tp, _epoch in tps:
            if tp not in out and tp not in reasons:
                reasons[tp] = (f"{self.node_where(node)} gave no offset for {tp[0]}-{tp[1]}", -1)

    def fetch(self, node: int, tp: tuple[str, int], offset: int, *, leader_epoch: int, max_bytes: int,
              isolation: str, rack: str = "", max_wait_ms: int = 500) -> Any:
        """One consumer Fetch of partition `tp` from `offset` at broker `node` (its leader, or
        the preferred read replica the leader named): the response's partition entry (error
        code, high watermark, last stable offset, log start, aborted transactions, preferred
        read replica, records as bytes). A broken connection raises KafkaConnectionError."""
        conn = self.leader_connection(node)
        try:
            body = conn.request(FETCH, {
                "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
                "isolation_level": ISOLATION_LEVEL[isolation], "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": tp[0], "partitions": [{
                    "partition": tp[1], "current_leader_epoch": leader_epoch, "fetch_offset": offset,
                    "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
                "forgotten_topics_data": [], "rack_id": rack or ""})
        except KafkaConnectionError:
            self.drop_connection(node)
            raise
        if body.error_code != NONE:
            raise KafkaError(f"{self.node_where(node)}: Fetch of {tp[0]}-{tp[1]} failed:"
                             f" {error_name(body.error_code)}", int(body.error_code))
        for t in body.responses:
            for p in t.partitions:
                if t.topic == tp[0] and p.partition_index == tp[1]:
                    return p
        raise KafkaError(f"{self.node_where(node)} answered a Fetch of {tp[0]}-{tp[1]} without it")

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and its epoch."""
        body = self.request(INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60_000,
                                               "producer_id": -1, "producer_epoch": -1})
        if body.error_code != NONE:
            raise KafkaError(f"{self.where()} refused InitProducerId: {error_name(body.error_code)}",
                              int(body.error_code))
        return int(body.producer_id), int(body.producer_epoch)


class ClientPool:
    """Broker clients kept for the next task of the same (reused) Python worker, or the next
    micro-batch's commit on the driver: a new client costs a connection and ApiVersions to each
    broker it talks to, and Metadata. A task takes one and gives it back when done; a client
    with responses still awaited (a task that failed mid-request) is closed instead."""

    def __init__(self, client_id: str, keep: int = 2):
        self.client_id = client_id
        self.keep = keep
        self._free: dict[tuple, list[BrokerClient]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(servers: str, retry_timeout: float, security: ClientSecurity | None) -> tuple:
        # ClientSecurity objects are built once per process (kafka_security.KafkaSecurity.client)
        # and a pooled client holds its own: the identity cannot be reused while it is kept.
        return servers, retry_timeout, None if security is None else id(security)

    def take(self, servers: str, *, security: ClientSecurity | None,
             retry_timeout: float = DEFAULT_RETRY_TIMEOUT_S) -> BrokerClient:
        with self._lock:
            free = self._free.get(self._key(servers, retry_timeout, security))
            if free:
                return free.pop()
        return BrokerClient(servers, client_id=self.client_id, retry_timeout=retry_timeout, security=security)

    def give_back(self, client: BrokerClient) -> None:
        if client.idle():
            with self._lock:
                free = self._free.setdefault(self._key(client.bootstrap, client.retry_timeout, client.security), [])
                if len(free) < self.keep:
                    free.append(client)
                    return
        client.close()
