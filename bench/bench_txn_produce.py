"""Transactional produce: Kafka's own ProducerPerformance (org.apache.kafka.tools.ProducerPerformance,
kafka-tools from bench/kafka_anchor.py's jars) with `--transactional-id` and
`--transaction-duration-ms` against seglog and against Apache Kafka, same machine, same run, as a
ratio (issue #27's target: at least 1.0x).

Two rows, each on a freshly started server: the idempotent producer without transactions
(acks=all; the baseline both serve) and the same producer in transactions committed every
`--txn-ms`. One broker by default (`seglog broker` and Kafka 4.x KRaft with its start scripts'
JVM flags, as bench_broker.py starts them); `--cluster` runs three brokers each (a seglog cluster
over ZooKeeper and a 3-node KRaft cluster, as bench_cluster.py starts them; RF=3,
min.insync.replicas=2). A server that cannot run a row says why in the table (for example a
seglog without transactions refuses the `transaction.state.log.*` settings, or the producer's
InitProducerId fails) instead of a figure.

    python bench/bench_txn_produce.py [--records 200000] [--record-bytes 1024] [--partitions 4]
        [--txn-ms 100] [--cluster] [--no-seglog] [--no-kafka]
"""
from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests", REPO / "tests" / "cluster", REPO / "bench"):
    sys.path.insert(0, str(_p))

TOPIC = "perf"
SEGLOG, KAFKA = "seglog", "Apache Kafka"
# A single broker holds the transaction state log with one replica; a cluster with three.
SINGLE_TXN = {"transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"}
CLUSTER_TXN = {"transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}
_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                      r"([\d.]+) ms max latency(?:, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th)?")


class CouldNotRun(Exception):
    """The row could not be measured on this server; the message says why."""


# ----------------------------------------------------------------------------------- servers

class OneBroker:
    """One broker process this run started (as bench_broker.py starts them); SIGTERM, then SIGKILL
    after STOP_GRACE seconds."""

    def __init__(self, proc: subprocess.Popen, bootstrap: str, stop_grace: float):
        self.proc, self.bootstrap, self.stop_grace = proc, bootstrap, stop_grace

    def create_topic(self, partitions: int) -> None:
        _create_topic(self.bootstrap, partitions, 1, {})

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(self.stop_grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def single_seglog(workdir: Path, transactional: bool) -> OneBroker:
    import bench_broker
    try:
        proc, bootstrap = bench_broker.start_broker(str(workdir), SINGLE_TXN if transactional else {})
    except SystemExit as exc:      # start_broker's way of saying it did not start
        log = (workdir / "broker.log").read_text(errors="replace").strip().splitlines()
        raise CouldNotRun(f"seglog broker did not start: {log[-1] if log else exc}") from None
    return OneBroker(proc, bootstrap, stop_grace=30)


def single_kafka(workdir: Path, transactional: bool) -> OneBroker:
    import bench_broker
    try:
        # kafka_reference's server properties always carry SINGLE_TXN (a one-node state log)
        proc, bootstrap = bench_broker.start_apache_kafka(str(workdir))
    except bench_broker.PeerUnavailable as exc:
        raise CouldNotRun(f"Apache Kafka did not start: {exc}") from None
    return OneBroker(proc, bootstrap, stop_grace=60)


class ThreeNodes:
    """bench_cluster.py's seglog cluster or KRaft cluster."""

    def __init__(self, name: str, workdir: Path, transactional: bool):
        import bench_cluster
        try:
            if name == SEGLOG:
                self.run = bench_cluster.SeglogClusterRun(workdir, CLUSTER_TXN if transactional else {})
            else:
                self.run = bench_cluster.KafkaClusterRun(workdir, 3)     # its properties carry CLUSTER_TXN
        except (bench_cluster.Unavailable, RuntimeError) as exc:
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            why = [line for line in lines if "error" in line.lower()][-1:] or lines[-1:]
            raise CouldNotRun(f"{name} cluster did not start: {lines[0]} {why[0][:300]}") from None
        self.bootstrap = self.run.bootstrap

    def create_topic(self, partitions: int) -> None:
        self.run.create_topic(TOPIC, partitions, 3, {"min.insync.replicas": "2"})

    def close(self) -> None:
        self.run.close()


def _create_topic(bootstrap: str, partitions: int, rf: int, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, rf, config=config)], request_timeout=60)[TOPIC].result(60)


# ----------------------------------------------------------------------------------- workload

def producer_performance(bootstrap: str, args, transactional: bool) -> dict:
    """One ProducerPerformance run (full JIT, 512 MB heap): its summary line, parsed."""
    from kafka_anchor import KafkaUnavailable, resolve_jars
    try:
        jars = resolve_jars()
    except KafkaUnavailable as exc:
        raise CouldNotRun(f"no Kafka tools: {exc}") from None
    cmd_args = ["--topic", TOPIC, "--num-records", str(args.records), "--record-size", str(args.record_bytes),
                "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
                "enable.idempotence=true", "linger.ms=5", "batch.size=262144", "max.block.ms=30000",
                "delivery.timeout.ms=120000"]
    if transactional:
        cmd_args += ["--transactional-id", f"perf-{time.time_ns()}", "--transaction-duration-ms", str(args.txn_ms)]
    cmd = jars.java_command("org.apache.kafka.tools.ProducerPerformance", cmd_args, heap="-Xmx512m")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    summary = [m for m in map(_SUMMARY.search, proc.stdout.splitlines()) if m]
    if proc.returncode != 0 or not summary:
        why = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])
        errors = [line for line in why if "Exception" in line or "ERROR" in line] or why
        raise CouldNotRun(f"ProducerPerformance exited {proc.returncode}: {errors[0][:300]}")
    m = summary[-1]
    return {"records": int(m.group(1)), "rec/s": float(m.group(2)), "MB/s": float(m.group(3)),
            "avg ms": float(m.group(4)), "p99 ms": float(m.group(8)) if m.group(8) else float("nan")}


def measure(name: str, args, transactional: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        workdir = Path(tmp)
        if args.cluster:
            server = ThreeNodes(name, workdir, transactional)
        else:
            server = (single_seglog if name == SEGLOG else single_kafka)(workdir, transactional)
        try:
            server.create_topic(args.partitions)
            return producer_performance(server.bootstrap, args, transactional)
        finally:
            server.close()


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--txn-ms", type=int, default=100, help="--transaction-duration-ms: commit interval")
    parser.add_argument("--cluster", action="store_true", help="three brokers each instead of one")
    parser.add_argument("--no-seglog", action="store_true")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for one ProducerPerformance run")
    args = parser.parse_args(argv)
    servers = [n for n, off in ((SEGLOG, args.no_seglog), (KAFKA, args.no_kafka)) if not off]
    rows = (("idempotent, no transactions", False),
            (f"transactional, commit every {args.txn_ms} ms", True))
    results: dict[tuple[str, bool], dict | str] = {}
    for _label, transactional in rows:
        for name in servers:
            try:
                results[(name, transactional)] = measure(name, args, transactional)
            except CouldNotRun as exc:
                results[(name, transactional)] = f"could not run: {exc}"
    return _table(args, rows, results)


def _cell(result) -> str:
    if isinstance(result, str):
        return result
    return f"{result['MB/s']:,.1f} MB/s ({result['rec/s']:,.0f} rec/s, p99 {result['p99 ms']:.0f} ms)"


def _table(args, rows, results) -> list[str]:
    shape = "3 brokers, RF=3, min.insync.replicas=2" if args.cluster else "1 broker, RF=1"
    lines = [f"### Transactional produce, Kafka's ProducerPerformance ({args.records:,} x {args.record_bytes} B, "
             f"acks=all, idempotent, {args.partitions} partitions, {shape})", "",
             f"| producer | {SEGLOG} | {KAFKA} | ratio seglog / Kafka |", "|---|---:|---:|---:|"]
    for label, transactional in rows:
        ours, kafka = results.get((SEGLOG, transactional), "not run"), results.get((KAFKA, transactional), "not run")
        ratio = f"{ours['MB/s'] / kafka['MB/s']:.2f}x" if isinstance(ours, dict) and isinstance(kafka, dict) \
            else "n/a (no figure on both)"
        lines.append(f"| {label} | {_cell(ours)} | {_cell(kafka)} | {ratio} |")
    lines += ["", "Each cell is a freshly started server; the same ProducerPerformance (Kafka's Java producer, "
              "linger.ms=5, batch.size=256 KiB) for both. Apache Kafka runs with its start scripts' JVM flags."]
    print("\n".join(lines) + "\n", flush=True)
    return lines


if __name__ == "__main__":
    main()
