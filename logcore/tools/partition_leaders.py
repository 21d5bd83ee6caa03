"""Where a topic's partitions are led, for the console producer and consumer
(`seglog produce|consume --bootstrap-server`): Metadata from the first bootstrap server that
answers, one connection per leader, refreshed when a leader moves.

Requests about partitions (Produce, Fetch, ListOffsets) go to each partition's leader; when it
answers with a stale-leader error or its connection breaks, the caller asks `refresh()` and sends
again (retry_errors lists which codes mean that), as Kafka's clients do.
"""
from __future__ import annotations

import time

from logcore.errors import TopicNotFoundError
from logcore.wire.api_keys import METADATA
from logcore.wire.client import BrokerAddress, KafkaConnection, KafkaError, bootstrap, error_name
from logcore.wire.error_codes import (FENCED_LEADER_EPOCH, KAFKA_STORAGE_ERROR, LEADER_NOT_AVAILABLE, NONE,
                                      NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                      NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, UNKNOWN_LEADER_EPOCH,
                                      UNKNOWN_TOPIC_OR_PARTITION)

# A leader that moved, or one that cannot answer now: ask Metadata again, then send again.
RETRY_ERRORS = frozenset({NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
                          KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
                          NOT_ENOUGH_REPLICAS_AFTER_APPEND, UNKNOWN_TOPIC_OR_PARTITION})
RETRY_BACKOFF_S = 0.2


class PartitionLeaders:
    """The leaders of one topic's partitions and a connection to each."""

    def __init__(self, servers: str, topic: str, *, client_id: str, timeout_s: float = 30.0,
                 windows: dict | None = None, option: str = "--bootstrap-server", security=None):
        self.servers = servers
        self.topic = topic
        self.timeout_s = timeout_s
        self.option = option
        self.conn = bootstrap(servers, timeout_s=timeout_s, client_id=client_id, windows=windows, option=option,
                              security=security)
        self.brokers: dict[int, BrokerAddress] = {}
        self.leaders: dict[int, int] = {}         # partition -> leader id (-1: none)
        self.epochs: dict[int, int] = {}
        self._connections: dict[int, KafkaConnection] = {}
        self.refresh()

    @property
    def partitions(self) -> int:
        return len(self.leaders)

    def where(self) -> str:
        return f"{self.option}={self.servers}"

    def refresh(self) -> None:
        """Ask Metadata about the topic; TopicNotFoundError when the cluster does not have it."""
        body = self.conn.request(METADATA, {"topics": [{"name": self.topic}], "allow_auto_topic_creation": False})
        self.brokers = {int(b.node_id): BrokerAddress(int(b.node_id), b.host, int(b.port), b.rack)
                        for b in body.brokers}
        (t,) = [t for t in body.topics if t.name == self.topic] or [None]
        code = NONE if t is None else int(t.error_code)
        if t is None or code == UNKNOWN_TOPIC_OR_PARTITION:
            raise TopicNotFoundError(f"Topic {self.topic} does not exist on {self.where()}"
                                     " (UNKNOWN_TOPIC_OR_PARTITION)")
        if code not in (NONE, LEADER_NOT_AVAILABLE):
            raise KafkaError(f"Metadata of topic {self.topic} from {self.conn.where()}: {error_name(code)}", code)
        self.leaders = {int(p.partition_index): int(p.leader_id) for p in t.partitions}
        self.epochs = {int(p.partition_index): int(getattr(p, "leader_epoch", -1)) for p in t.partitions}

    def check_partition(self, partition: int) -> None:
        if partition not in self.leaders:
            raise KafkaError(f"--partition {partition}: topic {self.topic} has partitions 0..{self.partitions - 1}"
                             f" on {self.where()}", UNKNOWN_TOPIC_OR_PARTITION)

    def leader(self, partition: int, deadline: float) -> int:
        """The leader id of `partition`, waiting (Metadata again) while it has none."""
        while True:
            node = self.leaders.get(partition, -1)
            if node >= 0 and node in self.brokers:
                return node
            if time.monotonic() >= deadline:
                raise KafkaError(f"{self.topic}-{partition} has no leader on {self.where()}", LEADER_NOT_AVAILABLE)
            time.sleep(RETRY_BACKOFF_S)
            self.refresh()

    def connection(self, node: int) -> KafkaConnection:
        conn = self._connections.get(node)
        if conn is None or not conn.connected:
            address = self.brokers[node]
            conn = KafkaConnection(address.host, address.port, timeout_s=self.timeout_s,
                                   client_id=self.conn.client_id, windows=self.conn.windows,
                                   origin=f"node {node}, {self.where()}", security=self.conn.security).connect()
            self._connections[node] = conn
        return conn

    def by_leader(self, partitions, deadline: float) -> dict[int, list[int]]:
        """`partitions` grouped by their leader's id."""
        out: dict[int, list[int]] = {}
        for p in partitions:
            out.setdefault(self.leader(p, deadline), []).append(p)
        return out

    def drop(self, node: int) -> None:
        conn = self._connections.pop(node, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for node in list(self._connections):
            self.drop(node)
        self.conn.close()
