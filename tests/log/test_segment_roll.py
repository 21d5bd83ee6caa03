"""Segment rolling (Kafka's four roll rules, kafka-storage.md 2.8) and index density (2.6),
checked on the files the log leaves behind."""
from __future__ import annotations

import os
import random
import re
import time

import numpy as np
import pytest

from logcore.log.checkpoint import OffsetCheckpoint
from logcore.log.partition_state import RECOVERY_POINT_CHECKPOINT
from logcore.log.segment import INT32_MAX, LogSegment
from logcore.records.batch import iter_batches
from logcore.storage import open_storage

both = pytest.mark.parametrize("root_target", ["local", "memory"], indirect=True)
local_only = pytest.mark.parametrize("root_target", ["local"], indirect=True)

OFFSET_ENTRY = np.dtype([("rel", ">i4"), ("pos", ">i4")])
TIME_ENTRY = np.dtype([("ts", ">i8"), ("rel", ">i4")])
T0 = 1_700_000_000_000


def segment_files(log) -> list[tuple[int, str]]:
    """(base offset, name) of every `.log` file in the partition folder, in offset order."""
    names = [n for n in log.storage.list_dir(log.dir) if n.endswith(".log")]
    for name in names:
        assert re.fullmatch(r"\d{20}\.log", name), name
    return sorted((int(n[:20]), n) for n in names)


def read_file(log, name: str) -> bytes:
    return log.storage.read(log.storage.join(log.dir, name))


def expected_indexes(data: bytes, base: int, interval: int, sealed: bool):
    """The offset and time index entries Kafka's LogSegment.append rule gives for `data`."""
    offsets, times = [], []
    since, max_ts, offset_of_max = 0, -1, -1
    for pos, header in iter_batches(data):
        if header.max_timestamp > max_ts:
            max_ts, offset_of_max = header.max_timestamp, header.last_offset
        if since > interval:
            offsets.append((header.last_offset - base, pos))
            if max_ts > (times[-1][0] if times else -1):
                times.append((max_ts, offset_of_max - base))
            since = 0
        since += header.size
    if sealed and max_ts > (times[-1][0] if times else -1):
        times.append((max_ts, offset_of_max - base))
    return offsets, times


def check_sealed_segments(log, interval: int) -> list[tuple[int, bytes]]:
    """Every segment but the last: exact-size indexes whose entries follow the interval rule."""
    files = segment_files(log)
    result = []
    for i, (base, name) in enumerate(files):
        data = read_file(log, name)
        headers = [h for _, h in iter_batches(data, allow_partial_tail=False)]
        assert headers and headers[0].base_offset == base
        result.append((base, data))
        if i == len(files) - 1:
            continue
        index = read_file(log, name.replace(".log", ".index"))
        time_index = read_file(log, name.replace(".log", ".timeindex"))
        want_offsets, want_times = expected_indexes(data, base, interval, sealed=True)
        # Exactly sized: no preallocated zeros left after the roll.
        assert len(index) == 8 * len(want_offsets), name
        assert len(time_index) == 12 * len(want_times), name
        got = np.frombuffer(index, dtype=OFFSET_ENTRY)
        assert [(int(r), int(p)) for r, p in got] == want_offsets
        got_t = np.frombuffer(time_index, dtype=TIME_ENTRY)
        assert [(int(t), int(r)) for t, r in got_t] == want_times
    return result


def check_contiguous_and_boundaries(log, segments) -> None:
    bases = [base for base, _ in segments]
    assert [r.offset for r in log.read_records(0)] == list(range(log.log_end_offset))
    for base in bases[1:]:
        assert next(log.read_records(base)).offset == base
        assert next(log.read_records(base - 1)).offset == base - 1
        first = next(iter_batches(log.read(base).data))[1]
        assert first.base_offset == base
    # Each segment starts where the previous one ended.
    for (base, data), (next_base, _) in zip(segments, segments[1:]):
        last = [h for _, h in iter_batches(data)][-1]
        assert last.next_offset == next_base


# ---------------------------------------------------------------------------------------------

@both
def test_rolls_on_segment_bytes(open_root):
    segment_bytes, interval = 1000, 150
    root = open_root()
    root.create_topic("t", config={"segment.bytes": str(segment_bytes),
                                   "index.interval.bytes": str(interval)})
    log = root.log("t", 0, writer=True)
    rng = random.Random(7)
    n = 0
    for b in range(120):
        count = rng.randint(1, 4)
        log.append_records([(b"k%d" % (n + i), b"v" * rng.randint(5, 150), (), T0 + n + i)
                            for i in range(count)])
        n += count
    # One commit at the end: on object stores a commit also publishes (seals) the active segment.
    log.commit()
    assert log.log_end_offset == n
    segments = check_sealed_segments(log, interval)
    assert len(segments) > 10
    for (base, data), (_, following) in zip(segments, segments[1:]):
        assert len(data) <= segment_bytes
        # Rolled only because the next batch would not fit (Kafka's rule 1), not earlier.
        first_next = next(iter_batches(following))[1]
        assert len(data) + first_next.size > segment_bytes
    check_contiguous_and_boundaries(log, segments)
    log.close()
    # After a clean close the last segment is sealed too; a reader sees the same log.
    reader = open_root(create=False).log("t", 0)
    assert [r.offset for r in reader.read_records(0)] == list(range(n))


@local_only
def test_active_index_is_preallocated_and_trimmed_on_close(open_root):
    root = open_root()
    root.create_topic("t", config={"segment.index.bytes": "4000", "index.interval.bytes": "0"})
    log = root.log("t", 0, writer=True)
    for i in range(6):
        log.append_records([(b"k", b"v" * 50, (), T0 + i)])
    log.commit()
    base, name = segment_files(log)[-1]
    index_path = log.storage.local_path(log.storage.join(log.dir, name.replace(".log", ".index")))
    time_path = index_path.replace(".index", ".timeindex")
    assert os.path.getsize(index_path) == 4000           # Kafka preallocates the active index
    assert os.path.getsize(time_path) == 4000 // 12 * 12
    log.close()
    assert os.path.getsize(index_path) == 5 * 8          # every batch but the first has an entry
    assert os.path.getsize(time_path) == 5 * 12
    check_sealed_segments(log, 0)


@both
def test_rolls_on_segment_ms_by_record_timestamps(open_root):
    root = open_root()
    root.create_topic("t", config={"segment.ms": "1000"})
    log = root.log("t", 0, writer=True)
    # Rolls when a batch's max timestamp is more than segment.ms after the max timestamp of the
    # segment's first batch; older and equal-distance timestamps do not roll.
    timestamps = [T0, T0 + 500, T0 - 5000, T0 + 1000,   # segment 0 (1000 is not > 1000)
                  T0 + 1001, T0 + 2001,                 # segment 4: 2001 - 1001 = 1000
                  T0 + 2002,                            # segment 6
                  T0 + 10**6]                           # segment 7
    for i, ts in enumerate(timestamps):
        log.append_records([(b"k%d" % i, b"v%d" % i, (), ts)])
    log.commit()
    assert [base for base, _ in segment_files(log)] == [0, 4, 6, 7]
    segments = check_sealed_segments(log, 4096)
    check_contiguous_and_boundaries(log, segments)


@local_only
def test_segment_ms_roll_survives_a_reopen(open_root):
    """A reopened writer still measures segment.ms from the active segment's first batch.

    (Local disk: on object stores a new writer always starts a new segment.)"""
    root = open_root()
    root.create_topic("t", config={"segment.ms": "1000"})
    log = root.log("t", 0, writer=True)
    log.append_records([(b"a", b"0", (), T0)])
    log.append_records([(b"b", b"1", (), T0 + 400)])
    log.commit()
    log.close()
    again = open_root(create=False).log("t", 0, writer=True)
    again.append_records([(b"c", b"2", (), T0 + 900)])      # still within segment.ms: no roll
    again.append_records([(b"d", b"3", (), T0 + 1500)])     # 1500 after the first batch: roll
    again.commit()
    assert [base for base, _ in segment_files(again)] == [0, 3]
    assert [r.value for r in again.read_records(0)] == [b"0", b"1", b"2", b"3"]


@both
@pytest.mark.parametrize("timestamps", ["equal", "increasing"])
def test_rolls_on_a_full_index(open_root, timestamps):
    root = open_root()
    root.create_topic("t", config={"segment.index.bytes": "64", "index.interval.bytes": "0"})
    log = root.log("t", 0, writer=True)
    for i in range(40):
        ts = T0 if timestamps == "equal" else T0 + i
        log.append_records([(b"k%d" % i, b"v%d" % i, (), ts)])
    log.commit()
    # 64 bytes hold 8 offset entries (full at 8) and 5 time entries (full at 4, one slot kept
    # for the entry written at roll). Every batch but a segment's first adds an offset entry;
    # with equal timestamps only the first of those adds a time entry.
    per_segment = 9 if timestamps == "equal" else 5
    assert [base for base, _ in segment_files(log)] == list(range(0, 40, per_segment))
    segments = check_sealed_segments(log, 0)
    for base, name in segment_files(log)[:-1]:
        entries = len(read_file(log, name.replace(".log", ".index"))) // 8
        assert entries == per_segment - 1
    check_contiguous_and_boundaries(log, segments)


def test_relative_offset_overflow_rolls(tmp_path):
    storage = open_storage(str(tmp_path))
    base = 1000
    seg = LogSegment(storage, "t-0", base, index_interval_bytes=4096, max_index_size=1 << 20,
                     writable=True)
    try:
        limits = dict(segment_bytes=1 << 30, segment_ms=1 << 40, now_ms=T0)
        assert not seg.should_roll(100, T0, base + INT32_MAX, **limits)
        assert seg.should_roll(100, T0, base + INT32_MAX + 1, **limits)
        assert seg.should_roll(100, T0, base + 2**40, **limits)
    finally:
        seg.close()


@both
def test_index_entries_follow_index_interval_bytes(open_root):
    interval = 300
    root = open_root()
    root.create_topic("t", config={"index.interval.bytes": str(interval), "segment.bytes": "20000"})
    log = root.log("t", 0, writer=True)
    rng = random.Random(3)
    for i in range(150):
        log.append_records([(b"k", b"x" * rng.randint(1, 400), (), T0 + rng.randint(0, 10_000))])
    log.commit()
    log.close()
    segments = check_sealed_segments(log, interval)
    assert len(segments) >= 2
    # The last (now sealed by the close) segment follows the same rule.
    base, data = segments[-1]
    name = f"{base:020d}"
    want_offsets, want_times = expected_indexes(data, base, interval, sealed=True)
    got = np.frombuffer(read_file(log, name + ".index"), dtype=OFFSET_ENTRY)
    assert [(int(r), int(p)) for r, p in got] == want_offsets
    got_t = np.frombuffer(read_file(log, name + ".timeindex"), dtype=TIME_ENTRY)
    assert [(int(t), int(r)) for t, r in got_t] == want_times
    # Entries are sparse: far fewer than batches, and every gap covers more than the interval.
    assert 0 < len(want_offsets) < 150 // 2


# ---------------------------------------------------------------------------------------------
# sealed segments after a crash (local disk)

def _crashed_after_rolls(open_root, config):
    """A writer that committed, rolled several segments and died before its next flush."""
    root = open_root()
    root.create_topic("t", config=config)
    log = root.log("t", 0, writer=True)
    for i in range(5):
        log.append_records([(b"k", b"c" * 100, (), T0 + i)])
    log.commit()
    for i in range(5, 40):
        log.append_records([(b"k", b"u" * 100, (), T0 + i)])
    # Each roll has the segment it sealed fsynced in the background (the recovery point moves
    # in memory once that is done, as Kafka's roll flush), but only a commit checkpoints it:
    # the next writer recovers from offset 5.
    deadline = time.monotonic() + 10
    while log.recovery_point != log.segments[-1].base_offset and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(log.segments) > 3 and log.recovery_point == log.segments[-1].base_offset
    checkpointed = OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read()
    assert checkpointed[("t", 0)] == 5 < log.segments[-2].base_offset
    return log                                 # never closed: no clean-shutdown marker


@local_only
def test_sealed_segments_above_the_recovery_point_are_recovered(open_root):
    interval = 150
    crashed = _crashed_after_rolls(open_root, {"segment.bytes": "1000",
                                               "index.interval.bytes": str(interval)})
    bases = [s.base_offset for s in crashed.segments]
    # The next writer recovers every segment from the recovery point, sealed ones included
    # (their indexes are rebuilt in place and trimmed), and keeps the uncommitted tail here.
    again = open_root(create=False).log("t", 0, writer=True, truncate_uncommitted=False)
    assert again.recovery.truncated == []
    assert [s.base_offset for s in again.segments] == bases
    assert again.log_end_offset == 40
    check_sealed_segments(again, interval)
    assert [r.offset for r in again.read_records(0, isolation="log_end")] == list(range(40))
    # A writer that drops the uncommitted tail cuts back to the committed high watermark.
    again.close()
    third = open_root(create=False).log("t", 0, writer=True)
    assert third.log_end_offset == third.high_watermark == 5
    assert [r.value for r in third.read_records(0)] == [b"c" * 100] * 5
    assert [base for base, _ in segment_files(third)] == [0]


@local_only
def test_missing_index_of_a_sealed_segment_is_rebuilt_and_trimmed(open_root):
    interval = 100
    root = open_root()
    root.create_topic("t", config={"segment.bytes": "1500", "index.interval.bytes": str(interval)})
    log = root.log("t", 0, writer=True)
    for i in range(40):
        log.append_records([(b"k", b"x" * 60, (), T0 + i)])
    log.commit()
    log.close()
    files = segment_files(log)
    assert len(files) > 3
    storage = log.storage
    damaged = storage.join(log.dir, files[1][1].replace(".log", ".index"))
    want = storage.read(damaged)
    assert len(want) >= 16, "the test needs index entries"
    storage.delete(damaged)
    writer = open_root(create=False).log("t", 0, writer=True)
    assert writer.recovery.rebuilt_indexes == [storage.join(log.dir, files[1][1])]
    assert storage.read(damaged) == want
    check_sealed_segments(writer, interval)
    assert [r.offset for r in writer.read_records(0)] == list(range(40))
