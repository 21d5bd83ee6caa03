"""The partition log through its public API, on every storage kind."""
from __future__ import annotations

import pytest

from logcore.errors import (FencedWriterError, InvalidRecordError, OffsetOutOfRangeError,
                            ReadOnlyLogError, RecordTooLargeError)
from logcore.records.batch import build_batch, iter_batches
from logcore.records.compression import Compression
from logcore.records.control import ControlType


def recs(n, start=0, ts=1_700_000_000_000, size=20):
    return [(f"k{i}".encode(), f"v{i}".encode().ljust(size, b"."), (("h", b"x"),), ts + i)
            for i in range(start, start + n)]


def values(log, offset=0, isolation="read_committed"):
    return [(r.offset, r.value.rstrip(b".")) for r in log.read_records(offset, isolation=isolation)]


def test_append_commit_read(open_root):
    root = open_root()
    root.create_topic("t", partitions=2)
    log = root.log("t", 0, writer=True)
    info = log.append_records(recs(10))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 9, 10)
    assert log.log_end_offset == 10
    # Nothing is visible before the commit.
    assert log.high_watermark == 0
    assert values(log) == []
    log.commit()
    assert log.high_watermark == 10
    got = list(log.read_records(0))
    assert [r.offset for r in got] == list(range(10))
    assert got[3].key == b"k3" and got[3].headers == (("h", b"x"),)
    assert got[3].timestamp == 1_700_000_000_003
    log.append_records(recs(5, start=10), compression=Compression.ZSTD)
    log.commit()
    assert [o for o, _ in values(log, 7)] == list(range(7, 15))


def test_reader_in_other_handle_sees_only_committed(open_root):
    root = open_root()
    root.create_topic("t")
    writer = root.log("t", 0, writer=True)
    writer.append_records(recs(3))
    writer.commit()
    writer.append_records(recs(4, start=3))
    reader = open_root(create=False).log("t", 0)
    assert reader.high_watermark == 3
    assert [o for o, _ in values(reader)] == [0, 1, 2]
    writer.commit()
    reader.refresh()
    assert reader.high_watermark == 7
    assert [o for o, _ in values(reader)] == list(range(7))
    with pytest.raises(ReadOnlyLogError):
        reader.append_records(recs(1))


def test_rolls_segments_and_reads_across_them(open_root):
    root = open_root()
    root.create_topic("t", config={"segment.bytes": "2000", "index.interval.bytes": "100"})
    log = root.log("t", 0, writer=True)
    for i in range(40):
        log.append_records(recs(3, start=3 * i))
        if i % 7 == 6:
            log.commit()
    log.commit()
    assert len(log.segments) > 3
    assert log.log_end_offset == 120
    assert [o for o, _ in values(log)] == list(range(120))
    # Reads from every offset start at the right record.
    for offset in (0, 1, 59, 60, 61, 118, 119):
        first = next(log.read_records(offset))
        assert first.offset == offset
    # Reopen: everything is there, the indexes are used for lookups.
    log.close()
    again = open_root(create=False).log("t", 0)
    assert again.log_end_offset == 120 and again.high_watermark == 120
    assert [o for o, _ in values(again, 100)] == list(range(100, 120))


def test_offset_for_timestamp(open_root):
    root = open_root()
    root.create_topic("t", config={"segment.bytes": "1500", "index.interval.bytes": "64"})
    log = root.log("t", 0, writer=True)
    for i in range(30):
        log.append_records([(b"k", b"v" * 30, (), 1000 + 10 * i)])
    log.commit()
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (1, 1010)
    assert log.offset_for_timestamp(1150) == (15, 1150)
    assert log.offset_for_timestamp(1290) == (29, 1290)
    assert log.offset_for_timestamp(1291) is None


def test_out_of_range_and_bounds(open_root):
    root = open_root()
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records(recs(5))
    log.commit()
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(6)
    assert "t-0" in str(err.value) and err.value.log_end_offset == 5
    assert log.read(5).data == b""
    log.append_records(recs(2, start=5))
    # Above the HW: invisible to readers, visible to the writer's own log_end reads.
    assert log.read(5).data == b""
    assert log.read(5, isolation="log_end").data != b""


def test_append_client_batch_assigns_offsets_and_epoch(open_root):
    root = open_root()
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records(recs(2))
    batch = build_batch([(None, b"a", (), 5), (b"k", None, (), 6)], base_offset=0)
    info = log.append_batch(batch)
    assert (info.first_offset, info.last_offset) == (2, 3)
    log.commit()
    data = log.read(0).data
    headers = [h for _, h in iter_batches(data)]
    assert [h.base_offset for h in headers] == [0, 2]
    assert all(h.partition_leader_epoch == log.leader_epoch for h in headers)
    got = list(log.read_records(2))
    assert (got[0].key, got[0].value, got[1].key, got[1].value) == (None, b"a", b"k", None)


def test_append_rejects_bad_client_batches(open_root):
    root = open_root()
    root.create_topic("c", config={"cleanup.policy": "compact", "max.message.bytes": "500"})
    log = root.log("c", 0, writer=True)
    with pytest.raises(InvalidRecordError, match="key"):
        log.append_batch(build_batch([(None, b"v", (), 1)]))
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append_batch(build_batch([(b"k", b"v" * 600, (), 1)]))
    from logcore.records.batch import build_control_batch
    with pytest.raises(InvalidRecordError, match="control"):
        log.append_batch(build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0,
                                             timestamp_ms=1))
    corrupt = bytearray(build_batch([(b"k", b"v", (), 1)]))
    corrupt[-1] ^= 0xFF
    with pytest.raises(Exception, match="CRC|crc"):
        log.append_batch(bytes(corrupt))
    assert log.log_end_offset == 0


def test_second_writer_fences_the_first(open_root):
    root = open_root()
    root.create_topic("t")
    first = root.log("t", 0, writer=True)
    first.append_records(recs(3))
    first.commit()
    first.append_records(recs(2, start=3))      # never committed
    second = open_root(create=False).log("t", 0, writer=True)
    assert second.leader_epoch > first.leader_epoch
    # The takeover dropped what the first writer never committed.
    assert second.log_end_offset == 3
    with pytest.raises(FencedWriterError):
        first.append_records(recs(1, start=5))
        first.commit()
    with pytest.raises(FencedWriterError):
        first.commit()
    second.append_records(recs(2, start=100))
    second.commit()
    reader = open_root(create=False).log("t", 0)
    assert [o for o, _ in values(reader)] == [0, 1, 2, 3, 4]
    assert [v for _, v in values(reader)][3:] == [b"v100", b"v101"]


def test_truncate_to(open_root):
    root = open_root()
    root.create_topic("t", config={"segment.bytes": "1000"})
    log = root.log("t", 0, writer=True)
    for i in range(20):
        log.append_records(recs(2, start=2 * i))
        log.commit() if i % 5 == 4 else None
    log.truncate_to(17, below_high_watermark=True)
    assert log.log_end_offset in (17, 18)     # cut at a batch boundary at or above 17
    assert log.high_watermark <= log.log_end_offset
    log.append_records(recs(1, start=500))
    log.commit()
    offsets = [o for o, _ in values(log)]
    assert offsets == list(range(log.log_end_offset))


def test_transactions_read_committed(open_root):
    root = open_root()
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records(recs(2))
    log.append_records(recs(2, start=2), producer_id=7, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    log.commit()
    # An open transaction holds the LSO at its first offset.
    assert log.last_stable_offset == 2
    assert [o for o, _ in values(log)] == [0, 1]
    assert [o for o, _ in values(log, isolation="read_uncommitted")] == [0, 1, 2, 3]
    log.append_control(ControlType.ABORT, producer_id=7, producer_epoch=0)
    log.append_records(recs(1, start=5))
    log.commit()
    assert log.last_stable_offset == log.high_watermark == 6
    assert [o for o, _ in values(log)] == [0, 1, 5]


def test_idempotent_producer_duplicates(open_root):
    root = open_root()
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    batch = build_batch([(b"k", b"a", (), 1), (b"k", b"b", (), 2)], producer_id=42,
                        producer_epoch=0, base_sequence=0)
    first = log.append_batch(batch)
    again = log.append_batch(batch)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 2
    with pytest.raises(InvalidRecordError):
        log.append_batch(build_batch([(b"k", b"c", (), 3)], producer_id=42, producer_epoch=0,
                                     base_sequence=5))
