"""Batches of one topic produced to their partitions' leaders over the Kafka protocol, for
`seglog produce --bootstrap-server` (kafka-console-producer's path).

The batches come closed from the console producer's batcher (produce_command._Producer); they
are queued and sent at `commit()` (or when the queue passes `max_queued_bytes`), one Produce
request per leader and round with at most one batch per partition (Kafka's rule for RecordBatch
v2), in the order they were made, so a partition's records land in input order. An answer that
says the leader moved or cannot take the write now (partition_leaders.RETRY_ERRORS, a broken
connection) refreshes Metadata and sends again until `timeout_ms` (Kafka's delivery.timeout.ms)
has passed; any other error ends the run naming the partition, the Kafka error and the broker's
message. Without idempotence (as Kafka's producer with enable.idempotence=false) a batch sent
again after a lost answer may be written twice.
"""
from __future__ import annotations

import time

from logcore.records.batch import build_batch
from logcore.records.compression import Compression
from logcore.tools.partition_leaders import RETRY_BACKOFF_S, RETRY_ERRORS, PartitionLeaders
from logcore.wire.api_keys import PRODUCE
from logcore.wire.client import KafkaConnectionError, KafkaError, error_name
from logcore.wire.error_codes import NONE

# Produce v3 is the first with RecordBatch v2; v9 the last that names topics.
WINDOWS = {PRODUCE: (3, 9)}
MAX_QUEUED_BYTES = 1 << 20


class TopicProducer:
    """Sends closed batches of one topic to their leaders; `commit()` returns once every queued
    batch is acknowledged with `acks` (-1: all in-sync replicas, 1: the leader)."""

    def __init__(self, leaders: PartitionLeaders, *, acks: int, timeout_ms: int,
                 max_queued_bytes: int = MAX_QUEUED_BYTES):
        self.leaders = leaders
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.max_queued_bytes = max_queued_bytes
        self._queue: list[tuple[int, bytes]] = []
        self._queued_bytes = 0

    def append(self, partition: int, records: list, compression) -> None:
        batch = build_batch(records, compression=compression if compression is not None else Compression.NONE)
        self._queue.append((partition, batch))
        self._queued_bytes += len(batch)
        if self._queued_bytes >= self.max_queued_bytes:
            self.commit()

    def commit(self) -> None:
        deadline = time.monotonic() + self.timeout_ms / 1000
        while self._queue:
            # one round: the oldest queued batch of each partition
            round_, rest, seen = [], [], set()
            for partition, batch in self._queue:
                if partition in seen:
                    rest.append((partition, batch))
                else:
                    seen.add(partition)
                    round_.append((partition, batch))
            failed = self._send_round(dict(round_), deadline)
            # what must go again keeps its place before the partition's later batches
            self._queue = [(p, b) for p, b in round_ if p in failed] + rest
            if failed:
                time.sleep(RETRY_BACKOFF_S)
                self.leaders.refresh()
        self._queued_bytes = 0

    def close(self) -> None:
        pass                           # the leaders' connections belong to the caller

    def _send_round(self, batches: dict[int, bytes], deadline: float) -> set[int]:
        """Send one batch per partition; the partitions to send again (retriable failures)."""
        failed: set[int] = set()
        topic = self.leaders.topic
        for node, partitions in self.leaders.by_leader(sorted(batches), deadline).items():
            body = {"transactional_id": None, "acks": self.acks, "timeout": self.timeout_ms,
                    "topic_data": [{"name": topic, "partition_data": [
                        {"index": p, "records": batches[p]} for p in partitions]}]}
            try:
                response = self.leaders.connection(node).request(PRODUCE, body, window=WINDOWS[PRODUCE])
            except KafkaConnectionError as exc:
                self.leaders.drop(node)
                self._check_deadline(deadline, partitions[0], str(exc))
                failed.update(partitions)
                continue
            for t in response.responses:
                for p in t.partition_responses:
                    code = int(p.error_code)
                    if code == NONE:
                        continue
                    message = getattr(p, "error_message", None)
                    text = f"{error_name(code)}{': ' + message if message else ''}"
                    if code in RETRY_ERRORS:
                        self._check_deadline(deadline, int(p.index), text)
                        failed.add(int(p.index))
                    else:
                        raise KafkaError(f"producing to {topic}-{p.index} on {self.leaders.where()}: {text}", code)
        return failed

    def _check_deadline(self, deadline: float, partition: int, why: str) -> None:
        if time.monotonic() >= deadline:
            raise KafkaError(f"producing to {self.leaders.topic}-{partition} on {self.leaders.where()} did not"
                             f" succeed within {self.timeout_ms} ms: {why}")
