"""`seglog broker` vs Apache Kafka under the Java client: Kafka's own ProducerPerformance and
ConsumerPerformance (kafka-tools jars, resolved as the Kafka reference tests do) against one
seglog broker and one Apache Kafka broker (KRaft, Kafka's start-script JVM flags), same machine.

Each case runs on a fresh 4-partition topic: ProducerPerformance with the Java client's defaults
(linger.ms=5, idempotence on, up to 5 requests in flight) and the case's acks and record size,
then ConsumerPerformance reading that topic from the start. Both brokers are warmed up first
(the same workload once, not measured: Kafka's JIT compiles its paths then), then `--rounds`
rounds alternate which broker goes first. Each row prints the median ratio and the rounds'
range, with the broker CPU seconds per run beside it.

    python bench/bench_java_produce.py [--records 300000] [--rounds 3] [--cases all-1k,1-1k,all-100,1-100]
    python bench/bench_java_produce.py --only seglog --records 300000   # a profile run (no Kafka)
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from bench_broker import _cpu_of, start_apache_kafka, start_broker  # noqa: E402
from common import stop_process  # noqa: E402
from kafka_anchor import resolve_jars  # noqa: E402

PARTITIONS = 4
CASES = {"all-1k": ("all", 1024), "1-1k": ("1", 1024), "all-100": ("all", 100), "1-100": ("1", 100)}
_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def _java(jars, main_class: str, args: list[str], timeout: float = 600) -> str:
    """Run one Kafka tool (full JIT, as a user's shell script runs it); its stdout."""
    java = shutil.which("java")
    if java is None:
        raise SystemExit("no `java` on PATH")
    cmd = [java, "-Xmx512m", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={jars.folder / 'log4j2-tools.properties'}",
           "-cp", jars.classpath, main_class, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{main_class} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def create_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
        future.result(60)
    time.sleep(0.5)           # leaders elected on the peer


def produce(jars, bootstrap: str, topic: str, records: int, acks: str, size: int) -> float:
    """ProducerPerformance, unthrottled: MB/s (its own figure, 1 MB = 2^20 bytes)."""
    out = _java(jars, "org.apache.kafka.tools.ProducerPerformance",
                ["--topic", topic, "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
                 "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}"])
    found = _PRODUCED.findall(out)
    if not found or int(found[-1][0]) != records:
        raise RuntimeError(f"ProducerPerformance did not report {records} records: {out[-800:]}")
    return float(found[-1][2])


def consume(jars, bootstrap: str, topic: str, records: int) -> float:
    """ConsumerPerformance from the start of TOPIC: MB/s of its fetch phase (MB = 2^20 bytes)."""
    out = _java(jars, "org.apache.kafka.tools.ConsumerPerformance",
                ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records), "--timeout", "60000"])
    lines = [line for line in out.splitlines() if line and line[0].isdigit()]
    if not lines:
        raise RuntimeError(f"ConsumerPerformance printed no figures: {out[-800:]}")
    fields = [f.strip() for f in lines[-1].split(",")]
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    if int(fields[4]) < records:
        raise RuntimeError(f"ConsumerPerformance read {fields[4]} of {records} records")
    return float(fields[8])


def run_case(jars, proc, bootstrap: str, topic: str, records: int, acks: str, size: int,
             profile: str | None = None) -> dict:
    """One case on one broker: produce then consume MB/s and the broker's CPU seconds of each.
    `profile`: a path where py-spy's samples of the broker during the produce run are written."""
    spy = _py_spy(proc.pid, profile) if profile else None
    b0 = _cpu_of(proc.pid)
    produced = produce(jars, bootstrap, topic, records, acks, size)
    b1 = _cpu_of(proc.pid)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    consumed = consume(jars, bootstrap, topic, records)
    b2 = _cpu_of(proc.pid)
    return {"produce": produced, "consume": consumed, "produce_cpu": b1 - b0, "consume_cpu": b2 - b1}


def _py_spy(pid: int, out: str) -> subprocess.Popen:
    """py-spy sampling PID (250 Hz, without pausing it) into OUT as collapsed stacks."""
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--nonblocking", "--threads", "-r", "250",
                             "-f", "raw", "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)                  # attached before the run starts
    return proc


def top_frames(raw: str, count: int = 25) -> list[str]:
    """The frames where the broker spent its samples (self and cumulative, in % of busy
    samples; waiting in epoll, where py-spy cannot tell idle from busy, is left out)."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    busy = 0
    for line in Path(raw).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames or "EpollSelector.select" in frames[-1] or "_worker (concurrent" in frames[-1]:
            continue
        busy += int(n)
        own[frames[-1]] = own.get(frames[-1], 0) + int(n)
        for f in set(frames):
            total[f] = total.get(f, 0) + int(n)
    lines = [f"{busy} busy samples", "self:"]
    lines += [f"  {100 * c / busy:5.1f}% {f}" for f, c in sorted(own.items(), key=lambda x: -x[1])[:count]]
    lines.append("cumulative:")
    lines += [f"  {100 * c / busy:5.1f}% {f}" for f, c in sorted(total.items(), key=lambda x: -x[1])[:count * 2]]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--only", choices=("seglog", "kafka"), help="one broker only (a profile run)")
    parser.add_argument("--profile", metavar="DIR", help="py-spy the seglog broker during each measured produce run;"
                        " samples and top frames written to DIR")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    jars = resolve_jars()
    names = [n for n in ("seglog", "kafka") if args.only in (None, n)]
    starters = {"seglog": start_broker, "kafka": start_apache_kafka}
    with tempfile.TemporaryDirectory() as workdir:
        brokers = {}
        for name in names:
            os.makedirs(f"{workdir}/{name}")
            brokers[name] = starters[name](f"{workdir}/{name}")
        try:
            topics = [f"{c}-{r}" for c in cases for r in range(args.rounds + 1)]
            for name, (proc, bootstrap) in brokers.items():
                create_topics(bootstrap, topics)
            results: dict[tuple[str, str], list[dict]] = {}
            for r in range(args.rounds + 1):        # round 0 warms both brokers up
                order = names if r % 2 else names[::-1]
                for case in cases:
                    acks, size = CASES[case]
                    for name in order:
                        proc, bootstrap = brokers[name]
                        profile = (f"{args.profile}/{case}-{r}.raw" if args.profile and r and name == "seglog"
                                   else None)
                        got = run_case(jars, proc, bootstrap, f"{case}-{r}", args.records, acks, size, profile)
                        if profile:
                            Path(profile[:-4] + ".top").write_text("\n".join(top_frames(profile)) + "\n")
                        print(f"round {r} {case} {name}: {got}", flush=True)
                        if r:
                            results.setdefault((case, name), []).append(got)
        finally:
            for proc, _ in brokers.values():
                stop_process(proc, 60)
    _table(args, cases, names, results)


def _table(args, cases, names, results) -> None:
    print(f"\n### Kafka's ProducerPerformance / ConsumerPerformance, {args.records:,} records, "
          f"{PARTITIONS} partitions, {args.rounds} rounds after a warm-up\n")
    if len(names) == 1:
        print("| case | metric | MB/s per round | broker CPU s |\n|---|---|---|---|")
        for case in cases:
            runs = results[(case, names[0])]
            for metric in ("produce", "consume"):
                figures = ", ".join(f"{r[metric]:.1f}" for r in runs)
                cpu = ", ".join(f"{r[metric + '_cpu']:.1f}" for r in runs)
                print(f"| {case} | {metric} | {figures} | {cpu} |")
        return
    print("| case | metric | seglog MB/s | Kafka MB/s | ratio (median) | rounds | broker CPU s seglog / Kafka |")
    print("|---|---|---:|---:|---:|---|---|")
    for case in cases:
        ours, theirs = results[(case, "seglog")], results[(case, "kafka")]
        for metric in ("produce", "consume"):
            cpu = metric + "_cpu"
            ratios = [o[metric] / t[metric] for o, t in zip(ours, theirs)]
            rounds = ", ".join(f"{r:.2f}" for r in ratios)
            print(f"| {case} | {metric} | {statistics.median(o[metric] for o in ours):.1f} | "
                  f"{statistics.median(t[metric] for t in theirs):.1f} | {statistics.median(ratios):.2f}x | "
                  f"{rounds} | {statistics.median(o[cpu] for o in ours):.1f} / "
                  f"{statistics.median(t[cpu] for t in theirs):.1f} |")


if __name__ == "__main__":
    main()
