"""What a source task asks an object store, counted at the store (fsspec's filesystem), and
what happens when the log changed between the driver's planning and the task's open.

The driver records its reads while planning (logcore.storage.read_facts) and hands each task the
facts of its partition: a task opens its range without listing anything and, when the range
lies in the segment the driver looked at, without any request at all; each read window is one
ranged GET. A segment deleted meanwhile is found missing on its read and the task re-lists (or
fails clearly when the offsets are gone); a segment rolled meanwhile does not change the range.
"""
from __future__ import annotations

import pickle
import uuid

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from logcore.errors import OffsetOutOfRangeError
from logcore.log.log_root import LogRoot
from pyspark_seglog.partition_reader import open_files, read_files, read_partition
from pyspark_seglog.source import SeglogBatchReader, SeglogStreamReader

from call_counts import count_calls

VALUE = b"v" * 100


@pytest.fixture
def requests(monkeypatch):
    """Counts of what reaches the memory:// store, by method (ls: a LIST, info/exists: a HEAD,
    cat_file: a GET)."""
    return count_calls(monkeypatch, MemoryFileSystem, ("ls", "info", "exists", "cat_file"),
                       thread_prefix="seglog-read-ahead")


def _root(config: dict | None = None, commits: int = 1, batches: int = 300) -> str:
    url = f"memory://task-open-{uuid.uuid4().hex[:8]}/root"
    with LogRoot.open(url, create=True) as root:
        root.create_topic("t", 2, config=config)
        for p in range(2):
            log = root.log("t", p, writer=True)
            for i in range(batches):
                log.append_records([(b"k%d" % i, VALUE, (), None)] * 10)
                if (i + 1) % (batches // commits) == 0:
                    log.commit()        # on an object store each commit publishes a segment
            log.commit()
            log.close()
    return url


def _planned(url: str, **options) -> list:
    reader = SeglogBatchReader({"path": url, "subscribe": "t", **options}, None)
    # What Spark ships to a task: the partition pickled.
    return [pickle.loads(pickle.dumps(p)) for p in reader.partitions()]


def _offsets(p) -> list[int]:
    return [o for batch in read_partition(p) for o in batch.column("offset").to_pylist()]


def test_a_task_opens_its_range_without_a_request_and_reads_a_window_in_one(requests):
    url = _root()
    part = _planned(url)[0]
    requests.clear()
    opened = open_files(part)
    assert sum(requests.values()) == 0, f"the task's open asked the store: {dict(requests)}"
    rows = read_files(part, *opened)
    first = next(rows)
    assert first.num_rows > 0
    # The first batch came from one GET made by the task itself (the next window's GET, read
    # ahead in another thread while the batch is handed on, may have started too).
    task_gets = requests["cat_file"] - requests["cat_file@seglog-read-ahead"]
    assert task_gets == 1 and requests["ls"] == requests["info"] == requests["exists"] == 0, \
        f"the first window: {dict(requests)}"
    offsets = first.column("offset").to_pylist() + [o for b in rows for o in b.column("offset").to_pylist()]
    assert offsets == list(range(3000))
    # The range fits the fetch bound: one GET, no header read before it.
    assert requests["cat_file"] == 1 and requests["ls"] == requests["info"] == requests["exists"] == 0


def test_without_the_planners_facts_the_open_asks_each_thing_once(requests):
    url = _root()
    part = _planned(url)[0]
    part.read_facts = None          # a partition planned by an older driver
    requests.clear()
    root, log, _bound = open_files(part)
    try:
        # the root and the partition listed once each; every object read once
        assert requests["ls"] == 2, dict(requests)
        assert requests["exists"] == 0, dict(requests)
    finally:
        root.close()
    assert _offsets(part) == list(range(3000))


def test_a_task_over_many_segments_lists_nothing(requests):
    url = _root(commits=6)
    part = _planned(url)[0]
    requests.clear()
    assert _offsets(part) == list(range(3000))
    assert requests["ls"] == 0 and requests["exists"] == 0, dict(requests)


def test_segments_rolled_after_planning_do_not_change_the_range():
    url = _root(commits=3)
    reader = SeglogStreamReader({"path": url, "subscribe": "t", "startingoffsets": "earliest"}, None)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    parts = [pickle.loads(pickle.dumps(p)) for p in reader.partitions(start, end)]
    with LogRoot.open(url) as root:         # the writer goes on: new segments
        log = root.log("t", 0, writer=True)
        for _ in range(3):
            log.append_records([(b"k", VALUE, (), None)] * 10)
            log.commit()
        log.close()
    assert _offsets(parts[0]) == list(range(3000))
    reader.stop()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_segments_deleted_after_planning_fail_clearly_or_are_skipped(fail_on_data_loss):
    url = _root({"file.delete.delay.ms": "0"}, commits=6)
    part = _planned(url, failondataloss=fail_on_data_loss)[0]
    with LogRoot.open(url) as root:         # retention deletes the first segments meanwhile
        log = root.log("t", 0, writer=True)
        log.delete_records_before(1200)
        log.delete_expired_files(now_ms=2**62)
        start = log.log_start_offset
        log.close()
        assert 0 < start <= 1200 and not root.storage.exists("t-0/00000000000000000000.log")
    if fail_on_data_loss == "true":
        with pytest.raises(OffsetOutOfRangeError, match="data loss.*failOnDataLoss"):
            _offsets(part)
    else:
        assert _offsets(part) == list(range(start, 3000))


def test_a_partition_deleted_and_rewritten_after_planning_is_not_read_from_the_old_listing():
    url = _root(commits=2)
    part = _planned(url)[0]
    with LogRoot.open(url) as root:
        root.delete_topic("t")
        root.create_topic("t", 2)
        log = root.log("t", 0, writer=True)
        log.append_records([(b"new", b"n", (), None)] * 5)
        log.commit()
        log.close()
    # The planned range [0, 3000) is gone: fail clearly, never a mix of old facts and new bytes.
    with pytest.raises(OffsetOutOfRangeError):
        _offsets(part)
