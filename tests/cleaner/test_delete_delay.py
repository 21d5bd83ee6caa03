"""file.delete.delay.ms: the segments a pass replaces stay readable for the delay, then go."""
import random

from logcore.cleaner import delayed_delete
from logcore.cleaner.cleaner import LogCleaner
from tests.cleaner.helpers import check_compacted, open_root, read_all, reader_root, write

HOUR = 3_600_000


def _items(n, seed=3):
    rnd = random.Random(seed)
    return [(f"k{rnd.randrange(8)}".encode(), f"value-{i}".encode() * 4) for i in range(n)]


def _replaced(target, log):
    """Names of the replaced files still stored: `.deleted` files (local) or the objects the
    partition state lists as replaced (object stores)."""
    names = log.storage.list_dir(log.dir)
    if log.storage.is_local:
        return sorted(n for n in names if n.endswith(".deleted"))
    stems = {stem for stem, _due in delayed_delete.pending_objects(log.state_store.cleaned)}
    return sorted(n for n in names if n.rsplit(".", 1)[0] in stems)


def test_reader_keeps_reading_replaced_segments_until_the_delay_passed(any_storage_url):
    target = any_storage_url
    root = open_root(target, file_delete_delay_ms=HOUR)
    log = root.log("t", 0, writer=True)
    written = write(log, _items(200))
    reader = reader_root(target).log("t", 0)
    before = read_all(reader)
    assert [o for o, *_ in before] == sorted(written)

    started = delayed_delete.now_ms()
    stats = LogCleaner(dedupe_buffer_size=1 << 16).clean(log, 2_000_000)
    assert stats is not None and stats.records_kept < stats.records_read
    pending = _replaced(target, log)
    assert pending, "the replaced segments' files are kept for the delay"

    # Not due yet: neither the next pass nor a writer opening the log removes them.
    assert LogCleaner.delete_expired_files(log) == []
    assert delayed_delete.delete_expired(log, started + HOUR - 1) == []
    if not log.storage.is_local:
        root.close()
        root = reader_root(target)
        log = root.log("t", 0, writer=True)
        assert _replaced(target, log) == pending
    # The reader has not refreshed: it still reads the log as it was, from the replaced files.
    assert read_all(reader) == before

    # Due: removed; the reader meets the missing files, refreshes and reads the cleaned log.
    removed = delayed_delete.delete_expired(log, delayed_delete.now_ms() + HOUR + 1)
    assert removed
    assert not any(log.storage.exists(p) for p in removed)
    assert _replaced(target, log) == []
    after = read_all(reader)
    assert len(after) < len(before)
    check_compacted(after, written, tombstones_expected=True)
    assert after == read_all(log)
    root.close()


def test_leftovers_go_at_open_and_a_zero_delay_at_the_next_pass(tmp_path):
    from tests.conftest import StorageTarget
    target = StorageTarget("local", str(tmp_path / "a"))
    root = open_root(target, file_delete_delay_ms=HOUR)
    log = root.log("t", 0, writer=True)
    write(log, _items(200))
    LogCleaner(dedupe_buffer_size=1 << 16).clean(log, 2_000_000)
    assert _replaced(target, log)
    root.close()
    # Kafka's startup: a writer opening the log removes every `.deleted` leftover.
    root = reader_root(target)
    log = root.log("t", 0, writer=True)
    assert _replaced(target, log) == []
    root.close()

    target = StorageTarget("local", str(tmp_path / "b"))
    root = open_root(target, file_delete_delay_ms=0)
    log = root.log("t", 0, writer=True)
    write(log, _items(200))
    LogCleaner(dedupe_buffer_size=1 << 16).clean(log, 2_000_000)
    assert _replaced(target, log)
    assert LogCleaner.delete_expired_files(log)
    assert _replaced(target, log) == []
    root.close()
