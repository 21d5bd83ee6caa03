"""Spark connector throughput and per-micro-batch overhead, each figure beside its anchor.

One SparkSession (local[2], driver memory 6g). The same N records (default 4M, ~100-byte values,
4 partitions) are held three ways: a seglog log root, Parquet files, Arrow IPC files. Every
scenario runs once per round, a figure right before its anchors (every other round in reverse
order, so that none always runs first while the JVM still compiles); after `--warmup` rounds (1),
`--runs` rounds (3) are measured, and each table row shows the figure and anchor of the round
whose ratio is the median one (a paired measurement: steadier than separate medians when the
machine's load varies).

(a) source -> noop, Trigger.AvailableNow, one micro-batch holding every record:
    seglog source vs a Python source that only yields prebuilt Arrow batches of the Kafka schema
    (the Python Data Source ceiling, bench/spark_anchors.py) and vs Spark's Parquet file-stream
    source.
(b) sink, input = the Parquet copy (key, value): seglog sink, streaming (one micro-batch) and
    batch (df.write), vs an Arrow writer that only counts its input (the Python sink ceiling) and
    vs Spark's Parquet writer.
(c) per-micro-batch overhead of a tiny batch (one record per partition, 4 tasks): median
    triggerExecution over 12 back-to-back micro-batches (first two dropped), seglog source ->
    noop vs rate-micro-batch -> noop (a JVM source) and vs a trivial Python stream source
    (bench/spark_anchors.py: what Spark's machinery costs any Python source).

Stream rows/s = rows / triggerExecution of the micro-batch (which includes the sink's commit);
batch rows/s = rows / wall time of df.write. Every run checks that all N rows arrived.
Run: python bench/bench_spark.py [--rows N] [--runs R] [--warmup W] [--only source|sink|overhead]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
from common import print_table  # noqa: E402

TOPIC = "bench"
PARTITIONS = 4
VALUE_SIZE = 100
IPC_BATCH_ROWS = 8192
APPEND_CHUNK = 150          # records per RecordBatch in the prepared log (~16 KiB batches)
TINY_BATCHES = 12


# ---------------------------------------------------------------------------------------- data

def make_records(n: int, partition: int, ts0: int = 1_700_000_000_000):
    """Deterministic click-event records (key, value, headers, timestamp_ms) with ~100-byte values."""
    events = (b"click", b"view", b"scroll", b"purchase", b"login")
    for i in range(partition, n, PARTITIONS):
        value = b'{"user":%d,"event":"%s","item":%d,"ts":%d,"pad":"' % (
            (i * 7919) % 10_000_000, events[i % 5], (i * 31) % 100_000, ts0 + i)
        yield (b"user-%d" % (i % 1000), (value + b"x" * VALUE_SIZE)[:VALUE_SIZE - 2] + b'"}', (), ts0 + i)


def prepare(workdir: str, rows: int) -> dict[str, str]:
    """The same records as a seglog root, Parquet files and Arrow IPC files (one file per partition)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from logcore.log.log_root import LogRoot
    from logcore.records import batches_to_arrow
    from pyspark_seglog.schema import ARROW_SCHEMA

    paths = {k: os.path.join(workdir, k) for k in ("log", "parquet", "arrow", "tiny")}
    for k in ("parquet", "arrow"):
        os.makedirs(paths[k])
    t0 = time.perf_counter()
    with LogRoot.open(paths["log"], create=True) as root:
        root.create_topic(TOPIC, partitions=PARTITIONS)
        for p in range(PARTITIONS):
            log = root.log(TOPIC, p, writer=True)
            append_in_chunks(log, make_records(rows, p))
            log.commit()
            # The same records, decoded from the log itself, for the Parquet and Arrow copies.
            parts, offset = [], 0
            while offset < log.high_watermark:
                fetched = log.read(offset, 8 << 20)
                decoded = batches_to_arrow(fetched.data, min_offset=offset, max_offset=log.high_watermark)
                parts.append(decoded)
                offset = decoded.column("offset")[-1].as_py() + 1
            table = pa.Table.from_batches(parts)
            n = table.num_rows
            table = pa.table({
                "key": table["key"], "value": table["value"],
                "topic": pa.array([TOPIC] * n, pa.string()),
                "partition": pa.array([p] * n, pa.int32()),
                "offset": table["offset"], "timestamp": table["timestamp"],
                "timestampType": table["timestampType"]}, schema=ARROW_SCHEMA)
            pq.write_table(table, os.path.join(paths["parquet"], f"part-{p}.parquet"))
            with pa.OSFile(os.path.join(paths["arrow"], f"part-{p}.arrow"), "wb") as sink:
                with pa.ipc.new_file(sink, ARROW_SCHEMA) as writer:
                    for batch in table.to_batches(max_chunksize=IPC_BATCH_ROWS):
                        writer.write_batch(batch)
            log.close()
        # A tiny topic for the per-micro-batch overhead: TINY_BATCHES records per partition.
        root.create_topic("tiny", partitions=PARTITIONS)
        for p in range(PARTITIONS):
            log = root.log("tiny", p, writer=True)
            for i in range(TINY_BATCHES):
                log.append_records([(b"k", b"v%d" % i, (), None)])
            log.commit()
            log.close()
    print(f"prepared {rows:,} records (log, Parquet, Arrow IPC) in {time.perf_counter() - t0:.1f} s",
          flush=True)
    return paths


# ------------------------------------------------------------------------------------- session

def append_in_chunks(log, records) -> None:
    """Append `records` in batches of APPEND_CHUNK (the last one shorter)."""
    chunk = []
    for record in records:
        chunk.append(record)
        if len(chunk) == APPEND_CHUNK:
            log.append_records(chunk)
            chunk = []
    if chunk:
        log.append_records(chunk)


def spark_builder(app: str):
    """A local[2] SparkSession builder with the settings every Spark benchmark runs with (the
    workers' Python and path set up); the caller adds its own and calls getOrCreate()."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers unpickle the anchor data sources by reference (bench/ on their path) and find
    # format("seglog") by listing top-level pyspark_* modules (the package's folder on their path,
    # which an editable install does not provide by itself).
    import pyspark_seglog
    connector = os.path.dirname(os.path.dirname(os.path.abspath(pyspark_seglog.__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (BENCH_DIR, connector, os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName(app)
            .config("spark.driver.memory", "6g")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.log.level", "ERROR")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC"))


def spark_session():
    spark = spark_builder("seglog-bench").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from spark_anchors import ArrowCeilingDataSource, CountingSinkDataSource, TinyPythonSource
    spark.dataSource.register(ArrowCeilingDataSource)
    spark.dataSource.register(CountingSinkDataSource)
    spark.dataSource.register(TinyPythonSource)
    return spark


def add_round_options(parser, runs: int, scenarios) -> None:
    """--runs, --warmup and --only (parts of `scenarios`, repeatable) of the Spark benchmarks."""
    parser.add_argument("--runs", type=int, default=runs, help="measured rounds (after the warm-up ones)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up rounds (not reported)")
    parser.add_argument("--only", choices=tuple(scenarios), action="append",
                        help="run only these parts (repeatable)")


def run_rounds(bench, names: list[str], warmup: int, runs: int, unit=lambda name: "rows/s") -> dict:
    """{name: [figure of each measured round]} of `bench.<name>()`, each round after the warm-up
    ones printed. Every other round runs in reverse order, so that no figure always runs before
    its anchors: the JVM is still compiling hot code during the first rounds, which slows
    whichever query runs first in a round."""
    results: dict[str, list[float]] = {n: [] for n in names}
    for round_no in range(warmup + runs):
        label = "warm-up" if round_no < warmup else f"run {round_no - warmup + 1}"
        for name in (names if round_no % 2 == 0 else names[::-1]):
            figure = getattr(bench, name)()
            print(f"  {label}: {name} {figure:,.0f} {unit(name)}", flush=True)
            if round_no >= warmup:
                results[name].append(figure)
    return results


KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
             "timestamp timestamp, timestampType int")


# ----------------------------------------------------------------------------------- scenarios

class Bench:
    def __init__(self, spark, paths: dict[str, str], workdir: str, rows: int):
        self.spark, self.paths, self.workdir, self.rows = spark, paths, workdir, rows
        self.seq = 0

    def fresh(self, name: str) -> str:
        self.seq += 1
        return os.path.join(self.workdir, f"{name}-{self.seq}")

    def run_stream(self, df, fmt: str, options: dict, path: str | None = None) -> float:
        """One AvailableNow run; rows/s over the micro-batches' triggerExecution; checks the row count."""
        writer = df.writeStream.format(fmt).trigger(availableNow=True)
        for k, v in {"checkpointLocation": self.fresh("ckpt"), **options}.items():
            writer = writer.option(k, v)
        query = writer.start(path) if path else writer.start()
        try:
            query.awaitTermination()
        finally:
            query.stop()
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        got = sum(p["numInputRows"] for p in batches)
        if got != self.rows:
            raise AssertionError(f"{fmt}: the query read {got:,} rows, expected {self.rows:,}")
        ms = sum(p["durationMs"]["triggerExecution"] for p in batches)
        return self.rows / (ms / 1000)

    # (a) sources
    def source_seglog(self) -> float:
        df = (self.spark.readStream.format("seglog").option("subscribe", TOPIC)
              .option("startingOffsets", "earliest").load(self.paths["log"]))
        return self.run_stream(df, "noop", {})

    def source_ceiling(self) -> float:
        df = self.spark.readStream.format("bench_arrow_ceiling").load(self.paths["arrow"])
        return self.run_stream(df, "noop", {})

    def source_parquet(self) -> float:
        df = self.spark.readStream.schema(KAFKA_DDL).parquet(self.paths["parquet"])
        return self.run_stream(df, "noop", {})

    # (b) sinks
    def _stream_input(self):
        return self.spark.readStream.schema(KAFKA_DDL).parquet(self.paths["parquet"]).select("key", "value")

    def _batch_input(self):
        return self.spark.read.parquet(self.paths["parquet"]).select("key", "value")

    def _check_log(self, root: str, topic: str) -> None:
        from logcore.log.log_root import LogRoot
        with LogRoot.open(root, read_only=True) as r:
            n = 0
            for p in range(r.describe_topic(topic).partitions):
                log = r.log(topic, p)
                n += log.high_watermark - log.log_start_offset
                log.close()
        if n != self.rows:
            raise AssertionError(f"seglog sink: {n:,} records in {topic}, expected {self.rows:,}")

    def _check_counts(self, result: str) -> None:
        from spark_anchors import read_counts
        n = sum(c["rows"] for c in read_counts(result))
        if n != self.rows:
            raise AssertionError(f"counting sink: commits saw {n:,} rows, expected {self.rows:,}")

    def sink_stream_seglog(self) -> float:
        root = self.fresh("sink-log")
        rate = self.run_stream(self._stream_input(), "seglog",
                               {"topic": TOPIC, "topic.partitions": PARTITIONS}, root)
        self._check_log(root, TOPIC)
        shutil.rmtree(root)
        return rate

    def sink_stream_ceiling(self) -> float:
        result = self.fresh("counts") + ".jsonl"
        rate = self.run_stream(self._stream_input(), "bench_count_sink", {"result": result})
        self._check_counts(result)
        return rate

    def sink_stream_parquet(self) -> float:
        out = self.fresh("sink-parquet")
        rate = self.run_stream(self._stream_input(), "parquet", {"path": out})
        shutil.rmtree(out)
        return rate

    def _timed_write(self, writer, path: str | None = None) -> float:
        t0 = time.perf_counter()
        writer.save(path) if path else writer.save()
        return self.rows / (time.perf_counter() - t0)

    def sink_batch_seglog(self) -> float:
        root = self.fresh("sink-log")
        rate = self._timed_write(self._batch_input().write.format("seglog").mode("append")
                                 .option("topic", TOPIC).option("topic.partitions", PARTITIONS), root)
        self._check_log(root, TOPIC)
        shutil.rmtree(root)
        return rate

    def sink_batch_ceiling(self) -> float:
        result = self.fresh("counts") + ".jsonl"
        rate = self._timed_write(self._batch_input().write.format("bench_count_sink").mode("append")
                                 .option("result", result))
        self._check_counts(result)
        return rate

    def sink_batch_parquet(self) -> float:
        out = self.fresh("sink-parquet")
        rate = self._timed_write(self._batch_input().write.mode("overwrite").format("parquet"), out)
        shutil.rmtree(out)
        return rate

    # (c) per-micro-batch overhead
    def tiny_batches(self, df) -> float:
        """Median triggerExecution (ms) of back-to-back one-record-per-partition micro-batches."""
        query = (df.writeStream.format("noop").option("checkpointLocation", self.fresh("ckpt"))
                 .start())
        try:
            deadline = time.monotonic() + 180
            while True:
                batches = [p for p in query.recentProgress if p["numInputRows"]]
                if len(batches) >= TINY_BATCHES:
                    break
                if query.exception() is not None:
                    raise query.exception()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {len(batches)} micro-batches with data in 180 s")
                time.sleep(0.2)
        finally:
            # Stopping an endless query interrupts the micro-batch in flight, which Spark logs
            # as an aborted write at ERROR level: expected here, so not printed.
            # The killed tasks log after stop() returns: stay quiet until no stage is running.
            sc = self.spark.sparkContext
            sc.setLogLevel("OFF")
            try:
                query.stop()
                quiet_until = time.monotonic() + 10
                while sc.statusTracker().getActiveStageIds() and time.monotonic() < quiet_until:
                    time.sleep(0.1)
                time.sleep(0.5)
            finally:
                sc.setLogLevel("ERROR")
        kept = batches[2:TINY_BATCHES]
        parts = sorted({k for p in kept for k in p["durationMs"] if k != "triggerExecution"})
        print("    median ms: " + ", ".join(
            f"{k} {statistics.median(p['durationMs'].get(k, 0) for p in kept):g}" for k in parts), flush=True)
        return statistics.median(p["durationMs"]["triggerExecution"] for p in kept)

    def tiny_seglog(self) -> float:
        df = (self.spark.readStream.format("seglog").option("subscribe", "tiny")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", PARTITIONS)
              .load(self.paths["log"]))
        return self.tiny_batches(df)

    def tiny_python(self) -> float:
        df = self.spark.readStream.format("bench_tiny_python").option("partitions", PARTITIONS).load()
        return self.tiny_batches(df)

    def tiny_rate(self) -> float:
        df = (self.spark.readStream.format("rate-micro-batch").option("rowsPerBatch", PARTITIONS)
              .option("numPartitions", PARTITIONS).load())
        return self.tiny_batches(df)


SCENARIOS = {
    "source": ["source_seglog", "source_ceiling", "source_parquet"],
    "sink": ["sink_stream_seglog", "sink_stream_ceiling", "sink_stream_parquet",
             "sink_batch_seglog", "sink_batch_ceiling", "sink_batch_parquet"],
    "overhead": ["tiny_seglog", "tiny_python", "tiny_rate"],
}


def paired(results: dict[str, list[float]], name: str, anchor: str) -> tuple[float, float]:
    """(figure, anchor) from the round whose ratio is the median one.

    A figure and its anchor run back to back in every round, so their ratio is steadier than
    either figure when the machine's load changes between rounds; reporting both from one round
    keeps the printed ratio equal to figure / anchor.
    """
    pairs = sorted(zip(results[name], results[anchor]), key=lambda fa: fa[0] / fa[1])
    return pairs[(len(pairs) - 1) // 2]


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    add_round_options(parser, 3, SCENARIOS)
    args = parser.parse_args(argv if argv is not None else [])
    parts = args.only or list(SCENARIOS)

    workdir = tempfile.mkdtemp(prefix="seglog-bench-spark-")
    spark = None
    try:
        paths = prepare(workdir, args.rows)
        t0 = time.perf_counter()
        spark = spark_session()
        print(f"SparkSession in {time.perf_counter() - t0:.1f} s", flush=True)
        bench = Bench(spark, paths, workdir, args.rows)
        names = [n for part in SCENARIOS if part in parts for n in SCENARIOS[part]]
        results = run_rounds(bench, names, args.warmup, args.runs,
                             unit=lambda name: "ms" if name.startswith("tiny") else "rows/s")
        lines: list[str] = []
        rows_m = f"{args.rows / 1e6:g}M"
        how = f"{args.runs} rounds after {args.warmup} warm-up, figures from the round with the median ratio"
        if "source" in parts:
            lines += print_table(
                f"Spark source -> noop ({rows_m} records of {VALUE_SIZE}-byte values, {PARTITIONS}"
                f" partitions, local[2], one AvailableNow micro-batch; {how})", [
                    ("seglog source vs Python Arrow source ceiling",
                     *paired(results, "source_seglog", "source_ceiling"), "rows/s"),
                    ("seglog source vs Parquet file-stream source",
                     *paired(results, "source_seglog", "source_parquet"), "rows/s"),
                    ("(anchors) Python Arrow ceiling vs Parquet",
                     *paired(results, "source_ceiling", "source_parquet"), "rows/s"),
                ]) + [""]
        if "sink" in parts:
            lines += print_table(
                f"Spark sink, Parquet input of key+value ({rows_m} records, {PARTITIONS} target"
                f" partitions, local[2]; {how})", [
                    ("stream: seglog sink vs counting Arrow writer",
                     *paired(results, "sink_stream_seglog", "sink_stream_ceiling"), "rows/s"),
                    ("stream: seglog sink vs Parquet writer",
                     *paired(results, "sink_stream_seglog", "sink_stream_parquet"), "rows/s"),
                    ("batch: seglog sink vs counting Arrow writer",
                     *paired(results, "sink_batch_seglog", "sink_batch_ceiling"), "rows/s"),
                    ("batch: seglog sink vs Parquet writer",
                     *paired(results, "sink_batch_seglog", "sink_batch_parquet"), "rows/s"),
                    ("(anchors) stream: counting writer vs Parquet",
                     *paired(results, "sink_stream_ceiling", "sink_stream_parquet"), "rows/s"),
                    ("(anchors) batch: counting writer vs Parquet",
                     *paired(results, "sink_batch_ceiling", "sink_batch_parquet"), "rows/s"),
                ]) + [""]
        if "overhead" in parts:
            lines += print_table(
                f"Per-micro-batch overhead ({PARTITIONS} tasks, one record per partition, median"
                f" triggerExecution of batches 3..{TINY_BATCHES}; {how})", [
                    ("seglog source -> noop vs rate-micro-batch -> noop",
                     *paired(results, "tiny_seglog", "tiny_rate"), "ms"),
                    ("seglog source -> noop vs trivial Python source -> noop",
                     *paired(results, "tiny_seglog", "tiny_python"), "ms"),
                    ("(anchors) trivial Python source vs rate-micro-batch",
                     *paired(results, "tiny_python", "tiny_rate"), "ms"),
                ])
        return lines
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
