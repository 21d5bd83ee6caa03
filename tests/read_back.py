"""The read-back of a topic through librdkafka: a consumer assigned every partition from its start
(no group offsets) that polls until it has the expected number of records (`read_back`) or until
each partition's end (`read_to_eof`)."""
from __future__ import annotations

import time
from collections.abc import Callable


def read_back(bootstrap: str, topic: str, partitions: int, expected: int, row: Callable, *,
              group: str, timeout: float, read_committed: bool = False,
              quiet_wait: float | None = None) -> list:
    """`row(message)` of each record polled until `expected` arrived or `timeout` s passed. With
    `quiet_wait`, asserts that nothing more arrives within that many seconds afterwards."""
    from confluent_kafka import Consumer, TopicPartition
    config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "fetch.wait.max.ms": 50}
    if read_committed:
        config["isolation.level"] = "read_committed"
    c = Consumer(config)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(row(m))
        if quiet_wait is not None:
            extra = c.poll(quiet_wait)
            assert extra is None, f"unexpected record at {extra.partition()}-{extra.offset()}"
    finally:
        c.close()
    return got


def read_to_eof(bootstrap: str, topic: str, partitions: int, row: Callable, *, config: dict,
                timeout: float, poll_s: float = 0.5) -> list:
    """`row(message)` of every record from the beginning up to each partition's end (the
    consumer's end-of-partition event); asserts that every partition reached it. `config`: the
    consumer's group.id and whatever else the caller's read needs."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False, "enable.partition.eof": True,
                  **config})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, done = [], set()
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            m = c.poll(poll_s)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                    continue
                raise AssertionError(f"consumer error {m.error()}")
            out.append(row(m))
        assert len(done) == partitions, f"did not reach the end of {partitions - len(done)} partitions"
        return out
    finally:
        c.close()
