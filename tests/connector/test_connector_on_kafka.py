"""`format("seglog")` against Apache Kafka itself: the connector's broker path
(`kafka.bootstrap.servers`) with a real KRaft Kafka broker (tests/kafka_reference.py).

- Source: confluent-kafka (librdkafka) produces keyed records with headers into several
  partitions of Kafka; a batch read of Kafka's live `log.dirs` with kafka.bootstrap.servers
  (offsets from Kafka's ListOffsets, records from its segment files) returns exactly the
  records Kafka acknowledged; a stream (AvailableNow, checkpoint) reads them, and after a
  restart only the ones produced since.
- Sink: a DataFrame written with `kafka.bootstrap.servers` (no path) is produced into Kafka by
  the tasks' transactional producers and committed by the driver (exactly-once: a failed attempt,
  a replayed batch, a driver dead mid-commit, as tests/connector/test_broker_sink_exactly_once.py
  on a seglog broker); confluent-kafka (read_committed) reads back exactly its rows.
- What Kafka cannot do for the connector fails with a message naming it.

Uses the session's one Spark (tests/connector/conftest.py) and one Kafka broker for the module.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark_seglog.broker_client import BrokerClient  # noqa: E402
from read_back import read_back  # noqa: E402


@pytest.fixture(scope="module")
def kafka(kafka_broker_factory):
    # Kafka writes its HW checkpoint (replication-offset-checkpoint) every 5 s by default; with
    # 10 minutes the log dir's checkpoint never covers what a test just produced, so the tasks
    # must read up to the HW Kafka answered to the driver (not the stored one) every time.
    return kafka_broker_factory({"replica.high.watermark.checkpoint.interval.ms": "600000"})


def create_topic(kafka, name: str, partitions: int) -> None:
    """The topic, once the broker leads each of its partitions: Kafka answers CreateTopics
    before its broker has taken the leadership from the controller's metadata, and a produce in
    that window is refused NOT_LEADER_OR_FOLLOWER (what these tests check is not that window)."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    deadline = time.monotonic() + 30
    while True:
        found = admin.list_topics(name, timeout=10).topics.get(name)
        if found is not None and found.error is None and len(found.partitions) == partitions \
                and all(p.leader >= 0 and p.error is None for p in found.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{name}: no leader for every partition after 30 s"
        time.sleep(0.1)


def produce(kafka, topic: str, partitions: int, first: int, count: int) -> set:
    """(partition, offset, key, value, headers, timestamp ms) of every record Kafka acknowledged:
    keys (every 7th null), 0-2 headers (one with a null value), spread over the partitions."""
    p = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "compression.type": "none"})
    acked, errors = set(), []

    def on_delivery(headers):
        # a delivery report does not carry the headers: the callback keeps the ones sent
        def done(err, msg):
            if err is not None:
                errors.append(err)
                return
            acked.add((msg.partition(), msg.offset(), msg.key(), msg.value(), tuple(headers),
                       msg.timestamp()[1]))
        return done

    for i in range(first, first + count):
        key = None if i % 7 == 0 else b"key-%d" % i
        headers = [("h%d" % j, None if (i + j) % 5 == 0 else b"v%d-%d" % (i, j)) for j in range(i % 3)]
        p.produce(topic, key=key, value=b"value-%06d" % i + b"x" * (i % 50), partition=i % partitions,
                  headers=headers, on_delivery=on_delivery(headers))
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors
    assert len(acked) == count
    return acked


def kafka_end_offsets(kafka, topic: str, partitions: int) -> dict[int, int]:
    with BrokerClient(kafka.bootstrap) as client:
        found = client.list_offsets([(topic, p) for p in range(partitions)], isolation="read_uncommitted")
    return {p: o for (_t, p), o in found.items()}


def row_tuple(r) -> tuple:
    headers = tuple((h.key, None if h.value is None else bytes(h.value)) for h in (r.headers or []))
    key = None if r.key is None else bytes(r.key)
    millis = round(r.timestamp.timestamp() * 1000)
    return (r.partition, r.offset, key, bytes(r.value), headers, millis)


COLUMNS = ("partition", "offset", "key", "value", "headers", "timestamp")


def read_batch(spark, kafka, topic: str) -> set:
    rows = (spark.read.format("seglog").option("subscribe", topic)
            .option("kafka.bootstrap.servers", kafka.bootstrap).option("includeHeaders", "true")
            .load(str(kafka.log_dirs)).select(*COLUMNS).collect())
    out = {row_tuple(r) for r in rows}
    assert len(out) == len(rows), "duplicate rows"
    return out


def stream_available_now(spark, kafka, topic: str, checkpoint: Path) -> list:
    """One AvailableNow run on `checkpoint`: the rows of its micro-batches, in arrival order."""
    rows, lock = [], threading.Lock()

    def collect(df, _batch_id):
        got = df.select(*COLUMNS).collect()
        with lock:
            rows.extend(row_tuple(r) for r in got)

    q = (spark.readStream.format("seglog").option("subscribe", topic)
         .option("kafka.bootstrap.servers", kafka.bootstrap).option("includeHeaders", "true")
         .option("startingOffsets", "earliest").load(str(kafka.log_dirs))
         .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(180), "AvailableNow query did not finish"
        if q.exception():
            raise q.exception()
    finally:
        q.stop()
    return rows


def test_source_reads_what_kafka_acknowledged(spark, kafka, tmp_path):
    topic = "k-in"
    create_topic(kafka, topic, 3)
    produced = produce(kafka, topic, 3, 0, 600)
    ends = kafka_end_offsets(kafka, topic, 3)
    assert ends == {0: 200, 1: 200, 2: 200}
    assert {(p, o) for p, o, *_ in produced} == {(p, o) for p in range(3) for o in range(200)}

    assert read_batch(spark, kafka, topic) == produced

    checkpoint = tmp_path / "checkpoint"
    first = stream_available_now(spark, kafka, topic, checkpoint)
    assert len(first) == len(produced) and set(first) == produced

    more = produce(kafka, topic, 3, 600, 150)
    second = stream_available_now(spark, kafka, topic, checkpoint)
    assert len(second) == len(more) and set(second) == more      # only the new ones, each once

    third = stream_available_now(spark, kafka, topic, checkpoint)
    assert third == []                                           # nothing new: nothing read
    assert read_batch(spark, kafka, topic) == produced | more


def consume_all(kafka, topic: str, partitions: int, expected: int, timeout: float = 60) -> list:
    """(partition, offset, key, value, headers, timestamp) of the expected committed records;
    nothing beyond them arrives."""
    def row(m) -> tuple:
        headers = tuple((k, v) for k, v in (m.headers() or []))
        return (m.partition(), m.offset(), m.key(), m.value(), headers, m.timestamp()[1])
    return read_back(kafka.bootstrap, topic, partitions, expected, row, group=f"readback-{topic}",
                     timeout=timeout, read_committed=True, quiet_wait=1.0)


def by_value(row: tuple) -> bytes:
    return row[2]           # values are unique; keys may be null


def test_sink_writes_what_kafka_serves(spark, kafka):
    from pyspark.sql import Row
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, StringType, StructField,
                                   StructType, TimestampType)
    import datetime

    topic = "k-out"
    create_topic(kafka, topic, 4)
    schema = StructType([
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("partition", IntegerType()), StructField("timestamp", TimestampType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())])))])
    # Recent timestamps: Kafka rolls a segment once its first record is older than log.roll.ms
    # (7 days) and deletes segments past retention.ms, which older ones would be.
    now_ms = int(time.time() * 1000) - 60_000
    base = datetime.datetime.fromtimestamp(now_ms / 1000, tz=datetime.timezone.utc)
    rows = []
    for i in range(2000):
        headers = [Row(key="n", value=b"%d" % i)] if i % 3 else []
        rows.append(Row(key=None if i % 11 == 0 else b"k%d" % i, value=b"row-%05d" % i,
                        partition=i % 4, timestamp=base + datetime.timedelta(milliseconds=i),
                        headers=headers))
    df = spark.createDataFrame(rows, schema).repartition(3)
    (df.write.format("seglog").option("kafka.bootstrap.servers", kafka.bootstrap)
     .option("topic", topic).mode("append").save())

    got = consume_all(kafka, topic, 4, len(rows))
    base_ms = round(base.timestamp() * 1000)
    expected = sorted(((i % 4, None if i % 11 == 0 else b"k%d" % i, b"row-%05d" % i,
                        (("n", b"%d" % i),) if i % 3 else (), base_ms + i) for i in range(2000)), key=by_value)
    assert sorted(((p, k, v, h, ts) for p, _o, k, v, h, ts in got), key=by_value) == expected
    # each partition holds its 500 rows once (between them the transactions' commit markers)
    by_part: dict[int, list] = {}
    for p, o, *_ in got:
        by_part.setdefault(p, []).append(o)
    assert {p: len(set(o)) for p, o in by_part.items()} == {p: 500 for p in range(4)}

    # Spark's source through Kafka reads the same rows back
    back = read_batch(spark, kafka, topic)
    assert sorted(((p, k, v, h, ts) for p, _o, k, v, h, ts in back), key=by_value) == expected


def test_sink_codecs_kafka_accepts(spark, kafka):
    """Kafka validates (and decompresses) every batch the tasks send: each codec's rows come back."""
    codecs = ("gzip", "snappy", "lz4", "zstd")
    for codec in codecs:
        create_topic(kafka, f"k-codec-{codec}", 2)
    df = spark.range(0, 300, 1, 2).selectExpr("cast(cast(id as string) as binary) as key",
                                              "cast(concat('v-', cast(id as string)) as binary) as value")
    for codec in codecs:
        (df.write.format("seglog").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("topic", f"k-codec-{codec}").option("compression.type", codec).mode("append").save())
        got = consume_all(kafka, f"k-codec-{codec}", 2, 300)
        assert sorted((k, v) for _p, _o, k, v, _h, _t in got) == \
            sorted((b"%d" % i, b"v-%d" % i) for i in range(300)), codec


def test_sink_exactly_once_protocol_on_kafka(kafka):
    """The broker path's transactions on Apache Kafka: EndTxn from the driver (another client
    than the task's) commits; a failed attempt's rows are aborted by its retry; a replayed batch
    writes nothing; a batch whose driver died after committing one task rewrites only the other."""
    import test_broker_sink_exactly_once as eos
    from pyspark_seglog.broker_sink import commit_batch, produce_task
    from pyspark_seglog.sink_options import parse_sink_options

    topic = "k-eos"
    create_topic(kafka, topic, 3)
    opts = parse_sink_options(eos.options(kafka.bootstrap, topic))
    txn0, dead = eos.open_attempt(opts, "q-kafka", 0, 0)
    for batch in eos.rows(0, 1500):
        dead.add(batch)
    dead.flush()
    dead.close()
    txn0.close()
    first = [produce_task(opts, eos.COLUMNS, eos.rows(t * 3000, 3000), t, 1 - t, "q-kafka", 0, streaming=True)
             for t in range(2)]
    assert eos.read_values(kafka.bootstrap, topic, 3) == []
    commit_batch(opts, first, 0)
    commit_batch(opts, first, 0)
    assert eos.exactly(eos.read_values(kafka.bootstrap, topic, 3), range(6000))
    replay = produce_task(opts, eos.COLUMNS, eos.rows(0, 3000), 0, 0, "q-kafka", 0, streaming=True)
    assert replay.skipped and replay.transaction is None
    second = [produce_task(opts, eos.COLUMNS, eos.rows(6000 + t * 500, 500), t, 0, "q-kafka", 1, streaming=True)
              for t in range(2)]
    commit_batch(opts, second[:1], 1)
    again = [produce_task(opts, eos.COLUMNS, eos.rows(6000 + t * 500, 500), t, 0, "q-kafka", 1, streaming=True)
             for t in range(2)]
    assert again[0].skipped and not again[1].skipped
    commit_batch(opts, again, 1)
    assert eos.exactly(eos.read_values(kafka.bootstrap, topic, 3), range(7000))


def test_sink_writes_right_after_create_topics(kafka, caplog):
    """The sink creates its topic (autoCreateTopics) and produces at once, as a first write to a
    new topic does: Kafka answers CreateTopics before its broker leads the partitions, so the
    first batches are often refused NOT_LEADER_OR_FOLLOWER (or the topic is not listed yet).
    Each partition's first batch flies alone until acknowledged, so a later one cannot get in
    ahead of it (Kafka takes any sequence as an unknown producer's first): every task commits,
    and read_committed reads each row once, each partition's rows in the task's order. Several
    fresh topics, since the window is a race (before the fix, about 1 in 3 of these writes failed
    OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    import logging

    import test_broker_sink_exactly_once as eos
    from pyspark_seglog.broker_sink import commit_batch, produce_task
    from pyspark_seglog.sink_options import parse_sink_options

    refused = 0
    for i in range(6):
        topic = f"k-fresh-{i}"
        opts = parse_sink_options(eos.options(kafka.bootstrap, topic, **{"topic.partitions": "6"}))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pyspark_seglog.broker_sink"):
            message = produce_task(opts, eos.COLUMNS, eos.rows(0, 6000), 0, 0, f"q-fresh-{i}", 0, streaming=False)
        refused += "NOT_LEADER_OR_FOLLOWER" in caplog.text
        commit_batch(opts, [message], 0)
        got = committed_rows(kafka, topic, 6, 6000)
        assert sorted(v for _p, v in got) == sorted(b"v%d" % n for n in range(6000)), topic
        for p in range(6):
            ids = [int(v[1:]) for q, v in got if q == p]
            assert ids == sorted(ids), f"{topic}-{p}: rows out of the task's order"
    print(f"{refused} of 6 fresh topics refused first batches NOT_LEADER_OR_FOLLOWER")


def committed_rows(kafka, topic: str, partitions: int, expected: int) -> list[tuple[int, bytes]]:
    """(partition, value) of the first `expected` committed records (read_committed), each
    partition's in offset order. (Not read to each partition's end: Kafka writes a transaction's
    markers after answering EndTxn, and until then a read_committed reader's end is the
    transaction's start. A duplicate would take the place of a missing row in the count.)"""
    return read_back(kafka.bootstrap, topic, partitions, expected, lambda m: (m.partition(), m.value()),
                     group=f"readback-{topic}", timeout=60, read_committed=True)
