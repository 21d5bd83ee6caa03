"""End-to-end latency of a Spark streaming pipeline on a 3-broker cluster: seglog vs Apache Kafka.

The pipeline a streaming user runs: a Spark query (local[2]) reads topic `in` through the brokers
and writes every record back to topic `out` through them; a producer sends to `in` at a steady
`--rate` (acks=all), a consumer (read_committed) polls `out`. A record's latency is the time from
its acknowledgment to the producer until the consumer holds its copy from `out`; p50, p99 and the
maximum over `--seconds` of sending, after `--warmup` seconds that are not counted. Beside it, the
query's micro-batches: trigger to commit (`triggerExecution` of each progress report).

- seglog: a 3-broker seglog cluster on ZooKeeper (bench_cluster.SeglogClusterRun), the query with
  `format("seglog")` for source and sink (`kafka.bootstrap.servers`, no path: tasks fetch through
  the brokers; the sink writes through them, exactly-once with Kafka transactions).
- seglog-alo: the same with the sink's `deliveryGuarantee=at-least-once` (idempotent producers, no
  transaction: the guarantee Spark's Kafka sink gives, so the like-for-like row against it).
- anchor: a 3-node Apache Kafka KRaft cluster (bench_cluster.KafkaClusterRun), the same query with
  Spark's own Kafka source and sink (`format("kafka")`, spark-sql-kafka-0-10 from Maven).

Both topics: 4 partitions, RF=3, min.insync.replicas=2. The systems run one after the other
(never side by side: the machine has 2 cores); with `--rounds 2` the order is reversed in the
second round. Every acknowledged record must arrive exactly once; missing and duplicate counts
are printed.

    python bench/bench_stream_latency.py [--rate 200] [--seconds 30] [--warmup 10] [--rounds 1]
        [--only seglog|seglog-alo|kafka] [--sink-steps BATCHES]

`--sink-steps N` measures the seglog sink alone instead, without Spark, on the same 3-broker
cluster: N micro-batches of 4 tasks of 12 rows (what a task of the pipeline above writes), each
task's steps called as Spark calls them (`broker_sink.produce_task`, then the driver's
`commit_batch`), one after the other, each batch starting as soon as the previous one's commit
returned (as Spark starts the next micro-batch); the medians of each step from the sink's DEBUG
timings, and of a whole batch: its tasks, its commit, and (exactly-once, timed by a thread
beside) until read_committed readers see it (every partition's last stable offset at the end
its tasks produced to). Both delivery guarantees.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
from bench_cluster import KafkaClusterRun, SeglogClusterRun, Unavailable  # noqa: E402
from bench_spark_kafka import spark_session  # noqa: E402
from common import print_table  # noqa: E402
from spark_kafka_jars import resolve_spark_kafka_jars  # noqa: E402

PARTITIONS = 4
TOPIC_CONFIG = {"min.insync.replicas": "2"}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Receiver(threading.Thread):
    """Polls `out` from its end offsets (taken before anything is sent) and notes when each
    sequence number arrives."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        from confluent_kafka import Consumer, TopicPartition
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{time.time_ns()}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "fetch.wait.max.ms": 10, "fetch.min.bytes": 1})
        parts = []
        for p in range(PARTITIONS):
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            parts.append(TopicPartition(topic, p, high))
        self.consumer.assign(parts)
        self.arrived: dict[int, float] = {}
        self.duplicates = 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            msg = self.consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            now = time.monotonic()
            seq = int(msg.value())
            if seq in self.arrived:
                self.duplicates += 1
            else:
                self.arrived[seq] = now
        self.consumer.close()


def send_paced(bootstrap: str, topic: str, rate: int, seconds: float, first: int = 0) -> dict[int, float]:
    """Send `rate` records/s for `seconds`, sequence numbers from `first`; the acknowledgment
    time of each."""
    from confluent_kafka import Producer
    acked: dict[int, float] = {}
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            acked[int(msg.value())] = time.monotonic()

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": True})
    start = time.monotonic()
    n = int(rate * seconds)
    for i, seq in enumerate(range(first, first + n)):
        due = start + i / rate
        while True:
            wait = due - time.monotonic()
            if wait <= 0:
                break
            producer.poll(min(wait, 0.005))
        producer.produce(topic, key=b"%d" % (seq % 1000), value=b"%d" % seq, on_delivery=on_delivery)
        producer.poll(0)
    if producer.flush(60) != 0 or errors:
        raise RuntimeError(f"the producer failed: {errors[:3]} ({len(producer)} not delivered)")
    return acked


# The systems measured: (cluster, format, sink options).
SYSTEMS = {"seglog": ("seglog", "seglog", {}),
           "seglog-alo": ("seglog", "seglog", {"deliveryGuarantee": "at-least-once"}),
           "kafka": ("kafka", "kafka", {})}


def run_pipeline(spark, cluster, fmt: str, workdir: Path, args, label: str,
                 sink_options: dict[str, str]) -> dict:
    for name in ("in", "out"):
        cluster.create_topic(name, PARTITIONS, 3, TOPIC_CONFIG)
    bs = cluster.bootstrap
    reader = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bs)
              .option("subscribe", "in").option("startingOffsets", "latest"))
    if fmt == "kafka":
        reader = reader.option("kafka.fetch.max.wait.ms", "10")
    query = (reader.load().selectExpr("key", "value").writeStream.format(fmt)
             .option("kafka.bootstrap.servers", bs).option("topic", "out").options(**sink_options)
             .option("checkpointLocation", str(workdir / f"checkpoint-{label}"))
             .queryName(f"latency-{label}").start())
    try:
        deadline = time.monotonic() + 120
        while query.lastProgress is None:           # the query planned its first batch
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"{label}: the query did not start: {query.exception()}")
            time.sleep(0.2)
        receiver = Receiver(bs, "out")
        receiver.start()
        send_paced(bs, "in", args.rate, args.warmup)
        first_counted = int(args.rate * args.warmup)
        progress_from = len(query.recentProgress)
        t0 = time.monotonic()
        acked = send_paced(bs, "in", args.rate, args.seconds, first=first_counted)
        # Everything acknowledged is due: wait for the tail (at most 60 s).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(s in receiver.arrived for s in acked):
            time.sleep(0.1)
        receiver.stop_flag.set()
        receiver.join(30)
        progress = [p for p in query.recentProgress[progress_from:] if p["numInputRows"] > 0]
    finally:
        query.stop()
    latencies = [(receiver.arrived[s] - t) * 1000 for s, t in acked.items() if s in receiver.arrived]
    triggers = [p["durationMs"].get("triggerExecution", 0) for p in progress]
    # Where a micro-batch's time goes (Spark's own phases: latestOffset, addBatch, walCommit, ...).
    phases = sorted({k for p in progress for k in p["durationMs"]})
    breakdown = {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) for k in phases}
    return {"p50": _percentile(latencies, 0.5), "p99": _percentile(latencies, 0.99),
            "max": max(latencies, default=float("nan")), "records": len(acked),
            "missing": sum(1 for s in acked if s not in receiver.arrived), "duplicates": receiver.duplicates,
            "batch_p50": _percentile(triggers, 0.5), "batch_p99": _percentile(triggers, 0.99),
            "batches": len(triggers), "phases": breakdown, "cpu_s": cluster.cpu(), "rss_mb": cluster.rss_mb(),
            "elapsed": time.monotonic() - t0}


def measure(system: str, spark, workdir: Path, args, round_no: int) -> dict:
    wd = workdir / f"{system}-{round_no}"
    wd.mkdir(parents=True)
    kind, fmt, sink_options = SYSTEMS[system]
    cluster = SeglogClusterRun(wd) if kind == "seglog" else KafkaClusterRun(wd)
    try:
        return run_pipeline(spark, cluster, fmt, wd, args, f"{system}-{round_no}", sink_options)
    finally:
        cluster.close()


class _StepTimings(logging.Handler):
    """Collects the numbers of the sink's DEBUG timing lines (see broker_sink.produce_task)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.tasks: list[list[float]] = []
        self.commits: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("seglog sink task"):
            self.tasks.append([float(v) for v in record.args[3:]])
        elif "EndTxn of" in record.msg:
            self.commits.append(float(record.args[2]))


class _Visibility(threading.Thread):
    """Times each committed batch until read_committed readers see it (every partition's last
    stable offset at the end its tasks produced to), while the next batch already runs, as in
    a Spark query."""

    def __init__(self, bootstrap: str, tps: list):
        super().__init__(daemon=True)
        import queue
        from pyspark_seglog.broker_client import BrokerClient
        self.client = BrokerClient(bootstrap)
        self.tps = tps
        self.pending: queue.Queue = queue.Queue()
        self.times: list[float] = []
        self.start()

    def watch(self, committing: float, produced: dict, counted: bool) -> None:
        self.pending.put((committing, produced, counted))

    def run(self) -> None:
        while True:
            item = self.pending.get()
            if item is None:
                return
            committing, produced, counted = item
            while True:
                stable = self.client.list_offsets(self.tps, isolation="read_committed")
                if all(stable[tp] >= produced[tp] for tp in self.tps):
                    break
                time.sleep(0.001)
            if counted:
                self.times.append((time.perf_counter() - committing) * 1000)

    def close(self) -> list[float]:
        self.pending.put(None)
        self.join(60)
        self.client.close()
        return self.times


def sink_steps(batches: int) -> list[str]:
    import pyarrow as pa
    from pyspark_seglog import broker_sink
    from pyspark_seglog.broker_client import BrokerClient
    from pyspark_seglog.sink_options import parse_sink_options
    timings = _StepTimings()
    sink_logger = logging.getLogger(broker_sink.__name__)
    sink_logger.addHandler(timings)
    sink_logger.setLevel(logging.DEBUG)
    workdir = Path(tempfile.mkdtemp(prefix="seglog-bench-sink-steps-"))
    cluster = SeglogClusterRun(workdir)
    rows: list[tuple[str, float]] = []
    try:
        for guarantee in ("exactly-once", "at-least-once"):
            cluster.create_topic(f"out-{guarantee}", PARTITIONS, 3, TOPIC_CONFIG)
            tps = [(f"out-{guarantee}", p) for p in range(PARTITIONS)]
            opts = parse_sink_options({"kafka.bootstrap.servers": cluster.bootstrap, "topic": tps[0][0],
                                       "deliveryGuarantee": guarantee})
            timings.tasks.clear()
            timings.commits.clear()
            whole, readable = [], []
            seq = 0
            visible = _Visibility(cluster.bootstrap, tps) if guarantee == "exactly-once" else None
            with BrokerClient(cluster.bootstrap) as ends:
                for batch in range(batches + 3):          # the first 3 warm the clients up
                    started = time.perf_counter()
                    messages = []
                    for task in range(4):
                        ids = range(seq, seq + 12)
                        seq += 12
                        data = pa.record_batch([pa.array([b"%d" % i for i in ids]), pa.array([b"%d" % i for i in ids])],
                                               names=["key", "value"])
                        messages.append(broker_sink.produce_task(opts, {"key": "key", "value": "value"}, iter([data]),
                                                                 task, 0, f"steps-{guarantee}", batch, True))
                    committing = time.perf_counter()
                    produced = ends.list_offsets(tps, isolation="read_uncommitted") if visible else None
                    broker_sink.commit_batch(opts, messages, batch)
                    if visible is not None:
                        visible.watch(committing, produced, counted=batch >= 3)
                    if batch >= 3:
                        whole.append((committing - started) * 1000)
            if visible is not None:
                readable = visible.close()
            tasks = timings.tasks[12:]
            label = f"sink {guarantee}"
            if guarantee == "exactly-once" and tasks:          # (a tree without the DEBUG timings: none)
                for i, step in enumerate(("InitProducerId", "OffsetFetch (replay check)", "rows routed and encoded",
                                          "AddPartitionsToTxn + Produce (+ the batch record alongside)")):
                    rows.append((f"{label}: a task's {step}, median", statistics.median(t[i] for t in tasks)))
                rows.append((f"{label}: a task's InitProducerId, p90 (the first tasks of a batch can wait for"
                             " the previous commit)", _percentile([t[0] for t in tasks], 0.9)))
                rows.append((f"{label}: the driver's EndTxn of 4 tasks, median",
                             statistics.median(timings.commits[3:])))
            if guarantee == "exactly-once":
                rows.append((f"{label}: commit start -> read_committed sees the batch, median",
                             statistics.median(readable)))
                rows.append((f"{label}: commit start -> read_committed sees the batch, p90",
                             _percentile(readable, 0.9)))
            rows.append((f"{label}: a batch's 4 tasks one after the other, median", statistics.median(whole)))
            rows.append((f"{label}: a batch's 4 tasks one after the other, p90", _percentile(whole, 0.9)))
    finally:
        sink_logger.removeHandler(timings)
        cluster.close()
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    lines = [f"### The seglog sink's steps without Spark on 3 brokers, RF=3 ({batches} batches of 4 tasks x 12"
             f" rows, {PARTITIONS} partitions)", "", "| step | ms |", "|---|---:|"]
    lines += [f"| {what} | {ms:,.1f} |" for what, ms in rows]
    print("\n".join(lines) + "\n", flush=True)
    return lines


def main(argv: list[str] | None = None) -> list[str]:
    import pyspark
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=200, help="records/s sent to `in`")
    parser.add_argument("--seconds", type=float, default=30, help="seconds of sending that are counted")
    parser.add_argument("--warmup", type=float, default=10, help="seconds of sending first, not counted")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sink-steps", type=int, metavar="BATCHES",
                        help="measure the seglog sink's steps alone (no Spark, no Kafka) over BATCHES batches")
    parser.add_argument("--only", choices=tuple(SYSTEMS), action="append",
                        help="measure only these (repeatable); default: all three")
    args = parser.parse_args(argv if argv is not None else [])
    if args.sink_steps:
        return sink_steps(args.sink_steps)
    systems = args.only or list(SYSTEMS)
    connector_version, jars = resolve_spark_kafka_jars(pyspark.__version__)
    workdir = Path(tempfile.mkdtemp(prefix="seglog-bench-latency-"))
    spark = spark_session(jars)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    results: dict[str, list[dict]] = {s: [] for s in systems}
    skipped: dict[str, str] = {}
    try:
        for round_no in range(args.rounds):
            for system in (systems if round_no % 2 == 0 else systems[::-1]):
                if system in skipped:
                    continue
                try:
                    r = measure(system, spark, workdir, args, round_no)
                except Unavailable as exc:
                    skipped[system] = str(exc)
                    print(f"  {system}: not measured: {exc}", flush=True)
                    continue
                results[system].append(r)
                print(f"  round {round_no + 1} {system}: p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms,"
                      f" max {r['max']:.0f} ms; batches p50 {r['batch_p50']:.0f} ms p99 {r['batch_p99']:.0f} ms"
                      f" ({r['batches']}); {r['records']} records, {r['missing']} missing,"
                      f" {r['duplicates']} duplicated; batch phases (median ms) {r['phases']}", flush=True)
    finally:
        spark.stop()
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)

    def median(system: str, key: str) -> float:
        values = [r[key] for r in results.get(system, [])]
        return statistics.median(values) if values else float("nan")

    def spread(system: str, key: str) -> str:
        values = [r[key] for r in results.get(system, [])]
        return f"rounds {', '.join(f'{v:.0f}' for v in values)}" if values else skipped.get(system, "")

    rows = []
    sinks = {"seglog": "exactly-once", "seglog-alo": "at-least-once"}
    for variant in [v for v in sinks if v in systems]:
        for key, what in (("p50", "ack -> readable in `out`, p50"), ("p99", "ack -> readable in `out`, p99"),
                          ("max", "ack -> readable in `out`, max"),
                          ("batch_p50", "micro-batch trigger -> commit, p50"),
                          ("batch_p99", "micro-batch trigger -> commit, p99")):
            s, k = median(variant, key), median("kafka", key)
            rows.append((f"{what}, seglog sink {sinks[variant]} (ms; seglog {spread(variant, key)};"
                         f" Kafka {spread('kafka', key)})", s, k, "ms"))
    lost = sum(r["missing"] + r["duplicates"] for rs in results.values() for r in rs)
    title = (f"Streaming pipeline latency on 3 brokers, RF=3 ({args.rate} records/s for {args.seconds:g} s"
             f" after {args.warmup:g} s, {PARTITIONS} partitions, local[2], default trigger; format(\"seglog\")"
             f" through the brokers vs Spark's Kafka connector {connector_version} on Apache Kafka;"
             f" {args.rounds} round(s); missing or duplicated records over all runs: {lost}; a time: a ratio"
             f" below 1 is seglog faster)")
    return print_table(title, rows)


if __name__ == "__main__":
    main(sys.argv[1:])
