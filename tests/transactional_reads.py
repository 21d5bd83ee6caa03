"""What a consumer of one isolation level reads of a topic, up to the end of each partition (the
LSO for read_committed, the high watermark for read_uncommitted), with librdkafka's consumer.
Used by the transaction tests of one broker and of a cluster."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, TopicPartition


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str, *, expect: list | None = None,
                timeout: float) -> list:
    """Every value read, sorted. With `expect`: read again until that is what it reads (a commit's
    markers follow EndTxn's answer), or the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = read_to_end(bootstrap, topic, partitions, isolation, timeout)
        if expect is None or got == sorted(expect) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 50, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, ended = [], set()
    deadline = time.monotonic() + timeout
    while len(ended) < partitions and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() == KafkaError._PARTITION_EOF:
                ended.add(m.partition())
            continue
        got.append(m.value())
    c.close()
    assert len(ended) == partitions, f"{topic}: reached the end of {sorted(ended)} only"
    return sorted(got)
