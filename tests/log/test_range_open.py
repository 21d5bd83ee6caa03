"""The range-bounded open of readers (`LogRoot.log(..., read_range=(start, end))`): reads of the
range answer as a full open does, untouched segments are not checked at open, and the LSO of
read_committed still bounds the reads."""
from __future__ import annotations

import os

import pytest

from logcore.errors import CorruptRecordError
from logcore.log.log_root import LogRoot
from logcore.records.control import ControlType

SEGMENT_BYTES = "2048"


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def root_target(request, storage_targets):
    """Local disk, fsspec memory and one S3 server: the session's preferred one (SeaweedFS, or
    moto's server where there is none). A range open only lists a folder and issues ranged GETs,
    which both servers answer alike; moto's server (in this process, a few hundred small
    requests) took twice SeaweedFS's time here for the same checks. Where the two servers
    behave differently (conditional writes, fencing) the tests run on each: tests/log's
    `root_target` and the `s3_backend_url` fixture."""
    return storage_targets.make(request.param)


def recs(n, start=0, ts=1_700_000_000_000):
    return [(f"k{i}".encode(), f"v{i}".encode().ljust(40, b"."), (), ts + i) for i in range(start, start + n)]


def read(log, start, end, isolation):
    out = []
    for r in log.read_records(start, isolation=isolation):
        if r.offset >= end:
            break
        out.append((r.offset, r.value))
    return out


def build(root, *, writer_open=False):
    """About 20 segments: plain batches, an aborted and a committed transaction in the middle."""
    root.create_topic("t", config={"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": "200"})
    log = root.log("t", 0, writer=True)
    for i in range(80):
        log.append_records(recs(5, start=i * 5))
        if i == 15:
            log.append_records(recs(3, start=1000), producer_id=7, producer_epoch=0, base_sequence=0,
                               is_transactional=True)
            log.append_control(ControlType.ABORT, producer_id=7, producer_epoch=0)
        if i == 25:
            log.append_records(recs(3, start=2000), producer_id=8, producer_epoch=0, base_sequence=0,
                               is_transactional=True)
            log.append_control(ControlType.COMMIT, producer_id=8, producer_epoch=0)
        log.commit()
    if writer_open:
        return log
    log.close()
    return None


@pytest.mark.parametrize("writer_open", [False, True], ids=["closed", "live-writer"])
def test_range_reads_match_a_full_open(open_root, writer_open):
    root = open_root()
    writer = build(root, writer_open=writer_open)
    full = root.log("t", 0)
    assert len(full.segments) >= 12
    hw = full.high_watermark
    for start, end in [(0, 10), (83, 97), (100, 160), (hw - 7, hw), (hw - 40, hw), (0, hw)]:
        bounded = root.log("t", 0, read_range=(start, end))
        assert (bounded.high_watermark, bounded.log_start_offset) == (full.high_watermark, full.log_start_offset)
        assert full.last_stable_offset >= bounded.last_stable_offset >= min(end, full.last_stable_offset)
        for isolation in ("read_committed", "read_uncommitted"):
            assert read(bounded, start, end, isolation) == read(full, start, end, isolation), (start, end)
        # aborted data is filtered by the range's transaction indexes
        fetch = bounded.read(start, 1 << 20)
        assert fetch.aborted == full.read(start, 1 << 20).aborted
        bounded.close()
    full.close()
    if writer is not None:
        writer.close()


def test_untouched_segments_are_not_checked_at_open(tmp_path):
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    build(root)
    d = tmp_path / "root" / "t-0"
    first_index = sorted(p for p in os.listdir(d) if p.endswith(".index"))[0]
    # The first segment's offset index is gone: a full open rebuilds it.
    os.remove(d / first_index)
    full = root.log("t", 0)
    assert [p for p in full.recovery.rebuilt_indexes if p.endswith(first_index[:20] + ".log")]
    hw = full.high_watermark
    bounded = root.log("t", 0, read_range=(hw - 20, hw))
    assert bounded.recovery.rebuilt_indexes == []       # the open never looked at it
    assert read(bounded, hw - 20, hw, "read_committed") == read(full, hw - 20, hw, "read_committed")
    # A read outside the range still works: the entry it uses is checked on use.
    assert read(bounded, 0, 10, "read_committed") == read(full, 0, 10, "read_committed")
    bounded.close()
    full.close()
    root.close()


def test_damage_in_the_range_is_reported_with_file_and_position(tmp_path):
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    build(root)
    full = root.log("t", 0)
    seg = full.segments[5]
    target = seg.base_offset
    position = full.read(target, 1).position
    full.close()
    with open(seg.log_path if os.path.isabs(seg.log_path) else tmp_path / "root" / seg.log_path, "r+b") as f:
        f.seek(position + 70)       # inside the first record: the batch CRC no longer matches
        byte = f.read(1)
        f.seek(position + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    bounded = root.log("t", 0, read_range=(target, target + 5))
    with pytest.raises(CorruptRecordError) as info:
        read(bounded, target, target + 5, "read_committed")
    assert info.value.file.endswith(os.path.basename(seg.log_path))
    assert info.value.position == position
    bounded.close()
    root.close()


def test_open_transaction_bounds_a_read_committed_range(open_root):
    root = open_root()
    root.create_topic("t", config={"segment.bytes": SEGMENT_BYTES})
    log = root.log("t", 0, writer=True)
    for i in range(10):
        log.append_records(recs(5, start=i * 5))
    open_at = log.log_end_offset
    log.append_records(recs(2, start=500), producer_id=9, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    for i in range(10):
        log.append_records(recs(5, start=600 + i * 5))      # rolls past the open transaction
    log.commit()
    assert log.last_stable_offset == open_at
    hw = log.high_watermark
    for end in (open_at - 3, open_at, hw):
        bounded = root.log("t", 0, read_range=(0, end))
        assert bounded.last_stable_offset == open_at
        committed = read(bounded, 0, end, "read_committed")
        assert [o for o, _ in committed] == list(range(min(end, open_at)))
        assert len(read(bounded, 0, end, "read_uncommitted")) == end
        bounded.close()
    # once the transaction ends, a fresh bounded reader sees past it
    log.append_control(ControlType.COMMIT, producer_id=9, producer_epoch=0)
    log.commit()
    bounded = root.log("t", 0, read_range=(open_at, log.high_watermark))
    assert bounded.last_stable_offset == log.high_watermark
    assert read(bounded, open_at, open_at + 2, "read_committed")[0][0] == open_at
    bounded.close()
    log.close()

