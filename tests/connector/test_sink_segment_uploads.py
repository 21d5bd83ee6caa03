"""staging.publish=multipart: a batch job's tasks upload their parts as their segment objects
and the commit completes the uploads (If-None-Match) instead of copying staged objects. Exact
data; a partition another writer appended to or took fails the job before anything is
published, leaving no upload; failed attempts and crashed jobs leave no upload either; the
option is refused where it cannot hold."""
from __future__ import annotations

import pyarrow as pa
import pytest

from logcore.errors import CommitFailedError, InvalidConfigError
from logcore.log.log_root import LogRoot
from logcore.storage import open_storage
from logcore.storage.objectstore import ObjectStorage

from pyspark_seglog.sink import SeglogBatchWriter, SeglogStreamWriter
from pyspark_seglog.staging_area import STAGING_DIR

pytestmark = pytest.mark.s3


def _schema():
    from pyspark.sql.types import BinaryType, StructField, StructType
    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def _rows(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([b"k%d" % i for i in range(start, start + n)]),
                                       pa.array([b"v%d" % i for i in range(start, start + n)])], ["key", "value"])


@pytest.fixture
def s3(storage_targets):
    target = storage_targets.make("s3")
    so = target.storage_options
    options = {"path": target.url, "topic": "t", "topic.partitions": "2", "staging.publish": "multipart",
               "storage.endpoint_url": so["endpoint_url"], "storage.key": so["key"],
               "storage.secret": so["secret"], "storage.anon": "false",
               "storage.client_kwargs.region_name": so["client_kwargs"]["region_name"]}
    return target, options, open_storage(target.url, so)


def _values(target) -> dict[int, list]:
    with LogRoot.open(target.url, storage_options=target.storage_options) as root:
        out = {}
        for p in range(root.describe_topic("t").partitions):
            log = root.log("t", p)
            out[p] = [(r.offset, r.value) for r in log.read_records(0)]
            log.close()
        return out


def _staged_reads_and_copies(monkeypatch) -> list:
    """The staged objects the commit reads back or copies (neither happens for uploads)."""
    seen = []
    real_read, real_copy = ObjectStorage._read, ObjectStorage.copy_if_absent

    def read(self, path, *args, **kwargs):
        if STAGING_DIR in path and "/t-" in path:
            seen.append(("read", path))
        return real_read(self, path, *args, **kwargs)

    def copy(self, src, dst):
        seen.append(("copy", src))
        return real_copy(self, src, dst)
    monkeypatch.setattr(ObjectStorage, "_read", read)
    monkeypatch.setattr(ObjectStorage, "copy_if_absent", copy)
    return seen


def test_parts_uploaded_as_segments_are_published_exactly(s3, monkeypatch):
    target, options, storage = s3
    seen = _staged_reads_and_copies(monkeypatch)
    w = SeglogBatchWriter({**options, "staging.part.bytes": "600"}, _schema(), False)
    messages = [w.write(iter([_rows(0, 50), _rows(50, 50)])), w.write(iter([_rows(100, 80)]))]
    parts = [p for m in messages for p in m.parts]
    assert parts and all(p.upload_id and p.upload_key == f"t-{p.partition}/{p.base:020d}.log" for p in parts)
    assert storage.list_uploads("t-")                       # invisible until the commit
    assert _values(target) == {0: [], 1: []}
    w.commit(messages)
    assert seen == [] and storage.list_uploads("t-") == []
    values = _values(target)
    assert sorted(int(v[1:]) for rs in values.values() for _o, v in rs) == list(range(180))
    for rs in values.values():
        assert [o for o, _v in rs] == list(range(len(rs)))
    assert not storage.exists(f"{STAGING_DIR}/{w.job_id}")


def test_a_writer_appending_during_the_job_fails_it_with_nothing_published(s3):
    target, options, storage = s3
    w = SeglogBatchWriter(options, _schema(), False)
    messages = [w.write(iter([_rows(0, 60)]))]
    with LogRoot.open(target.url, storage_options=target.storage_options) as root:
        other = root.log("t", 1, writer=True)
        other.append_records([(b"x", b"other", (), None)] * 3)
        other.commit()
        other.close()
    with pytest.raises(CommitFailedError, match=r"t-1: its log end offset is 3, past offset 0 reserved") as info:
        w.commit(messages)
    assert "nothing was published" in str(info.value) and "staging.publish=copy" in str(info.value)
    w.abort(messages)                                       # as Spark does after a failed commit
    # partition 0 was publishable, but nothing was: every partition is checked first
    assert _values(target) == {0: [], 1: [(0, b"other"), (1, b"other"), (2, b"other")]}
    assert storage.list_uploads("") == []
    assert [n for n in storage.list_dir("t-0") if n.endswith(".log")] == []


def test_a_writer_taking_a_partition_during_the_job_fails_it(s3):
    target, options, storage = s3
    w = SeglogBatchWriter(options, _schema(), False)
    messages = [w.write(iter([_rows(0, 60)]))]
    with LogRoot.open(target.url, storage_options=target.storage_options) as root:
        root.log("t", 0, writer=True).close()               # takes it (a new epoch), appends nothing
    with pytest.raises(CommitFailedError, match=r"t-0: another writer took it during this job"):
        w.commit(messages)                                  # aborts the uploads itself
    assert storage.list_uploads("") == []
    assert _values(target) == {0: [], 1: []}


def test_a_failed_task_attempt_aborts_its_uploads(s3):
    target, options, storage = s3
    w = SeglogBatchWriter({**options, "staging.part.bytes": "600"}, _schema(), False)

    def staged_then_failed():
        yield _rows(0, 50)
        yield _rows(50, 50)
        raise RuntimeError("task lost")
    with pytest.raises(RuntimeError, match="task lost"):
        w.write(staged_then_failed())
    assert storage.list_uploads("") == []
    w.commit([w.write(iter([_rows(0, 100)]))])
    values = _values(target)
    assert sorted(int(v[1:]) for rs in values.values() for _o, v in rs) == list(range(100))


def test_a_crashed_jobs_uploads_are_aborted_by_the_next_commit(s3):
    target, options, storage = s3
    crashed = SeglogBatchWriter(options, _schema(), False)
    crashed.write(iter([_rows(0, 40)]))                     # its driver dies before the commit
    left = storage.list_uploads("t-")
    assert left
    nxt = SeglogBatchWriter(options, _schema(), False)
    nxt.commit([nxt.write(iter([_rows(100, 40)]))])         # same offsets reserved: same keys
    assert storage.list_uploads("") == []
    values = _values(target)
    assert sorted(int(v[1:]) for rs in values.values() for _o, v in rs) == list(range(100, 140))


def test_the_policy_is_refused_where_it_cannot_hold(s3, storage_targets, monkeypatch):
    _target, options, _storage = s3
    for kind in ("local", "memory"):
        url = storage_targets.make(kind).url
        with pytest.raises(InvalidConfigError, match=r"staging.publish=multipart: .*(local disk|no multipart)"):
            SeglogBatchWriter({"path": url, "topic": "t", "staging.publish": "multipart"}, _schema(), False)
    with pytest.raises(InvalidConfigError, match=r"staging.publish='sometimes': use copy"):
        SeglogBatchWriter({**options, "staging.publish": "sometimes"}, _schema(), False)
    with pytest.raises(InvalidConfigError, match="is for a batch df.write"):
        SeglogStreamWriter(options, _schema(), False)
    # a server that completes an upload over an existing object, ignoring If-None-Match
    real = ObjectStorage.complete_upload_if_absent

    def ignores_the_condition(self, path, upload_id, etag):
        real(self, path, upload_id, etag) or self.delete(path) or real(self, path, upload_id, etag)
        return True
    monkeypatch.setattr(ObjectStorage, "complete_upload_if_absent", ignores_the_condition)
    with pytest.raises(InvalidConfigError, match="despite If-None-Match"):
        SeglogBatchWriter(options, _schema(), False)


def test_the_policy_is_refused_on_a_server_that_refuses_the_conditional_complete(s3, monkeypatch):
    _target, options, _storage = s3
    from logcore.errors import StorageError

    def refuses(self, path, upload_id, etag):
        raise StorageError(f"complete upload of {path} failed: NotImplemented: If-None-Match")
    monkeypatch.setattr(ObjectStorage, "complete_upload_if_absent", refuses)
    with pytest.raises(InvalidConfigError, match="refused a conditional multipart upload .*NotImplemented"):
        SeglogBatchWriter(options, _schema(), False)
    monkeypatch.undo()
    assert _storage.list_uploads("") == []
