"""The broker and damaged segments, through a real Kafka client (confluent-kafka).

A flipped byte in a closed `.log` is answered with CORRUPT_MESSAGE for that batch only (the
batches before it and after it, and other partitions, are served), and the broker logs the
segment file and position. A corrupt `.index` of a closed segment (entries that pass Kafka's
sanity check but point at the wrong positions) is detected on use, logged, rebuilt and never
served: the partition reads in full.
"""
from __future__ import annotations

import struct
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from logcore.log.log_root import LogRoot
from logcore.records.batch import iter_batches

SEGMENT_BYTES = 16384
PER_BATCH = 10


def _build(root_dir, partitions=3, batches=60):
    root = LogRoot.open(str(root_dir), create=True)
    root.create_topic("t", partitions, {"segment.bytes": str(SEGMENT_BYTES), "index.interval.bytes": "1000"})
    for p in range(partitions):
        log = root.log("t", p, writer=True)
        for b in range(batches):
            log.append_records([(b"k", b"p%d-%05d" % (p, b * PER_BATCH + i) + b"x" * 60, (), 1000 + b)
                                for i in range(PER_BATCH)])
        log.commit()
        log.close()
    root.close()
    return root_dir / "t-0", root_dir / "t-1", root_dir / "t-2"


def _segments(part):
    return sorted(p for p in part.iterdir() if p.suffix == ".log")


def _consume(b, partition, start, until, timeout=20):
    """(offsets got, errors seen) reading [start, until) of t-partition."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "corruption", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "fetch.error.backoff.ms": 100})
    c.assign([TopicPartition("t", partition, start)])
    got, errors = [], []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if errors and got and got[-1] + 1 < until:
                    break
                continue
            if m.error() is not None:
                errors.append(m.error())
                if len(errors) >= 3:
                    break
                continue
            assert m.value() == b"p%d-%05d" % (partition, m.offset()) + b"x" * 60
            got.append(m.offset())
            if m.offset() + 1 >= until:
                break
    finally:
        c.close()
    return got, errors


def test_flipped_byte_and_corrupt_index_of_closed_segments(tmp_path, broker_factory):
    root = tmp_path / "logs"
    p0, p1, p2 = _build(root)
    # partition 2: a batch's base offset moved back by 20 (outside the CRC)
    moved = _segments(p2)[2]
    data = bytearray(moved.read_bytes())
    moved_at = [pos for pos, _ in iter_batches(bytes(data))][3]
    moved_base = struct.unpack_from(">q", data, moved_at)[0]
    struct.pack_into(">q", data, moved_at, moved_base - 20)
    moved.write_bytes(bytes(data))
    # partition 0: one byte flipped inside a batch (CRC-covered part) of its second segment
    seg = _segments(p0)[1]
    data = bytearray(seg.read_bytes())
    bounds = [pos for pos, _ in iter_batches(bytes(data))]
    victim = bounds[5]
    bad_base = struct.unpack_from(">q", data, victim)[0]
    data[victim + 70] ^= 0x04
    seg.write_bytes(bytes(data))
    # partition 1: the second segment's offset index points 7 bytes off (sane, but wrong)
    index = _segments(p1)[1].with_suffix(".index")
    entries = bytearray(index.read_bytes())
    assert len(entries) >= 16, "the test needs index entries"
    for i in range(0, len(entries), 8):
        struct.pack_into(">i", entries, i + 4, struct.unpack_from(">i", entries, i + 4)[0] + 7)
    index.write_bytes(bytes(entries))

    b = broker_factory(root)
    total = 600
    got, errors = _consume(b, 1, 0, total)
    assert got == list(range(total)) and not errors
    got, errors = _consume(b, 0, 0, total)
    assert got == list(range(bad_base)), (got[-3:], errors)
    # CORRUPT_MESSAGE (2), which librdkafka calls INVALID_MSG, at the damaged batch's offset
    assert errors and all(e.code() == KafkaError.INVALID_MSG and f"offset {bad_base}" in e.str()
                          for e in errors)
    # after the damaged batch the partition serves again
    got, errors = _consume(b, 0, bad_base + PER_BATCH, total)
    assert got == list(range(bad_base + PER_BATCH, total)) and not errors
    # no record under a wrong offset: the moved batch is CORRUPT_MESSAGE, the ones before it read
    got, errors = _consume(b, 2, 0, total)
    assert got == list(range(moved_base)) and errors and errors[0].code() == KafkaError.INVALID_MSG
    b.stop()
    text = b.log_text()
    assert f"{seg.parent.name}/{seg.name}" in text and f"position {victim}" in text
    assert "offset index" in text and index.name in text


def test_partition_with_damaged_committed_data_is_not_served_the_rest_is(tmp_path, broker_factory):
    """After an unclean shutdown, a partition whose committed data is damaged is not opened (not
    truncated); the broker starts, serves the other partitions and says what to run."""
    root = tmp_path / "logs"
    p0, p1, _p2 = _build(root)
    for part in (p0, p1):
        (part / ".seglog-clean-shutdown").unlink()
    seg = _segments(p1)[-1]
    data = bytearray(seg.read_bytes())
    bounds = [pos for pos, _ in iter_batches(bytes(data))]
    struct.pack_into(">i", data, bounds[2] + 8, 1 << 20)          # a broken length field
    seg.write_bytes(bytes(data))
    size = seg.stat().st_size

    b = broker_factory(root)
    got, errors = _consume(b, 0, 0, 600)
    assert got == list(range(600)) and not errors
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "corruption", "enable.auto.commit": False})
    c.assign([TopicPartition("t", 1, 0)])
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:        # KAFKA_STORAGE_ERROR: the client retries quietly
        m = c.poll(0.2)
        assert m is None or m.error() is not None, "a damaged partition must not be served"
    c.close()
    b.stop()
    assert seg.stat().st_size == size                 # nothing was cut
    text = b.log_text()
    assert "t-1 is not served" in text and "seglog repair" in text and f"position {bounds[2]}" in text


def test_wrong_log_start_checkpoint_is_reported_not_acted_on(tmp_path, broker_factory):
    """A well-formed log-start-offset-checkpoint entry that seglog did not write (2000 for a log
    that starts at 0): the broker logs it and deletes nothing; consumers read from 0."""
    root = tmp_path / "logs"
    p0, _p1, _p2 = _build(root)
    before = sorted(p.name for p in p0.iterdir() if p.suffix == ".log")
    (root / "log-start-offset-checkpoint").write_text("0\n1\nt 0 300\n")
    b = broker_factory(root)
    got, errors = _consume(b, 0, 0, 600)
    assert got == list(range(600)) and not errors
    b.stop()
    assert sorted(p.name for p in p0.iterdir() if p.suffix == ".log") == before
    assert "log-start-offset-checkpoint entry 300" in b.log_text() and "no segment is deleted" in b.log_text()
