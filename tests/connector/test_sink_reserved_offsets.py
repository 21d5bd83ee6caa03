"""A batch job on an object store: tasks stamp their parts with offsets reserved at staging
time, and the commit publishes each part as a segment by a server-side copy (no part is read
back nor written again). Exactly once with a task that fails after staging (its range stays a
gap), a driver that dies between the copies and the commit, and guesses that no longer hold."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from logcore.log.log import Log
from logcore.log.log_root import LogRoot
from logcore.storage import open_storage
from logcore.storage.objectstore import ObjectStorage

from pyspark_seglog.offset_reservation import OFFSETS
from pyspark_seglog.sink import SeglogBatchWriter
from pyspark_seglog.staging_area import STAGING_DIR, staging_path


def _schema():
    from pyspark.sql.types import BinaryType, StructField, StructType
    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def _rows(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([b"k%d" % i for i in range(start, start + n)]),
                                       pa.array([b"v%d" % i for i in range(start, start + n)])], ["key", "value"])


def _records(url: str) -> dict[int, list]:
    with LogRoot.open(url) as root:
        out = {}
        for p in range(root.describe_topic("t").partitions):
            log = root.log("t", p)
            out[p] = list(log.read_records(0))
            log.close()
        return out


@pytest.fixture
def url():
    return f"memory://reserved-{uuid.uuid4().hex[:8]}/root"


@pytest.fixture
def part_reads(monkeypatch):
    """Staged parts the commit reads back (the path before offsets were reserved)."""
    reads = []
    real = ObjectStorage._read

    def counted(self, path, *args, **kwargs):
        if STAGING_DIR in path and "/t-" in path:
            reads.append(path)
        return real(self, path, *args, **kwargs)
    monkeypatch.setattr(ObjectStorage, "_read", counted)
    return reads


def test_a_retried_task_leaves_a_gap_and_the_commit_copies_every_part(url, part_reads):
    opts = {"path": url, "topic": "t", "topic.partitions": "2", "staging.part.bytes": "1"}
    w = SeglogBatchWriter(opts, _schema(), False)
    storage = open_storage(url)
    assert storage.exists(f"{staging_path(w.job_id)}/{OFFSETS}")

    def staged_then_failed():
        yield _rows(0, 50)
        yield _rows(50, 50)
        raise RuntimeError("task lost")
    with pytest.raises(RuntimeError, match="task lost"):
        w.write(staged_then_failed())           # first attempt: reserved, staged, then failed
    messages = [w.write(iter([_rows(0, 50), _rows(50, 50)])), w.write(iter([_rows(100, 80)]))]
    assert all(p.base >= 0 and p.epoch >= 0 for m in messages for p in m.parts)
    w.commit(messages)
    assert part_reads == []                     # copied on the server, not read back
    records = _records(url)
    values = sorted(int(r.value[1:]) for rs in records.values() for r in rs)
    assert values == list(range(180))
    for p, rs in records.items():
        offsets = [r.offset for r in rs]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert offsets[0] > 0                   # the failed attempt's range: a gap, never published
    assert not storage.exists(f"{STAGING_DIR}/{w.job_id}")


def test_a_driver_dead_between_the_copies_and_the_commit_publishes_nothing(url, monkeypatch):
    opts = {"path": url, "topic": "t", "topic.partitions": "2"}
    w = SeglogBatchWriter(opts, _schema(), False)
    messages = [w.write(iter([_rows(0, 100)]))]
    real_commit = Log.commit

    def dies(self, *args, **kwargs):
        raise SystemExit("driver killed")       # after the segments were copied
    monkeypatch.setattr(Log, "commit", dies)
    with pytest.raises(SystemExit):
        w.commit(messages)
    monkeypatch.setattr(Log, "commit", real_commit)
    storage = open_storage(url)
    assert any(n.endswith(".log") for p in (0, 1) for n in storage.list_dir(f"t-{p}"))   # copied
    assert sum(len(rs) for rs in _records(url).values()) == 0
    # the next job takes the partitions: the copies nobody committed are dropped, not published
    again = SeglogBatchWriter(opts, _schema(), False)
    again.commit([again.write(iter([_rows(1000, 60)]))])
    records = _records(url)
    assert sorted(int(r.value[1:]) for rs in records.values() for r in rs) == list(range(1000, 1060))
    for rs in records.values():
        assert [r.offset for r in rs] == list(range(len(rs)))


def test_guesses_that_no_longer_hold_are_appended_as_before(url, part_reads):
    opts = {"path": url, "topic": "t", "topic.partitions": "1"}
    w = SeglogBatchWriter(opts, _schema(), False)
    messages = [w.write(iter([_rows(0, 40)]))]
    # another writer appends between the planning and the commit: the reserved offsets are
    # taken and the partition's epoch moved on
    with LogRoot.open(url) as root:
        other = root.log("t", 0, writer=True)
        other.append_records([(b"x", b"other", (), None)] * 3)
        other.commit()
        other.close()
    w.commit(messages)
    assert part_reads                           # appended the usual way
    rs = _records(url)[0]
    assert [r.offset for r in rs] == list(range(43))
    assert [r.value for r in rs] == [b"other"] * 3 + [b"v%d" % i for i in range(40)]


def test_a_second_job_reads_the_seeds_and_copies_too(url, part_reads, monkeypatch):
    """The first job created the topic (its seeds are offset 0, epoch 0, nothing read); the next
    one seeds from each partition's committed HW and writer epoch, and its parts are copied
    after the first job's. Neither job's tasks open the root: they take the topic as planned."""
    opts = {"path": url, "topic": "t", "topic.partitions": "2"}
    first = SeglogBatchWriter(opts, _schema(), False)
    opened = []
    real_open = LogRoot.open.__func__
    monkeypatch.setattr(LogRoot, "open", classmethod(lambda cls, *a, **k: opened.append(a) or real_open(cls, *a, **k)))
    first.commit([first.write(iter([_rows(0, 30)])), first.write(iter([_rows(30, 30)]))])
    second = SeglogBatchWriter(opts, _schema(), False)
    opened.clear()
    messages = [second.write(iter([_rows(100, 20)]))]
    assert opened == []                         # the task used the planning's topic facts
    assert all(p.base > 0 for m in messages for p in m.parts)
    second.commit(messages)
    assert part_reads == []                     # every part of both jobs copied on the server
    records = _records(url)
    assert sorted(int(r.value[1:]) for rs in records.values() for r in rs) == list(range(60)) + list(range(100, 120))
    for rs in records.values():
        assert [r.offset for r in rs] == list(range(len(rs)))


def test_parts_written_while_the_task_encodes_keep_each_partitions_row_order(url, part_reads, monkeypatch):
    """A task hands its finished parts to background uploads (part_uploads.py) and encodes on:
    each partition's parts still get their reserved offsets in the order of its rows, the task
    reports every part written, and the commit copies them all in that order."""
    from pyspark_seglog import task_stager
    monkeypatch.setattr(task_stager, "_UPLOAD_MEMORY_BYTES", 2000)      # hand-overs also wait
    opts = {"path": url, "topic": "t", "topic.partitions": "3", "staging.part.bytes": "500"}
    w = SeglogBatchWriter(opts, _schema(), False)
    storage = open_storage(url)
    message = w.write(iter([_rows(i * 40, 40) for i in range(12)]))
    by_partition = {}
    for part in message.parts:
        assert storage.exists(part.path) and part.base >= 0
        by_partition.setdefault(part.partition, []).append(part)
    assert all(len(parts) > 3 for parts in by_partition.values())
    for parts in by_partition.values():
        ordered = sorted(parts, key=lambda p: p.seq)
        assert [p.base for p in ordered] == sorted(p.base for p in parts)
    w.commit([message])
    assert part_reads == []
    records = _records(url)
    assert sorted(int(r.value[1:]) for rs in records.values() for r in rs) == list(range(480))
    for rs in records.values():
        ids = [int(r.value[1:]) for r in rs]
        assert ids == sorted(ids) and [r.offset for r in rs] == list(range(len(rs)))


def test_a_part_put_that_fails_fails_the_task_and_leaves_no_part(url, monkeypatch):
    opts = {"path": url, "topic": "t", "topic.partitions": "2", "staging.part.bytes": "1000"}
    w = SeglogBatchWriter(opts, _schema(), False)
    real = ObjectStorage.write_atomic
    puts = []

    def third_fails(self, path, data, **kwargs):
        if f"{STAGING_DIR}/{w.job_id}/0/" in path:
            puts.append(path)
            if len(puts) == 3:
                raise OSError("the store refused the part")
        return real(self, path, data, **kwargs)
    monkeypatch.setattr(ObjectStorage, "write_atomic", third_fails)
    with pytest.raises(OSError, match="refused the part"):
        w.write(iter([_rows(i * 40, 40) for i in range(10)]))
    storage = open_storage(url)
    assert [n for n in storage.list_dir(staging_path(w.job_id, 0)) for n in storage.list_dir(
        f"{staging_path(w.job_id, 0)}/{n}")] == []
