"""format("seglog") as a source in real Spark (local[2]): batch and streaming queries.

Logs are built with logcore; the helpers come from test_source_read.py (same folder).
"""
from __future__ import annotations

import importlib.util
import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from logcore.log.log_root import LogRoot
from logcore.records.control import ControlType
from streaming_query import await_available_now
from test_source_read import T0, append, make_root, retain_from, value_of

LOG_DIR = Path(__file__).resolve().parents[1] / "log"


def utc(ms: int) -> datetime:
    # Spark returns naive datetimes in the session time zone (UTC in the fixture)
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).replace(tzinfo=None)


def read(spark, url, **options):
    reader = spark.read.format("seglog")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load(url)


def stream(spark, url, **options):
    reader = spark.readStream.format("seglog")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load(url)


class Collector:
    """foreachBatch sink (runs on the driver): keeps every row with its batch id."""

    def __init__(self):
        self.rows = []
        self.batches = []
        self.lock = threading.Lock()

    def __call__(self, df, batch_id):
        got = [(r.topic, r.partition, r.offset, bytes(r.value)) for r in
               df.select("topic", "partition", "offset", "value").collect()]
        with self.lock:
            self.batches.append((batch_id, len(got)))
            self.rows.extend(got)


def run_available_now(df, checkpoint, collector, timeout=180):
    q = (df.writeStream.foreachBatch(collector).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    await_available_now(q, timeout)
    return q


def checkpoint_offsets(checkpoint: Path, batch: int) -> dict:
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    assert lines[0] == "v1"
    return json.loads(lines[2])       # line 1 is the query's metadata, then one line per source


# ------------------------------------------------------------------------------- batch

def test_batch_read_schema_values_and_headers(spark, tmp_path):
    url = make_root(tmp_path / "r", {"t": 2})
    append(url, "t", 0, 0, 30, headers=[("h", b"v"), ("none", None)])
    append(url, "t", 1, 0, 12)
    df = read(spark, url, subscribe="t", includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert len(rows) == 42
    for r in rows:
        i = r.offset
        assert bytes(r.value) == value_of("t", r.partition, i)
        assert (bytes(r.key) if r.key is not None else None) == (f"k{i}".encode() if i % 7 else None)
        assert (r.topic, r.timestampType, r.timestamp) == ("t", 0, utc(T0 + i))
    assert [(h.key, h.value and bytes(h.value)) for h in rows[3].headers] == [("h", b"v"), ("none", None)]
    assert rows[-1].headers is None                       # a record without headers
    plain = read(spark, url, subscribe="t")
    assert "headers" not in plain.columns and plain.count() == 42
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PARTITION: topic missing of option subscribe"):
        read(spark, url, subscribe="missing").count()               # not 0 rows (test_source_missing_topic)


def test_batch_offsets_timestamps_and_min_partitions(spark, tmp_path):
    url = make_root(tmp_path / "r", {"t": 2})
    append(url, "t", 0, 0, 100)
    append(url, "t", 1, 0, 100)
    df = read(spark, url, subscribe="t", startingOffsets='{"t": {"0": 10, "1": -2}}',
              endingOffsets='{"t": {"0": 20, "1": -1}}')
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, i) for i in range(10, 20)] + [(1, i) for i in range(100)]
    by_time = read(spark, url, subscribe="t", startingTimestamp=T0 + 90, endingTimestamp=T0 + 95)
    assert sorted(r.offset for r in by_time.collect()) == sorted([90, 91, 92, 93, 94] * 2)
    split = read(spark, url, subscribe="t", minPartitions=6)
    assert split.rdd.getNumPartitions() == 6 and split.count() == 200
    assert read(spark, url, subscribe="t").rdd.getNumPartitions() == 2


def test_batch_isolation_levels(spark, tmp_path):
    url = make_root(tmp_path / "r", {"t": 1})
    root = LogRoot.open(url)
    log = root.log("t", 0, writer=True)
    log.append_records([(None, b"a", (), T0)] * 2)                                       # 0, 1
    log.append_records([(None, b"aborted", (), T0)] * 2, producer_id=3, producer_epoch=0,
                       is_transactional=True)                                              # 2, 3
    log.append_control(ControlType.ABORT, producer_id=3, producer_epoch=0)                # 4
    log.append_records([(None, b"b", (), T0)])                                            # 5
    log.append_records([(None, b"open", (), T0)], producer_id=4, producer_epoch=0,
                       is_transactional=True)                                              # 6: open
    log.append_records([(None, b"c", (), T0)])                                            # 7
    log.commit()
    log.close()
    root.close()
    committed = read(spark, url, subscribe="t").orderBy("offset").collect()
    assert [(r.offset, bytes(r.value)) for r in committed] == [(0, b"a"), (1, b"a"), (5, b"b")]
    everything = read(spark, url, subscribe="t", **{"kafka.isolation.level": "read_uncommitted"})
    assert [bytes(r.value) for r in everything.orderBy("offset").collect()] == [
        b"a", b"a", b"aborted", b"aborted", b"b", b"open", b"c"]


def test_batch_fail_on_data_loss(spark, tmp_path):
    url = make_root(tmp_path / "r", {"t": 1}, {"segment.bytes": "1000"})
    append(url, "t", 0, 0, 100)
    start = retain_from(url, "t", 0, 2)
    with pytest.raises(Exception) as info:
        read(spark, url, subscribe="t", startingOffsets='{"t": {"0": 3}}').collect()
    message = str(info.value)
    assert "t-0" in message and f"offsets 3 to {start - 1}" in message and "failOnDataLoss" in message
    lenient = read(spark, url, subscribe="t", startingOffsets='{"t": {"0": 3}}', failOnDataLoss="false")
    assert sorted(r.offset for r in lenient.collect()) == list(range(start, 100))


@pytest.mark.parametrize("options, name", [
    ({"subscribe": "t", "startingOffsets": "latest"}, "startingOffsets"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "-1"}, "maxOffsetsPerTrigger"),
    ({"subscribe": "t", "startingOffset": "earliest"}, "startingoffset"),
    ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ({"subscribe": "t", "assign": '{"t": [0]}'}, "assign"),
    ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
])
def test_batch_bad_options_fail_at_query_start(spark, tmp_path, options, name):
    url = make_root(tmp_path / "r", {"t": 1})
    with pytest.raises(Exception) as info:
        read(spark, url, **options).collect()
    assert name in str(info.value)


def test_stream_bad_options_fail_at_query_start(spark, tmp_path):
    url = make_root(tmp_path / "r", {"t": 1})
    for options, name in [({"subscribe": "t", "endingOffsets": "latest"}, "endingOffsets"),
                          ({"subscribe": "t", "maxTriggerDelay": "later"}, "maxTriggerDelay")]:
        with pytest.raises(Exception) as info:
            q = (stream(spark, url, **options).writeStream.format("noop")
                 .option("checkpointLocation", str(tmp_path / f"ck-{name}")).start())
            try:
                q.awaitTermination(60)
                if q.exception():
                    raise q.exception()
            finally:
                q.stop()
        assert name in str(info.value)


# ------------------------------------------------------------------------------- streaming

def test_stream_available_now_rate_limit_checkpoint_and_restart(spark, tmp_path):
    url = make_root(tmp_path / "r", {"t": 2})
    append(url, "t", 0, 0, 60)
    append(url, "t", 1, 0, 20)
    checkpoint = tmp_path / "ck"
    first = Collector()
    q = run_available_now(stream(spark, url, subscribe="t", startingOffsets="earliest",
                                 maxOffsetsPerTrigger=40), checkpoint, first)
    assert [n for _b, n in sorted(first.batches)] == [40, 40]
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    source = progress[0]["sources"][0]
    assert json.loads(source["endOffset"]) == {"t": {"0": 30, "1": 10}}
    assert json.loads(source["latestOffset"]) == {"t": {"0": 60, "1": 20}}   # the lag shows
    assert checkpoint_offsets(checkpoint, 0) == {"t": {"0": 30, "1": 10}}
    assert checkpoint_offsets(checkpoint, 1) == {"t": {"0": 60, "1": 20}}
    # more data, restart from the checkpoint: the rest exactly once
    append(url, "t", 0, 60, 10)
    append(url, "t", 1, 20, 50)
    second = Collector()
    run_available_now(stream(spark, url, subscribe="t", startingOffsets="earliest",
                             maxOffsetsPerTrigger=40), checkpoint, second)
    assert sorted(b for b, _n in second.batches) == [2, 3]
    assert checkpoint_offsets(checkpoint, 3) == {"t": {"0": 70, "1": 70}}
    rows = first.rows + second.rows
    assert len(rows) == len(set(rows)) == 140
    assert sorted(rows) == sorted([("t", 0, i, value_of("t", 0, i)) for i in range(70)]
                                  + [("t", 1, i, value_of("t", 1, i)) for i in range(70)])


def test_stream_concurrent_appends_new_topics_and_partitions(spark, tmp_path):
    """A writer appends and commits, creates a matching topic and adds a partition while the query
    runs (startingOffsets=latest, subscribePattern): every record committed after the start is read
    exactly once, in order per partition."""
    url = make_root(tmp_path / "r", {"ca": 2})
    append(url, "ca", 0, 0, 10)                     # before the start: not read (latest)
    append(url, "ca", 1, 0, 10)
    collector = Collector()
    q = (stream(spark, url, subscribePattern="c.*", maxOffsetsPerTrigger=250).writeStream
         .foreachBatch(collector).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    expected = {}
    try:
        deadline = time.time() + 120
        while not collector.batches and not q.lastProgress and time.time() < deadline:
            time.sleep(0.2)             # the query has resolved its starting offsets

        def writer():
            root = LogRoot.open(url)
            next_i = {("ca", 0): 10, ("ca", 1): 10}
            for round_ in range(12):
                if round_ == 3:
                    root.create_topic("cb", 1)
                    next_i[("cb", 0)] = 0
                if round_ == 6:
                    root.add_partitions("ca", 3)
                    next_i[("ca", 2)] = 0
                for (t, p), i in sorted(next_i.items()):
                    append(url, t, p, i, 40, per_batch=7)
                    next_i[(t, p)] = i + 40
                time.sleep(0.15)
            root.close()
            expected.update(next_i)

        thread = threading.Thread(target=writer)
        thread.start()
        thread.join(120)
        total = sum(n - (10 if t == "ca" and p < 2 else 0) for (t, p), n in expected.items())
        while len(collector.rows) < total and time.time() < deadline:
            time.sleep(0.3)
        if q.exception():
            raise q.exception()
    finally:
        q.stop()
    rows = collector.rows
    assert len(rows) == len(set(rows)) == total
    for (t, p), n in expected.items():
        first = 10 if t == "ca" and p < 2 else 0
        got = [(o, v) for tt, pp, o, v in rows if (tt, pp) == (t, p)]
        assert got == [(i, value_of(t, p, i)) for i in range(first, n)], (t, p)
    assert len(collector.batches) > 1


@pytest.mark.s3
def test_s3_root_batch_and_stream(spark, storage_targets, tmp_path):
    target = storage_targets.make("s3")
    root = LogRoot.open(target.url, storage_options=target.storage_options, create=True)
    root.create_topic("t", 2)
    root.close()
    for p in range(2):
        append(target.url, "t", p, 0, 25, storage_options=target.storage_options)
    so = target.storage_options
    options = {"storage.endpoint_url": so["endpoint_url"], "storage.key": so["key"],
               "storage.secret": so["secret"], "storage.anon": "false",
               "storage.client_kwargs.region_name": so["client_kwargs"]["region_name"]}
    df = read(spark, target.url, subscribe="t", **options)
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())
    assert got == [(p, i, value_of("t", p, i)) for p in range(2) for i in range(25)]
    plan = df._jdf.queryExecution().toString()
    assert so["secret"] not in plan
    # streaming on the same root: the driver refreshes object-store logs between triggers
    append(target.url, "t", 1, 25, 15, storage_options=so)
    collector = Collector()
    run_available_now(stream(spark, target.url, subscribe="t", startingOffsets="earliest",
                             maxOffsetsPerTrigger=30, **options), tmp_path / "ck", collector)
    assert sorted(collector.rows) == [("t", p, i, value_of("t", p, i))
                                      for p in range(2) for i in range(25 if p == 0 else 40)]
    assert len(collector.batches) == 3


def _kafka_copy_module():
    spec = importlib.util.spec_from_file_location("seglog_kafka_copy_helpers", LOG_DIR / "test_kafka_copy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_read_a_copy_of_a_kafka_log_dir(spark, tmp_path):
    pytest.importorskip("kafka.record.default_records")
    kafka = _kafka_copy_module()
    root_dir = tmp_path / "kafka-logs"
    kafka.make_kafka_dir(root_dir)
    before = kafka.fingerprint(root_dir)
    df = read(spark, str(root_dir), subscribe="orders", includeHeaders="true")
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    p0 = [r for r in rows if r.partition == 0]
    p1 = [r for r in rows if r.partition == 1]
    assert [bytes(r.value) for r in p0] == [b"p0-%d" % i for i in range(60)]
    # bounded by the broker's high watermark (42); the batch 40..44 crosses it
    assert [r.offset for r in p1] == list(range(40))
    assert bytes(p0[7].key) == b"key" and p0[7].timestamp == utc(1_000_007)
    assert [(h.key, bytes(h.value)) for h in p0[7].headers] == [("h", b"1")]
    assert kafka.fingerprint(root_dir) == before
