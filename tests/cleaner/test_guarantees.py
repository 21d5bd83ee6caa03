"""Kafka's compaction guarantees, each its own test, on local disk, fsspec memory and S3."""
import random

import pytest

from logcore.cleaner.cleaner import LogCleaner
from tests.cleaner.helpers import DAY, check_compacted, open_root, read_all, reader_root, write

KEYS = 15


def _items(n, seed=1, tombstone_every=11, prefix="key"):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = f"{prefix}-{rnd.randrange(KEYS)}".encode()
        value = None if i % tombstone_every == 5 else f"value-{i}-".encode() * 3
        out.append((key, value))
    return out


@pytest.fixture
def written_log(any_storage_url):
    root = open_root(any_storage_url)
    log = root.log("t", 0, writer=True)
    written = write(log, _items(240))
    yield any_storage_url, root, log, written
    root.close()


def _clean(log, now_ms=2_000_000):
    stats = LogCleaner(dedupe_buffer_size=1 << 16).clean(log, now_ms)
    assert stats is not None and stats.records_kept < stats.records_read
    return stats


def test_reader_at_the_head_sees_every_offset(written_log):
    """Guarantee 1: compaction only touches the tail; a reader keeping up sees all records."""
    target, root, log, written = written_log
    reader = reader_root(target).log("t", 0)
    head = read_all(reader)
    assert [o for o, *_ in head] == list(range(240))
    _clean(log)
    more = write(log, _items(30, seed=2), ts=3_000_000)
    reader.refresh()
    tail = read_all(reader, 240)
    assert [o for o, *_ in tail] == sorted(more) == list(range(240, 270))


def test_order_is_preserved(written_log):
    """Guarantee 2: the cleaned log is a subsequence of the written one."""
    _t, _root, log, written = written_log
    _clean(log)
    records = read_all(log)
    offsets = [o for o, *_ in records]
    assert offsets == sorted(offsets) and len(offsets) < len(written)


def test_offsets_never_change(written_log):
    """Guarantee 3: every surviving record keeps its offset (and content)."""
    _t, _root, log, written = written_log
    _clean(log)
    for offset, key, value in read_all(log):
        assert written[offset] == (key, value)


def test_reader_from_start_sees_final_values_and_tombstones(written_log):
    """Guarantee 4: final value of each key, in write order, and tombstones within
    delete.retention.ms; also through a reader in another root handle."""
    target, _root, log, written = written_log
    stats = _clean(log)
    reader = reader_root(target).log("t", 0)
    records = read_all(reader)
    check_compacted(records, written, tombstones_expected=True)
    cleaned_end = stats.end_offset
    below = [(k, v) for o, k, v in records if o < cleaned_end]
    assert len({k for k, _ in below}) == len(below), "one record per key in the cleaned part"


def test_seek_into_a_compacted_gap_lands_on_next_offset(written_log):
    _t, _root, log, written = written_log
    _clean(log)
    offsets = [o for o, *_ in read_all(log)]
    gaps = [o for o in range(offsets[-1]) if o not in set(offsets)]
    assert gaps
    for gap in gaps[:20]:
        first = next(iter(log.read_records(gap)))
        assert first.offset == min(o for o in offsets if o > gap)


def test_tombstones_removed_after_delete_retention(written_log):
    target, _root, log, written = written_log
    first = _clean(log, now_ms=2_000_000)
    assert any(v is None for o, _k, v in read_all(log) if o < first.end_offset)
    write(log, _items(40, seed=3, prefix="other"), ts=4_000_000)   # dirty data for the next pass
    _clean(log, now_ms=2_000_000 + DAY - 1)
    assert any(v is None for o, _k, v in read_all(log) if o < first.end_offset), "kept until the horizon"
    write(log, _items(40, seed=5, prefix="third"), ts=5_000_000)
    _clean(log, now_ms=2_000_000 + DAY + 1)
    records = read_all(log)
    # tombstones whose horizon the first pass set are gone; their keys have no value left
    horizon_end = first.end_offset
    assert not any(v is None for o, _k, v in records if o < horizon_end)
    everything = dict(written)
    check_compacted(records, everything | _written_since(log, 240), tombstones_expected=False)


def _written_since(log, start):
    return {o: (k, v) for o, k, v in read_all(log, start)}


def test_small_segments_are_merged(any_storage_url):
    root = open_root(any_storage_url, segment_bytes=1 << 20)
    log = root.log("t", 0, writer=True)
    written = {}
    for round_ in range(12):                # one segment per commit on object stores, roll locally
        written.update(write(log, _items(10, seed=round_), per_commit=100, ts=1_000_000 + round_ * 100))
        if log.storage.is_local:
            log.roll_to(log.log_end_offset)
    before = len(log.segments)
    stats = _clean(log)
    assert before >= 12 and len(log.segments) == 2      # one merged segment + the active one
    assert stats.segments_before == before - 1 and stats.segments_after == 1
    check_compacted(read_all(log), written, tombstones_expected=True)
    root.close()
    reopened = reader_root(any_storage_url).log("t", 0)
    check_compacted(read_all(reopened), written, tombstones_expected=True)


def test_aborted_transactions_removed(any_storage_url):
    from logcore.records.control import ControlType
    root = open_root(any_storage_url)
    log = root.log("t", 0, writer=True)
    write(log, _items(20))
    pid, epoch = 42, 0
    aborted = []
    for seq in range(3):
        info = log.append_records([(b"key-1", b"aborted-%d" % seq, (), 1_500_000)], producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, is_transactional=True)
        aborted.append(info.first_offset)
    log.append_control(ControlType.ABORT, producer_id=pid, producer_epoch=epoch)
    committed = log.append_records([(b"key-2", b"committed", (), 1_500_001)], producer_id=pid,
                                   producer_epoch=epoch, base_sequence=3, is_transactional=True)
    log.append_control(ControlType.COMMIT, producer_id=pid, producer_epoch=epoch)
    log.commit()
    write(log, _items(30, seed=4), ts=1_600_000)
    if log.storage.is_local:
        log.roll_to(log.log_end_offset)
    stats = _clean(log)
    assert stats.aborted_records_removed == 3
    raw = read_all(log, isolation="read_uncommitted")
    assert not any(o in aborted for o, *_ in raw), "aborted data is gone even for read_uncommitted"
    assert (committed.first_offset, b"key-2", b"committed") in raw or \
        any(k == b"key-2" and o > committed.first_offset for o, k, _ in raw)
    root.close()


def test_nothing_to_clean_returns_none(any_storage_url):
    root = open_root(any_storage_url)
    log = root.log("t", 0, writer=True)
    assert LogCleaner(dedupe_buffer_size=4096).clean(log) is None
    root.close()


def test_map_smaller_than_dirty_section_cleans_in_several_passes(tmp_path):
    from tests.conftest import StorageTarget
    target = StorageTarget("local", str(tmp_path / "root"))
    root = open_root(target)
    log = root.log("t", 0, writer=True)
    items = [(f"k{i % 40}".encode(), f"v{i}".encode()) for i in range(400)]
    written = write(log, items)
    cleaner = LogCleaner(dedupe_buffer_size=24 * 12)       # 10 keys a pass
    passes = []
    while True:
        stats = cleaner.clean(log, 2_000_000)
        if stats is None:
            break
        passes.append(stats.end_offset)
        assert len(passes) < 50
    assert len(passes) > 1 and passes == sorted(passes)
    records = read_all(log)
    check_compacted(records, written, tombstones_expected=True)
    root.close()
