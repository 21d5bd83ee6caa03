"""A writer appends, a reader in another handle reads from the start, the cleaner runs: at once."""
import threading
import time

import pytest

from tests.conftest import StorageTarget
from logcore.cleaner.cleaner import CleanerAbortedError, LogCleaner
from tests.cleaner.helpers import check_compacted, open_root, read_all, reader_root, write


def test_append_read_and_clean_concurrently(tmp_path):
    target = StorageTarget("local", str(tmp_path / "root"))
    root = open_root(target, segment_bytes=4000)
    log = root.log("t", 0, writer=True)
    written = {}
    written_lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def writer():
        i = 0
        try:
            while not stop.is_set():
                for _ in range(10):
                    info = log.append_records([(b"k%d" % (i % 23), b"value-%d" % i, (), 1_000_000 + i)])
                    # Offsets are handed out once each, in order: the i-th append gets offset i.
                    assert info.first_offset == i, (info.first_offset, i, log.bases[-3:])
                    with written_lock:
                        written[info.first_offset] = (b"k%d" % (i % 23), b"value-%d" % i)
                    i += 1
                log.commit()
        except Exception as exc:     # noqa: BLE001 - reported below
            errors.append(exc)
            stop.set()

    def cleaner():
        c = LogCleaner(dedupe_buffer_size=1 << 14)
        while not stop.is_set():
            try:
                c.clean(log, 2_000_000)
            except Exception as exc:     # noqa: BLE001 - reported below
                errors.append(exc)
                return
            time.sleep(0.01)

    threads = [threading.Thread(target=writer), threading.Thread(target=cleaner)]
    for t in threads:
        t.start()
    reader = reader_root(target).log("t", 0)
    passes = 0
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline and not stop.is_set():
            reader.refresh()
            seen = {}
            last = -1
            for record in reader.read_records(0):
                assert record.offset > last
                last = record.offset
                assert written[record.offset] == (record.key, record.value)
                seen[record.key] = record.offset
            # Every key's latest record up to what the reader saw is there, unless the key has a
            # newer record past `last`: the cleaner works up to the writer's HW, which may be
            # ahead of the HW this reader refreshed, and a reader that reads on reaches it.
            with written_lock:      # a copy made while the writer adds may see the dict resized
                snapshot = list(written.items())
            newest = {}
            for offset, (key, _v) in snapshot:
                newest[key] = max(newest.get(key, -1), offset)
            for offset, (key, _v) in snapshot:
                if offset <= last:
                    assert seen.get(key, -1) >= offset or newest[key] > last, (key, offset, last)
            passes += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert passes > 3
    root.close()


def test_the_cleaner_reads_the_writers_offsets_under_its_lock(tmp_path):
    """The cleaner's snapshot of segments, LEO, HW and LSO waits for a writer in the middle of a
    change (the producer state's dicts are not safe to read meanwhile)."""
    target = StorageTarget("local", str(tmp_path / "root"))
    root = open_root(target, segment_bytes=1000)
    log = root.log("t", 0, writer=True)
    for i in range(40):
        log.append_records([(b"k%d" % (i % 5), b"v%d" % i, (), 1_000_000 + i)])
    log.commit()
    sections = []
    with log.lock:         # the writer, mid-change
        t = threading.Thread(target=lambda: sections.append(LogCleaner().dirty_section(log, 2_000_000)))
        t.start()
        t.join(0.2)
        assert t.is_alive() and not sections
    t.join(10)
    assert not t.is_alive() and sections[0].first_uncleanable == log.segments[-1].base_offset
    root.close()


def test_segments_deleted_during_a_pass_abandon_it_and_leave_nothing(any_storage_url, monkeypatch):
    """DeleteRecords removes the segments a pass is cleaning before its swap: Log.replace_segments
    refuses the replacement, the pass is abandoned (CleanerAbortedError), its outputs are
    discarded and the log reads as retention left it; the next pass cleans what is left."""
    root = open_root(any_storage_url, cleanup_policy="compact,delete", retention_ms=-1)
    log = root.log("t", 0, writer=True)
    items = [(b"k%d" % (i % 7), b"value-%d" % i * 3) for i in range(300)]
    written = write(log, items)
    assert len(log.segments) > 3
    cut = log.segments[2].base_offset
    original = LogCleaner._clean_group

    def clean_then_delete(self, log, group, *args, **kwargs):
        out = original(self, log, group, *args, **kwargs)
        if log.log_start_offset < cut:
            log.delete_records_before(cut)          # the group's first segment leaves the log
        return out

    monkeypatch.setattr(LogCleaner, "_clean_group", clean_then_delete)
    with pytest.raises(CleanerAbortedError, match="segments changed during cleaning"):
        LogCleaner(dedupe_buffer_size=1 << 16).clean(log, 2_000_000)
    monkeypatch.setattr(LogCleaner, "_clean_group", original)
    assert log.log_start_offset == cut
    names = log.storage.list_dir(log.dir)
    assert not [n for n in names if n.endswith(".cleaned") or n.endswith(".swap")]
    left = {o: kv for o, kv in written.items() if o >= cut}
    assert read_all(log, cut) == [(o, k, v) for o, (k, v) in sorted(left.items())]
    stats = LogCleaner(dedupe_buffer_size=1 << 16).clean(log, 2_000_000)
    assert stats is not None and stats.records_kept < stats.records_read
    check_compacted(read_all(log, cut), left, tombstones_expected=False)
    root.close()


def test_a_truncation_during_a_pass_abandons_it(tmp_path, monkeypatch):
    """A follower cuts its log where it diverged from its leader while its cleaner is mid-pass:
    the pass's offset map holds records the cut removed, so a group cleaned with it would lose
    records whose later versions are gone. The segments of the first group are all still in the
    log, yet Log.replace_segments refuses (the log's truncation count moved), the pass is
    abandoned, the cleaner checkpoint is not written, and the next pass cleans what is left."""
    from logcore.log.cleaner_checkpoint import CleanerCheckpoint
    root = open_root(StorageTarget("local", str(tmp_path / "root")))
    log = root.log("t", 0, writer=True)
    items = [(b"k%d" % (i % 7), b"value-%d" % i * 3) for i in range(300)]
    written = write(log, items)
    assert len(log.segments) > 4
    cut = log.segments[3].base_offset + 3          # inside a sealed segment the map covered
    original = LogCleaner._clean_group

    def clean_then_truncate(self, log, group, *args, **kwargs):
        out = original(self, log, group, *args, **kwargs)
        if log.log_end_offset > cut:
            log.truncate_to(cut, below_high_watermark=True)
        return out

    monkeypatch.setattr(LogCleaner, "_clean_group", clean_then_truncate)
    with pytest.raises(CleanerAbortedError):
        LogCleaner(dedupe_buffer_size=1 << 16).clean(log, 2_000_000)
    monkeypatch.setattr(LogCleaner, "_clean_group", original)
    assert CleanerCheckpoint(log).read() is None
    left = {o: kv for o, kv in written.items() if o < cut}
    assert read_all(log) == [(o, k, v) for o, (k, v) in sorted(left.items())]
    assert not [n for n in log.storage.list_dir(log.dir) if n.endswith(".cleaned") or n.endswith(".swap")]
    stats = LogCleaner(dedupe_buffer_size=1 << 16).clean(log, 2_000_000)
    assert stats is not None and stats.records_kept < stats.records_read
    check_compacted(read_all(log), left, tombstones_expected=False)
    root.close()


def test_truncating_below_the_cleaner_checkpoint_lowers_it(tmp_path):
    """Kafka's maybeTruncateCheckpoint: offsets appended after a cut below the clean section's end
    are dirty, and the next pass dedupes them."""
    from logcore.log.cleaner_checkpoint import CleanerCheckpoint
    root = open_root(StorageTarget("local", str(tmp_path / "root")))
    log = root.log("t", 0, writer=True)
    write(log, [(b"k%d" % (i % 7), b"value-%d" % i * 3) for i in range(300)])
    cleaner = LogCleaner(dedupe_buffer_size=1 << 16)
    end = cleaner.clean(log, 2_000_000).end_offset
    assert CleanerCheckpoint(log).read() == end
    cut = end - 20
    log.truncate_to(cut, below_high_watermark=True)
    assert CleanerCheckpoint(log).read() == cut
    assert cleaner.dirty_section(log, 2_000_000).first_dirty == cut
    # Many values of one key from the cut on: once sealed, a pass keeps only the last one.
    again = write(log, [(b"hot", b"v%d" % i * 20) for i in range(200)] + [(b"x%d" % i, b"y" * 60) for i in range(40)])
    cleaner.clean(log, 2_000_000)
    hot = [(o, v) for o, k, v in read_all(log) if k == b"hot"]
    assert hot == [(max(o for o, (k, _v) in again.items() if k == b"hot"), b"v199" * 20)]
    root.close()


def test_a_log_closed_during_a_pass_gets_nothing_written(tmp_path, monkeypatch):
    """A cluster member's replica reassigned away is closed and its folder deleted while its
    cleaner is mid-pass: the pass stops before the next group, swaps nothing in and writes no
    checkpoint, and the deleted folder is not created again."""
    import shutil
    from logcore.log.cleaner_checkpoint import CleanerCheckpoint
    root = open_root(StorageTarget("local", str(tmp_path / "root")))
    log = root.log("t", 0, writer=True)
    write(log, [(b"k%d" % (i % 7), b"value-%d" % i * 3) for i in range(300)])
    folder = log.storage.local_path(log.dir)
    original = LogCleaner._clean_group
    calls = []

    def clean_then_close(self, log, group, *args, **kwargs):
        out = original(self, log, group, *args, **kwargs)
        if not calls:
            calls.append(group)
            root.release_log(log)
            shutil.rmtree(folder)
        return out

    monkeypatch.setattr(LogCleaner, "_clean_group", clean_then_close)
    with pytest.raises(CleanerAbortedError):
        LogCleaner(dedupe_buffer_size=1 << 16).clean(log, 2_000_000)
    assert calls and log.is_closed
    import os
    assert not os.path.exists(folder)
    assert CleanerCheckpoint(log).read() is None
    root.close()
