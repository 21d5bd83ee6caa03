"""`__remote_log_metadata` as a cluster member reaches it: the client the remote tier's
TopicBasedRemoteLogMetadataManager policy writes and replays through
(logcore.tiered.metadata_topic.MetadataTopicClient).

As Kafka's RLMM does with its own producer and consumer, records go to the metadata partition's
leader over the Kafka protocol (Produce with acks=all, Fetch up to the high watermark), whichever
broker that is (this one included), so every broker sees them in the leader's order. The topic is
created on first use with the `rlmm.config.remote.log.metadata.topic.*` settings (partitions,
replication factor, retention.ms) and Kafka's configs for it: cleanup.policy=delete,
remote.storage.enable=false (min.insync.replicas is the broker's default, as in Kafka). It is not
created while fewer brokers than its replication factor live (the caller retries).

Runs on the maintenance thread and the fetch threads (blocking calls), never on the event loop.
"""
from __future__ import annotations

import datetime
import logging
import threading
import time

from logcore.errors import RemoteStorageError, SegLogError, TopicExistsError
from logcore.records.batch import build_batch, decode_records, iter_batches
from logcore.tiered.config import TOPIC_BASED_RLMM_CLASS, TieredConfig
from logcore.tiered.metadata_records import TOPIC
from logcore.wire import error_codes as E
from logcore.wire.api_keys import FETCH, PRODUCE
from logcore.wire.client import KafkaConnection, KafkaConnectionError, error_name

logger = logging.getLogger(__name__)
_RETRY = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.LEADER_NOT_AVAILABLE, E.FENCED_LEADER_EPOCH,
                    E.UNKNOWN_LEADER_EPOCH, E.KAFKA_STORAGE_ERROR, E.REQUEST_TIMED_OUT,
                    E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                    E.UNKNOWN_TOPIC_OR_PARTITION})
_WINDOWS = {PRODUCE: (3, 9), FETCH: (4, 12)}
_FETCH_BYTES = 1 << 20


class ClusterMetadataTopic:
    """`__remote_log_metadata` of the cluster `replica_manager` and `catalog` belong to."""

    def __init__(self, config: TieredConfig, replica_manager, catalog, node_id: int, *,
                 timeout_s: float = 30.0):
        self.config = config
        self.replica_manager = replica_manager
        self.catalog = catalog
        self.node_id = node_id
        self.timeout_s = timeout_s
        self._connections: dict[int, KafkaConnection] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()

    # -- the topic -----------------------------------------------------------------------------

    @property
    def partitions(self) -> int:
        return len(self._assignment().partitions)

    def _assignment(self):
        rm = self.replica_manager
        ta = rm.assignments.get(TOPIC)
        if ta is not None:
            return ta
        self._create()
        deadline = time.monotonic() + self.timeout_s
        while (ta := rm.assignments.get(TOPIC)) is None:
            if time.monotonic() > deadline:
                raise RemoteStorageError(f"{TOPIC} was created but this broker has not seen it "
                                         f"within {self.timeout_s:.0f} s")
            time.sleep(0.05)
        return ta

    def _create(self) -> None:
        config = self.config
        rf = config.metadata_topic_replication_factor
        live = sorted(self.replica_manager.store.brokers())
        if len(live) < rf:
            raise RemoteStorageError(
                f"{TOPIC} not created: rlmm.config.remote.log.metadata.topic.replication.factor={rf} "
                f"but only {len(live)} live brokers {live}")
        topic_config = {"cleanup.policy": "delete", "remote.storage.enable": "false",
                        "retention.ms": str(config.metadata_topic_retention_ms)}
        try:
            self.catalog.create_topic(TOPIC, config.metadata_topic_partitions, topic_config,
                                      replication_factor=rf)
            logger.info("created %s (%d partitions, replication factor %d)", TOPIC,
                        config.metadata_topic_partitions, rf)
        except TopicExistsError:
            pass

    # -- the leaders ---------------------------------------------------------------------------

    def _leader(self, partition: int, deadline: float) -> int:
        while True:
            leader = int(self.replica_manager.current_leader(TOPIC, partition)["leader_id"])
            if leader >= 0:
                return leader
            self._wait(deadline, f"{TOPIC}-{partition} has no leader")

    def _wait(self, deadline: float, why: str) -> None:
        if time.monotonic() > deadline:
            raise RemoteStorageError(f"{why} (gave up after {self.timeout_s:.0f} s)")
        time.sleep(0.1)

    def _request(self, node: int, api_key: int, body: dict):
        """One request to broker `node` on a kept connection (one request at a time each)."""
        with self._lock:
            lock = self._locks.setdefault(node, threading.Lock())
        with lock:
            conn = self._connections.get(node)
            if conn is None or not conn.connected:
                address = self.replica_manager.address_of(node)
                if address is None:
                    raise KafkaConnectionError(f"broker {node} is not registered")
                conn = KafkaConnection(address[0], address[1], timeout_s=self.timeout_s,
                                       client_id=f"rlmm-{self.node_id}").connect()
                self._connections[node] = conn
            try:
                return conn.request(api_key, body, window=_WINDOWS[api_key])
            except KafkaConnectionError:
                conn.close()
                self._connections.pop(node, None)
                raise

    # -- MetadataTopicClient -------------------------------------------------------------------

    def append(self, partition: int, value: bytes) -> int:
        batch = build_batch([(None, value, (), int(time.time() * 1000))])
        deadline = time.monotonic() + self.timeout_s
        while True:
            node = self._leader(partition, deadline)
            body = {"transactional_id": None, "acks": -1, "timeout": int(self.timeout_s * 1000),
                    "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]}
            try:
                response = self._request(node, PRODUCE, body)
            except KafkaConnectionError as exc:
                self._wait(deadline, f"producing to {TOPIC}-{partition} on broker {node}: {exc}")
                continue
            p = response.responses[0].partition_responses[0]
            code = int(p.error_code)
            if code == E.NONE:
                return int(p.base_offset)
            if code not in _RETRY:
                raise RemoteStorageError(f"producing to {TOPIC}-{partition} on broker {node}: {error_name(code)}")
            self._wait(deadline, f"producing to {TOPIC}-{partition} on broker {node}: {error_name(code)}")

    def read(self, partition: int, offset: int) -> tuple[list[tuple[int, bytes]], int]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            node = self._leader(partition, deadline)
            body = {"replica_id": -1, "max_wait": datetime.timedelta(0), "min_bytes": 0,
                    "max_bytes": _FETCH_BYTES, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": TOPIC, "partitions": [
                        {"partition": partition, "fetch_offset": offset, "partition_max_bytes": _FETCH_BYTES,
                         "current_leader_epoch": -1, "log_start_offset": -1}]}],
                    "forgotten_topics_data": [], "rack_id": ""}
            try:
                response = self._request(node, FETCH, body)
            except KafkaConnectionError as exc:
                self._wait(deadline, f"fetching {TOPIC}-{partition} from broker {node}: {exc}")
                continue
            p = response.responses[0].partitions[0]
            code = int(p.error_code)
            if code == E.NONE:
                return _records(p.records or b"", offset, f"{TOPIC}-{partition}"), int(p.high_watermark)
            if code not in _RETRY:
                raise RemoteStorageError(f"fetching {TOPIC}-{partition} at offset {offset} from broker "
                                         f"{node}: {error_name(code)}")
            self._wait(deadline, f"fetching {TOPIC}-{partition} from broker {node}: {error_name(code)}")

    def close(self) -> None:
        with self._lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()


def attach_metadata_topic(tier, replica_manager, catalog, node_id: int) -> ClusterMetadataTopic | None:
    """With TopicBasedRemoteLogMetadataManager, the cluster's `__remote_log_metadata` attached to
    the root's remote tier `tier` (before the partitions open); else None."""
    if tier is None or tier.config.metadata_manager_class_name != TOPIC_BASED_RLMM_CLASS:
        return None
    client = ClusterMetadataTopic(tier.config, replica_manager, catalog, node_id)
    tier.attach_metadata_topic(client)
    return client


def _records(data: bytes, offset: int, source: str) -> list[tuple[int, bytes]]:
    out = []
    try:
        for pos, header in iter_batches(data, source=source, allow_partial_tail=True):
            if header.is_control:
                continue
            for record in decode_records(data, pos, header, source=source):
                if record.offset >= offset and record.value is not None:
                    out.append((record.offset, bytes(record.value)))
    except SegLogError as exc:
        raise RemoteStorageError(f"{source}: unreadable fetch answer: {exc}") from None
    return out
