"""Spark on S3 as a user runs it: `format("seglog")` on an S3 root against Spark's own Parquet
reader and writer on the same S3 server (`s3a://`), and against Spark's Kafka source and sink on
Apache Kafka (issue 31 item 3).

The S3 server is SeaweedFS (`weed mini` on 127.0.0.1, tests/conftest.py) with its Prometheus
endpoint on, so that every S3 request is counted by the server, per bucket and type, the same way
for both sides. `s3a://` is hadoop-aws and the AWS SDK bundle it depends on, resolved with Maven
(spark_kafka_jars.resolve_maven_jars) at the version of the Hadoop client that pyspark ships.
Spark's Kafka connector, the Kafka broker (Kafka's start-script JVM flags) and the Kafka anchors
themselves are bench_spark_kafka.py's.

N records (default 1M, 100-byte values and keys, 4 partitions, bench_spark.make_records) are
written once to Kafka (confluent-kafka, acks=all) and once with seglog's writer to an S3 root; the
Parquet copy (Kafka's schema, written by Spark through s3a) is made from that root.

(a) source -> noop, Trigger.AvailableNow, local checkpoint: `format("seglog")` on the S3 root vs
    Spark's Parquet file stream source on `s3a://` vs `format("kafka")` on the live broker;
    rows/s = rows / triggerExecution. A third anchor is the floor of any Python data source:
    bench_spark's Arrow ceiling (a Python source that only yields prebuilt Arrow batches of the
    same records, from local Arrow IPC files), so that what Spark's Python data source path costs
    is told apart from what seglog's reads cost. The seglog source also reads a second root holding the same
    records in lz4 batches (topic compression.type=lz4, as a Kafka producer with
    compression.type=lz4 writes them): Parquet's pages are snappy-compressed, and the S3 server
    moves about five times their bytes for uncompressed batches.
(b) sink, batch `df.write` of the same key+value DataFrame (local Parquet): the seglog sink into
    a fresh S3 root (path mode, exactly-once) vs `df.write.parquet("s3a://...")` (Spark's default
    commit protocol: the only one pyspark ships, as Spark's hadoop-cloud module is not on Maven
    Central for 4.x) vs `format("kafka")` (acks=all) into a fresh topic; rows/s = rows / wall time.
    The seglog sink runs three times: with the topic's compression (none), with
    `compression.type=lz4` (Parquet's writer compresses with snappy by default), and
    uncompressed with `staging.publish=multipart` (each part uploaded as its segment object and
    completed by the commit, instead of staged, then copied on the server).
(c) a task's open and first bytes: one source task's `open_files` (LogRoot.open + the partition's
    bounded open, from the facts the planner hands the task, and without them) and its first
    Arrow batch, timed in this process against one GET of a small object (the S3 round trip)
    through the same client; the server's request count for each step.
(d) S3 requests per GB of records (key + value bytes), from the server's counters around each
    scenario of the median round, and the S3 server's CPU time (user + system, from /proc) in it.

After `--warmup` rounds (1), `--runs` rounds (3) are measured; every other round runs the
scenarios in reverse order; each ratio is from the round with the median ratio (bench_spark.paired).
Run: python bench/bench_spark_s3.py [--records N] [--runs R] [--warmup W] [--only source|sink]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
sys.path.insert(0, os.path.dirname(BENCH_DIR))
from bench_spark import (IPC_BATCH_ROWS, PARTITIONS, VALUE_SIZE, add_round_options, make_records,  # noqa: E402
                         paired, run_rounds)
from bench_spark_kafka import (TOPIC, BROKER_OVERRIDES, Bench, DefaultJvmKafka, cluster_id,  # noqa: E402
                               produce_to_kafka, spark_session, write_seglog_root)
from common import print_table  # noqa: E402
from spark_anchors import ArrowCeilingDataSource  # noqa: E402
from kafka_anchor import resolve_jars  # noqa: E402
from spark_kafka_jars import resolve_maven_jars, resolve_spark_kafka_jars  # noqa: E402
from tests.conftest import _free_port, _make_bucket, _start_seaweedfs  # noqa: E402

SCENARIOS = {
    "source": ("source_seglog_s3", "source_seglog_s3_lz4", "source_parquet_s3", "source_kafka", "source_ceiling"),
    "sink": ("sink_seglog_s3", "sink_seglog_s3_lz4", "sink_seglog_s3_mpu", "sink_parquet_s3", "sink_kafka"),
}
# The bucket each scenario's S3 requests go to (the server counts per bucket).
BUCKETS = {"source_seglog_s3": "log", "source_seglog_s3_lz4": "log_lz4", "source_parquet_s3": "parquet",
           "sink_seglog_s3": "log_sink", "sink_seglog_s3_lz4": "log_sink_lz4", "sink_seglog_s3_mpu": "log_sink_mpu",
           "sink_parquet_s3": "parquet_sink"}
# The sink's publish policy of the third sink row (the sink's staging.publish option).
SINK_PUBLISH = {"staging.publish": "multipart"}
# The sink with the batches compressed (option compression.type), as Parquet's writer compresses
# (snappy by default): the bytes the S3 server moves three times shrink. The source reads a root
# of the same records in batches of this codec beside the uncompressed one.
SINK_CODEC = "lz4"
FIRST_BYTES_TRIES = 7
RTT_TRIES = 21
_REQUEST_LINE = re.compile(r'^SeaweedFS_s3_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


def s3_identities(folder: Path) -> Path:
    """A SeaweedFS identities file granting the test keys (tests/conftest.py's S3Endpoint) everything:
    without one the server takes unsigned requests only and refuses s3a's chunk-signed PUTs."""
    import json
    path = folder / "s3-identities.json"
    path.write_text(json.dumps({"identities": [{
        "name": "bench", "credentials": [{"accessKey": "testing", "secretKey": "testing"}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    return path


def hadoop_version() -> str:
    """The Hadoop client version pyspark ships (jars/hadoop-client-api-<version>.jar)."""
    import pyspark
    found = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("hadoop-client-api-*.jar"))
    if not found:
        raise RuntimeError("pyspark ships no hadoop-client-api jar: cannot pick a hadoop-aws version")
    return found[0].name[len("hadoop-client-api-"):-len(".jar")]


def resolve_s3a_jars(version: str) -> list[Path]:
    """hadoop-aws at `version` and what it needs at run time (the AWS SDK v2 bundle)."""
    return resolve_maven_jars(f"hadoop-aws-{version}", [f"org.apache.hadoop:hadoop-aws:{version}"])


class RequestCounter:
    """SeaweedFS's per-bucket S3 request counters (Prometheus text at /metrics). HEAD requests
    count as GET there, as they are billed."""

    def __init__(self, metrics_port: int):
        self.url = f"http://127.0.0.1:{metrics_port}/metrics"

    def snapshot(self, bucket: str) -> Counter:
        text = urllib.request.urlopen(self.url, timeout=10).read().decode()
        counts: Counter = Counter()
        for line in text.splitlines():
            m = _REQUEST_LINE.match(line)
            if not m:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
            if labels.get("bucket") == bucket:
                counts[labels.get("type", "?")] += int(float(m["value"]))
        return counts

    def around(self, bucket: str, fn):
        """(fn's result, the requests to `bucket` while it ran, the server's CPU seconds meanwhile)."""
        before, cpu = self.snapshot(bucket), server_cpu_seconds()
        result = fn()
        cpu, after = server_cpu_seconds() - cpu, self.snapshot(bucket)
        return result, Counter({k: after[k] - before[k] for k in after if after[k] - before[k]}), cpu


def server_cpu_seconds() -> float:
    """User + system CPU seconds of this process's `weed` children (the S3 server)."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, _, rest = f.read().rpartition(")")
        except OSError:
            continue
        fields = rest.split()
        if head.endswith("(weed") and int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def configure_s3a(spark, endpoint) -> None:
    """s3a:// on the SeaweedFS endpoint: path-style, plain HTTP, static keys; the rest at
    hadoop-aws's defaults."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in {
        "fs.s3a.endpoint": endpoint.endpoint_url,
        "fs.s3a.endpoint.region": endpoint.region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.access.key": endpoint.key,
        "fs.s3a.secret.key": endpoint.secret,
    }.items():
        conf.set(key, value)


def record_bytes(rows: int) -> int:
    """Key + value bytes of the benchmark's records: the denominator of requests per GB."""
    return sum(len(k) + len(v) for p in range(PARTITIONS) for k, v, _h, _ts in make_records(rows, p))


class S3Bench(Bench):
    """bench_spark_kafka's Kafka anchors plus the S3 scenarios."""

    def __init__(self, spark, broker, paths, workdir, rows, endpoint, buckets: dict[str, str], counter):
        super().__init__(spark, broker, paths, workdir, rows)
        self.endpoint, self.buckets, self.counter = endpoint, buckets, counter
        self.storage = {f"storage.{k}": v for k, v in {
            "endpoint_url": endpoint.endpoint_url, "key": endpoint.key, "secret": endpoint.secret,
            "client_kwargs.region_name": endpoint.region}.items()}
        self.requests: dict[str, list[Counter]] = {}
        self.server_cpu: dict[str, list[float]] = {}
        self.parquet_schema = None      # the Parquet copy's, once written

    def counted(self, name: str, fn) -> float:
        rate, requests, cpu = self.counter.around(self.buckets[BUCKETS[name]], fn)
        self.requests.setdefault(name, []).append(requests)
        self.server_cpu.setdefault(name, []).append(cpu)
        print(f"    {name}: S3 server {cpu:.2f} CPU-s, {sum(requests.values())} requests", flush=True)
        return rate

    # (a) sources
    def source_seglog_s3(self) -> float:
        return self._source_seglog("source_seglog_s3", "s3_log")

    def source_seglog_s3_lz4(self) -> float:
        return self._source_seglog("source_seglog_s3_lz4", "s3_log_lz4")

    def _source_seglog(self, name: str, root: str) -> float:
        return self.counted(name, lambda: self.run_stream(
            self.spark.readStream.format("seglog").options(**self.storage).option("subscribe", TOPIC)
            .option("startingOffsets", "earliest").load(self.paths[root])))

    def source_ceiling(self) -> float:
        return self._counted_rows("the Arrow ceiling",
                                  self.spark.readStream.format("bench_arrow_ceiling").load(self.paths["arrow"]))

    def source_parquet_s3(self) -> float:
        df = self.spark.readStream.schema(self.parquet_schema).parquet(self.paths["s3_parquet"])
        return self.counted("source_parquet_s3", lambda: self._counted_rows("the Parquet stream", df))

    def _counted_rows(self, what: str, df) -> float:
        """rows / triggerExecution of an AvailableNow query into noop whose source counts its rows."""
        batches = [p for p in self.available_now(df) if p["numInputRows"]]
        if sum(p["numInputRows"] for p in batches) != self.rows:
            raise AssertionError(f"{what} read {sum(p['numInputRows'] for p in batches):,}"
                                 f" rows, expected {self.rows:,}")
        return self.rows / (sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000)

    # (b) sinks
    def sink_seglog_s3(self) -> float:
        return self._sink_seglog("sink_seglog_s3", "log_sink", {})

    def sink_seglog_s3_lz4(self) -> float:
        return self._sink_seglog("sink_seglog_s3_lz4", "log_sink_lz4", {"compression.type": SINK_CODEC})

    def sink_seglog_s3_mpu(self) -> float:
        return self._sink_seglog("sink_seglog_s3_mpu", "log_sink_mpu", SINK_PUBLISH)

    def _sink_seglog(self, name: str, bucket: str, options: dict) -> float:
        from logcore.log.log_root import LogRoot
        url = f"s3://{self.buckets[bucket]}/{os.path.basename(self.fresh('sink'))}"

        def write() -> float:
            t0 = time.perf_counter()
            (self._input().write.format("seglog").mode("append").options(**self.storage).options(**options)
             .option("topic", TOPIC).option("topic.partitions", PARTITIONS).save(url))
            return self.rows / (time.perf_counter() - t0)
        rate = self.counted(name, write)
        with LogRoot.open(url, storage_options=self.endpoint.storage_options(), read_only=True) as root:
            n = 0
            for p in range(PARTITIONS):
                log = root.log(TOPIC, p)
                n += log.high_watermark - log.log_start_offset
                log.close()
        if n != self.rows:
            raise AssertionError(f"seglog sink on S3: {n:,} records, expected {self.rows:,}")
        return rate

    def sink_parquet_s3(self) -> float:
        url = f"s3a://{self.buckets['parquet_sink']}/{os.path.basename(self.fresh('sink'))}"

        def write() -> float:
            t0 = time.perf_counter()
            self._input().write.parquet(url)
            return self.rows / (time.perf_counter() - t0)
        rate = self.counted("sink_parquet_s3", write)
        n = self.spark.read.parquet(url).count()
        if n != self.rows:
            raise AssertionError(f"Parquet sink on S3: {n:,} rows, expected {self.rows:,}")
        return rate


def write_arrow_copy(url: str, storage_options: dict, folder: str) -> None:
    """The root's records as Arrow IPC files, one per partition, in the source's Arrow schema
    (the Arrow ceiling's input), decoded from the root itself."""
    import pyarrow as pa
    from logcore.log.log_root import LogRoot
    from logcore.records import batches_to_arrow
    from pyspark_seglog.schema import ARROW_SCHEMA
    os.makedirs(folder)
    with LogRoot.open(url, storage_options=storage_options, read_only=True) as root:
        for p in range(PARTITIONS):
            log = root.log(TOPIC, p)
            parts, offset = [], log.log_start_offset
            while offset < log.high_watermark:
                fetched = log.read(offset, 8 << 20)
                data = fetched.data.read() if hasattr(fetched.data, "read") else bytes(fetched.data)
                decoded = batches_to_arrow(data, min_offset=offset, max_offset=log.high_watermark)
                parts.append(decoded)
                offset = decoded.column("offset")[-1].as_py() + 1
            log.close()
            table = pa.Table.from_batches(parts)
            n = table.num_rows
            table = pa.table({
                "key": table["key"], "value": table["value"], "topic": pa.array([TOPIC] * n, pa.string()),
                "partition": pa.array([p] * n, pa.int32()), "offset": table["offset"],
                "timestamp": table["timestamp"], "timestampType": table["timestampType"]}, schema=ARROW_SCHEMA)
            with pa.OSFile(os.path.join(folder, f"part-{p}.arrow"), "wb") as sink:
                with pa.ipc.new_file(sink, ARROW_SCHEMA) as writer:
                    for batch in table.to_batches(max_chunksize=IPC_BATCH_ROWS):
                        writer.write_batch(batch)


def first_bytes(url: str, storage_options: dict, spark_options: dict, bucket: str,
                counter: RequestCounter) -> dict:
    """Median over FIRST_BYTES_TRIES of a source task's open and first Arrow batch (partition 0,
    its whole range, planned by the batch reader as Spark's driver plans it, pickled as Spark
    ships it), with the server's request count for each step, beside one small GET. Also the
    same task without the planner's facts (`read_facts` None: a task of an older driver)."""
    import pickle
    from logcore.storage import open_storage
    from pyspark_seglog.partition_reader import open_files, read_files
    from pyspark_seglog.source import SeglogBatchReader
    planned = SeglogBatchReader({"path": url, "subscribe": TOPIC, **spark_options}, None).partitions()
    shipped = pickle.dumps(next(p for p in planned if p.partition == 0))
    storage = open_storage(f"s3://{bucket}/rtt", storage_options)
    storage.write_atomic("small", b"x" * 100)
    rtts = []
    for _ in range(RTT_TRIES):
        t0 = time.perf_counter()
        storage.read("small")
        rtts.append(time.perf_counter() - t0)
    out = {"rtt": statistics.median(rtts), "facts_bytes": len(shipped)}
    for label, with_facts in (("", True), ("plain_", False)):
        opens, firsts, open_requests, first_requests = [], [], [], []
        for _ in range(FIRST_BYTES_TRIES):
            p = pickle.loads(shipped)
            if not with_facts:
                p.read_facts = None
            before = counter.snapshot(bucket)
            t0 = time.perf_counter()
            opened = open_files(p)
            t1 = time.perf_counter()
            middle = counter.snapshot(bucket)
            rows = read_files(p, *opened)
            t2 = time.perf_counter()
            batch = next(rows)
            t3 = time.perf_counter()
            after = counter.snapshot(bucket)
            rows.close()
            if batch.num_rows == 0:
                raise AssertionError("the first batch of a task is empty")
            opens.append(t1 - t0)
            firsts.append(t3 - t2)
            open_requests.append(sum((middle - before).values()))
            first_requests.append(sum((after - middle).values()))
        out.update({f"{label}open": statistics.median(opens), f"{label}first": statistics.median(firsts),
                    f"{label}open_requests": statistics.median(open_requests),
                    f"{label}first_requests": statistics.median(first_requests)})
    return out


def _request_rows(bench: S3Bench, results: dict, names: list[str], gb: float) -> list[str]:
    """One row per S3 scenario: requests of the median-rate round by type, total, per GB."""
    lines = ["| scenario | GET (incl. HEAD) | PUT | LIST | DELETE | other | total | per GB of records"
             " | S3 server CPU-s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        if name not in bench.requests:
            continue
        measured = bench.requests[name][-len(results[name]):]
        order = sorted(range(len(measured)), key=lambda i: results[name][i])
        median = order[(len(order) - 1) // 2]
        req = measured[median]
        cpu = bench.server_cpu[name][-len(results[name]):][median]
        other = sum(v for k, v in req.items() if k not in ("GET", "PUT", "LIST", "DELETE"))
        total = sum(req.values())
        lines.append(f"| {name} | {req['GET']:,} | {req['PUT']:,} | {req['LIST']:,} | {req['DELETE']:,}"
                     f" | {other:,} | {total:,} | {total / gb:,.0f} | {cpu:.2f} |")
    return lines


def _range(results: dict, name: str, anchor: str) -> str:
    ratios = sorted(f / a for f, a in zip(results[name], results[anchor]))
    return f"{ratios[0]:.2f}-{ratios[-1]:.2f}x"


def _printed(line: str) -> list[str]:
    print(line + "\n", flush=True)
    return ["", line, ""]


def main(argv: list[str] | None = None) -> list[str]:
    import pyspark
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    add_round_options(parser, 3, SCENARIOS)
    args = parser.parse_args(argv if argv is not None else [])
    parts = args.only or list(SCENARIOS)
    rows = args.records

    hadoop = hadoop_version()
    s3a_jars = resolve_s3a_jars(hadoop)
    connector_version, kafka_connector_jars = resolve_spark_kafka_jars(pyspark.__version__)
    kafka_jars = resolve_jars()
    workdir = tempfile.mkdtemp(prefix="seglog-bench-spark-s3-")
    broker = spark = stop_s3 = None
    try:
        os.makedirs(os.path.join(workdir, "weed"))
        metrics_port = _free_port()
        endpoint, stop_s3 = _start_seaweedfs(Path(workdir) / "weed", metrics_port=metrics_port,
                                             s3_config=s3_identities(Path(workdir)))
        counter = RequestCounter(metrics_port)
        buckets = {role: _make_bucket(endpoint)[0]
                   for role in ("log", "log_lz4", "parquet", "log_sink", "log_sink_lz4", "log_sink_mpu",
                                "parquet_sink")}
        storage_options = endpoint.storage_options()
        broker = DefaultJvmKafka.create(kafka_jars, Path(workdir) / "kafka", BROKER_OVERRIDES,
                                        cluster_id=cluster_id()).start()
        paths = {"s3_log": f"s3://{buckets['log']}/root", "s3_log_lz4": f"s3://{buckets['log_lz4']}/root",
                 "s3_parquet": f"s3a://{buckets['parquet']}/records",
                 "parquet": os.path.join(workdir, "input-parquet"), "arrow": os.path.join(workdir, "arrow")}
        ts0 = int(time.time() * 1000) - rows      # today's timestamps: see bench_spark_kafka.main
        t0 = time.perf_counter()
        produce_to_kafka(broker.bootstrap, rows, ts0)
        print(f"produced {rows:,} records to Kafka {kafka_jars.version} in {time.perf_counter() - t0:.1f} s",
              flush=True)
        t0 = time.perf_counter()
        write_seglog_root(paths["s3_log"], rows, ts0, storage_options)
        print(f"wrote them to a seglog root on S3 in {time.perf_counter() - t0:.1f} s", flush=True)
        if "source" in parts:
            write_seglog_root(paths["s3_log_lz4"], rows, ts0, storage_options, {"compression.type": SINK_CODEC})
            write_arrow_copy(paths["s3_log"], storage_options, paths["arrow"])
        spark = spark_session(kafka_connector_jars + s3a_jars)
        spark.dataSource.register(ArrowCeilingDataSource)
        configure_s3a(spark, endpoint)
        bench = S3Bench(spark, broker, paths, workdir, rows, endpoint, buckets, counter)
        records = (spark.read.format("seglog").options(**bench.storage).option("subscribe", TOPIC)
                   .load(paths["s3_log"]))
        t0 = time.perf_counter()
        records.write.parquet(paths["s3_parquet"])
        records.select("key", "value").write.parquet(paths["parquet"])
        bench.parquet_schema = spark.read.parquet(paths["s3_parquet"]).schema
        print(f"wrote the Parquet copies (s3a and the local sink input) in {time.perf_counter() - t0:.1f} s",
              flush=True)

        names = [n for part in SCENARIOS if part in parts for n in SCENARIOS[part]]
        results = run_rounds(bench, names, args.warmup, args.runs)
        fb = (first_bytes(paths["s3_log"], storage_options, bench.storage, buckets["log"], counter)
              if "source" in parts else None)

        how = (f"{args.runs} rounds after {args.warmup} warm-up, figures from the round with the median"
               f" ratio; SeaweedFS {endpoint.backend} on 127.0.0.1, hadoop-aws {hadoop}, Kafka"
               f" {kafka_jars.version}, spark-sql-kafka-0-10 {connector_version}, pyspark {pyspark.__version__}")
        rows_m = f"{rows / 1e6:g}M"
        lines: list[str] = []
        if "source" in parts:
            lines += print_table(
                f"Spark source on S3 -> noop ({rows_m} records of {VALUE_SIZE}-byte values, {PARTITIONS}"
                f" partitions, local[2], AvailableNow; {how})", [
                    ("seglog source (S3 root) vs Parquet file stream (s3a://)",
                     *paired(results, "source_seglog_s3", "source_parquet_s3"), "rows/s"),
                    ("seglog source (S3 root) vs format(\"kafka\") (live Kafka)",
                     *paired(results, "source_seglog_s3", "source_kafka"), "rows/s"),
                    ("seglog source (S3 root) vs Python Arrow source ceiling (local Arrow IPC)",
                     *paired(results, "source_seglog_s3", "source_ceiling"), "rows/s"),
                    ("(anchors) Python Arrow source ceiling vs Parquet file stream (s3a://)",
                     *paired(results, "source_ceiling", "source_parquet_s3"), "rows/s"),
                    (f"seglog source, {SINK_CODEC} batches vs Parquet file stream (s3a://, snappy)",
                     *paired(results, "source_seglog_s3_lz4", "source_parquet_s3"), "rows/s"),
                    (f"seglog source, {SINK_CODEC} batches vs format(\"kafka\") (live Kafka)",
                     *paired(results, "source_seglog_s3_lz4", "source_kafka"), "rows/s"),
                ])
            lines += _printed(f"Rounds' ratio range: vs Parquet {_range(results, 'source_seglog_s3', 'source_parquet_s3')},"
                              f" vs Kafka {_range(results, 'source_seglog_s3', 'source_kafka')},"
                              f" vs the Python Arrow ceiling {_range(results, 'source_seglog_s3', 'source_ceiling')};"
                              f" the ceiling vs Parquet {_range(results, 'source_ceiling', 'source_parquet_s3')};"
                              f" {SINK_CODEC} batches:"
                              f" vs Parquet {_range(results, 'source_seglog_s3_lz4', 'source_parquet_s3')},"
                              f" vs Kafka {_range(results, 'source_seglog_s3_lz4', 'source_kafka')}.")
        if "sink" in parts:
            lines += print_table(
                f"Spark sink on S3 ({rows_m} records key+value from local Parquet, batch df.write,"
                f" {PARTITIONS} partitions, local[2]; {how})", [
                    ("seglog sink (S3 root, exactly-once) vs df.write.parquet (s3a://)",
                     *paired(results, "sink_seglog_s3", "sink_parquet_s3"), "rows/s"),
                    ("seglog sink (S3 root, exactly-once) vs format(\"kafka\") (acks=all)",
                     *paired(results, "sink_seglog_s3", "sink_kafka"), "rows/s"),
                    (f"seglog sink, compression.type={SINK_CODEC} vs df.write.parquet (s3a://, snappy)",
                     *paired(results, "sink_seglog_s3_lz4", "sink_parquet_s3"), "rows/s"),
                    (f"seglog sink, compression.type={SINK_CODEC} vs format(\"kafka\") (acks=all)",
                     *paired(results, "sink_seglog_s3_lz4", "sink_kafka"), "rows/s"),
                    ("seglog sink, staging.publish=multipart vs df.write.parquet (s3a://)",
                     *paired(results, "sink_seglog_s3_mpu", "sink_parquet_s3"), "rows/s"),
                    ("seglog sink, staging.publish=multipart vs format(\"kafka\") (acks=all)",
                     *paired(results, "sink_seglog_s3_mpu", "sink_kafka"), "rows/s"),
                    ("seglog sink, staging.publish=multipart vs staging.publish=copy",
                     *paired(results, "sink_seglog_s3_mpu", "sink_seglog_s3"), "rows/s"),
                ])
            lines += _printed(f"Rounds' ratio range: vs Parquet {_range(results, 'sink_seglog_s3', 'sink_parquet_s3')},"
                              f" vs Kafka {_range(results, 'sink_seglog_s3', 'sink_kafka')}; with {SINK_CODEC}:"
                              f" vs Parquet {_range(results, 'sink_seglog_s3_lz4', 'sink_parquet_s3')},"
                              f" vs Kafka {_range(results, 'sink_seglog_s3_lz4', 'sink_kafka')}; multipart:"
                              f" vs Parquet {_range(results, 'sink_seglog_s3_mpu', 'sink_parquet_s3')},"
                              f" vs Kafka {_range(results, 'sink_seglog_s3_mpu', 'sink_kafka')},"
                              f" vs copy {_range(results, 'sink_seglog_s3_mpu', 'sink_seglog_s3')}.")
        gb = record_bytes(rows) / 1e9
        table = [f"### S3 requests per GB of records ({gb * 1e3:,.0f} MB of keys and values; counted by"
                 " SeaweedFS per bucket, the round with the median rate)", ""]
        table += _request_rows(bench, results, [n for n in names if n in BUCKETS], gb)
        print("\n".join(table) + "\n", flush=True)
        lines += table + [""]
        if fb is not None:
            text = [f"### A source task's open and first bytes on S3 (partition 0 of the root, median of"
                    f" {FIRST_BYTES_TRIES}; anchor: one GET of a 100-byte object, median of {RTT_TRIES})", "",
                    "| step | ms | S3 requests | in S3 round trips |", "|---|---:|---:|---:|",
                    f"| one GET of a small object | {fb['rtt'] * 1e3:.1f} | 1 | 1.0 |",
                    f"| open with the planner's facts ({fb['facts_bytes']:,} bytes pickled) | {fb['open'] * 1e3:.1f} |"
                    f" {fb['open_requests']:g} | {fb['open'] / fb['rtt']:.1f} |",
                    f"| first Arrow batch after it | {fb['first'] * 1e3:.1f} | {fb['first_requests']:g} |"
                    f" {fb['first'] / fb['rtt']:.1f} |",
                    f"| open without them (each thing asked once) | {fb['plain_open'] * 1e3:.1f} |"
                    f" {fb['plain_open_requests']:g} | {fb['plain_open'] / fb['rtt']:.1f} |",
                    f"| first Arrow batch after it | {fb['plain_first'] * 1e3:.1f} | {fb['plain_first_requests']:g} |"
                    f" {fb['plain_first'] / fb['rtt']:.1f} |"]
            print("\n".join(text) + "\n", flush=True)
            lines += text + [""]
        return lines
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        if stop_s3 is not None:
            stop_s3()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
