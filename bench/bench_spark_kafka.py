"""Spark with Apache Kafka vs Spark with seglog: Spark's own Kafka connector as the anchor.

One SparkSession (local[2], driver memory 6g) with Spark's Kafka connector
(`org.apache.spark:spark-sql-kafka-0-10_2.13`, resolved with Maven by spark_kafka_jars.py) in
`spark.jars`, and one Apache Kafka 4.x broker (KRaft, single node, tests/kafka_reference.py via
kafka_anchor.py) started as Kafka's own scripts start it: `-Xmx1G -Xms1G`, G1 with Kafka's flags,
full JIT. N records (default 4M, 100-byte values, keys, 4 partitions, bench_spark.make_records)
are written once with confluent-kafka (acks=all, idempotent) to Kafka and once with seglog's
writer to a seglog root; Kafka's log dir is copied once its checkpoints cover every record.

(a) source -> noop, Trigger.AvailableNow, startingOffsets=earliest, checked row count:
    `format("kafka")` reading the live broker vs `format("seglog")` reading the seglog root, and
    vs `format("seglog")` reading the copy of Kafka's log dir; and `format("seglog")` through the
    brokers (kafka.bootstrap.servers and no path: the files hidden, every task fetches its range
    over the Kafka protocol) from a `seglog broker` serving a copy of the seglog root, and from
    the same Apache Kafka broker. rows/s = rows / triggerExecution.
(b) sink, batch `df.write` of the same key+value DataFrame (a Parquet copy of the records):
    Spark's Kafka sink into a fresh 4-partition topic (`kafka.acks=all`, the producer's other
    settings at their defaults) vs the seglog sink in path mode (exactly-once protocol) into a
    fresh root; and the seglog sink through brokers (`kafka.bootstrap.servers`, exactly-once with
    Kafka transactions, the default) into a fresh topic of a `seglog broker` and into a fresh
    topic of the same Apache Kafka broker. rows/s = rows / wall time; each write's record count
    is checked (read_committed for the transactional writes: their markers take offsets too).

After `--warmup` rounds (1), `--runs` rounds (3) are measured; every other round runs the
scenarios in reverse order; each row shows the round with the median ratio (bench_spark.paired).
Run: python bench/bench_spark_kafka.py [--records N] [--runs R] [--warmup W] [--only source|sink]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
from bench_spark import (PARTITIONS, VALUE_SIZE, add_round_options, make_records, paired,  # noqa: E402
                         append_in_chunks, run_rounds, spark_builder)
from common import print_table  # noqa: E402
from kafka_anchor import KafkaBroker, resolve_jars  # noqa: E402
from spark_kafka_jars import resolve_spark_kafka_jars  # noqa: E402

TOPIC = "bench"
SCENARIOS = {
    "source": ("source_seglog", "source_kafka", "source_seglog_kafka_copy", "source_seglog_brokers",
               "source_seglog_through_kafka"),
    "sink": ("sink_seglog", "sink_kafka", "sink_seglog_broker", "sink_seglog_on_kafka"),
}
# Kafka's bin/kafka-server-start.sh and kafka-run-class.sh defaults.
KAFKA_JVM = ["-Xmx1G", "-Xms1G", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]
BROKER_OVERRIDES = {
    "log.segment.bytes": str(1 << 30),
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "num.io.threads": "8", "num.network.threads": "3",        # Kafka's defaults
}


class DefaultJvmKafka(KafkaBroker):
    """The reference broker, but with the JVM flags of Kafka's start scripts (the test fixture
    runs C1-only with SerialGC to start fast; a benchmark anchor must run as users run it)."""

    def start(self, timeout: float = 180) -> "DefaultJvmKafka":
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("no `java` on PATH (Kafka needs Java 17+)")
        cmd = [java, *KAFKA_JVM, f"-Dlog4j2.configurationFile={self.jars.folder / 'log4j2-broker.properties'}",
               f"-Dseglog.kafka.log={self.log_path}", "-cp", self.jars.classpath, "kafka.Kafka",
               str(self.config_path)]
        with open(self.workdir / "broker.out", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode}: {self._tail()}")
            if "Kafka Server started" in self._log_since(0) and self._port_answers():
                return self
            time.sleep(0.2)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"Kafka did not start within {timeout:.0f}s: {self._tail()}")


def cluster_id() -> str:
    """A random Kafka cluster id (kafka_reference never gives one starting with '-')."""
    from kafka_reference import random_cluster_id
    return random_cluster_id()


# ---------------------------------------------------------------------------------------- data

def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(60)


def delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})     # alive until the result is in
    admin.delete_topics([name])[name].result(60)


def kafka_records(bootstrap: str, topic: str) -> int:
    """Records in `topic` (sum of the partitions' high watermarks; the topics start at 0)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count"})
    try:
        meta = c.list_topics(topic, timeout=30).topics[topic]
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in meta.partitions)
    finally:
        c.close()


def committed_records(bootstrap: str, topic: str) -> int:
    """Records a read_committed consumer reads from `topic` (every partition, to its end)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        n, eof = 0, set()
        while len(eof) < len(parts):
            for m in c.consume(10_000, timeout=5):
                if m.error() is None:
                    n += 1
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    raise RuntimeError(f"counting {topic}: {m.error()}")
        return n
    finally:
        c.close()


def kafka_low_offsets(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0] for p in range(PARTITIONS)]
    finally:
        c.close()


def produce_to_kafka(bootstrap: str, rows: int, ts0: int) -> None:
    from confluent_kafka import Producer
    create_topic(bootstrap, TOPIC)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 20, "batch.size": 1 << 20, "compression.type": "none",
                  "queue.buffering.max.kbytes": 1 << 20})
    errors = []

    def done(err, _msg):
        if err is not None:
            errors.append(err)

    for part in range(PARTITIONS):
        for key, value, _headers, ts in make_records(rows, part, ts0):
            while True:
                try:
                    p.produce(TOPIC, value=value, key=key, partition=part, timestamp=ts, on_delivery=done)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
    if p.flush(300) != 0 or errors:
        raise RuntimeError(f"confluent-kafka could not produce every record: {errors[:3]}")
    if kafka_records(bootstrap, TOPIC) != rows:
        raise RuntimeError("Kafka holds a different number of records than produced")


def write_seglog_root(path: str, rows: int, ts0: int, storage_options: dict | None = None,
                      topic_config: dict | None = None) -> None:
    """The records as a seglog root; `topic_config` (e.g. compression.type) sets the topic's."""
    from logcore.log.log_root import LogRoot
    with LogRoot.open(path, storage_options=storage_options, create=True) as root:
        root.create_topic(TOPIC, partitions=PARTITIONS, config=topic_config)
        for part in range(PARTITIONS):
            log = root.log(TOPIC, part, writer=True)
            append_in_chunks(log, make_records(rows, part, ts0))
            log.commit()
            log.close()


def copy_kafka_log_dir(broker: KafkaBroker, dest: str, rows: int) -> None:
    """Kafka's data dir, copied (crash-consistent) once its HW checkpoint covers every record."""
    from kafka_reference import read_checkpoint
    deadline = time.monotonic() + 60
    while True:
        hw = read_checkpoint(broker.log_dirs / "replication-offset-checkpoint")
        if sum(o for (t, _p), o in hw.items() if t == TOPIC) == rows:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka's replication-offset-checkpoint does not cover {rows} records: {hw}")
        time.sleep(0.5)
    os.makedirs(dest)
    for name in os.listdir(broker.log_dirs):
        src = broker.log_dirs / name
        if name.startswith(f"{TOPIC}-") and src.is_dir():
            shutil.copytree(src, os.path.join(dest, name))
        elif src.is_file():
            shutil.copy2(src, os.path.join(dest, name))


# ------------------------------------------------------------------------------------- session

def spark_session(jars: list[Path]):
    return spark_builder("seglog-bench-kafka").config("spark.jars", ",".join(str(j) for j in jars)).getOrCreate()


# ----------------------------------------------------------------------------------- scenarios

def _offsets(value) -> dict:
    """A source's start/end offset in a progress report: {topic: {partition: offset}} (JSON)."""
    if not value:
        return {}
    doc = json.loads(value) if isinstance(value, str) else value
    if not isinstance(doc, dict):
        return {}
    return {(t, int(p)): int(o) for t, parts in doc.items() if isinstance(parts, dict)
            for p, o in parts.items()}


def _span(progress) -> int:
    """Records between the start and end offsets of the micro-batch's (only) source."""
    source = progress["sources"][0]
    start, end = _offsets(source.get("startOffset")), _offsets(source.get("endOffset"))
    return sum(o - start.get(tp, 0) for tp, o in end.items())


class Bench:
    def __init__(self, spark, broker: KafkaBroker, paths: dict[str, str], workdir: str, rows: int,
                 seglog_bootstrap: str | None = None):
        self.spark, self.broker, self.paths, self.workdir, self.rows = spark, broker, paths, workdir, rows
        self.seglog_bootstrap = seglog_bootstrap
        self.seq = 0

    def fresh(self, name: str) -> str:
        self.seq += 1
        return os.path.join(self.workdir, f"{name}-{self.seq}")

    def available_now(self, df) -> list[dict]:
        """The progress reports of `df` run into noop with Trigger.AvailableNow (a fresh checkpoint)."""
        query = (df.writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", self.fresh("ckpt")).start())
        try:
            query.awaitTermination()
        finally:
            query.stop()
        return query.recentProgress

    def run_stream(self, df) -> float:
        progress = self.available_now(df)
        # Spark's Kafka source reports numInputRows 0 into noop here (connector 4.2.0 on Spark
        # 4.3.0), so the micro-batches are those that moved the source's offsets, and the check
        # is that they cover every record (plus numInputRows where the source reports it).
        batches = [p for p in progress if _span(p) or p["numInputRows"]]
        spanned = sum(_span(p) for p in batches)
        counted = sum(p["numInputRows"] for p in batches)
        if spanned != self.rows or counted not in (0, self.rows):
            raise AssertionError(f"the query read offsets of {spanned:,} records ({counted:,} rows"
                                 f" counted), expected {self.rows:,}")
        return self.rows / (sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000)

    # (a) sources
    def source_seglog(self) -> float:
        return self.run_stream(self.spark.readStream.format("seglog").option("subscribe", TOPIC)
                               .option("startingOffsets", "earliest").load(self.paths["log"]))

    def source_seglog_kafka_copy(self) -> float:
        return self.run_stream(self.spark.readStream.format("seglog").option("subscribe", TOPIC)
                               .option("startingOffsets", "earliest").load(self.paths["kafka_copy"]))

    def _source_through(self, bootstrap: str) -> float:
        return self.run_stream(self.spark.readStream.format("seglog").option("kafka.bootstrap.servers", bootstrap)
                               .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())

    def source_seglog_brokers(self) -> float:
        return self._source_through(self.seglog_bootstrap)

    def source_seglog_through_kafka(self) -> float:
        return self._source_through(self.broker.bootstrap)

    def source_kafka(self) -> float:
        rate = self.run_stream(self.spark.readStream.format("kafka")
                               .option("kafka.bootstrap.servers", self.broker.bootstrap)
                               .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())
        # The first micro-batch's start offsets are not in its progress report: the check above
        # counts from 0, which holds only while Kafka still starts every partition at 0.
        if kafka_low_offsets(self.broker.bootstrap, TOPIC) != [0] * PARTITIONS:
            raise AssertionError("Kafka deleted records of the source topic during the run")
        return rate

    # (b) sinks
    def _input(self):
        return self.spark.read.parquet(self.paths["parquet"])

    def sink_seglog(self) -> float:
        from logcore.log.log_root import LogRoot
        root = self.fresh("sink-log")
        t0 = time.perf_counter()
        (self._input().write.format("seglog").mode("append").option("topic", TOPIC)
         .option("topic.partitions", PARTITIONS).save(root))
        rate = self.rows / (time.perf_counter() - t0)
        with LogRoot.open(root, read_only=True) as r:
            n = 0
            for p in range(PARTITIONS):
                log = r.log(TOPIC, p)
                n += log.high_watermark - log.log_start_offset
                log.close()
        shutil.rmtree(root)
        if n != self.rows:
            raise AssertionError(f"seglog sink: {n:,} records, expected {self.rows:,}")
        return rate

    def sink_kafka(self) -> float:
        topic = os.path.basename(self.fresh("sink"))
        create_topic(self.broker.bootstrap, topic)
        t0 = time.perf_counter()
        (self._input().write.format("kafka").option("kafka.bootstrap.servers", self.broker.bootstrap)
         .option("kafka.acks", "all").option("topic", topic).save())
        rate = self.rows / (time.perf_counter() - t0)
        n = kafka_records(self.broker.bootstrap, topic)
        delete_topic(self.broker.bootstrap, topic)
        if n != self.rows:
            raise AssertionError(f"Kafka sink: {n:,} records, expected {self.rows:,}")
        return rate

    def _sink_through(self, bootstrap: str, who: str) -> float:
        """The seglog sink's broker path (exactly-once: a transaction per task, committed by the
        driver) into a fresh topic of the broker at `bootstrap`."""
        topic = os.path.basename(self.fresh("sink"))
        create_topic(bootstrap, topic)
        t0 = time.perf_counter()
        (self._input().write.format("seglog").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).save())
        rate = self.rows / (time.perf_counter() - t0)
        n = committed_records(bootstrap, topic)
        delete_topic(bootstrap, topic)
        if n != self.rows:
            raise AssertionError(f"seglog sink into {who}: {n:,} records, expected {self.rows:,}")
        return rate

    def sink_seglog_broker(self) -> float:
        return self._sink_through(self.seglog_bootstrap, "a seglog broker")

    def sink_seglog_on_kafka(self) -> float:
        return self._sink_through(self.broker.bootstrap, "Apache Kafka")


def main(argv: list[str] | None = None) -> list[str]:
    import pyspark
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4_000_000)
    add_round_options(parser, 5, SCENARIOS)
    args = parser.parse_args(argv if argv is not None else [])
    parts = args.only or list(SCENARIOS)
    rows = args.records

    connector_version, spark_jars = resolve_spark_kafka_jars(pyspark.__version__)
    kafka_jars = resolve_jars()
    workdir = tempfile.mkdtemp(prefix="seglog-bench-spark-kafka-")
    broker = spark = seglog_broker = None
    try:
        broker = DefaultJvmKafka.create(kafka_jars, Path(workdir) / "kafka", BROKER_OVERRIDES,
                                        cluster_id=cluster_id()).start()
        paths = {k: os.path.join(workdir, k) for k in ("log", "kafka_copy", "parquet")}
        # Timestamps of today: with bench_spark's fixed 2023 ones Kafka would roll a segment per
        # batch (log.roll.ms counts from the first record's timestamp) and its retention
        # (7 days) would delete them under the reading queries.
        ts0 = int(time.time() * 1000) - rows
        t0 = time.perf_counter()
        produce_to_kafka(broker.bootstrap, rows, ts0)
        print(f"produced {rows:,} records to Kafka {kafka_jars.version} in {time.perf_counter() - t0:.1f} s",
              flush=True)
        t0 = time.perf_counter()
        write_seglog_root(paths["log"], rows, ts0)
        print(f"wrote them to a seglog root in {time.perf_counter() - t0:.1f} s", flush=True)
        copy_kafka_log_dir(broker, paths["kafka_copy"], rows)
        spark = spark_session(spark_jars)
        from bench_broker import start_broker
        os.makedirs(os.path.join(workdir, "seglog-broker"))
        if "source" in parts:       # the broker serves a copy of the records for the broker read path
            shutil.copytree(paths["log"], os.path.join(workdir, "seglog-broker", "logs"))
        seglog_broker, seglog_bootstrap = start_broker(os.path.join(workdir, "seglog-broker"))
        bench = Bench(spark, broker, paths, workdir, rows, seglog_bootstrap)
        if "sink" in parts:
            (spark.read.format("seglog").option("subscribe", TOPIC).load(paths["log"])
             .select("key", "value").write.parquet(paths["parquet"]))
        names = [n for part in SCENARIOS if part in parts for n in SCENARIOS[part]]
        results = run_rounds(bench, names, args.warmup, args.runs)
        how = (f"{args.runs} rounds after {args.warmup} warm-up, figures from the round with the median"
               f" ratio; Kafka {kafka_jars.version}, spark-sql-kafka-0-10 {connector_version},"
               f" pyspark {pyspark.__version__}")
        lines: list[str] = []
        rows_m = f"{rows / 1e6:g}M"
        if "source" in parts:
            lines += print_table(
                f"Spark source -> noop vs Spark's Kafka source ({rows_m} records of {VALUE_SIZE}-byte"
                f" values, {PARTITIONS} partitions, local[2], AvailableNow; {how})", [
                    ("seglog source (seglog root) vs format(\"kafka\") (live Kafka)",
                     *paired(results, "source_seglog", "source_kafka"), "rows/s"),
                    ("seglog source (copy of Kafka's log dir) vs format(\"kafka\") (live Kafka)",
                     *paired(results, "source_seglog_kafka_copy", "source_kafka"), "rows/s"),
                    ("seglog source through a seglog broker (no path: Fetch) vs format(\"kafka\")"
                     " (live Kafka)", *paired(results, "source_seglog_brokers", "source_kafka"), "rows/s"),
                    ("seglog source through Kafka's broker (no path: Fetch) vs format(\"kafka\")"
                     " (live Kafka)", *paired(results, "source_seglog_through_kafka", "source_kafka"), "rows/s"),
                ]) + [""]
        if "sink" in parts:
            lines += print_table(
                f"Spark sink vs Spark's Kafka sink ({rows_m} records key+value from Parquet, batch"
                f" df.write, {PARTITIONS} partitions, local[2]; {how})", [
                    ("seglog sink (path mode, exactly-once) vs format(\"kafka\") (acks=all)",
                     *paired(results, "sink_seglog", "sink_kafka"), "rows/s"),
                    ("seglog sink (broker path, exactly-once) into a seglog broker vs format(\"kafka\")"
                     " into Kafka (acks=all)", *paired(results, "sink_seglog_broker", "sink_kafka"), "rows/s"),
                    ("seglog sink (broker path, exactly-once) into Kafka vs format(\"kafka\") into"
                     " Kafka (acks=all)", *paired(results, "sink_seglog_on_kafka", "sink_kafka"), "rows/s"),
                ]) + [""]
        return lines
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        if seglog_broker is not None:
            seglog_broker.terminate()
            seglog_broker.wait(60)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
