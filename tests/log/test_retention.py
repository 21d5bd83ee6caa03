"""Retention (time, size, log start offset), DeleteRecords, readers during deletion, recovery:
on local disk, fsspec memory and real S3 servers (the `open_root` fixture of tests/log)."""
from __future__ import annotations

import pytest

from logcore.errors import OffsetOutOfRangeError, PartitionInUseError, PolicyViolationError
from logcore.log.partition_state import LocalPartitionState, ObjectPartitionState
from logcore.log.retention import (BREACH_LOG_START, BREACH_SIZE, BREACH_TIME, SegmentInfo,
                                   deletable_segments)

T0 = 1_700_000_000_000
DAY = 86_400_000
# Every batch of 5 records of ~100 bytes rolls a segment of 600 bytes (local disk); on object
# stores every commit is a segment anyway.
CONFIG = {"segment.bytes": "600", "file.delete.delay.ms": "0", "retention.ms": str(DAY)}


def batch(first, n=5, ts=T0):
    return [(b"k%d" % i, b"v%d" % i + b"." * 90, (), ts) for i in range(first, first + n)]


def fill(log, segments, *, ts_of=lambda i: T0, per=5, commit=True):
    """Append `segments` batches, one segment each, committing after each."""
    for i in range(segments):
        log.append_records(batch(log.log_end_offset, per, ts_of(i)))
        if commit:
            log.commit()


def offsets(log, start):
    return [r.offset for r in log.read_records(start)]


def live_segment_bases(log):
    return [s.base_offset for s in log.segments]


def files(root, topic="t", partition=0):
    return root.storage.list_dir(f"{topic}-{partition}")


# ------------------------------------------------------------------ the pure policy

def info(base, nxt, size=100, ts=T0):
    return SegmentInfo(base, nxt, size, ts)


def test_policy_stops_at_high_watermark_and_first_survivor():
    segs = [info(0, 10), info(10, 20, ts=T0 + 5 * DAY), info(20, 30), info(30, 30, size=0)]
    d = deletable_segments(segs, high_watermark=30, log_start_offset=0, now_ms=T0 + 2 * DAY,
                           retention_ms=DAY, retention_bytes=-1, delete_policy=True)
    assert d.count == 1 and d.reasons == (BREACH_TIME,)      # the young second one stops the walk
    d = deletable_segments(segs[:3], high_watermark=25, log_start_offset=0, now_ms=T0 + 9 * DAY,
                           retention_ms=DAY, retention_bytes=-1, delete_policy=True)
    assert d.count == 2                                      # [20, 30) is not all below the HW


def test_policy_size_then_time_and_compact_only():
    segs = [info(0, 10), info(10, 20), info(20, 30), info(30, 40)]
    d = deletable_segments(segs, high_watermark=40, log_start_offset=0, now_ms=T0,
                           retention_ms=-1, retention_bytes=250, delete_policy=True)
    assert d.count == 1 and d.reasons == (BREACH_SIZE,)      # 400 - 100 = 300 >= 250, then stop
    d = deletable_segments(segs, high_watermark=40, log_start_offset=25, now_ms=T0,
                           retention_ms=-1, retention_bytes=100, delete_policy=True)
    assert d.reasons == (BREACH_LOG_START, BREACH_LOG_START, BREACH_SIZE)
    d = deletable_segments(segs, high_watermark=40, log_start_offset=25, now_ms=T0 + 9 * DAY,
                           retention_ms=DAY, retention_bytes=0, delete_policy=False)
    assert d.count == 2 and set(d.reasons) == {BREACH_LOG_START}


# ------------------------------------------------------------------ the log

def test_time_retention_deletes_old_segments_oldest_first(open_root):
    root = open_root()
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    fill(log, 6, ts_of=lambda i: T0 + i * DAY)              # segment i holds timestamps T0 + i days
    bases = live_segment_bases(log)
    assert len([b for b in bases if b < log.log_end_offset]) == 6
    result = log.apply_retention(now_ms=T0 + 3 * DAY + 1)    # segments 0, 1, 2 are > 1 day old
    assert result.segments_deleted == 3
    assert result.deleted_base_offsets == tuple(bases[:result.segments_deleted])
    assert result.log_start_offset == bases[result.segments_deleted] == log.log_start_offset
    assert result.bytes_deleted > 0 and set(result.reasons) == {BREACH_TIME}
    assert offsets(log, log.log_start_offset) == list(range(log.log_start_offset, 30))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)
    log.close()
    reader = open_root(create=False).log("t", 0)
    assert reader.log_start_offset == result.log_start_offset
    assert offsets(reader, reader.log_start_offset) == list(range(result.log_start_offset, 30))
    with pytest.raises(OffsetOutOfRangeError) as caught:
        reader.read(0)
    assert caught.value.log_start_offset == result.log_start_offset
    names = files(root)
    assert not any(n.startswith(f"{b:020d}") for b in result.deleted_base_offsets for n in names)


def test_exact_time_boundary(open_root):
    root = open_root()
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    fill(log, 3, ts_of=lambda i: T0 + i * 1000)
    # A segment goes when now - largest timestamp > retention.ms, strictly.
    assert log.apply_retention(now_ms=T0 + 1000 + DAY).segments_deleted == 1
    assert log.log_start_offset == 5
    assert log.apply_retention(now_ms=T0 + 1000 + DAY + 1).segments_deleted == 1
    assert log.log_start_offset == 10
    log.close()


def test_size_retention(open_root):
    root = open_root()
    root.create_topic("t", config={**CONFIG, "retention.ms": "-1", "retention.bytes": "1500"})
    log = root.log("t", 0, writer=True)
    fill(log, 6)
    sizes = [s.size() for s in log.segments]
    total = sum(sizes)
    result = log.apply_retention(now_ms=T0 + 365 * DAY)
    kept = sum(s.size() for s in log.segments)
    assert result.segments_deleted >= 1 and set(result.reasons) == {BREACH_SIZE}
    assert result.bytes_deleted == total - kept
    assert kept >= 1500 - max(sizes) and kept - log.segments[0].size() < 1500
    assert offsets(log, log.log_start_offset)[-1] == 29
    log.close()


def test_nothing_at_or_above_the_high_watermark(open_root):
    root = open_root()
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    fill(log, 2)
    log.append_records(batch(10))                            # uncommitted: above the HW
    assert log.high_watermark == 10
    result = log.apply_retention(now_ms=T0 + 30 * DAY)
    assert log.log_start_offset == 10 and result.log_start_offset == 10
    assert log.log_end_offset == 15
    log.commit()
    assert offsets(log, 10) == list(range(10, 15))
    log.close()


def test_active_segment_is_rolled_when_everything_goes(open_root):
    root = open_root()
    root.create_topic("t", config={**CONFIG, "segment.bytes": "100000"})
    log = root.log("t", 0, writer=True)
    fill(log, 3)                                             # local: one active segment
    result = log.apply_retention(now_ms=T0 + 30 * DAY)
    assert result.log_start_offset == 15 == log.log_start_offset == log.log_end_offset
    assert live_segment_bases(log)[-1] == 15 and log.segments[-1].size() == 0
    log.append_records(batch(15))
    log.commit()
    assert offsets(log, 15) == list(range(15, 20))
    log.close()
    again = open_root(create=False).log("t", 0, writer=True)
    assert (again.log_start_offset, again.high_watermark) == (15, 20)
    assert offsets(again, 15) == list(range(15, 20))
    again.close()


def test_compact_only_topic_keeps_old_segments(open_root):
    root = open_root()
    root.create_topic("t", config={**CONFIG, "cleanup.policy": "compact"})
    log = root.log("t", 0, writer=True)
    fill(log, 3)
    assert log.apply_retention(now_ms=T0 + 30 * DAY).segments_deleted == 0
    with pytest.raises(PolicyViolationError, match="cleanup.policy"):
        log.delete_records_before(5)
    log.close()
    root.create_topic("both", config={**CONFIG, "cleanup.policy": "compact,delete"})
    log = root.log("both", 0, writer=True)
    fill(log, 3)
    assert log.apply_retention(now_ms=T0 + 30 * DAY).log_start_offset == 15
    log.close()


def test_delete_records_before(open_root):
    root = open_root()
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    fill(log, 4)
    log.append_records(batch(20))                            # above the HW (20)
    with pytest.raises(OffsetOutOfRangeError, match="high watermark 20"):
        log.delete_records_before(21)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(-5)
    result = log.delete_records_before(12)                   # inside the third segment
    assert result.log_start_offset == 12 == log.log_start_offset
    assert result.segments_deleted == 2
    assert offsets(log, 12)[:3] == [12, 13, 14]
    assert log.delete_records_before(7).segments_deleted == 0 and log.log_start_offset == 12
    log.commit()
    log.close()
    reader = open_root(create=False).log("t", 0)
    assert reader.log_start_offset == 12
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(11)
    assert [r.offset for r in reader.read_records(12)] == list(range(12, 25))
    reader.close()
    writer = open_root(create=False).log("t", 0, writer=True)
    assert writer.delete_records_before(-1).log_start_offset == 25   # -1: the HW
    writer.close()


def test_reader_positioned_in_deleted_segment(open_root):
    root = open_root()
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    fill(log, 4)
    reader = open_root(create=False).log("t", 0)
    first = reader.read(2, 200)                              # reading the first segment
    assert first.data
    log.delete_records_before(15)
    # The reader has not refreshed: it still lists the deleted segments; reading there finds
    # the files gone, refreshes, and reports the new start.
    with pytest.raises(OffsetOutOfRangeError) as caught:
        reader.read(3)
    assert caught.value.log_start_offset == 15
    assert reader.log_start_offset == 15
    assert [r.offset for r in reader.read_records(15)] == list(range(15, 20))
    # a refresh alone also forgets them
    log.delete_records_before(20)
    reader.refresh()
    assert reader.log_start_offset == 20 and all(b >= 15 for b in live_segment_bases(reader))
    log.close()
    reader.close()


def test_local_reader_with_open_segment_survives_rename(storage_targets):
    from logcore.log.log_root import LogRoot
    target = storage_targets.make("local")
    root = LogRoot.open(target.url, create=True)
    root.create_topic("t", config={**CONFIG, "file.delete.delay.ms": "60000"})
    log = root.log("t", 0, writer=True)
    fill(log, 3)
    reader = LogRoot.open(target.url).log("t", 0)
    log.delete_records_before(10)
    # Renamed `.deleted`, not yet removed.
    deleted = sorted(n for n in files(root) if n.endswith(".deleted"))
    assert f"{0:020d}.log.deleted" in deleted and f"{5:020d}.log.deleted" in deleted
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(0)
    assert offsets(reader, 10) == list(range(10, 15))
    # Not yet expired; then expired.
    assert log.delete_expired_files() == 0
    assert log.delete_expired_files(now_ms=2**62) == 2
    assert not any(n.endswith(".deleted") for n in files(root))
    log.close()
    reader.close()


def test_delete_delay_on_every_storage(open_root):
    root = open_root()
    root.create_topic("t", config={**CONFIG, "file.delete.delay.ms": "60000"})
    log = root.log("t", 0, writer=True)
    fill(log, 3)
    log.delete_records_before(10)
    log_names = [n for n in files(root) if n.endswith(".log")]
    assert f"{0:020d}.log" not in log_names or not root.storage.is_local
    reader = open_root(create=False).log("t", 0)
    assert reader.log_start_offset == 10 and live_segment_bases(reader)[0] == 10
    assert log.delete_expired_files() == 0
    assert log.delete_expired_files(now_ms=2**62) == 2
    remaining = files(root)
    assert not any(n.startswith((f"{0:020d}", f"{5:020d}")) for n in remaining)
    log.close()
    reader.close()


def test_crash_between_checkpoint_and_deletion_reopens_cleanly(open_root):
    root = open_root()
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    fill(log, 4)
    # What a pass killed right after its checkpoint leaves: the log start offset moved, every
    # segment still there.
    log.state_store.commit(high_watermark=20, log_start_offset=10, first_segment_base=0,
                           epoch=log.leader_epoch)
    log.close()
    reader = open_root(create=False).log("t", 0)
    assert reader.log_start_offset == 10 and live_segment_bases(reader)[0] == 10
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(4)
    reader.close()
    writer = open_root(create=False).log("t", 0, writer=True)
    assert writer.log_start_offset == 10 and live_segment_bases(writer)[0] == 10
    assert not any(n.startswith((f"{0:020d}", f"{5:020d}")) for n in files(root))
    assert offsets(writer, 10) == list(range(10, 20))
    writer.close()


def test_leftover_deleted_files_removed_at_open(storage_targets):
    from logcore.log.log_root import LogRoot
    target = storage_targets.make("local")
    root = LogRoot.open(target.url, create=True)
    root.create_topic("t", config={**CONFIG, "file.delete.delay.ms": "600000"})
    log = root.log("t", 0, writer=True)
    fill(log, 3)
    log.delete_records_before(10)
    log.close()
    assert any(n.endswith(".deleted") for n in files(root))
    LogRoot.open(target.url).log("t", 0, writer=True).close()
    assert not any(n.endswith(".deleted") for n in files(root))


def test_maintenance_writer_does_not_take_a_held_partition(open_root):
    root = open_root()
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    fill(log, 1)
    other = open_root(create=False)
    with pytest.raises(PartitionInUseError, match="held by"):
        other.log("t", 0, writer=True, only_if_free=True)
    log.close()
    maint = other.log("t", 0, writer=True, only_if_free=True)
    assert maint.high_watermark == 5
    # A regular writer still takes the partition from it.
    taker = open_root(create=False).log("t", 0, writer=True)
    taker.close()
    maint.close()
    state = maint.state_store
    assert isinstance(state, (LocalPartitionState, ObjectPartitionState))


def test_a_deleted_segment_loses_its_log_before_its_indexes(open_root, monkeypatch):
    """Segments are found by their `.log`: deleting one removes the `.log` first, so whatever a
    lister finds still has its indexes (object stores delete the objects themselves; local disk
    renames to `.deleted` first, then removes those)."""
    root = open_root()
    root.create_topic("t", config={**CONFIG, "retention.ms": "-1", "file.delete.delay.ms": "0"})
    log = root.log("t", 0, writer=True)
    fill(log, 4)
    deleted = []
    real_delete = log.storage.delete

    def recording_delete(path, *args, **kwargs):
        deleted.append(path.rsplit("/", 1)[-1])
        return real_delete(path, *args, **kwargs)

    monkeypatch.setattr(log.storage, "delete", recording_delete)
    doomed = [s.base_offset for s in log.segments[:2]]
    log.delete_records_before(log.segments[2].base_offset)
    for base in doomed:
        mine = [n for n in deleted if n.startswith(f"{base:020d}.")]
        kinds = [n[21:].split(".")[0] for n in mine]          # log, index, timeindex, txnindex
        assert "log" in kinds and "index" in kinds, mine
        assert kinds.index("log") < kinds.index("index") and kinds.index("log") < kinds.index("timeindex")
    assert [s.base_offset for s in log.segments][0] == doomed[-1] + 5
    log.close()
