"""Kafka's own tools as the anchor: ProducerPerformance, ConsumerPerformance and EndToEndLatency
(kafka-tools from bench/kafka_anchor.py's jars, run as `java -cp ... <class>`) against seglog and
Apache Kafka 4.x, side by side in one run (issue 31, item 1).

Two set-ups, each pair running at once on the same machine so that rows interleave:
- single: one `seglog broker` and one Apache Kafka broker (KRaft, combined roles, the JVM flags of
  Kafka's start scripts), topics RF=1;
- cluster: three `seglog broker` processes on a ZooKeeper (bench_cluster.py's SeglogClusterRun) and
  a 3-node KRaft cluster (KafkaClusterRun), topics RF=3 with min.insync.replicas=2.

Rows (each at every --sizes record size; --only picks them by name, shell patterns allowed):
- produce-acks1, produce-acksall (not idempotent), produce-idempotent (the Java client's defaults:
  acks=all, idempotence on, linger.ms=5, batch.size=16 KiB), produce-transactional
  (--transactional-id, commit every --txn-ms), produce-lz4 and produce-zstd (the default producer
  with compression.type set): ProducerPerformance unpaced, --records records;
- consume-start: ConsumerPerformance from the earliest offset of the produce-idempotent row's topic
  (produced first, unmeasured, when that row is not selected); its fetch.MB.sec;
- consume-tail: ConsumerPerformance --from-latest, joined to its group before a ProducerPerformance
  of the same records starts; the consumer's rate from its first record to its last report;
- e2e: EndToEndLatency (one record at a time, produce acks=all then poll) on a 1-partition topic;
  p50 and p99 as the tool prints them (whole milliseconds, truncated) and the average.

A warm-up round of every row comes first (not reported), then --runs rounds; in each round every
row runs on one side and then the other, the order alternating between rounds. Beside each figure:
the broker side's CPU seconds during the row (/proc/<pid>/stat) and its peak resident memory
(VmHWM, reset through /proc/<pid>/clear_refs before the row; summed over a cluster's processes,
ZooKeeper included on the seglog side), and the CPU seconds of the row's tool JVMs (their whole
lives, start-up included): on a machine of few cores the client's CPU bounds what a broker can
show.

    python bench/bench_kafka_tools.py [--records 300000] [--runs 2] [--sizes 100,1024]
        [--only 'produce-*,e2e'] [--setups single,cluster] [--quick]
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests", REPO / "tests" / "cluster", REPO / "bench"):
    sys.path.insert(0, str(_p))

import bench_broker  # noqa: E402
from common import stop_process  # noqa: E402
from bench_cluster import Cluster, KafkaClusterRun, SeglogClusterRun, Unavailable  # noqa: E402
from bench_txn_produce import CLUSTER_TXN, SINGLE_TXN  # noqa: E402

SEGLOG, KAFKA = "seglog", "Apache Kafka"
TOOL_HEAP = "-Xmx512m"          # kafka-producer-perf-test.sh's and kafka-consumer-perf-test.sh's heap
PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"
END_TO_END = "org.apache.kafka.tools.EndToEndLatency"

_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                       r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")
_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
_E2E_PCT = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")
_DATE = "%Y-%m-%d %H:%M:%S:%f"   # ConsumerPerformance's default date format, yyyy-MM-dd HH:mm:ss:SSS


class CouldNotRun(Exception):
    """A row that could not be measured on one side; the message says why (printed in its cell)."""


# ----------------------------------------------------------------------------------- rows

@dataclass(frozen=True)
class Row:
    name: str
    label: str
    kind: str                         # produce / consume-start / consume-tail / e2e
    producer_props: tuple[str, ...] = ()
    transactional: bool = False
    higher_better: bool = True


ROWS = (
    Row("produce-acks1", "produce acks=1", "produce", ("acks=1", "enable.idempotence=false")),
    Row("produce-acksall", "produce acks=all, not idempotent", "produce", ("acks=all", "enable.idempotence=false")),
    Row("produce-idempotent", "produce, Java defaults (acks=all, idempotent)", "produce"),
    Row("produce-transactional", "produce, transactional", "produce", transactional=True),
    Row("produce-lz4", "produce lz4, Java defaults", "produce", ("compression.type=lz4",)),
    Row("produce-zstd", "produce zstd, Java defaults", "produce", ("compression.type=zstd",)),
    Row("consume-start", "consume from the start", "consume-start"),
    Row("consume-tail", "consume at the tail (producer alongside)", "consume-tail"),
    Row("e2e", "end to end, EndToEndLatency", "e2e", higher_better=False),
)
DATA_ROW = "produce-idempotent"       # its topic is what consume-start reads


def pick_rows(only: str | None) -> list[Row]:
    if not only:
        return list(ROWS)
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    unknown = [p for p in patterns if not any(fnmatch.fnmatchcase(r.name, p) for r in ROWS)]
    if unknown:
        raise SystemExit(f"--only: no row matches {', '.join(unknown)}; rows: {', '.join(r.name for r in ROWS)}")
    return [r for r in ROWS if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)]


# ----------------------------------------------------------------------------------- brokers

class OneBroker(Cluster):
    """One broker process this run started, seen through bench_cluster's Cluster (topics, CPU)."""

    def __init__(self, name: str, proc: subprocess.Popen, bootstrap: str):
        self.name, self.proc = name, proc
        self.ports = {1: int(bootstrap.rsplit(":", 1)[1])}

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc.poll() is None else []

    def alive(self, broker_id: int) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        stop_process(self.proc, 60)

    def log_tails(self) -> str:
        return ""


def single_seglog(workdir: Path, extra: dict[str, str]) -> OneBroker:
    # The reference Kafka broker's settings where they differ from the defaults (tests/kafka_reference.py)
    settings = {**SINGLE_TXN, "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
                "offsets.topic.replication.factor": "1", **extra}
    try:
        proc, bootstrap = bench_broker.start_broker(str(workdir), settings)
    except SystemExit as exc:
        raise Unavailable(f"seglog broker did not start: {exc}") from None
    return OneBroker(f"{SEGLOG} broker", proc, bootstrap)


def single_kafka(workdir: Path) -> OneBroker:
    try:
        proc, bootstrap = bench_broker.start_apache_kafka(str(workdir))
    except bench_broker.PeerUnavailable as exc:
        raise Unavailable(str(exc)) from None
    return OneBroker(f"{KAFKA} broker", proc, bootstrap)


def cluster_seglog(workdir: Path, extra: dict[str, str]) -> Cluster:
    return SeglogClusterRun(workdir, {**CLUSTER_TXN, **extra})


def cluster_kafka(workdir: Path) -> Cluster:
    return KafkaClusterRun(workdir, 3)           # its properties carry CLUSTER_TXN's values


SETUPS = {
    "single": ("one broker each, RF=1", 1, {SEGLOG: single_seglog, KAFKA: single_kafka}),
    "cluster": ("three brokers each, RF=3, min.insync.replicas=2", 3, {SEGLOG: cluster_seglog, KAFKA: cluster_kafka}),
}


class Usage:
    """CPU seconds and peak resident memory of a side's processes over one row."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.client0 = _children_cpu()
        for pid in pids:
            try:     # "5" resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+)
                Path(f"/proc/{pid}/clear_refs").write_text("5")
            except OSError:
                pass
        self.cpu0 = self._cpu()

    def _cpu(self) -> float:
        total = 0.0
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def finish(self) -> dict:
        peak = 0
        for pid in self.pids:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak += int(line.split()[1])
            except OSError:
                pass
        return {"cpu": self._cpu() - self.cpu0, "rss": peak / 1024, "client_cpu": _children_cpu() - self.client0}


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended and been waited for: the tool JVMs
    of a row (the brokers, also children, are waited for only when the set-up closes)."""
    t = os.times()
    return t.children_user + t.children_system


# ----------------------------------------------------------------------------------- tools

class Tools:
    """Kafka's tool classes in their own JVMs (full JIT, as the shell scripts run them)."""

    def __init__(self, timeout: float):
        from kafka_anchor import KafkaUnavailable, resolve_jars
        try:
            self.jars = resolve_jars()
        except KafkaUnavailable as exc:
            raise Unavailable(f"no Kafka tools: {exc}") from None
        self.timeout = timeout

    def command(self, main_class: str, args: list[str]) -> list[str]:
        return self.jars.java_command(main_class, args, heap=TOOL_HEAP)

    def run(self, main_class: str, args: list[str]) -> str:
        try:
            proc = subprocess.run(self.command(main_class, args), capture_output=True, text=True,
                                  timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise CouldNotRun(f"{main_class.rsplit('.', 1)[1]} did not finish within {self.timeout:.0f} s") from None
        if proc.returncode != 0:
            raise CouldNotRun(f"{main_class.rsplit('.', 1)[1]} exited {proc.returncode}: {_why(proc.stderr, proc.stdout)}")
        return proc.stdout

    def produce(self, bootstrap: str, topic: str, records: int, size: int, row: Row, txn_ms: int) -> dict:
        args = ["--topic", topic, "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
                "--producer-props", f"bootstrap.servers={bootstrap}", *row.producer_props]
        if row.transactional:
            args += ["--transactional-id", f"perf-{uuid.uuid4().hex[:12]}", "--transaction-duration-ms", str(txn_ms)]
        out = self.run(PRODUCER, args)
        found = [m for m in map(_PRODUCED.search, out.splitlines()) if m]
        if not found:
            raise CouldNotRun(f"ProducerPerformance printed no summary: {_why(out)}")
        m = found[-1]
        if int(m.group(1)) != records:
            raise CouldNotRun(f"ProducerPerformance sent {m.group(1)} of {records} records")
        return {"value": float(m.group(3)), "p99": float(m.group(8))}

    def consume_start(self, bootstrap: str, topic: str, records: int) -> dict:
        out = self.run(CONSUMER, ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records),
                                  "--group", f"perf-{uuid.uuid4().hex[:12]}", "--timeout", "30000"])
        if "WARNING: Exiting before" in out:
            raise CouldNotRun("ConsumerPerformance timed out before reading every record")
        fields = [f.strip() for f in out.strip().splitlines()[-1].split(",")]
        if len(fields) != 10 or int(fields[4]) != records:
            raise CouldNotRun(f"ConsumerPerformance's summary is not of {records} records: {fields}")
        return {"value": float(fields[8])}          # fetch.MB.sec: after the group join

    def consume_tail(self, cluster: Cluster, topic: str, records: int, size: int, txn_ms: int) -> dict:
        group = f"perf-{uuid.uuid4().hex[:12]}"
        args = ["--bootstrap-server", cluster.bootstrap, "--topic", topic, "--messages", str(records), "--group",
                group, "--from-latest", "--show-detailed-stats", "--reporting-interval", "100", "--timeout", "60000"]
        consumer = subprocess.Popen(self.command(CONSUMER, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        try:
            _wait_assigned(cluster.bootstrap, group, consumer, 120)
            time.sleep(0.5)    # its ListOffsets(latest) comes right after the assignment
            producer = self.produce(cluster.bootstrap, topic, records, size, ROWS_BY_NAME[DATA_ROW], txn_ms)
            out, err = consumer.communicate(timeout=self.timeout)
        finally:
            if consumer.poll() is None:
                consumer.kill()
                consumer.communicate()
        if consumer.returncode != 0:
            raise CouldNotRun(f"ConsumerPerformance exited {consumer.returncode}: {_why(err, out)}")
        if "WARNING: Exiting before" in out:
            raise CouldNotRun("the tail consumer timed out before reading every record")
        reports = []
        for line in out.splitlines():
            fields = [f.strip() for f in line.split(",")]
            if len(fields) == 10 and fields[1] == "0":
                reports.append((datetime.datetime.strptime(fields[0], _DATE), int(fields[4])))
        if len(reports) < 2:
            raise CouldNotRun(f"the tail consumer reported {len(reports)} intervals (too short a run to time)")
        (t0, n0), (t1, n1) = reports[0], reports[-1]
        seconds = (t1 - t0).total_seconds()
        return {"value": (n1 - n0) * size / (1 << 20) / seconds, "producer": producer["value"]}

    def end_to_end(self, bootstrap: str, topic: str, messages: int, size: int) -> dict:
        out = self.run(END_TO_END, [bootstrap, topic, str(messages), "all", str(size)])
        avg, pct = _E2E_AVG.search(out), _E2E_PCT.search(out)
        if not avg or not pct:
            raise CouldNotRun(f"EndToEndLatency printed no result: {_why(out)}")
        return {"value": float(pct.group(2)), "p50": float(pct.group(1)), "p99": float(pct.group(2)),
                "avg": float(avg.group(1))}


ROWS_BY_NAME = {r.name: r for r in ROWS}


def _why(*texts: str) -> str:
    lines = [line.strip() for t in texts for line in (t or "").splitlines() if line.strip()]
    errors = [line for line in lines if "Exception" in line or "ERROR" in line or "rror:" in line]
    return ((errors or lines or ["no output"])[0])[:300]


def _wait_assigned(bootstrap: str, group: str, consumer: subprocess.Popen, timeout: float) -> None:
    """Until GROUP is stable with a member that holds partitions (the tail consumer has joined)."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if consumer.poll() is not None:
            raise CouldNotRun(f"the tail consumer exited {consumer.returncode} before joining its group")
        try:
            desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
            if desc.state == ConsumerGroupState.STABLE and any(
                    m.assignment and m.assignment.topic_partitions for m in desc.members):
                return
        except Exception as exc:     # noqa: BLE001 - the group does not exist yet
            last = exc
        time.sleep(0.2)
    raise CouldNotRun(f"the tail consumer did not join group {group} within {timeout:.0f} s ({last})")


# ----------------------------------------------------------------------------------- one side

@dataclass
class Side:
    """One broker set of a set-up and the topics a round left for later rows."""
    name: str
    cluster: Cluster
    rf: int
    data_topics: dict[int, str] = field(default_factory=dict)     # record size -> consume-start's topic

    def create_topic(self, topic: str, partitions: int) -> None:
        config = {"min.insync.replicas": "2"} if self.rf >= 3 else {}
        self.cluster.create_topic(topic, partitions, self.rf, config)

    def delete_topic(self, topic: str) -> None:
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        try:
            admin.delete_topics([topic], request_timeout=60)[topic].result(60)
        except Exception as exc:     # noqa: BLE001 - only disk space is at stake
            print(f"  {self.name}: could not delete {topic}: {exc}", flush=True)


def run_row(side: Side, tools: Tools, row: Row, size: int, args, tag: str) -> dict:
    """One row on one side: its figure, and the side's CPU and peak memory over it."""
    topic = f"{row.name}-{size}-{tag}"
    partitions = 1 if row.kind == "e2e" else args.partitions
    if row.kind == "consume-start":
        topic = side.data_topics.pop(size, "")
        if not topic:       # the produce row was not selected: its data, unmeasured
            topic = f"data-{size}-{tag}"
            side.create_topic(topic, partitions)
            tools.produce(side.cluster.bootstrap, topic, args.records, size, ROWS_BY_NAME[DATA_ROW], args.txn_ms)
    else:
        side.create_topic(topic, partitions)
    usage = Usage(side.cluster.pids())
    keep = False
    try:
        if row.kind == "produce":
            result = tools.produce(side.cluster.bootstrap, topic, args.records, size, row, args.txn_ms)
            keep = row.name == DATA_ROW        # all its records are in: consume-start reads them
        elif row.kind == "consume-start":
            result = tools.consume_start(side.cluster.bootstrap, topic, args.records)
        elif row.kind == "consume-tail":
            result = tools.consume_tail(side.cluster, topic, args.records, size, args.txn_ms)
        else:
            result = tools.end_to_end(side.cluster.bootstrap, topic, args.e2e_messages, size)
        result.update(usage.finish())
    finally:
        if keep:
            old = side.data_topics.pop(size, None)
            if old:
                side.delete_topic(old)
            side.data_topics[size] = topic
        else:
            side.delete_topic(topic)
    return result


def run_setup(setup: str, rows: list[Row], args) -> tuple[dict, dict[str, str], list[str]]:
    """Both sides of a set-up started together, a warm-up round, then args.runs interleaved rounds.
    Returns {(row, size, side): [result or error per round]}, the sides not measured (why) and
    notes for the table (an interruption)."""
    title, rf, starters = SETUPS[setup]
    tools = Tools(args.timeout)
    results: dict[tuple[str, int, str], list] = {}
    skipped: dict[str, str] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-tools-") as tmp:
        sides: list[Side] = []
        try:
            for name in ([SEGLOG] + ([] if args.no_kafka else [KAFKA])):
                print(f"[{setup}] starting {name} ({title}) ...", flush=True)
                workdir = Path(tmp) / name.replace(" ", "-")
                workdir.mkdir()
                try:
                    cluster = starters[name](workdir, args.seglog_config) if name == SEGLOG else starters[name](workdir)
                    sides.append(Side(name, cluster, rf))
                except Unavailable as exc:
                    if name == SEGLOG:
                        raise
                    skipped[name] = str(exc)
                    print(f"[{setup}] {name}: not measured ({exc})", flush=True)
            rnd = 0
            try:
                for rnd in range(args.runs + 1):
                    run_round(setup, sides, tools, rows, args, rnd, results)
            except KeyboardInterrupt:      # Ctrl-C or SIGTERM: the table of the rounds done so far
                notes.append(f"interrupted in {'the warm-up round' if rnd == 0 else f'round {rnd} of {args.runs}'}:"
                             " the figures are those of the rows both sides completed")
                print(f"[{setup}] {notes[-1]}", flush=True)
        finally:
            for side in sides:
                side.cluster.close()
    return results, skipped, notes


def run_round(setup: str, sides: list[Side], tools: Tools, rows: list[Row], args, rnd: int, results: dict) -> None:
    """Every row at every size, on one side and then the other (the order alternates by round);
    round 0 is the warm-up, not kept."""
    order = sides if rnd % 2 else sides[::-1]
    what = "warm-up" if rnd == 0 else f"round {rnd}"
    for size in args.sizes:
        for row in rows:
            for side in order:
                t0 = time.monotonic()
                try:
                    result = run_row(side, tools, row, size, args, f"r{rnd}")
                except CouldNotRun as exc:
                    result = {"error": str(exc)}
                shown = result.get("error") or (f"{result['value']:,.1f}, CPU {result['cpu']:.1f} s,"
                                                f" client CPU {result['client_cpu']:.1f} s,"
                                                f" peak RSS {result['rss']:,.0f} MB")
                print(f"[{setup}] {what} {row.name} {size} B {side.name}: {shown} ({time.monotonic() - t0:.0f} s)",
                      flush=True)
                if rnd:
                    results.setdefault((row.name, size, side.name), []).append(result)


# ----------------------------------------------------------------------------------- report

def _fmt(v: float) -> str:
    return f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"


def _ratio(row: Row, ours: float, theirs: float) -> float | None:
    """Above 1: seglog ahead (throughput seglog / Kafka, latency Kafka / seglog)."""
    if row.higher_better:
        return ours / theirs if theirs else None
    return theirs / ours if ours else None


def report(setup: str, rows: list[Row], args, results: dict, skipped: dict[str, str], notes: list[str],
           cmdline: str) -> list[str]:
    title = SETUPS[setup][0]
    lines = [f"### Kafka's own tools, {title} ({args.records:,} records per produce/consume row, "
             f"{args.partitions} partitions; EndToEndLatency {args.e2e_messages:,} records, 1 partition)", "",
             f"`{cmdline}`; {args.runs} round(s) after a warm-up round; medians, ratio range over the rounds.", "",
             f"| row | size | {SEGLOG} | {KAFKA} | ratio (rounds) | CPU s {SEGLOG} / Kafka | client CPU s {SEGLOG} / Kafka"
             f" | peak RSS MB {SEGLOG} / Kafka |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        unit = "ms" if row.kind == "e2e" else "MiB/s"
        for size in args.sizes:
            ours = results.get((row.name, size, SEGLOG), [])
            theirs = results.get((row.name, size, KAFKA), [])
            if ours and theirs:        # an interrupted round may have run one side only
                n = min(len(ours), len(theirs))
                ours, theirs = ours[:n], theirs[:n]
            lines.append(_row_line(row, size, unit, ours, theirs, skipped))
    lines += ["", "Ratios: throughput seglog / Kafka, latency Kafka / seglog (above 1: seglog ahead); the range is "
              "the per-round ratios'. MiB/s as the tools print them (2^20 bytes). CPU s and peak RSS are the broker "
              "side's over the row (a cluster's summed over its processes; the seglog cluster's include ZooKeeper); client CPU s "
              "is the row's tool JVMs', start-up included."]
    for name, reason in skipped.items():
        lines.append(f"{name}: not measured ({reason}).")
    lines += [note[0].upper() + note[1:] + "." for note in notes]
    print("\n".join(lines) + "\n", flush=True)
    return lines


def _row_line(row: Row, size: int, unit: str, ours: list[dict], theirs: list[dict], skipped: dict) -> str:
    def errors(rounds: list[dict]) -> str | None:
        errs = [r["error"] for r in rounds if "error" in r]
        return f"could not run: {errs[0]}" if errs else None

    def cell(rounds: list[dict], name: str) -> str:
        if name in skipped:
            return "not measured"
        if not rounds:
            return "not run"
        err = errors(rounds)
        if err:
            return err
        if row.kind == "e2e":
            return (f"p50 {statistics.median(r['p50'] for r in rounds):.0f} / p99 "
                    f"{statistics.median(r['p99'] for r in rounds):.0f} ms (avg "
                    f"{statistics.median(r['avg'] for r in rounds):.2f})")
        text = f"{_fmt(statistics.median(r['value'] for r in rounds))} {unit}"
        if row.kind == "produce":
            text += f" (p99 {statistics.median(r['p99'] for r in rounds):,.0f} ms)"
        if row.kind == "consume-tail":
            text += f" (producer {_fmt(statistics.median(r['producer'] for r in rounds))})"
        return text

    both = ours and theirs and not errors(ours) and not errors(theirs)
    if not both:
        ratio = "n/a"
    elif row.kind == "e2e":
        parts = []
        for key in ("p50", "p99", "avg"):
            each = [_ratio(row, a[key], b[key]) for a, b in zip(ours, theirs)]
            parts.append(f"{key} " + _range(each))
        ratio = "; ".join(parts)
    else:
        ratio = _range([_ratio(row, a["value"], b["value"]) for a, b in zip(ours, theirs)])

    def usage(rounds: list[dict], key: str, fmt: str) -> str:
        good = [r for r in rounds if "error" not in r]
        return fmt.format(statistics.median(r[key] for r in good)) if good else "-"

    return (f"| {row.label} | {size:,} B | {cell(ours, SEGLOG)} | {cell(theirs, KAFKA)} | {ratio} | "
            f"{usage(ours, 'cpu', '{:.1f}')} / {usage(theirs, 'cpu', '{:.1f}')} | "
            f"{usage(ours, 'client_cpu', '{:.1f}')} / {usage(theirs, 'client_cpu', '{:.1f}')} | "
            f"{usage(ours, 'rss', '{:,.0f}')} / {usage(theirs, 'rss', '{:,.0f}')} |")


def _range(each: list[float | None]) -> str:
    if any(x is None for x in each):
        return "n/a (a figure of 0: under the tool's 1 ms resolution)"
    text = f"{statistics.median(each):.2f}x"
    return text + (f" ({min(each):.2f}-{max(each):.2f})" if len(each) > 1 else "")


QUICK = {"records": 50_000, "runs": 1, "sizes": [1024], "e2e_messages": 1000,
         "only": "produce-acksall,produce-idempotent,consume-start,e2e"}


def _interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> list[str]:
    # Ctrl-C or SIGTERM (also when started in the background, where SIGINT comes ignored) ends the
    # rounds early and prints the table of what both sides completed.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, help="records per produce and consume row (default 300,000)")
    parser.add_argument("--runs", type=int, help="measured rounds after the warm-up round (default 2)")
    parser.add_argument("--sizes", help="record sizes in bytes, comma-separated (default 100,1024)")
    parser.add_argument("--only", help="rows by name, comma-separated shell patterns: "
                        + ", ".join(r.name for r in ROWS) + " (default: all)")
    parser.add_argument("--setups", default="single,cluster", help="single, cluster or both (default both)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--e2e-messages", type=int, help="EndToEndLatency's records (default 3,000)")
    parser.add_argument("--txn-ms", type=int, default=100, help="--transaction-duration-ms of the transactional row")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one tool run")
    parser.add_argument("--no-kafka", action="store_true", help="seglog only (no anchor, no ratios)")
    parser.add_argument("--seglog-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for seglog's brokers, e.g. event.loop=asyncio (repeatable)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a few minutes: {QUICK['records']:,} records, 1 round, 1 KiB only, rows {QUICK['only']}"
                             " (options given explicitly win)")
    args = parser.parse_args(argv)
    defaults = dict(QUICK) if args.quick else {"records": 300_000, "runs": 2, "sizes": [100, 1024],
                                                "e2e_messages": 3000, "only": None}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if isinstance(args.sizes, str):
        try:
            args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        except ValueError:
            parser.error(f"--sizes takes whole byte counts, comma-separated: {args.sizes!r}")
    if args.records < 1 or args.runs < 1 or args.e2e_messages < 1 or not args.sizes or min(args.sizes) < 1:
        parser.error("--records, --runs, --e2e-messages and every size must be at least 1")
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if not setups or any(s not in SETUPS for s in setups):
        parser.error(f"--setups takes {' and/or '.join(SETUPS)}, comma-separated: {args.setups!r}")
    rows = pick_rows(args.only)
    try:
        args.seglog_config = dict(kv.split("=", 1) for kv in args.seglog_config)
    except ValueError:
        parser.error(f"--seglog-config takes KEY=VALUE: {args.seglog_config!r}")
    cmdline = " ".join(["python bench/bench_kafka_tools.py", *(argv if argv is not None else sys.argv[1:])])
    lines: list[str] = []
    for setup in setups:
        try:
            results, skipped, notes = run_setup(setup, rows, args)
        except Unavailable as exc:
            lines += [f"### Kafka's own tools, {SETUPS[setup][0]}", "", f"Not measured: {exc}", ""]
            print("\n".join(lines[-4:]), flush=True)
            continue
        lines += report(setup, rows, args, results, skipped, notes, cmdline) + [""]
    return lines


if __name__ == "__main__":
    main()
