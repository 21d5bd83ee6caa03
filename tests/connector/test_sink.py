"""The seglog sink with real Spark: round trips, restarts, batch writes, replays, fencing, options."""
from __future__ import annotations

import datetime as dt
import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logcore.errors import FencedWriterError, InvalidConfigError, TopicNotFoundError
from logcore.log.log_root import LogRoot
from logcore.records.batch import iter_batches
from logcore.records.compression import Compression, compress, decompress
from logcore.storage import open_storage

from pyspark_seglog.sink import SeglogBatchWriter, SeglogCommitMessage, SeglogStreamWriter
from pyspark_seglog.staging_area import COMMITTED, JOB_MARKER, STAGING_DIR
from pyspark_seglog.task_stager import TaskStager

kafka_default = pytest.importorskip("kafka.partitioner.default", reason="kafka-python is not installed")

HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def kafka_partition(key: bytes, n: int) -> int:
    return (kafka_default.murmur2(key) & 0x7FFFFFFF) % n


def write_input_file(folder, name: str, first: int, n: int) -> None:
    """Rows `first..first+n`: key k<i> (null every 7th), value v<i>, a header every 3rd, ts T0+i s."""
    ids = range(first, first + n)
    table = pa.table({
        "key": pa.array([None if i % 7 == 0 else f"k{i}".encode() for i in ids], pa.binary()),
        "value": pa.array([f"v{i}" for i in ids]),
        "headers": pa.array([[{"key": "i", "value": str(i).encode()}] if i % 3 == 0 else None for i in ids],
                            HEADERS),
        "timestamp": pa.array([T0 + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us", tz="UTC")),
    })
    pq.write_table(table, os.path.join(folder, name))


def read_all(root: str, topic: str) -> dict[int, list]:
    r = LogRoot.open(root)
    try:
        return {p: list(r.log(topic, p).read_records(0)) for p in range(r.describe_topic(topic).partitions)}
    finally:
        r.close()


def check_rows(records_by_partition: dict[int, list], ids) -> None:
    """Every id exactly once, on the partition Kafka's partitioner picks, headers and timestamps kept."""
    n = len(records_by_partition)
    seen = {}
    for p, records in records_by_partition.items():
        for rec in records:
            i = int(rec.value[1:])
            assert i not in seen, f"row {i} twice (partitions {seen[i]} and {p})"
            seen[i] = p
            if i % 7:
                assert rec.key == f"k{i}".encode()
                assert p == kafka_partition(rec.key, n)
            else:
                assert rec.key is None
            assert rec.headers == ((("i", str(i).encode()),) if i % 3 == 0 else ())
            assert rec.timestamp == int((T0 + dt.timedelta(seconds=i)).timestamp() * 1000)
    assert sorted(seen) == sorted(ids)


def staging_leftovers(root: str) -> list[str]:
    base = os.path.join(root, STAGING_DIR)
    found = []
    for dirpath, _, files in os.walk(base):
        found += [os.path.relpath(os.path.join(dirpath, f), base) for f in files if f not in (COMMITTED, JOB_MARKER)]
    return found


def run_available_now(spark, source_dir, root, ckpt, query_name=None, **options):
    schema = spark.read.parquet(str(source_dir)).schema
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source_dir))
    writer = df.writeStream.format("seglog").option("checkpointLocation", str(ckpt))
    if query_name is not None:      # Spark hands it to the sink among its options
        writer = writer.queryName(query_name)
    for k, v in options.items():
        writer = writer.option(k, v)
    from pyspark.errors import StreamingQueryException
    q = writer.trigger(availableNow=True).start(str(root))
    try:
        q.awaitTermination(180)
    except StreamingQueryException:
        pass                    # the caller checks q.exception()
    finally:
        q.stop()
    return q


# ------------------------------------------------------------------------------- streaming

def stream_input(tmp_path, files: int, rows: int):
    """(input folder of `files` Parquet files of `rows` rows each, log root, checkpoint)."""
    src, root, ckpt = tmp_path / "in", str(tmp_path / "root"), tmp_path / "ckpt"
    src.mkdir()
    for f in range(files):
        write_input_file(src, f"f{f}.parquet", f * rows, rows)
    return src, root, ckpt


def test_stream_round_trip_and_restart(spark, tmp_path):
    src, root, ckpt = stream_input(tmp_path, 3, 700)
    q = run_available_now(spark, src, root, ckpt, topic="events", **{"topic.partitions": "3"})
    assert q.exception() is None
    records = read_all(root, "events")
    check_rows(records, range(2100))
    # null keys spread over every partition
    for p, recs in records.items():
        assert sum(1 for r in recs if r.key is None) > 50, p
    # three micro-batches, each committed with its marker; no staging left behind
    r = LogRoot.open(root)
    markers = [r.log("events", p).commit_marker for p in range(3)]
    assert {m["query"] for m in markers} == {q.id}
    assert {m["batch"] for m in markers} == {2}
    assert staging_leftovers(root) == []

    # restart from the checkpoint with more input: continues, no duplicate
    for f in range(3, 5):
        write_input_file(src, f"f{f}.parquet", f * 700, 700)
    q2 = run_available_now(spark, src, root, ckpt, query_name="events_copy", topic="events")
    assert q2.exception() is None and q2.id == q.id and q2.name == "events_copy"
    check_rows(read_all(root, "events"), range(3500))
    assert staging_leftovers(root) == []


def test_second_query_is_fenced_and_takeover(spark, tmp_path):
    src, root = tmp_path / "in", str(tmp_path / "root")
    src.mkdir()
    write_input_file(src, "f0.parquet", 0, 200)
    qa = run_available_now(spark, src, root, tmp_path / "ckpt-a", topic="t", **{"topic.partitions": "2"})
    assert qa.exception() is None
    qb = run_available_now(spark, src, root, tmp_path / "ckpt-b", topic="t")
    err = str(qb.exception())
    assert "FencedWriterError" in err and qa.id in err and "takeover=true" in err
    assert sum(len(v) for v in read_all(root, "t").values()) == 200       # B wrote nothing
    assert staging_leftovers(root) == []                                  # B's abort cleaned up
    qb2 = run_available_now(spark, src, root, tmp_path / "ckpt-b", topic="t", takeover="true")
    assert qb2.exception() is None
    assert sum(len(v) for v in read_all(root, "t").values()) == 400
    # A is now fenced at its next commit (driver-side: A's commit of its next batch)
    writer = SeglogStreamWriter({"path": root, "topic": "t"}, _schema(), False)
    msg = _stage(root, writer, qa.id, 1, 0, [(b"k1", b"late")])
    with pytest.raises(FencedWriterError, match=qb2.id):
        writer.commit([msg], 1)


def epoch_entries(root: str, topic: str, storage_options=None) -> dict[int, list[tuple[int, int]]]:
    """Each partition's leader-epoch-checkpoint entries."""
    r = LogRoot.open(root, storage_options=storage_options)
    try:
        return {p: r.log(topic, p).epoch_cache.entries for p in range(r.describe_topic(topic).partitions)}
    finally:
        r.close()


def batch_epochs(root: str, topic: str, storage_options=None) -> set[int]:
    """The partitionLeaderEpoch of every batch the topic holds."""
    r = LogRoot.open(root, storage_options=storage_options)
    try:
        epochs = set()
        for p in range(r.describe_topic(topic).partitions):
            log = r.log(topic, p)
            for seg in log.segments:
                data = log.storage.read(seg.log_path)
                epochs |= {h.partition_leader_epoch for _, h in iter_batches(data)}
        return epochs
    finally:
        r.close()


def test_stream_keeps_its_leader_epoch_across_micro_batches(spark, tmp_path):
    """One leader-epoch entry per partition for a query's many micro-batches (also across a
    restart of the query); a writer taking a partition in between costs one more entry there."""
    src, root, ckpt = stream_input(tmp_path, 5, 100)
    q = run_available_now(spark, src, root, ckpt, topic="t", **{"topic.partitions": "2"})
    assert q.exception() is None
    assert len(q.recentProgress) >= 5                      # one micro-batch per file
    first = epoch_entries(root, "t")
    assert all(len(entries) == 1 for entries in first.values()), first
    assert batch_epochs(root, "t") == {first[0][0][0]} == {first[1][0][0]}
    # the restarted query resumes the epochs its last commit recorded
    for f in range(5, 7):
        write_input_file(src, f"f{f}.parquet", f * 100, 100)
    assert run_available_now(spark, src, root, ckpt, topic="t").exception() is None
    assert epoch_entries(root, "t") == first
    # another writer takes partition 0 (fencing nobody: the query's commits released it)
    with LogRoot.open(root) as r, r.log("t", 0, writer=True) as other:
        taken = other.leader_epoch
    assert taken == first[0][0][0] + 1
    for f in range(7, 9):
        write_input_file(src, f"f{f}.parquet", f * 100, 100)
    assert run_available_now(spark, src, root, ckpt, topic="t").exception() is None
    after = epoch_entries(root, "t")
    assert after[1] == first[1]                            # untouched partition: still resumed
    assert [e for e, _ in after[0]] == [first[0][0][0], taken + 1]   # one takeover: one entry
    check_rows(read_all(root, "t"), range(900))


def _commit_batches(root, opts, query_id, batches, first_batch=0, storage_options=None):
    rows = [(f"k{i}".encode(), b"x") for i in range(40)]
    for b in range(first_batch, first_batch + batches):
        w = SeglogStreamWriter(opts, _schema(), False)
        w.commit([_stage(root, w, query_id, b, 0, rows)], b)


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_driver_commits_resume_and_a_takeover_is_fenced(tmp_path, kind):
    root = str(tmp_path / "root") if kind == "local" else f"memory://{tmp_path.name}/root"
    opts = {"path": root, "topic": "t", "topic.partitions": "2"}
    _commit_batches(root, opts, "qa", 12)
    entries = epoch_entries(root, "t")
    assert all(len(e) == 1 for e in entries.values()), entries
    committed = json.loads(open_storage(root).read(f"{STAGING_DIR}/qa/{COMMITTED}"))
    assert committed["batch"] == 11
    assert sorted((t, p, e) for t, p, e, _ in committed["epochs"]) == [
        ("t", p, entries[p][0][0]) for p in range(2)]
    # a writer that holds partition 1 while the next commit runs: the commit takes it over
    # (a bump, not a resume of the query's epoch) and the holder is fenced
    r = LogRoot.open(root)
    holder = r.log("t", 1, writer=True)
    _commit_batches(root, opts, "qa", 1, first_batch=12)
    with pytest.raises(FencedWriterError):
        holder.append_records([(b"k", b"late", (), 1)])
        holder.commit()
    r.close()
    after = epoch_entries(root, "t")
    assert after[0] == entries[0]
    assert [e for e, _ in after[1]] == [entries[1][0][0], entries[1][0][0] + 2]
    assert sum(len(v) for v in read_all(root, "t").values()) == 13 * 40
    assert all(r.value == b"x" for rs in read_all(root, "t").values() for r in rs)


# ------------------------------------------------------------------------------- batch writes

def test_batch_write_topic_column_partition_column_and_options(spark, tmp_path):
    root = str(tmp_path / "root")
    rows = [(f"k{i}", f"v{i}", "a" if i % 2 else "b", (i % 3) if i % 5 == 0 else None) for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string, topic string, partition int")
    (df.write.format("seglog").option("topic.partitions", 3).option("compression.type", "zstd")
     .option("maxRecordsPerBatch", 20).option("kafka.acks", "all").mode("append").save(root))
    for topic in ("a", "b"):
        recs = read_all(root, topic)
        got = {int(r.value[1:]): p for p, rs in recs.items() for r in rs}
        want = [i for i in range(300) if ("a" if i % 2 else "b") == topic]
        assert sorted(got) == want
        for i, p in got.items():
            assert p == (i % 3 if i % 5 == 0 else kafka_partition(f"k{i}".encode(), 3))
        # stored batches: zstd, at most 20 records each
        for p in range(3):
            path = os.path.join(root, f"{topic}-{p}", "00000000000000000000.log")
            data = open(path, "rb").read()
            headers = [h for _, h in iter_batches(data)]
            assert headers and all(h.compression == Compression.ZSTD for h in headers)
            assert all(h.records_count <= 20 for h in headers)
    assert staging_leftovers(root) == []
    # a second job appends; nothing of a job is visible before its commit (one HW move per partition)
    df.write.format("seglog").option("topic.partitions", 3).mode("append").save(root)
    assert sum(len(v) for v in read_all(root, "a").values()) == 300


def test_batch_write_compresses_at_kafka_compression_zstd_level(spark, tmp_path):
    root = str(tmp_path / "root")
    rows = [(f"k{i}", f'{{"user":{i},"event":"click","page":"/item/{i % 97}"}}') for i in range(2000)]
    df = spark.createDataFrame(rows, "key string, value string").coalesce(1)
    (df.write.format("seglog").option("topic", "z").option("kafka.compression.type", "zstd")
     .option("kafka.compression.zstd.level", "19").mode("append").save(root))
    sections = stored_sections(root, "z", 0)
    assert sections and all(codec == Compression.ZSTD for codec, _ in sections)
    for codec, section in sections:
        raw = decompress(codec, section)
        assert section == compress(codec, raw, 19) != compress(codec, raw)
    assert sorted(int(r.key[1:]) for r in read_all(root, "z")[0]) == list(range(2000))


def test_batch_write_is_atomic_per_job(spark, tmp_path):
    """A job whose tasks fail publishes nothing, though tasks had staged data before failing."""
    from pyspark.sql import functions as F
    root = str(tmp_path / "root")
    df = spark.range(0, 4000, numPartitions=2).select(
        F.col("id").cast("string").alias("key"),
        F.when(F.col("id") == 3500, F.raise_error(F.lit("boom"))).otherwise(F.col("id").cast("string"))
        .alias("value"))
    with pytest.raises(Exception, match="boom"):
        (df.write.format("seglog").option("topic", "t").option("staging.part.bytes", "1")
         .mode("append").save(root))
    assert sum(len(v) for v in read_all(root, "t").values()) == 0
    # The job's other task may still be ending (killed) after the abort: it removes its own parts.
    # Its Python worker may go on with that after Spark has marked the stage done, so wait for
    # the stage, then for the parts to go.
    deadline = time.monotonic() + 30
    while spark.sparkContext.statusTracker().getActiveStageIds() and time.monotonic() < deadline:
        time.sleep(0.1)
    while staging_leftovers(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert staging_leftovers(root) == []


def test_a_failed_task_removes_what_it_staged(tmp_path):
    root = str(tmp_path / "root")
    w = SeglogBatchWriter({"path": root, "topic": "t", "staging.part.bytes": "1"}, _schema(), False)

    def input_that_fails():
        for start in (0, 100):
            yield pa.RecordBatch.from_arrays([pa.array([b"k%d" % i for i in range(start, start + 100)]),
                                              pa.array([b"v"] * 100)], ["key", "value"])
        assert staging_leftovers(root), "the task staged parts before its input failed"
        raise RuntimeError("input failed")

    with pytest.raises(RuntimeError, match="input failed"):
        w.write(input_that_fails())
    assert staging_leftovers(root) == []


def _rows(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([b"k%d" % i for i in range(start, start + n)]),
                                       pa.array([b"v%d" % i for i in range(start, start + n)])], ["key", "value"])


def test_an_attempt_that_ends_after_the_jobs_abort_removes_its_parts(tmp_path):
    """Spark may abort a batch job (another task failed) while a task is still staging; no
    commit or abort comes after, so that task must not leave its parts behind."""
    root = str(tmp_path / "root")
    w = SeglogBatchWriter({"path": root, "topic": "t", "staging.part.bytes": "1"}, _schema(), False)
    assert staging_leftovers(root) == [] and os.listdir(os.path.join(root, STAGING_DIR))
    w.abort([])
    message = w.write(iter([_rows(0, 100), _rows(100, 100)]))
    assert message.parts == []
    assert staging_leftovers(root) == []
    assert sum(len(v) for v in read_all(root, "t").values()) == 0


def test_a_zombie_attempt_after_the_commit_removes_its_parts(tmp_path):
    root = str(tmp_path / "root")
    w = SeglogBatchWriter({"path": root, "topic": "t"}, _schema(), False)
    w.commit([w.write(iter([_rows(0, 300)]))])
    assert not os.path.exists(os.path.join(root, STAGING_DIR, w.job_id))
    # a second attempt of the same task that Spark no longer waits for finishes now
    assert w.write(iter([_rows(0, 300)])).parts == []
    assert staging_leftovers(root) == []
    assert sorted(r.value for v in read_all(root, "t").values() for r in v) == sorted(
        b"v%d" % i for i in range(300))


def test_overwrite_and_bad_options_fail_at_start(spark, tmp_path):
    root = str(tmp_path / "root")
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match="Overwrite is not supported"):
        df.write.format("seglog").option("topic", "t").mode("overwrite").save(root)
    with pytest.raises(Exception, match="did you mean 'compression.type'"):
        df.write.format("seglog").option("topic", "t").option("compresion.type", "gzip").mode("append").save(root)
    bad = spark.createDataFrame([(1, "v")], "key int, value string")
    with pytest.raises(Exception, match="column `key` has type int"):
        bad.write.format("seglog").option("topic", "t").mode("append").save(root)


# ------------------------------------------------------------------------------- driver-side protocol

def _schema():
    from pyspark.sql.types import BinaryType, StructField, StructType
    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def _stage(root, writer, query_id, batch_id, task, rows, attempt=0) -> SeglogCommitMessage:
    """What a task does in write(), without Spark: stage rows (key, value) for this writer."""
    stager = TaskStager(writer, query_id, batch_id, task, attempt)
    try:
        keys = pa.array([k for k, _ in rows], pa.binary())
        values = pa.array([v for _, v in rows], pa.binary())
        stager.add(pa.RecordBatch.from_arrays([keys, values], ["key", "value"]))
        stager.flush_all()
    finally:
        stager.close()
    return SeglogCommitMessage(query_id, batch_id, task, attempt, stager.parts)


def test_replayed_batch_changes_nothing(tmp_path):
    root = str(tmp_path / "root")
    opts = {"path": root, "topic": "t", "topic.partitions": "4"}
    writer = SeglogStreamWriter(opts, _schema(), False)
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(400)]
    msgs = [_stage(root, writer, "q1", 0, 0, rows[:200]), None, _stage(root, writer, "q1", 0, 2, rows[200:])]
    SeglogStreamWriter(opts, _schema(), False).commit(msgs, 0)
    before = {p: [(r.offset, r.value) for r in rs] for p, rs in read_all(root, "t").items()}
    assert sum(len(v) for v in before.values()) == 400
    # the same batch id again, with the same messages and with freshly staged ones
    SeglogStreamWriter(opts, _schema(), False).commit(msgs, 0)
    again = [_stage(root, writer, "q1", 0, 0, rows)]
    SeglogStreamWriter(opts, _schema(), False).commit(again, 0)
    after = {p: [(r.offset, r.value) for r in rs] for p, rs in read_all(root, "t").items()}
    assert after == before
    assert staging_leftovers(root) == []
    # all-None messages (no task succeeded): nothing happens
    SeglogStreamWriter(opts, _schema(), False).commit([None, None], 1)
    SeglogStreamWriter(opts, _schema(), False).abort([None, None], 1)


def test_crash_after_some_partitions_committed(tmp_path):
    """A commit that dies after publishing some partitions is finished by the replay, whatever
    the replayed tasks staged: the first attempt's manifest pins the batch."""
    root = str(tmp_path / "root")
    opts = {"path": root, "topic": "t", "topic.partitions": "3"}
    writer = SeglogStreamWriter(opts, _schema(), False)
    rows = [(None, f"v{i}".encode()) for i in range(300)]           # null keys: round-robin
    first = [_stage(root, writer, "q", 7, 0, rows)]
    storage = open_storage(root)
    # make partition 2's staged object unreadable: the commit publishes 0 and 1, then fails
    p2 = next(p for p in first[0].parts if p.partition == 2)
    saved = storage.read(p2.path)
    storage.delete(p2.path)
    with pytest.raises(Exception):
        SeglogStreamWriter(opts, _schema(), False).commit(first, 7)
    published = {p: len(rs) for p, rs in read_all(root, "t").items()}
    assert published == {0: 100, 1: 100, 2: 0}
    storage.write_atomic(p2.path, saved)                             # the "crash" is over
    # the replay's tasks route the null keys differently (another task id): the manifest wins
    replay = [_stage(root, writer, "q", 7, 1, rows, attempt=1)]
    SeglogStreamWriter(opts, _schema(), False).commit(replay, 7)
    records = read_all(root, "t")
    values = sorted(int(r.value[1:]) for rs in records.values() for r in rs)
    assert values == list(range(300))
    assert {p: len(rs) for p, rs in records.items()} == {0: 100, 1: 100, 2: 100}
    assert staging_leftovers(root) == []


def test_an_object_store_commit_reads_parts_ahead_in_order_and_a_crash_mid_commit_is_finished(tmp_path):
    """On an object store the commit reads each partition's parts ahead (staged_part.py) while it
    appends them: the parts still land in (task, seq) order, and a commit that fails on one
    partition's part publishes the others and is finished by the replay, as on local disk."""
    root = f"memory://{tmp_path.name}/root"
    opts = {"path": root, "topic": "t", "topic.partitions": "2"}
    writer = SeglogStreamWriter(opts, _schema(), False)
    # 7 tasks, each staging rows for both partitions (null keys: round-robin per task)
    msgs = [_stage(root, writer, "q", 4, task, [(None, b"%d-%03d" % (task, i)) for i in range(40)])
            for task in range(7)]
    storage = open_storage(root)
    victim = next(p for m in msgs[3:] for p in m.parts if p.partition == 1)
    saved = storage.read(victim.path)
    storage.delete(victim.path)
    with pytest.raises(Exception):
        SeglogStreamWriter(opts, _schema(), False).commit(msgs, 4)
    published = {p: len(rs) for p, rs in read_all(root, "t").items()}
    assert published[1] == 0 and published[0] == sum(p.records for m in msgs for p in m.parts if p.partition == 0)
    storage.write_atomic(victim.path, saved)                        # the "crash" is over
    SeglogStreamWriter(opts, _schema(), False).commit(msgs, 4)
    records = read_all(root, "t")
    for p, rs in records.items():
        values = [r.value for r in rs]
        assert values == sorted(values)     # task by task, each task's rows in their order
        assert [r.offset for r in rs] == list(range(len(rs)))
    assert sum(len(rs) for rs in records.values()) == 7 * 40


def test_an_object_store_stream_commit_costs_the_same_at_every_batch(tmp_path, monkeypatch):
    """Each micro-batch's commit publishes a segment per partition; the next commit's writer
    open must not grow with them (it checked every segment's indexes and replayed producer
    fields from every segment: 3 to 4 requests more per partition and batch). A batch job's
    commit leaves no staging behind either."""
    from collections import Counter
    from logcore.storage.objectstore import ObjectStorage
    counts: Counter = Counter()
    for op in ("_read", "_listing", "_exists", "_size", "_read_versioned", "write_atomic",
               "put_if_absent", "put_if_version", "delete", "delete_dir"):
        def counted(self, *args, _real=getattr(ObjectStorage, op), _op=op, **kwargs):
            counts[_op] += 1
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(ObjectStorage, op, counted)
    root = f"memory://{tmp_path.name}/root"
    opts = {"path": root, "topic": "t", "topic.partitions": "2"}
    writer = SeglogStreamWriter(opts, _schema(), False)
    per_commit = []
    for batch in range(25):
        msg = _stage(root, writer, "q", batch, 0, [(b"k%d" % i, b"v%d" % batch) for i in range(20)])
        counts.clear()
        SeglogStreamWriter(opts, _schema(), False).commit([msg], batch)
        per_commit.append(sum(counts.values()))
    assert max(per_commit[3:]) == min(per_commit[3:]), per_commit
    assert sum(len(v) for v in read_all(root, "t").values()) == 25 * 20
    job = SeglogBatchWriter({"path": root, "topic": "t"}, _schema(), False)
    job.commit([_stage(root, job, job.job_id, 0, 0, [(b"k", b"job")])])
    assert sum(len(v) for v in read_all(root, "t").values()) == 25 * 20 + 1
    assert not open_storage(root).exists(f"{STAGING_DIR}/{job.job_id}")


def test_abort_deletes_the_batch_staging_but_keeps_a_pinned_batch(tmp_path):
    root = str(tmp_path / "root")
    opts = {"path": root, "topic": "t"}
    writer = SeglogStreamWriter(opts, _schema(), False)
    msg = _stage(root, writer, "q", 3, 0, [(b"a", b"1")])
    SeglogStreamWriter(opts, _schema(), False).abort([msg, None], 3)
    assert staging_leftovers(root) == []
    assert sum(len(v) for v in read_all(root, "t").values()) == 0


def test_fencing_and_takeover_at_the_driver(tmp_path):
    root = str(tmp_path / "root")
    opts = {"path": root, "topic": "t", "topic.partitions": "2"}
    w = SeglogStreamWriter(opts, _schema(), False)
    rows = [(f"k{i}".encode(), b"x") for i in range(50)]
    w.commit([_stage(root, w, "qa", 0, 0, rows)], 0)
    with pytest.raises(FencedWriterError, match="qa"):
        w.commit([_stage(root, w, "qb", 0, 0, rows)], 0)
    assert sum(len(v) for v in read_all(root, "t").values()) == 50
    taker = SeglogStreamWriter(dict(opts, takeover="true"), _schema(), False)
    taker.commit([_stage(root, taker, "qb", 0, 0, rows)], 0)
    assert sum(len(v) for v in read_all(root, "t").values()) == 100
    with pytest.raises(FencedWriterError, match="qb"):
        w.commit([_stage(root, w, "qa", 1, 0, rows)], 1)
    # a batch job appends without taking the topic from the stream that owns it
    bw = SeglogBatchWriter({"path": root, "topic": "t"}, _schema(), False)
    bw.commit([_stage(root, bw, bw.job_id, 0, 0, rows)])
    taker.commit([_stage(root, taker, "qb", 1, 0, rows)], 1)
    assert sum(len(v) for v in read_all(root, "t").values()) == 200


# ------------------------------------------------------------------------------- options and schemas

# ------------------------------------------------------------------------------- options and schemas

@pytest.mark.parametrize("options, match", [
    ({"topic": "t", "bogus": "1"}, "unknown seglog sink option 'bogus'"),
    ({"topic": "t", "batch.sise": "10"}, "did you mean 'batch.size'"),
    ({"topic": "t", "compression.type": "brotli"}, "compression.type='brotli'.*none, gzip, snappy, lz4 or zstd"),
    ({"topic": "t", "batch.size": "0"}, "batch.size='0' must be an integer >= 1"),
    ({"topic": "t", "topic.partitions": "x"}, "topic.partitions='x'"),
    ({"topic": "t", "autocreatetopics": "maybe"}, "autocreatetopics='maybe' is not a boolean"),
    ({"topic": "t", "takeover": "yes"}, "takeover='yes' is not a boolean"),
    ({"topic": "t", "topic.config.cleanup.policy": "shred"}, "topic.config"),
    ({"topic": ""}, "option topic='' is empty"),
    ({}, "no topic: set the `topic` option"),
    ({"topic": "t", "kafka.compression.type": "brotli"}, "compression.type='brotli'"),
    ({"topic": "t", "batch.size": "100", "kafka.batch.size": "200"},
     "batch.size='100' and kafka.batch.size='200' disagree"),
])
def test_bad_options(tmp_path, options, match):
    with pytest.raises(InvalidConfigError, match=match):
        SeglogStreamWriter(dict(options, path=str(tmp_path / "root")), _schema(), False)


def test_no_root(tmp_path):
    with pytest.raises(InvalidConfigError, match="no log root"):
        SeglogStreamWriter({"topic": "t"}, _schema(), False)


def _struct(*fields):
    from pyspark.sql.types import StructField, StructType
    return StructType([StructField(name, t) for name, t in fields])


def _bad_schemas():
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                                   StructField, StructType)
    s, b = StringType(), BinaryType()
    str_headers = ArrayType(StructType([StructField("key", s), StructField("value", s)]))
    return [
        ([("key", b)], "no `value` column"),
        ([("value", IntegerType())], "column `value` has type int; the seglog sink needs string or binary"),
        ([("value", s), ("key", ArrayType(IntegerType()))], "column `key` has type array<int>"),
        ([("value", s), ("topic", b)], "column `topic` has type binary; the seglog sink needs string"),
        ([("value", s), ("partition", LongType())], "column `partition` has type bigint; the seglog sink needs int"),
        ([("value", s), ("timestamp", s)], "column `timestamp` has type string; the seglog sink needs timestamp"),
        ([("value", s), ("headers", str_headers)], "column `headers` has type array<struct<key:string,value:string>>"),
        ([("value", s), ("VALUE", b)], "two `value` columns"),
    ]


@pytest.mark.parametrize("fields, match", _bad_schemas())
def test_bad_schemas(tmp_path, fields, match):
    with pytest.raises(InvalidConfigError, match=match):
        SeglogStreamWriter({"path": str(tmp_path / "root"), "topic": "t"}, _struct(*fields), False)


def test_kafka_options_ignored_and_missing_topic_without_autocreate(tmp_path):
    root = str(tmp_path / "root")
    # (kafka.bootstrap.servers is not ignored: it writes through a broker, see test_broker_interop.py)
    SeglogStreamWriter({"path": root, "topic": "t", "kafka.acks": "all", "kafka.linger.ms": "5",
                        "checkpointlocation": "/c", "includeheaders": "true"}, _schema(), False)
    with pytest.raises(TopicNotFoundError, match="'u' does not exist.*autoCreateTopics=false"):
        SeglogStreamWriter({"path": root, "topic": "u", "autocreatetopics": "false"}, _schema(), False)
    with pytest.raises(InvalidConfigError, match="Overwrite"):
        SeglogBatchWriter({"path": root, "topic": "t"}, _schema(), True)


def test_kafka_producer_settings_checked_by_name_and_meaning(tmp_path, caplog):
    """kafka.* must be a Kafka producer setting; one whose meaning the sink cannot have is
    refused; one it does not apply is accepted and named in a warning."""
    from pyspark_seglog.sink_options import parse_sink_options
    base = {"path": str(tmp_path), "topic": "t"}
    with pytest.raises(InvalidConfigError, match=r"kafka\.linger\.msec is not a Kafka producer setting; "
                                                 r"did you mean kafka\.linger\.ms\?"):
        parse_sink_options({**base, "kafka.linger.msec": "5"})
    for name, value, words in [("kafka.acks", "1", "acks=all always"),
                               ("kafka.enable.idempotence", "false", "always idempotent"),
                               ("kafka.key.serializer", "x.Y", "DataFrame operations"),
                               ("kafka.transactional.id", "mine", "one transaction per task"),
                               ("kafka.partitioner.class", "x.P", "murmur2")]:
        with pytest.raises(InvalidConfigError, match=f"option {name}=.*not supported by the seglog sink: .*{words}"):
            parse_sink_options({**base, name: value})
    with caplog.at_level("WARNING", logger="pyspark_seglog"):
        parse_sink_options({**base, "kafka.acks": "all", "kafka.linger.ms": "5", "kafka.retries": "3",
                            "kafka.batch.size": "65536"})
    warned = [r.getMessage() for r in caplog.records if "without effect" in r.getMessage()]
    assert len(warned) == 1 and "kafka.linger.ms, kafka.retries tune Kafka's producer" in warned[0], warned


def test_kafka_producer_settings_of_spark_kafka_sink_are_honoured(tmp_path):
    """A pipeline moving from format("kafka") keeps kafka.compression.type and kafka.batch.size."""
    from pyspark_seglog.sink_options import parse_sink_options
    opts = parse_sink_options({"path": str(tmp_path), "topic": "t", "kafka.compression.type": "ZSTD",
                               "kafka.batch.size": "65536"})
    assert (opts.compression, opts.batch_size) == (Compression.ZSTD, 65536)
    same = parse_sink_options({"path": str(tmp_path), "topic": "t", "compression.type": "lz4",
                               "kafka.compression.type": "lz4"})
    assert same.compression == Compression.LZ4


def test_kafka_compression_levels_are_applied_and_checked(tmp_path, caplog):
    """kafka.compression.<codec>.level (Kafka's producer settings since 3.8): validated with the
    topic configs' ranges, not named as without effect, and the level of that codec's batches;
    without it the topic's level applies when the topic's codec is used."""
    from pyspark_seglog.sink_options import parse_sink_options
    base = {"path": str(tmp_path), "topic": "t"}
    for name, value, allowed in [("gzip", "0", "-1 or between 1 and 9"), ("lz4", "18", "between 1 and 17"),
                                 ("zstd", "23", "between -131072 and 22"), ("zstd", "high", "between")]:
        with pytest.raises(InvalidConfigError, match=f"option kafka.compression.{name}.level='{value}' is not"
                                                     f" a {name} level: .*{allowed}"):
            parse_sink_options({**base, f"kafka.compression.{name}.level": value})
    with caplog.at_level("WARNING", logger="pyspark_seglog"):
        opts = parse_sink_options({**base, "kafka.compression.zstd.level": "7", "kafka.compression.gzip.level": "-1"})
    assert not [r for r in caplog.records if "without effect" in r.getMessage()]
    assert opts.compression_levels == {Compression.ZSTD: 7, Compression.GZIP: -1}
    assert opts.batch_codec("zstd", 5) == (Compression.ZSTD, 7)          # the option's level
    assert opts.batch_codec("gzip", 1) == (Compression.GZIP, -1)
    assert opts.batch_codec("lz4", 12) == (Compression.LZ4, 12)         # the topic's codec: its level
    assert opts.batch_codec("producer", None) == (Compression.NONE, None)
    lz4 = parse_sink_options({**base, "compression.type": "lz4"})
    assert lz4.batch_codec("lz4", 12) == (Compression.LZ4, 12)
    assert lz4.batch_codec("zstd", 5) == (Compression.LZ4, None)        # not the topic's codec: default
    # into a root the sink stores what Kafka's broker would: the topic's codec, when it names one
    assert lz4.stored_codec("zstd", 5) == (Compression.ZSTD, 5)
    assert lz4.stored_codec("lz4", 12) == (Compression.LZ4, 12)
    assert lz4.stored_codec("producer", None) == (Compression.LZ4, None)
    assert opts.stored_codec("gzip", 1) == (Compression.GZIP, -1)        # the topic's codec: the option's level


@pytest.mark.parametrize("own_codec", [{}, {"compression.type": "zstd"}])
def test_the_topics_compression_level_reaches_the_staged_batches(tmp_path, own_codec):
    """Into a gzip topic, also with a codec of the sink's own: stored as Kafka's broker would."""
    root = str(tmp_path / "root")
    w = SeglogBatchWriter({"path": root, "topic": "t", "topic.config.compression.type": "gzip",
                           "topic.config.compression.gzip.level": "1", **own_codec}, _schema(), False)
    stager = TaskStager(w, w.job_id, 0, 0, 0)
    rows = 5000
    stager.add(pa.RecordBatch.from_arrays([pa.array([b"k%d" % i for i in range(rows)]),
                                           pa.array([b'{"n":%d,"page":"/p/%d"}' % (i, i % 89) for i in range(rows)])],
                                          ["key", "value"]))
    stager.flush_all()
    w.commit([SeglogCommitMessage(w.job_id, 0, 0, 0, stager.parts)])
    for codec, section in stored_sections(root, "t", 0):
        assert codec == Compression.GZIP
        assert section == compress(codec, decompress(codec, section), 1)
        assert len(section) > len(compress(codec, decompress(codec, section), 9))


def stored_sections(root: str, topic: str, partition: int) -> list[tuple]:
    """(codec, compressed records section) of each stored batch of a partition's first segment."""
    from logcore.records.batch import HEADER_SIZE
    data = open(os.path.join(root, f"{topic}-{partition}", "00000000000000000000.log"), "rb").read()
    return [(h.compression, data[pos + HEADER_SIZE:pos + h.size]) for pos, h in iter_batches(data)]


@pytest.mark.parametrize("topic_config, largest", [({}, 524294), ({"max.message.bytes": "20000"}, 10000)])
def test_default_batch_size_follows_the_topic_max_message_bytes(tmp_path, topic_config, largest):
    """Into a root, batches hold up to 1,000,000 bytes of records, at most half max.message.bytes."""
    root = str(tmp_path / "root")
    options = {"path": root, "topic": "t", **{f"topic.config.{k}": v for k, v in topic_config.items()}}
    w = SeglogBatchWriter(options, _schema(), False)
    stager = TaskStager(w, w.job_id, 0, 0, 0)
    rows = 20000
    stager.add(pa.RecordBatch.from_arrays([pa.array([b"k"] * rows), pa.array([b"v" * 100] * rows)],
                                          ["key", "value"]))
    stager.flush_all()
    w.commit([SeglogCommitMessage(w.job_id, 0, 0, 0, stager.parts)])
    data = open(os.path.join(root, "t-0", "00000000000000000000.log"), "rb").read()
    headers = [h for _, h in iter_batches(data)]
    assert sum(h.records_count for h in headers) == rows
    estimate = largest // (1 + 100 + 21)      # records per batch by the sink's size estimate
    assert max(h.records_count for h in headers) == min(rows, estimate)
    assert max(h.size for h in headers) <= largest + 61


def test_partition_out_of_range_and_created_topic_config(tmp_path):
    from pyspark.sql.types import IntegerType, StructField
    root = str(tmp_path / "root")
    schema = _schema().add(StructField("partition", IntegerType()))
    w = SeglogStreamWriter({"path": root, "topic": "t", "topic.partitions": "2",
                            "topic.config.compression.type": "gzip"}, schema, False)
    assert LogRoot.open(root).describe_topic("t").config == {"compression.type": "gzip"}
    stager = TaskStager(w, "q", 0, 0, 0)
    batch = pa.RecordBatch.from_arrays([pa.array([b"k"]), pa.array([b"v"]), pa.array([5], pa.int32())],
                                       ["key", "value", "partition"])
    with pytest.raises(Exception, match="partition 5 but topic 't' has partitions 0..1"):
        stager.add(batch)
    # the topic's compression.type is the default codec
    ok = pa.RecordBatch.from_arrays([pa.array([b"k"]), pa.array([b"v"]), pa.array([1], pa.int32())],
                                    ["key", "value", "partition"])
    stager.add(ok)
    stager.flush_all()
    w.commit([SeglogCommitMessage("q", 0, 0, 0, stager.parts)], 0)
    data = open(os.path.join(root, "t-1", "00000000000000000000.log"), "rb").read()
    assert [h.compression for _, h in iter_batches(data)] == [Compression.GZIP]


def test_reopened_log_accepts_older_timestamps(tmp_path):
    """logcore regression found by the sink: micro-batches whose timestamps go back in time,
    each appended by a fresh writer, must not break the active segment's time index."""
    r = LogRoot.open(str(tmp_path / "root"), create=True)
    r.create_topic("t")
    for start in (5000, 1000, 3000):
        log = r.log("t", 0, writer=True)
        log.append_records([(b"k", b"v", (), start + i) for i in range(10)])
        log.commit()
        log.close()
    log = r.log("t", 0)
    assert len(list(log.read_records(0))) == 30
    assert log.offset_for_timestamp(5005) == (5, 5005)
    assert log.offset_for_timestamp(2000) == (0, 5000)
    r.close()


def test_staged_objects_hold_whole_batches(tmp_path):
    """Tasks stage under .seglog-staging/<query>/<batch>/<topic>-<p>/<task>-<attempt>-..."""
    root = str(tmp_path / "root")
    w = SeglogStreamWriter({"path": root, "topic": "t", "staging.part.bytes": "1"}, _schema(), False)
    stager = TaskStager(w, "q", 0, 3, 1)
    for i in range(3):
        stager.add(pa.RecordBatch.from_arrays([pa.array([b"a", b"b"]), pa.array([b"1", b"%d" % i])],
                                              ["key", "value"]))
    stager.flush_all()
    storage = open_storage(root)
    assert [p.seq for p in stager.parts] == [0, 1, 2]
    for p in stager.parts:
        assert p.path.startswith(f"{STAGING_DIR}/q/0/t-0/3-1-")
        assert sum(h.records_count for _, h in iter_batches(storage.read(p.path))) == p.records == 2


def test_rows_of_many_partitions_land_where_kafka_puts_them_in_order(tmp_path):
    """100 partitions, several Arrow batches: each keyed row in Kafka's partition for its key,
    each partition's rows in input order; null keys spread over the partitions."""
    root = str(tmp_path / "root")
    w = SeglogBatchWriter({"path": root, "topic": "t", "topic.partitions": "100"}, _schema(), False)
    batches = []
    for b in range(3):
        keys = [None if i % 11 == 0 else b"key-%d" % i for i in range(b * 700, (b + 1) * 700)]
        values = [b"v%d" % i for i in range(b * 700, (b + 1) * 700)]
        batches.append(pa.RecordBatch.from_arrays([pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
                                                  ["key", "value"]))
    w.commit([w.write(iter(batches))])
    got = read_all(root, "t")
    assert sum(len(v) for v in got.values()) == 2100
    assert sum(1 for v in got.values() if any(r.key is None for r in v)) > 50
    for p, records in got.items():
        ids = [int(r.value[1:]) for r in records]
        assert ids == sorted(ids)
        for r in records:
            if r.key is not None:
                assert kafka_partition(r.key, 100) == p
