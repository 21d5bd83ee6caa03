"""The read-back of a topic through librdkafka: a consumer assigned every partition from offset 0
(no group offsets) that polls until it has the expected number of records."""
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
