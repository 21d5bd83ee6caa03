"""The broker's background retention and compaction, on the logs it holds open while it serves."""
from __future__ import annotations


import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from broker_helpers import consume_all, create, produce, wait_until  # noqa: E402

SERVICE = {"log.retention.check.interval.ms": 200, "log.segment.delete.delay.ms": 0}


def _low_watermark(b, topic: str, partition: int = 0) -> int:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
    finally:
        c.close()


def test_retention_deletes_old_segments_while_serving(broker_factory):
    b = broker_factory(**SERVICE)
    create(b, "short", 1, {"segment.bytes": "2048", "retention.bytes": "4096"})
    produce(b, "short", [b"x" * 200 for _ in range(200)], acks="all", **{"batch.num.messages": 5})
    segments = lambda: sorted((b.root / "short-0").glob("*.log"))  # noqa: E731

    def within_retention() -> bool:
        # Retention keeps the newest segments whose total stays within one segment of retention.bytes.
        sizes = []
        for p in segments():
            try:
                sizes.append(p.stat().st_size)
            except FileNotFoundError:       # retention deleted it between the listing and now
                continue
        return bool(sizes) and sum(sizes) - max(sizes) <= 4096

    assert wait_until(lambda: _low_watermark(b, "short") > 0 and within_retention())
    low = _low_watermark(b, "short")
    assert int(segments()[0].stem) == low
    # The broker still serves the rest, and keeps appending.
    got = consume_all(b, "short", 1, 200 - low, start=low)
    assert [o for _, o, *_ in got] == list(range(low, 200))
    more = produce(b, "short", [b"after"], acks="all")
    assert more[0][0] is None and more[0][2] == 200


def test_compacted_topic_and_consumer_offsets_are_cleaned(broker_factory):
    b = broker_factory(**SERVICE, offsets_topic_segment_bytes=1024, offsets_topic_num_partitions=1)
    create(b, "table", 1, {"cleanup.policy": "compact", "segment.bytes": "1024",
                           "min.cleanable.dirty.ratio": "0.01"})
    values = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(300)]
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.num.messages": 5})
    failed = []
    for k, v in values:
        p.produce("table", key=k, value=v, on_delivery=lambda err, _m: err and failed.append(err))
    assert p.flush(20) == 0 and not failed, failed

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "cg", "enable.auto.commit": False})
    for i in range(60):
        c.commit(offsets=[TopicPartition("table", 0, i + 1)], asynchronous=False)
    c.close()

    from logcore.log.log_root import LogRoot

    def records_left() -> int:
        with LogRoot.open(str(b.root)) as root:
            return sum(1 for _ in root.log("table", 0).read_records(0))

    assert wait_until(lambda: records_left() < 100)
    # The cleaner may run again meanwhile: read to the end (a consumer gets at most what is left).
    left = records_left()
    got = consume_all(b, "table", 1, left, timeout=5)
    assert 5 <= len(got) <= left
    latest = {}
    for _, _, k, v, _ in got:
        latest[k] = v
    assert latest == {b"k%d" % j: b"v%d" % (295 + j) for j in range(5)}

    # __consumer_offsets compacts too, and the last commit is what the group gets back.
    def offsets_records() -> int:
        with LogRoot.open(str(b.root)) as root:
            return sum(1 for _ in root.log("__consumer_offsets", 0).read_records(0))

    assert wait_until(lambda: offsets_records() < 30)
    b.stop()
    b2 = broker_factory(b.root)
    c2 = Consumer({"bootstrap.servers": b2.bootstrap, "group.id": "cg", "enable.auto.commit": False})
    assert c2.committed([TopicPartition("table", 0)], timeout=10)[0].offset == 60
    c2.close()
