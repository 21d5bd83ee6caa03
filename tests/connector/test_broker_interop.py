"""Spark <-> `seglog broker`: librdkafka writes what Spark reads, Spark writes what librdkafka reads.

A real broker subprocess on a free loopback port serves a log root; confluent-kafka (librdkafka)
produces to and consumes from it; Spark (local[2]) reads the broker's log dir with
format("seglog") with and without kafka.bootstrap.servers, and writes through the broker.
The producer fault test kills the broker (SIGKILL) under a task's idempotent producer.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from logcore.errors import SegLogError, TopicNotFoundError  # noqa: E402
from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.wire.client import KafkaConnectionError  # noqa: E402
from pyspark_seglog.broker_client import BrokerClient  # noqa: E402
import broker_spawner  # noqa: E402
from read_back import read_back  # noqa: E402
from streaming_query import await_available_now  # noqa: E402
from broker_process import subprocess_env  # noqa: E402
from zookeeper_reference import free_ports  # noqa: E402

START_TIMEOUT = 30


# ------------------------------------------------------------------------------ the broker

def _free_port() -> int:
    # the suite's picker: this worker's own slice, below the ephemeral range an outgoing
    # connection could take the port from before the broker binds it
    return free_ports(1)[0]


class BrokerProcess:
    """`seglog broker` over `root` on 127.0.0.1:`port`, started and stopped by its pid."""

    def __init__(self, base: Path, root: Path, port: int):
        self.base, self.root, self.port = base, root, port
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        conf = self.base / f"broker-{self.starts}.properties"
        conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:{self.port}\nlog.dirs={self.root}\n"
                        "num.partitions=1\n")
        env = subprocess_env()
        err = open(self.base / f"broker-{self.starts}.stderr", "wb")
        self.proc = broker_spawner.popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config",
                                          str(conf)], stdout=subprocess.PIPE, stderr=err, env=env, cwd=self.base)
        err.close()
        deadline = time.monotonic() + START_TIMEOUT
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line or self.proc.poll() is not None:
                break
        if b"listening on PLAINTEXT://" not in line:
            self.stop(signal.SIGKILL)
            text = (self.base / f"broker-{self.starts}.stderr").read_text(errors="replace")[-2000:]
            pytest.skip(f"seglog broker did not start: {line!r} {text}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("interop-broker")
    b = BrokerProcess(base, base / "logs", _free_port())
    b.start()
    yield b
    b.stop()


# ------------------------------------------------------------------------------ clients

def create_topic(b: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(15)


def librdkafka_produce(b: BrokerProcess, topic: str, first: int, count: int) -> set:
    """(partition, offset, key, value) of every acknowledged record."""
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    acked, errors = set(), []

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.add((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for i in range(first, first + count):
        p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, on_delivery=done)
        p.poll(0)
    assert p.flush(30) == 0 and not errors, errors
    assert len(acked) == count
    return acked


def librdkafka_consume(b: BrokerProcess, topic: str, partitions: int, expected: int,
                       timeout: float = 30) -> list[tuple]:
    """(partition, offset, key, value) of the expected records; nothing beyond them arrives."""
    return read_back(b.bootstrap, topic, partitions, expected,
                     lambda m: (m.partition(), m.offset(), m.key(), m.value()),
                     group="interop-assign", timeout=timeout, quiet_wait=0.5)


def broker_hw(b: BrokerProcess, topic: str, partitions: int) -> dict[int, int]:
    with BrokerClient(b.bootstrap) as client:
        found = client.list_offsets([(topic, p) for p in range(partitions)], isolation="read_uncommitted")
    return {p: o for (_t, p), o in found.items()}


# ------------------------------------------------------------------------------ Spark helpers

def spark_read(spark, b: BrokerProcess, topic: str, *, via_broker: bool) -> set:
    reader = spark.read.format("seglog").option("subscribe", topic)
    if via_broker:
        reader = reader.option("kafka.bootstrap.servers", b.bootstrap)
    rows = reader.load(str(b.root)).select("partition", "offset", "key", "value").collect()
    out = {(r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows}
    assert len(out) == len(rows), "duplicate rows"
    return out


def spark_stream_available_now(spark, b: BrokerProcess, topic: str, checkpoint: Path, *,
                               via_broker: bool) -> set:
    """One Trigger.AvailableNow run on `checkpoint`; the rows of its micro-batches."""
    reader = spark.readStream.format("seglog").option("subscribe", topic).option("startingOffsets", "earliest")
    if via_broker:
        reader = reader.option("kafka.bootstrap.servers", b.bootstrap)
    rows, lock = [], threading.Lock()

    def collect(df, _batch_id):
        got = df.select("partition", "offset", "key", "value").collect()
        with lock:
            rows.extend((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in got)

    q = (reader.load(str(b.root)).writeStream.foreachBatch(collect)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    await_available_now(q)
    out = set(rows)
    assert len(out) == len(rows), "duplicate rows"
    return out


def bounded_by(records: set, hw: dict[int, int]) -> bool:
    """Every offset below the HW of its partition, and every offset below the HW present."""
    by_part: dict[int, set] = {}
    for p, o, _k, _v in records:
        by_part.setdefault(p, set()).add(o)
    return all(by_part.get(p, set()) == set(range(h)) for p, h in hw.items())


# ------------------------------------------------------------------------------ (a) librdkafka -> Spark

def test_librdkafka_writes_spark_reads_the_log_dir(spark, broker, tmp_path):
    topic = "interop-in"
    create_topic(broker, topic, 2)
    produced = librdkafka_produce(broker, topic, 0, 400)
    hw = broker_hw(broker, topic, 2)
    assert sum(hw.values()) == 400 and bounded_by(produced, hw)

    for via_broker in (False, True):
        assert spark_read(spark, broker, topic, via_broker=via_broker) == produced

    # Streaming, AvailableNow: two runs on one checkpoint; the second gets exactly what
    # librdkafka added between them, up to the broker's new HW.
    for via_broker in (False, True):
        first = spark_stream_available_now(spark, broker, topic, tmp_path / f"ck-{via_broker}",
                                           via_broker=via_broker)
        assert first == produced
    more = librdkafka_produce(broker, topic, 400, 150)
    hw = broker_hw(broker, topic, 2)
    everything = produced | more
    assert sum(hw.values()) == 550 and bounded_by(everything, hw)
    for via_broker in (False, True):
        second = spark_stream_available_now(spark, broker, topic, tmp_path / f"ck-{via_broker}",
                                            via_broker=via_broker)
        assert second == more
    assert spark_read(spark, broker, topic, via_broker=True) == everything


def test_source_plans_up_to_the_broker_hw(broker):
    """The driver's ranges end at what ListOffsets answers, per isolation level."""
    from pyspark_seglog.source import SeglogBatchReader
    topic = "interop-plan"
    create_topic(broker, topic, 3)
    librdkafka_produce(broker, topic, 0, 90)
    hw = broker_hw(broker, topic, 3)
    for isolation in ("read_committed", "read_uncommitted"):
        reader = SeglogBatchReader({"path": str(broker.root), "subscribe": topic,
                                    "kafka.bootstrap.servers": broker.bootstrap,
                                    "isolation.level": isolation}, None)
        ranges = {p.partition: (p.start, p.until) for p in reader.partitions()}
        assert ranges == {p: (0, h) for p, h in hw.items()}


def test_source_errors_name_the_bootstrap_servers(broker, tmp_path):
    from pyspark_seglog.source import SeglogBatchReader
    # a topic that exists in a root but not on the broker
    other = tmp_path / "other-root"
    root = LogRoot.open(str(other), create=True)
    root.create_topic("only-here", 1)
    root.close()
    reader = SeglogBatchReader({"path": str(other), "subscribe": "only-here",
                                "kafka.bootstrap.servers": broker.bootstrap}, None)
    with pytest.raises(TopicNotFoundError, match=f"kafka.bootstrap.servers={broker.bootstrap}.*only-here-0"):
        reader.partitions()
    dead = f"127.0.0.1:{_free_port()}"
    reader = SeglogBatchReader({"path": str(other), "subscribe": "only-here",
                                "kafka.bootstrap.servers": dead}, None)
    with pytest.raises(KafkaConnectionError, match=f"kafka.bootstrap.servers={dead}"):
        reader.partitions()
    with pytest.raises(SegLogError, match="kafka.bootstrap.servers='nohost'"):
        SeglogBatchReader({"path": str(other), "subscribe": "only-here",
                           "kafka.bootstrap.servers": "nohost"}, None)


# ------------------------------------------------------------------------------ (b) Spark -> librdkafka

def test_spark_sink_produces_through_the_broker(spark, broker, tmp_path):
    n = 3000
    df = spark.range(n).selectExpr("cast(id as string) as key", "concat('row-', id) as value")
    # batch write, no path: the rows go through the broker
    (df.write.format("seglog").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", "interop-out").option("topic.partitions", "3").mode("append").save())
    got = librdkafka_consume(broker, "interop-out", 3, n)
    assert sorted(v for _p, _o, _k, v in got) == sorted(b"row-%d" % i for i in range(n))
    assert all(k == v[4:] for _p, _o, k, v in got)          # key travels with its value
    assert len({p for p, _o, _k, _v in got}) == 3

    # streaming: the seglog source (the broker's log dir) into the seglog sink (the broker)
    create_topic(broker, "interop-src", 2)
    produced = librdkafka_produce(broker, "interop-src", 0, 500)
    q = (spark.readStream.format("seglog").option("subscribe", "interop-src")
         .option("startingOffsets", "earliest").option("kafka.bootstrap.servers", broker.bootstrap)
         .load(str(broker.root)).selectExpr("key", "value")
         .writeStream.format("seglog").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "interop-copy").option("checkpointLocation", str(tmp_path / "ck-copy"))
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(120)
        if q.exception():
            raise q.exception()
    finally:
        q.stop()
    copied = librdkafka_consume(broker, "interop-copy", 1, len(produced))
    assert sorted((k, v) for _p, _o, k, v in copied) == sorted((k, v) for _p, _o, k, v in produced)


def test_path_mode_sink_on_a_served_root_names_the_broker_and_the_option(spark, broker):
    """A root a running broker serves is written only through it: the sink in path mode
    refuses at the start of the write, naming the broker and kafka.bootstrap.servers; with
    that option the same write goes through the broker."""
    create_topic(broker, "interop-owned", 1)
    hw_before = broker_hw(broker, "interop-owned", 1)
    df = spark.range(20).selectExpr("cast(id as string) as key", "concat('v-', id) as value")
    with pytest.raises(Exception) as caught:
        df.write.format("seglog").option("topic", "interop-owned").mode("append").save(str(broker.root))
    text = str(caught.value)
    assert f"served by seglog broker PLAINTEXT://{broker.bootstrap}" in text, text[-2000:]
    assert f"set option kafka.bootstrap.servers={broker.bootstrap}" in text, text[-2000:]
    assert broker_hw(broker, "interop-owned", 1) == hw_before        # nothing written, broker not fenced
    (df.write.format("seglog").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", "interop-owned").mode("append").save())
    assert len(librdkafka_consume(broker, "interop-owned", 1, 20)) == 20


def test_sink_needs_the_topic_or_creates_it(broker):
    from pyspark.sql.types import BinaryType, StructField, StructType

    from pyspark_seglog.sink import SeglogBatchWriter
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(TopicNotFoundError, match=f"'interop-none'.*kafka.bootstrap.servers={broker.bootstrap}"):
        SeglogBatchWriter({"kafka.bootstrap.servers": broker.bootstrap, "topic": "interop-none",
                           "autoCreateTopics": "false"}, schema, False)
    dead = f"127.0.0.1:{_free_port()}"
    with pytest.raises(KafkaConnectionError, match=f"kafka.bootstrap.servers={dead}"):
        SeglogBatchWriter({"kafka.bootstrap.servers": dead, "topic": "x"}, schema, False)


# ------------------------------------------------------------------------------ faults

def test_task_producer_survives_broker_kill_without_duplicates(tmp_path):
    """SIGKILL the broker while a task's producer has requests in flight; restart it on the
    same port: the producer resends what was not acknowledged and the broker de-duplicates
    what it already had, so the attempt's rows are in the topic exactly once."""
    from pyspark_seglog.broker_sink import TaskProducer
    from pyspark_seglog.sink_options import parse_sink_options

    b = BrokerProcess(tmp_path, tmp_path / "logs", _free_port())
    b.start()
    try:
        opts = parse_sink_options({"kafka.bootstrap.servers": b.bootstrap, "topic": "faults",
                                   "topic.partitions": "2", "batch.size": "2000",
                                   "kafka.delivery.timeout.ms": "60000"})
        producer = TaskProducer(opts, {"key": "key", "value": "value"}, task=0, attempt=0)
        rng = random.Random(7)
        kills = []

        def killer():
            for _ in range(2):
                time.sleep(rng.uniform(0.2, 0.6))
                b.stop(signal.SIGKILL)
                kills.append(time.monotonic())
                b.start()

        thread = threading.Thread(target=killer)
        n, chunk = 60_000, 2_000
        thread.start()
        try:
            for first in range(0, n, chunk):
                ids = range(first, first + chunk)
                producer.add(pa.record_batch([pa.array([b"k%d" % i for i in ids]),
                                              pa.array([b"v%d" % i for i in ids])], names=["key", "value"]))
                time.sleep(0.02)           # spread the rows over the kills
            producer.flush()
        finally:
            thread.join()
            producer.close()
        assert len(kills) == 2
        assert sum(producer.message().records.values()) == n
        got = librdkafka_consume(b, "faults", 2, n)
        values = [v for _p, _o, _k, v in got]
        assert len(values) == n and set(values) == {b"v%d" % i for i in range(n)}
        for p in (0, 1):                   # per partition, in the order they were produced
            ids = [int(v[1:]) for q, _o, _k, v in sorted(got) if q == p]
            assert ids == sorted(ids)
    finally:
        b.stop()
