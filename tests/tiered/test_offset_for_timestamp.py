"""ListOffsets by timestamp on a tiered log: `Log.offset_for_timestamp` finds offsets whose local
copies are gone in the remote tier (KIP-405), with the same answers as before tiering, checked
against a brute-force search over every record produced."""
from __future__ import annotations

import time

import pytest

from logcore.log.log import Log
from logcore.log.log_root import LogRoot
from logcore.maintenance.service import MaintenanceService
from tests.tiered.tiered_root import tiering_defaults

# An hour ago: recent enough that time retention (retention.ms, 7 days) keeps everything.
T0 = (int(time.time()) - 3600) * 1000
TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "16384", "index.interval.bytes": "1024",
                "local.retention.bytes": "40000", "retention.bytes": "-1"}


def produce_timed(log: Log, batches: int, per_batch: int = 10) -> list[tuple[int, int]]:
    """Batches whose records are 10 ms apart, except every 7th batch, whose timestamps lie 5 s in
    the past (so the first record reaching a target is not always the one after the previous
    answer); returns (offset, timestamp) of every record."""
    produced = []
    for b in range(batches):
        base = log.log_end_offset
        shift = -5000 if b % 7 == 6 else 0
        stamps = [T0 + 10 * (base + i) + shift for i in range(per_batch)]
        log.append_records([(b"k%d" % (base + i), b"v".ljust(200, b"x"), (), ts)
                            for i, ts in enumerate(stamps)])
        log.commit()
        produced += [(base + i, ts) for i, ts in enumerate(stamps)]
    return produced


def expected(produced: list[tuple[int, int]], target: int, start: int) -> tuple[int, int] | None:
    """Kafka's answer by brute force: the first record in offset order at or above the log start
    whose timestamp reaches the target."""
    return next(((o, ts) for o, ts in produced if o >= start and ts >= target), None)


def targets(produced: list[tuple[int, int]], boundaries: list[int]) -> list[int]:
    """Timestamps exactly at records, between records, at segment boundaries, before and after."""
    stamps = sorted({ts for _o, ts in produced})
    by_offset = dict(produced)
    picked = {0, stamps[0] - 1, stamps[0], stamps[-1], stamps[-1] + 1}
    picked.update(stamps[::37])
    picked.update(ts - 5 for ts in stamps[::41])                       # between two records
    for offset in boundaries:                                          # a segment's first and last
        for o in (offset - 1, offset):
            if o in by_offset:
                picked.update((by_offset[o] - 1, by_offset[o], by_offset[o] + 1))
    return sorted(picked)


@pytest.fixture
def tiered(tmp_path, remote):
    """A root tiered to `remote` with topic t: produced, copied, local copies deleted. Returns
    (root url, the root, records produced, answers of the all-local log before tiering)."""
    url = str(tmp_path / "root")
    root = LogRoot.open(url, create=True, defaults=tiering_defaults(*remote))
    root.create_topic("t", config=TOPIC_CONFIG)
    log = root.log("t", 0, writer=True)
    produced = produce_timed(log, 120)
    local_bases = list(log.bases)
    answers = {ts: log.offset_for_timestamp(ts) for ts in targets(produced, local_bases)}
    root.release_log(log)
    summary = MaintenanceService(root).run_once()
    assert summary.outcomes[0].tiering.segments_copied >= 10 and summary.segments_deleted >= 8
    yield url, root, produced, answers
    root.close()


def test_timestamps_in_the_remote_tier_find_the_remote_offset(tiered):
    url, root, produced, before = tiered
    reader = LogRoot.open(url, read_only=True).log("t", 0)
    local_start = reader.local_log_start_offset
    assert reader.log_start_offset == 0 and local_start > len(produced) // 3
    store = root.remote_tier().store("t", root.describe_topic("t").topic_id, 0)
    store.refresh()
    boundaries = [m.start_offset for m in store.list_segments()] + [local_start]
    remote_hits = 0
    for target in targets(produced, boundaries):
        found = reader.offset_for_timestamp(target)
        assert found == expected(produced, target, 0), target
        if target in before:
            assert found == before[target], target          # the same answer as before tiering
        remote_hits += found is not None and found[0] < local_start
    assert remote_hits > 20
    # Before everything: the first record, which only the remote tier holds now.
    assert reader.offset_for_timestamp(0) == produced[0]
    assert reader.offset_for_timestamp(produced[-1][1] + 1) is None
    reader.close()


def test_records_below_the_log_start_offset_are_never_answered(tiered):
    url, root, produced, _before = tiered
    log = root.log("t", 0, writer=True)
    store = root.remote_tier().store("t", root.describe_topic("t").topic_id, 0)
    second = store.list_segments()[1]
    start = second.start_offset + 7                      # inside a remote segment
    log.delete_records_before(start)
    assert log.log_start_offset == start < log.local_log_start_offset
    for target in (0, produced[start - 1][1], produced[start][1], produced[start + 3][1] - 5,
                   produced[second.end_offset + 2][1]):
        assert log.offset_for_timestamp(target) == expected(produced, target, start), target
    assert log.offset_for_timestamp(0) == produced[start]
    reader = LogRoot.open(url, read_only=True).log("t", 0)
    assert reader.offset_for_timestamp(0) == produced[start]
    reader.close()
    root.release_log(log)


def test_remote_search_reads_from_the_time_index_position(tmp_path):
    """The remote segment's time index narrows the read: a target late in a remote segment reads
    from near its record, not the whole segment from its start."""
    remote = (str(tmp_path / "remote"), {})
    url = str(tmp_path / "root")
    root = LogRoot.open(url, create=True, defaults=tiering_defaults(*remote))
    root.create_topic("t", config=TOPIC_CONFIG)
    log = root.log("t", 0, writer=True)
    produced = produce_timed(log, 120)
    root.release_log(log)
    MaintenanceService(root).run_once()
    store = root.remote_tier().store("t", root.describe_topic("t").topic_id, 0)
    store.refresh()
    meta = store.list_segments()[0]
    reader = LogRoot.open(url, read_only=True).log("t", 0)
    positions = []
    rsm = reader.remote.rsm
    fetch = rsm.fetch_log_segment
    rsm.fetch_log_segment = lambda m, start, end=None: positions.append(start) or fetch(m, start, end)
    target = meta.max_timestamp_ms - 30                  # three records before the segment's newest
    found = reader.offset_for_timestamp(target)
    assert found == expected(produced, target, 0) and found[0] > meta.start_offset + 30
    assert positions and min(positions) > meta.segment_size_in_bytes // 2
    reader.close()
    root.close()


def test_local_only_logs_are_unchanged(tmp_path):
    """Without a remote tier the local search answers as before (sanity anchor of the oracle)."""
    root = LogRoot.open(str(tmp_path / "plain"), create=True)
    root.create_topic("t", config={"segment.bytes": "16384"})
    log = root.log("t", 0, writer=True)
    produced = produce_timed(log, 60)
    for target in targets(produced, list(log.bases)):
        assert log.offset_for_timestamp(target) == expected(produced, target, 0), target
    root.release_log(log)
    root.close()
