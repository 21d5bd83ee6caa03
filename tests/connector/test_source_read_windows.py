"""How a source task reads its range from an object store, counted at the store (fsspec's
memory filesystem): a range that fits the fetch bound and the object-store window in one GET
(sized from the offset index, not grown 4x per read from a short first window), a longer one in
windows of that size, a small GET for a small range, and the next window's GET in flight while
the current window is decoded and Spark takes its Arrow batch (read-ahead), with the same rows
and errors as without."""
from __future__ import annotations

import pickle
import threading
import time
import uuid

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from logcore.errors import ResourceNotFoundError
from logcore.log.log_root import LogRoot
from pyspark_seglog import partition_reader
from pyspark_seglog.partition_reader import open_files, read_files
from pyspark_seglog.source import SeglogBatchReader

VALUE = b"v" * 100
RECORDS = 3000          # 300 batches of 10 records, about 1.3 KiB each: ~400 KB in one segment


@pytest.fixture
def gets(monkeypatch):
    """The (start, end) of every GET that reaches the memory:// store, in order."""
    seen: list[tuple] = []
    lock = threading.Lock()
    real = MemoryFileSystem.cat_file

    def counting(self, path, start=None, end=None, **kwargs):
        with lock:
            seen.append((str(path), start, end))
        return real(self, path, start=start, end=end, **kwargs)
    monkeypatch.setattr(MemoryFileSystem, "cat_file", counting)
    return seen


def _write_root(url: str, storage_options: dict | None = None) -> str:
    with LogRoot.open(url, storage_options=storage_options, create=True) as root:
        root.create_topic("t", 1)
        log = root.log("t", 0, writer=True)
        for i in range(RECORDS // 10):
            log.append_records([(b"k%d" % i, VALUE, (), None)] * 10)
        log.commit()            # one published segment
        log.close()
    return url


@pytest.fixture(scope="module")
def root_url() -> str:
    return _write_root(f"memory://read-windows-{uuid.uuid4().hex[:8]}/root")


def _planned(url: str, **options):
    reader = SeglogBatchReader({"path": url, "subscribe": "t", **options}, None)
    return [pickle.loads(pickle.dumps(p)) for p in reader.partitions()][0]


def _segment_gets(gets) -> list[tuple]:
    return [(path, start or 0, end) for path, start, end in gets if path.endswith(".log")]


def _read_range(url: str, gets, first: int = 0, until: int = RECORDS) -> tuple[list, list[tuple]]:
    """A task of offsets [first, until): (its Arrow batches, its GETs of the segment), after
    checking that the batches hold every offset once, in order."""
    part = _planned(url, startingOffsets=f'{{"t": {{"0": {first}}}}}', endingOffsets=f'{{"t": {{"0": {until}}}}}')
    opened = open_files(part)
    gets.clear()
    batches = list(read_files(part, *opened))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(first, until))
    return batches, _segment_gets(gets)


def test_a_range_within_the_fetch_bound_is_one_get(root_url, gets):
    batches, windows = _read_range(root_url, gets)
    assert len(windows) == 1, f"GETs of the segment: {windows}"
    (_p, start, end), = windows
    assert start == 0 and end > 256 << 10           # sized from the offset index, not grown 4x per read
    assert len(batches) == 1


def test_a_range_from_the_middle_of_the_segment_is_one_get_of_its_bytes(root_url, gets):
    _batches, windows = _read_range(root_url, gets, 1000, 2000)
    (_p, start, end), = windows
    # a third of the segment's ~400 KB, plus the slack past the last index entry below the end
    assert start > 0 and end - start < (400 << 10) // 3 + (80 << 10), (start, end)


def test_a_range_over_the_store_window_is_read_in_windows_of_it(root_url, gets, monkeypatch):
    monkeypatch.setattr(partition_reader, "STORE_WINDOW_BYTES", 128 << 10)
    batches, windows = _read_range(root_url, gets)
    # ~400 KB in windows of at most 128 KiB, each starting where the one before ended
    assert 3 <= len(windows) <= 5 and all(end - start <= 128 << 10 for _p, start, end in windows), windows
    assert [s for _p, s, _e in windows] == sorted(s for _p, s, _e in windows)
    assert len(batches) == len(windows)


def test_a_small_range_reads_a_small_window(root_url, gets):
    _batches, windows = _read_range(root_url, gets, 1500, 1510)
    (_path, start, end), = windows
    assert end - start <= 128 << 10, f"a 10-record range read {end - start:,} bytes"


def test_a_range_over_the_bound_reads_the_next_window_while_spark_takes_the_batch(root_url, gets):
    part = _planned(root_url, **{"kafka.max.partition.fetch.bytes": str(64 << 10)})
    opened = open_files(part)
    gets.clear()
    rows = read_files(part, *opened)
    first = next(rows)
    # The consumer holds the first batch: the second window's GET is asked for meanwhile.
    deadline = time.monotonic() + 10
    while len(_segment_gets(gets)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_segment_gets(gets)) == 2, "no read-ahead while the first batch was being taken"
    batches = [first] + list(rows)
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(RECORDS))
    # The batches handed on own their bytes: the next window read into the same buffer meanwhile
    # changed none of them.
    assert all(v == VALUE for b in batches for v in b.column("value").to_pylist())
    assert [k for b in batches for k in b.column("key").to_pylist()] == [b"k%d" % (o // 10) for o in offsets]
    windows = _segment_gets(gets)
    assert all(end - start <= 64 << 10 for _p, start, end in windows)
    # consecutive windows: each GET starts where a whole batch of the one before ended
    assert [s for _p, s, _e in windows] == sorted(s for _p, s, _e in windows)


def test_a_task_closed_with_a_read_ahead_in_flight_closes_cleanly(root_url):
    part = _planned(root_url, **{"kafka.max.partition.fetch.bytes": str(64 << 10)})
    root, log, bound = open_files(part)
    rows = read_files(part, root, log, bound)
    assert next(rows).num_rows > 0
    rows.close()                # waits for the read in flight, then closes the root
    assert log.is_closed


def test_an_error_of_a_read_ahead_is_the_tasks_error(root_url, monkeypatch):
    part = _planned(root_url, **{"kafka.max.partition.fetch.bytes": str(64 << 10)})
    opened = open_files(part)
    rows = read_files(part, *opened)
    next(rows)
    real = MemoryFileSystem.cat_file
    calls = []

    def failing(self, path, start=None, end=None, **kwargs):
        if str(path).endswith(".log"):
            calls.append(threading.current_thread().name)
            raise FileNotFoundError(path)
        return real(self, path, start=start, end=end, **kwargs)
    monkeypatch.setattr(MemoryFileSystem, "cat_file", failing)
    # A read already in flight may have finished before the patch; whichever read meets the
    # missing object (the read-ahead's thread or the task's), the task raises its error.
    with pytest.raises(ResourceNotFoundError):
        for _ in rows:
            pass


@pytest.mark.s3
def test_on_s3_each_window_is_one_get(storage_targets, monkeypatch):
    from logcore.storage import objectstore
    target = storage_targets.make("s3")
    _write_root(target.url, target.storage_options)
    so = target.storage_options
    part = _planned(target.url, **{"storage.endpoint_url": so["endpoint_url"], "storage.key": so["key"],
                                   "storage.secret": so["secret"],
                                   "storage.client_kwargs.region_name": so["client_kwargs"]["region_name"]})
    monkeypatch.setattr(partition_reader, "STORE_WINDOW_BYTES", 128 << 10)
    ranges = []
    real = objectstore.ObjectStorage._s3_get

    async def counting(self, bucket, key, byte_range=None):
        if key.endswith(".log"):
            ranges.append(byte_range)
        return await real(self, bucket, key, byte_range)
    monkeypatch.setattr(objectstore.ObjectStorage, "_s3_get", counting)
    batches = list(read_files(part, *open_files(part)))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(RECORDS))
    assert all(v == VALUE for b in batches for v in b.column("value").to_pylist())
    # ~400 KB in windows of at most 128 KiB, each one GET, each starting where the one before ended
    spans = [tuple(int(x) for x in r[len("bytes="):].split("-")) for r in ranges]
    assert len(spans) == len(batches) and 3 <= len(batches) <= 5, spans
    assert all(b - a + 1 <= 128 << 10 for a, b in spans), spans
    assert [a for a, _b in spans] == sorted(a for a, _b in spans)


def test_the_next_windows_get_is_sent_before_the_current_window_is_decoded(root_url, gets, monkeypatch):
    part = _planned(root_url, **{"kafka.max.partition.fetch.bytes": str(64 << 10)})
    opened = open_files(part)
    gets.clear()
    real = partition_reader.decode_batches
    seen_at_decode = []

    def decode(*args, **kwargs):
        # The first window is decoded only once the second window's GET went out (it is sent
        # from another thread: give it time to arrive).
        deadline = time.monotonic() + (5 if not seen_at_decode else 0)
        while len(_segment_gets(gets)) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        seen_at_decode.append(len(_segment_gets(gets)))
        return real(*args, **kwargs)
    monkeypatch.setattr(partition_reader, "decode_batches", decode)
    batches = list(read_files(part, *opened))
    assert seen_at_decode[0] == 2, seen_at_decode
    assert len(batches) == len(_segment_gets(gets)) > 2
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(RECORDS))
    assert all(v == VALUE for b in batches for v in b.column("value").to_pylist())


def test_the_first_window_is_short_and_the_next_ones_large(root_url, gets, monkeypatch):
    monkeypatch.setattr(partition_reader, "FIRST_STORE_WINDOW_BYTES", 64 << 10)
    monkeypatch.setattr(partition_reader, "STORE_WINDOW_BYTES", 256 << 10)
    batches, windows = _read_range(root_url, gets)
    sizes = [end - start for _p, start, end in windows]
    # the task's first rows after one short GET, the rest (~340 KB) in windows of up to 256 KiB
    assert sizes[0] <= 64 << 10 and len(windows) == 3 and sizes[1] > 128 << 10, sizes
    assert len(batches) == len(windows)
