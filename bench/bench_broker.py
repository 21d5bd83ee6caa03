"""`seglog broker` under a librdkafka client: produce MB/s, consume MB/s, p50/p99 produce latency.

Workload (the issue's): 1 KiB records, acks=all, enable.idempotence=true, a 4-partition topic;
an unpaced producer for throughput, then an assign() consumer reading everything back, then a
paced producer (1000 records/s) for latency (unpaced latency is queueing). CPU seconds of the
broker process and of this client process are printed beside each figure: at these rates the
Python client can be the limit. Peer brokers are added as anchors when they are measured here.

    python bench/bench_broker.py [--records 100000]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RECORD = 1024
TOPIC = "bench"
PARTITIONS = 4


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def start_broker(workdir: str) -> tuple[subprocess.Popen, str]:
    conf = Path(workdir) / "broker.properties"
    conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={workdir}/logs\nnode.id=0\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                            stdout=subprocess.PIPE, stderr=open(Path(workdir) / "broker.log", "wb"), env=env)
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        raise SystemExit(f"broker did not start: {line!r}")
    return proc, line.strip().rsplit("//", 1)[1]


def produce(bootstrap: str, n: int, *, rate: float | None = None) -> tuple[float, list[float]]:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})
    payload = os.urandom(RECORD)
    latencies: list[float] = []
    failures = [0]

    def make_cb(sent: float):
        def cb(err, _msg):
            if err is not None:
                failures[0] += 1
            else:
                latencies.append(time.perf_counter() - sent)
        return cb

    # Warm up: connection, metadata and the producer id are not part of the measurement.
    p.produce(TOPIC, value=payload, partition=0)
    p.flush(30)
    t0 = time.perf_counter()
    for i in range(n):
        if rate is not None:
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        while True:
            try:
                p.produce(TOPIC, value=payload, partition=i % PARTITIONS, on_delivery=make_cb(time.perf_counter()))
                break
            except BufferError:
                p.poll(0.001)
        p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - t0
    if failures[0]:
        raise SystemExit(f"{failures[0]} records failed")
    return elapsed, latencies


def consume(bootstrap: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        msgs = c.consume(10000, timeout=1)
        got += sum(1 for m in msgs if m.error() is None)
        if time.perf_counter() - t0 > 300:
            raise SystemExit(f"consumer read {got} of {n} records in 300 s")
    elapsed = time.perf_counter() - t0
    c.close()
    return elapsed


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--paced", type=int, default=3000, help="records of the paced latency run")
    args = parser.parse_args(argv)
    from confluent_kafka.admin import AdminClient, NewTopic
    with tempfile.TemporaryDirectory() as workdir:
        proc, bootstrap = start_broker(workdir)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
            mb = args.records * RECORD / 1e6
            b0, c0 = _cpu_of(proc.pid), _self_cpu()
            produce_s, unpaced = produce(bootstrap, args.records)
            b1, c1 = _cpu_of(proc.pid), _self_cpu()
            consume_s = consume(bootstrap, args.records)
            b2, c2 = _cpu_of(proc.pid), _self_cpu()
            _, paced = produce(bootstrap, args.paced, rate=1000)
        finally:
            proc.terminate()
            proc.wait(30)
    lines = [f"### seglog broker, librdkafka client ({args.records:,} x {RECORD} B records, acks=all, "
             f"idempotent, {PARTITIONS} partitions)", "",
             "| metric | seglog broker | broker CPU s | client CPU s |", "|---|---:|---:|---:|",
             f"| produce (unpaced) | {mb / produce_s:,.1f} MB/s | {b1 - b0:.1f} | {c1 - c0:.1f} |",
             f"| consume (assign, from 0) | {mb / consume_s:,.1f} MB/s | {b2 - b1:.1f} | {c2 - c1:.1f} |",
             f"| produce latency p50, paced 1000/s | {_pct(paced, 0.5) * 1000:.2f} ms | | |",
             f"| produce latency p99, paced 1000/s | {_pct(paced, 0.99) * 1000:.2f} ms | | |",
             f"| produce latency p50 / p99, unpaced (queueing) | {_pct(unpaced, 0.5) * 1000:.0f} / "
             f"{_pct(unpaced, 0.99) * 1000:.0f} ms | | |"]
    print("\n".join(lines) + "\n", flush=True)
    return lines


if __name__ == "__main__":
    main()
