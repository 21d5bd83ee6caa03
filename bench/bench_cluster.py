"""A 3-broker seglog cluster on ZooKeeper under librdkafka: replicated produce and consume
throughput, and failover time after a leader's SIGKILL, beside Apache Kafka on the same workload.

One run starts a standalone ZooKeeper (tests/zookeeper_reference.py, Debian's jars) and three
`seglog broker` processes on 127.0.0.1 (tests/cluster/seglog_cluster.py, the way the cluster tests
start them) with zookeeper.session.timeout.ms=6000 and Kafka's defaults otherwise
(auto.leader.rebalance.enable=false so that leaderships stay put during the run), and measures:

- produce: `--records` records of `--record-bytes` to a `--partitions`-partition topic with
  RF=3, min.insync.replicas=2 and acks=all vs the same to an RF=1 topic with the same producer, on
  the same cluster; the ratio RF3 / RF1 is the cost of replication. Two acks=all producers:
  pipelined (up to 5 requests in flight per connection, as Kafka's Java producer sends them, not
  idempotent) and idempotent. librdkafka's idempotent producer keeps one produce request in flight
  per partition and, while it waits for the answer, its broker threads poll the socket without
  sleeping: the longer the replicated round trip, the more CPU the client burns, which on a small
  machine the brokers lack. RF=1 with acks=1 (not idempotent) is measured too;
- consume: an assign() consumer reading each topic from offset 0 (leader reads);
- failover: a producer sending acks=all continuously (`--rate` records/s) to a 1-partition RF=3
  topic; the leader of that partition is SIGKILLed; the time from the kill to the first
  acknowledgment of a record handed to the producer after the kill (so one only the new leader
  can have acknowledged), and to the first Metadata answer of a surviving broker that names a
  new leader (polled every 50 ms). `--failovers` repetitions (the killed broker is restarted and
  the ISR is full again before the next), median and max. Every acknowledged record is read back
  at the end (missing / duplicated ones are counted).

Then the same workload against Apache Kafka 4.x (bench/kafka_anchor.py's jars, the JVM flags of
Kafka's start scripts): a 3-node KRaft cluster, combined broker+controller mode, three processes,
broker.session.timeout.ms=6000 (KRaft's counterpart of the ZooKeeper session). When the 3-node
cluster cannot run here, the reason is printed and a single Kafka broker's RF=1 figures are the
anchor instead.

    python bench/bench_cluster.py [--records 200000] [--record-bytes 512] [--partitions 6]
        [--rounds 1] [--failovers 3] [--no-kafka] [--kafka-single]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests", REPO / "tests" / "cluster", REPO / "bench"):
    sys.path.insert(0, str(_p))

from zookeeper_reference import ZooKeeperCluster, ZooKeeperUnavailable, free_ports  # noqa: E402

SESSION_MS = 6000
# Kafka's defaults for the replication settings (the test harness's FAST values are for tests),
# except auto.leader.rebalance.enable: the benchmark keeps leaderships where it measures them.
SEGLOG_PROPS = {
    "zookeeper.session.timeout.ms": str(SESSION_MS),
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.backoff.ms": "1000",
    "replica.socket.timeout.ms": "30000",
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "5000",
    "auto.leader.rebalance.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}
KAFKA_PROPS = {
    "broker.session.timeout.ms": str(SESSION_MS),
    "auto.leader.rebalance.enable": "false",
    "num.io.threads": "8", "num.network.threads": "3",                 # Kafka's defaults
    "log.segment.bytes": str(1 << 30),
    "offsets.topic.num.partitions": "3",
}
KAFKA_CLUSTER_PROPS = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3", "share.coordinator.state.topic.min.isr": "2",
}


class Unavailable(Exception):
    """A cluster that cannot be started here (the reason is printed instead of its figures)."""


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _metadata(port: int, topic: str, timeout: float = 2.0) -> tuple[int, dict[int, tuple[int, int, list, list]]]:
    """(controller id, {partition: (leader, leader epoch, replicas, isr)}) from one broker."""
    from logcore.wire.client import KafkaConnection
    with KafkaConnection("127.0.0.1", port, timeout_s=timeout) as conn:
        md = conn.request(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    t = md.topics[0]
    if int(t.error_code) != 0:
        raise RuntimeError(f"Metadata of {topic} from 127.0.0.1:{port}: error {int(t.error_code)}")
    return md.controller_id, {p.partition_index: (p.leader_id, p.leader_epoch, list(p.replica_nodes),
                                                  list(p.isr_nodes)) for p in t.partitions}


# ----------------------------------------------------------------------------------- clusters

class Cluster:
    """What the workload needs of a cluster: addresses, processes, kill and restart by id."""
    name = ""
    ports: dict[int, int]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def pids(self) -> list[int]:
        raise NotImplementedError

    def alive(self, broker_id: int) -> bool:
        raise NotImplementedError

    def kill(self, broker_id: int) -> None:
        raise NotImplementedError

    def restart(self, broker_id: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def cpu(self) -> float:
        return sum(_cpu_of(pid) for pid in self.pids())

    def rss_mb(self) -> float:
        """Resident memory of the cluster's processes, MB."""
        total = 0
        for pid in self.pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total / 1024

    def metadata(self, topic: str, exclude: int | None = None):
        last = None
        for broker_id, port in self.ports.items():
            if broker_id == exclude or not self.alive(broker_id):
                continue
            try:
                return _metadata(port, topic)
            except Exception as exc:   # noqa: BLE001 - ask the next broker
                last = exc
        raise RuntimeError(f"no broker answered Metadata of {topic}: {last}")

    def wait_for(self, condition, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                result = condition()
                if result:
                    return result
            except Exception as exc:   # noqa: BLE001 - between states
                last = exc
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")

    def controller_id(self) -> int:
        """The controller a live broker names in Metadata (ZooKeeper's; KRaft names a random broker)."""
        from logcore.wire.client import KafkaConnection
        port = next(p for i, p in self.ports.items() if self.alive(i))
        with KafkaConnection("127.0.0.1", port, timeout_s=5) as conn:
            return conn.request(3, {"topics": [], "allow_auto_topic_creation": False}).controller_id

    def full_isr(self, topic: str, rf: int) -> bool:
        _c, parts = self.metadata(topic)
        return bool(parts) and all(leader >= 0 and len(isr) == rf for leader, _e, _r, isr in parts.values())

    def create_topic(self, name: str, partitions: int, rf: int, config: dict[str, str] | None = None,
                     assignment: list[list[int]] | None = None) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topic = NewTopic(name, partitions, replica_assignment=assignment, config=config or {}) if assignment \
            else NewTopic(name, partitions, rf, config=config or {})
        admin.create_topics([topic], request_timeout=60)[name].result(60)
        self.wait_for(lambda: self.full_isr(name, rf), 60, f"leaders and full ISRs of {name}")


class SeglogClusterRun(Cluster):
    """ZooKeeper + 3 `seglog broker` processes (tests/cluster/seglog_cluster.py)."""
    name = "seglog cluster"

    def __init__(self, workdir: Path, extra: dict[str, str] | None = None):
        from seglog_cluster import SeglogCluster
        self.zk = ZooKeeperCluster(workdir / "zk", size=1)
        try:
            self.zk.start()
        except ZooKeeperUnavailable as exc:
            self.zk.stop()
            raise Unavailable(f"ZooKeeper: {exc}") from None
        self.cluster = SeglogCluster(workdir / "seglog", self.zk.connect_string, size=3,
                                     props={**SEGLOG_PROPS, **(extra or {})})
        try:
            self.cluster.start()
        except Exception:
            self.close()
            raise
        self.ports = {i: b.port for i, b in self.cluster.brokers.items()}

    def pids(self) -> list[int]:
        """The brokers' and ZooKeeper's processes."""
        return [b.proc.pid for b in self.cluster.brokers.values() if b.alive()] + \
            [n.pid for n in self.zk.nodes if n.alive()]

    def alive(self, broker_id: int) -> bool:
        return self.cluster.brokers[broker_id].alive()

    def kill(self, broker_id: int) -> None:
        self.cluster.brokers[broker_id].kill()

    def restart(self, broker_id: int) -> None:
        self.cluster.brokers[broker_id].start()

    def close(self) -> None:
        if getattr(self, "cluster", None) is not None:
            self.cluster.close()
        self.zk.stop()

    def log_tails(self) -> str:
        return self.cluster.logs()


class KafkaNode:
    """One Apache Kafka process of a KRaft cluster, started with the JVM flags of Kafka's scripts."""

    def __init__(self, broker, java: str, jvm: list[str]):
        self.broker = broker          # a kafka_reference.KafkaBroker (its config, dirs and jars)
        self.java = java
        self.jvm = jvm
        self.proc: subprocess.Popen | None = None
        self.log_offset = 0

    def launch(self) -> None:
        b = self.broker
        self.log_offset = b.log_path.stat().st_size if b.log_path.exists() else 0
        cmd = [self.java, *self.jvm, f"-Dlog4j2.configurationFile={b.jars.folder / 'log4j2-broker.properties'}",
               f"-Dseglog.kafka.log={b.log_path}", "-cp", b.jars.classpath, "kafka.Kafka", str(b.config_path)]
        with open(b.workdir / "broker.out", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=b.workdir)
        b.proc = self.proc

    def started(self) -> bool:
        if self.proc.poll() is not None:
            raise Unavailable(f"Kafka node exited with {self.proc.returncode}: {self.broker._tail()}")
        return "Kafka Server started" in self.broker._log_since(self.log_offset) and self.broker._port_answers()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


class KafkaClusterRun(Cluster):
    """Apache Kafka in KRaft combined mode: `size` processes, each broker and controller voter."""

    def __init__(self, workdir: Path, size: int = 3, start_timeout: float = 300):
        from bench_spark_kafka import KAFKA_JVM
        from kafka_anchor import KafkaUnavailable, resolve_jars
        from kafka_reference import KafkaBroker, random_cluster_id, server_properties
        import shutil
        self.name = f"Apache Kafka ({size} node{'s' if size > 1 else ''})"
        java = shutil.which("java")
        if java is None:
            raise Unavailable("no `java` on PATH (Kafka needs Java 17+)")
        try:
            jars = resolve_jars()
        except KafkaUnavailable as exc:
            raise Unavailable(str(exc)) from None
        cid = random_cluster_id()
        ports = free_ports(2 * size)
        voters = ",".join(f"{i + 1}@127.0.0.1:{ports[size + i]}" for i in range(size))
        self.nodes: dict[int, KafkaNode] = {}
        self.ports = {}
        for i in range(size):
            node_id = i + 1
            wd = workdir / f"kafka-{node_id}"
            wd.mkdir(parents=True)
            b = KafkaBroker(jars, wd, wd / "data", wd / "metadata", ports[i], ports[size + i], cid)
            props = server_properties(node_id, b.port, b.controller_port, b.log_dirs, b.metadata_dir,
                                      {**KAFKA_PROPS, **(KAFKA_CLUSTER_PROPS if size > 1 else {}),
                                       "controller.quorum.voters": voters})
            b.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            fmt = jars.run_tool(jars.storage_tool, ["format", "-t", cid, "-c", str(b.config_path),
                                                    "--ignore-formatted"], timeout=180)
            if fmt.returncode != 0:
                raise Unavailable(f"kafka-storage format of node {node_id} failed: {fmt.stderr[-1500:]}")
            self.nodes[node_id] = KafkaNode(b, java, KAFKA_JVM)
            self.ports[node_id] = b.port
        for n in self.nodes.values():
            n.launch()
        try:
            self._wait_started(list(self.nodes), start_timeout)
        except Exception:
            self.close()
            raise

    def _wait_started(self, ids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(ids)
        while pending:
            pending = [i for i in pending if not self.nodes[i].started()]
            if pending and time.monotonic() > deadline:
                tail = self.nodes[pending[0]].broker._tail()
                raise Unavailable(f"Kafka node(s) {pending} did not start within {timeout:.0f} s: {tail[-1500:]}")
            time.sleep(0.2)

    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes.values() if n.alive()]

    def alive(self, broker_id: int) -> bool:
        return self.nodes[broker_id].alive()

    def kill(self, broker_id: int) -> None:
        self.nodes[broker_id].kill()

    def restart(self, broker_id: int) -> None:
        self.nodes[broker_id].launch()
        self._wait_started([broker_id], 300)

    def close(self) -> None:
        for n in self.nodes.values():
            n.kill()

    def log_tails(self) -> str:
        return "\n".join(f"----- kafka node {i}\n{n.broker._tail()}" for i, n in self.nodes.items())


# ----------------------------------------------------------------------------------- workload

# The producers measured: acks, idempotence, requests in flight per connection.
PRODUCERS = {"1": ("1", False, 5), "all": ("all", True, 5), "pipe": ("all", False, 5)}


def produce(bootstrap: str, topic: str, n: int, size: int, partitions: int, producer: str) -> float:
    """Seconds to produce `n` records of `size` bytes round-robin over the partitions, unpaced,
    with one of the PRODUCERS."""
    from confluent_kafka import Producer
    acks, idempotent, in_flight = PRODUCERS[producer]
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": idempotent,
                  "max.in.flight.requests.per.connection": in_flight,
                  "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})
    payload = os.urandom(size)
    failures = []

    def cb(err, _msg):
        if err is not None:
            failures.append(err)
    p.produce(topic, value=payload, partition=0)      # connections, metadata, producer id
    p.flush(60)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=payload, partition=i % partitions, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.001)
        p.poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - t0
    if failures or left:
        raise RuntimeError(f"produce to {topic}: {len(failures)} records failed ({failures[:1]}), {left} unsent")
    return elapsed


def consume(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    """Seconds for an assign() consumer to read `n` records of the topic from offset 0."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cluster", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        msgs = c.consume(10000, timeout=1)
        got += sum(1 for m in msgs if m.error() is None)
        if time.perf_counter() - t0 > 300:
            raise TimeoutError(f"consumer read {got} of {n} records of {topic} in 300 s")
    elapsed = time.perf_counter() - t0
    c.close()
    return elapsed


def throughput(cl: Cluster, args, rnd: int) -> dict:
    """One round: produce to and consume from an RF=1 and an RF=3 topic (order alternates by
    round); a single broker has the RF=1 topic only."""
    out = {}
    order = (("rf1", 1, "1"), ("rf1all", 1, "all"), ("rf3", 3, "all"), ("rf1pipe", 1, "pipe"),
             ("rf3pipe", 3, "pipe")) if len(cl.ports) >= 3 else (("rf1", 1, "1"),)
    if rnd % 2:
        order = order[::-1]
    for key, rf, _acks in order:
        config = {"min.insync.replicas": "2"} if rf == 3 else {}
        cl.create_topic(f"{key}-{rnd}", args.partitions, rf, config)
    for key, rf, acks in order:
        b0, c0 = cl.cpu(), _self_cpu()
        out[f"produce {key}"] = produce(cl.bootstrap, f"{key}-{rnd}", args.records, args.record_bytes,
                                        args.partitions, acks)
        out[f"cpu produce {key}"] = (cl.cpu() - b0, _self_cpu() - c0)
    for key, _rf, _acks in order:
        if key not in ("rf1", "rf3"):
            continue                        # the same bytes as rf1 or rf3
        b0, c0 = cl.cpu(), _self_cpu()
        out[f"consume {key}"] = consume(cl.bootstrap, f"{key}-{rnd}", args.records + 1, args.partitions)
        out[f"cpu consume {key}"] = (cl.cpu() - b0, _self_cpu() - c0)
    return out


class PacedProducer(threading.Thread):
    """acks=all, idempotent, one partition, `rate` records/s; each record's value is its sequence
    number (padded to `size`); the send time and acknowledgment time of every record are kept."""

    def __init__(self, bootstrap: str, topic: str, rate: float, size: int):
        super().__init__(daemon=True)
        from confluent_kafka import Producer
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "log_level": 3})
        self.topic, self.rate, self.size = topic, rate, size
        self.sent: dict[int, float] = {}
        self.acked: dict[int, float] = {}
        self.failed: dict[int, str] = {}
        self.stop_flag = threading.Event()
        self.seq = 0

    def _cb(self, err, msg):
        seq = int(msg.value()[:12])
        if err is None:
            self.acked[seq] = time.monotonic()
        else:
            self.failed[seq] = err.name()

    def run(self) -> None:
        pad = b"x" * max(0, self.size - 12)
        t0 = time.monotonic()
        while not self.stop_flag.is_set():
            wait = t0 + self.seq / self.rate - time.monotonic()
            if wait > 0:
                self.producer.poll(min(wait, 0.002))
                continue
            self.sent[self.seq] = time.monotonic()
            try:
                self.producer.produce(self.topic, value=b"%012d" % self.seq + pad, partition=0, on_delivery=self._cb)
            except BufferError:
                self.producer.poll(0.01)
                continue
            self.seq += 1
            self.producer.poll(0)
        self.producer.flush(120)


def failover(cl: Cluster, args) -> tuple[list[dict], dict]:
    """`args.failovers` leader kills under a continuous acks=all producer."""
    topic = "failover"
    assignment = None
    if isinstance(cl, SeglogClusterRun):
        # The ZooKeeper controller as the first leader: the first kill takes both (the slower case).
        controller = cl.controller_id()
        if controller in cl.ports:
            assignment = [[controller] + [b for b in cl.ports if b != controller]]
    cl.create_topic(topic, 1, 3, {"min.insync.replicas": "2"}, assignment)
    prod = PacedProducer(cl.bootstrap, topic, args.rate, 100)
    prod.start()
    results = []
    try:
        cl.wait_for(lambda: len(prod.acked) > args.rate, 60, "the failover producer's first second of acks")
        for rep in range(args.failovers):
            controller, parts = cl.metadata(topic)
            leader, epoch = parts[0][0], parts[0][1]
            time.sleep(1.0)
            t_kill = time.monotonic()
            cl.kill(leader)
            t_elect = None
            new_leader = None
            while time.monotonic() - t_kill < 120:
                try:
                    _c, p = cl.metadata(topic, exclude=leader)
                    if p[0][0] not in (leader, -1):
                        t_elect, new_leader = time.monotonic(), p[0][0]
                        break
                except Exception:      # noqa: BLE001 - between states
                    pass
                time.sleep(0.05)
            if t_elect is None:
                raise RuntimeError(f"{cl.name}: no new leader of {topic} within 120 s of killing {leader}")
            # The first acknowledgment of a record handed to the producer after the kill.
            def first_ack():
                after = [t for s, t in list(prod.acked.items()) if prod.sent.get(s, 0) > t_kill]
                return min(after) if after else None
            t_ack = cl.wait_for(first_ack, 120, "an acknowledgment from the new leader")
            # (KRaft's Metadata names a random broker as controller: only ZooKeeper's is the real one.)
            was_controller = controller == leader and isinstance(cl, SeglogClusterRun)
            results.append({"killed": leader, "was controller": was_controller, "epoch": epoch,
                            "new leader": new_leader, "elect": t_elect - t_kill, "ack": t_ack - t_kill})
            print(f"  {cl.name} failover {rep + 1}: killed {leader}"
                  f"{' (controller)' if was_controller else ''}, new leader {new_leader} in Metadata"
                  f" after {t_elect - t_kill:.2f} s, first ack after {t_ack - t_kill:.2f} s", flush=True)
            cl.restart(leader)
            cl.wait_for(lambda: cl.full_isr(topic, 3), 180, f"broker {leader} back in the ISR of {topic}")
    finally:
        prod.stop_flag.set()
        prod.join(180)
    check = verify(cl, topic, prod)
    return results, check


def verify(cl: Cluster, topic: str, prod: PacedProducer) -> dict:
    """Read the failover topic back: acknowledged records missing, and records read twice."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": cl.bootstrap, "group.id": "bench-verify", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 120
    eof = False
    while not eof and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof = True
                continue
            raise RuntimeError(f"reading {topic} back: {m.error()}")
        seq = int(m.value()[:12])
        seen[seq] = seen.get(seq, 0) + 1
    c.close()
    missing = sorted(s for s in prod.acked if s not in seen)
    return {"sent": prod.seq, "acked": len(prod.acked), "failed": len(prod.failed),
            "failed kinds": sorted(set(prod.failed.values())), "read": sum(seen.values()),
            "missing": len(missing), "first missing": missing[:5],
            "duplicates": sum(1 for v in seen.values() if v > 1), "complete": eof}


def measure(cl: Cluster, args, with_failover: bool = True) -> dict:
    if args.warmup:
        cl.create_topic("warmup", args.partitions, 3 if len(cl.ports) >= 3 else 1)
        produce(cl.bootstrap, "warmup", args.warmup, args.record_bytes, args.partitions,
                "all" if len(cl.ports) >= 3 else "1")
        consume(cl.bootstrap, "warmup", args.warmup + 1, args.partitions)
    rounds = [throughput(cl, args, r) for r in range(args.rounds)]
    result = {"rounds": rounds, "rss": cl.rss_mb(), "processes": len(cl.pids())}
    if with_failover and args.failovers and len(cl.ports) >= 3:
        result["failover"], result["check"] = failover(cl, args)
    return result


# ----------------------------------------------------------------------------------- report

def _median(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def _cpu(rounds: list[dict], key: str) -> str:
    r = rounds[len(rounds) // 2]
    return f"{r[key][0]:.1f} / {r[key][1]:.1f}"


def report(args, results: dict[str, dict], skipped: dict[str, str], cmdline: str) -> list[str]:
    mb = args.records * args.record_bytes / 1e6
    names = list(results)
    lines = [f"### seglog cluster (3 brokers + ZooKeeper) vs Apache Kafka, librdkafka client "
             f"({args.records:,} x {args.record_bytes} B records, {args.partitions} partitions; "
             f"RF=3 min.insync.replicas=2 vs RF=1 with the same acks=all producer, pipelined or idempotent, and RF=1 acks=1; "
             f"session timeout {SESSION_MS / 1000:.0f} s)", "",
             f"`{cmdline}`; median of {args.rounds} round(s) after {args.warmup:,} warm-up records.", "",
             "| metric | " + " | ".join(names) + " |" + (" seglog / Kafka |" if len(names) > 1 else ""),
             "|---|" + "---:|" * len(names) + ("---:|" if len(names) > 1 else "")]

    def row(label: str, values: list[float | None], fmt: str, ratio_higher_better: bool | None = True):
        cells = [("n/a" if v is None else fmt.format(v)) for v in values]
        line = f"| {label} | " + " | ".join(cells) + " |"
        if len(names) > 1:
            a, b = values[0], values[1]
            if a is None or b is None or ratio_higher_better is None or not a or not b:
                line += " |"
            else:
                line += f" {a / b if ratio_higher_better else b / a:.2f}x |"
        lines.append(line)

    def get(name, fn):
        try:
            return fn(results[name])
        except (KeyError, IndexError, ValueError, statistics.StatisticsError):
            return None

    for key, label in (("rf1", "RF=1 acks=1"), ("rf1pipe", "RF=1 acks=all pipelined"),
                       ("rf3pipe", "RF=3 acks=all pipelined"), ("rf1all", "RF=1 acks=all idempotent"),
                       ("rf3", "RF=3 acks=all idempotent")):
        row(f"produce {label}, records/s",
            [get(n, lambda r, k=key: args.records / _median(r["rounds"], f"produce {k}")) for n in names], "{:,.0f}")
        row(f"produce {label}, MB/s",
            [get(n, lambda r, k=key: mb / _median(r["rounds"], f"produce {k}")) for n in names], "{:,.1f}")
    def ratios(label: str, rf1: str, rf3: str) -> None:
        """The median per-round ratio, and the range of the rounds' ratios beside it."""
        def cell(r):
            each = [x[f"produce {rf1}"] / x[f"produce {rf3}"] for x in r["rounds"]]
            return f"{statistics.median(each):.2f}x" + (f" ({min(each):.2f}-{max(each):.2f})" if len(each) > 1 else "")
        lines.append(f"| {label} | " + " | ".join(get(n, cell) or "n/a" for n in names) + " |"
                     + (" |" if len(names) > 1 else ""))
    ratios("produce RF=3 / RF=1, acks=all pipelined, median (range of rounds) (target >= 0.5x)", "rf1pipe", "rf3pipe")
    ratios("produce RF=3 / RF=1, acks=all idempotent, median (range of rounds)", "rf1all", "rf3")
    row("produce RF=3 acks=all idempotent / RF=1 acks=1",
        [get(n, lambda r: statistics.median(x["produce rf1"] / x["produce rf3"] for x in r["rounds"]))
         for n in names], "{:.2f}x", None)
    for key, label in (("rf1", "RF=1"), ("rf3", "RF=3 (leader reads)")):
        row(f"consume {label}, MB/s",
            [get(n, lambda r, k=key: mb / _median(r["rounds"], f"consume {k}")) for n in names], "{:,.1f}")
    row("consume RF=3 / RF=1",
        [get(n, lambda r: statistics.median(x["consume rf1"] / x["consume rf3"] for x in r["rounds"]))
         for n in names], "{:.2f}x", None)
    for phase, label in (("produce rf1", "produce RF=1 acks=1"), ("produce rf1pipe", "produce RF=1 pipelined"),
                         ("produce rf3pipe", "produce RF=3 pipelined"), ("produce rf1all", "produce RF=1 idempotent"),
                         ("produce rf3", "produce RF=3 idempotent"), ("consume rf1", "consume RF=1"),
                         ("consume rf3", "consume RF=3")):
        cells = [get(n, lambda r, p=phase: _cpu(r["rounds"], f"cpu {p}")) for n in names]
        lines.append(f"| CPU s, {label}: brokers / client | "
                     + " | ".join(c or "n/a" for c in cells) + " |" + (" |" if len(names) > 1 else ""))
    for key, label in (("elect", "kill -> new leader in Metadata"),
                       ("ack", "kill -> first ack on the new leader (target <= 6 s)")):
        row(f"failover {label}, median s",
            [get(n, lambda r, k=key: statistics.median(x[k] for x in r["failover"])) for n in names], "{:.2f}",
            ratio_higher_better=False)
        row(f"failover {label}, max s",
            [get(n, lambda r, k=key: max(x[k] for x in r["failover"])) for n in names], "{:.2f}",
            ratio_higher_better=False)
    lines.append("| failovers (of them, the killed leader was also the ZooKeeper controller) | "
                 + " | ".join(get(n, lambda r: f"{len(r['failover'])} ({sum(x['was controller'] for x in r['failover'])})")
                              or "n/a" for n in names) + " |" + (" |" if len(names) > 1 else ""))
    lines.append("| failover producer: acked / failed / acked but missing / duplicates | "
                 + " | ".join(get(n, lambda r: "{acked:,} / {failed} / {missing} / {duplicates}".format(**r["check"]))
                              or "n/a" for n in names) + " |" + (" |" if len(names) > 1 else ""))
    lines.append("| resident memory after the run, MB (processes) | "
                 + " | ".join(get(n, lambda r: f"{r['rss']:,.0f} ({r['processes']})") or "n/a" for n in names)
                 + " |" + (" |" if len(names) > 1 else ""))
    lines.append("")
    lines.append(f"Failover: a producer sends acks=all at {args.rate:.0f} records/s to a 1-partition RF=3 topic;"
                 " the partition's leader is SIGKILLed; times from the kill to the first Metadata answer of a"
                 " surviving broker naming a new leader (polled every 50 ms) and to the first acknowledgment of"
                 " a record handed to the producer after the kill; the killed broker is restarted and back in"
                 " the ISR before the next kill. seglog: zookeeper.session.timeout.ms=6000; Kafka (KRaft):"
                 " broker.session.timeout.ms=6000. CPU s and memory are summed over the cluster's processes (seglog:"
                 " 3 brokers + ZooKeeper; Kafka: 3 combined broker+controller JVMs, -Xmx1G -Xms1G each; 2 cores:"
                 " the brokers and the client share them). Ratios: seglog / Kafka for throughput,"
                 " Kafka / seglog for times (above 1: seglog ahead).")
    for name in names:
        if results[name].get("failover"):
            lines.append("")
            lines.append(f"{name}, each failover (s to the new leader in Metadata / to the first ack): "
                         + ", ".join(f"{x['elect']:.2f} / {x['ack']:.2f}{' (controller killed too)' if x['was controller'] else ''}"
                                     for x in results[name]["failover"]) + ".")
    for name, reason in skipped.items():
        lines.append(f"{name}: not measured ({reason}).")
    print("\n".join(lines) + "\n", flush=True)
    return lines


@contextlib.contextmanager
def _workdir(keep: str | None, name: str):
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as workdir:
            yield workdir
    else:
        path = Path(keep) / "".join(c if c.isalnum() else "-" for c in name).strip("-")
        path.mkdir(parents=True, exist_ok=False)
        yield str(path)


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=512)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1, help="throughput rounds (RF order alternates)")
    parser.add_argument("--warmup", type=int, default=20_000, help="records produced and consumed first (not measured)")
    parser.add_argument("--failovers", type=int, default=3, help="leader kills (0: none)")
    parser.add_argument("--rate", type=float, default=1000, help="records/s of the failover producer")
    parser.add_argument("--seglog-prop", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting of the seglog cluster over the benchmark's (repeatable)")
    parser.add_argument("--workdir", help="keep ZooKeeper's and the brokers' data and logs here (default: a"
                        " temporary folder, removed)")
    parser.add_argument("--no-kafka", action="store_true", help="measure the seglog cluster only")
    parser.add_argument("--kafka-single", action="store_true",
                        help="skip the 3-node Kafka cluster: a single Kafka broker's RF=1 figures as the anchor")
    args = parser.parse_args(argv)
    cmdline = " ".join(["python bench/bench_cluster.py", *(argv if argv is not None else sys.argv[1:])])
    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    extra = dict(kv.split("=", 1) for kv in args.seglog_prop)
    candidates = [("seglog cluster", lambda wd: SeglogClusterRun(wd, extra))]
    if not args.no_kafka:
        if not args.kafka_single:
            candidates.append(("Apache Kafka (3 nodes)", lambda wd: KafkaClusterRun(wd, 3)))
        else:
            skipped["Apache Kafka (3 nodes)"] = "left out by --kafka-single"
    for name, start in candidates:
        with _workdir(args.workdir, name) as workdir:
            print(f"starting {name} ...", flush=True)
            try:
                cl = start(Path(workdir))
            except Unavailable as exc:
                skipped[name] = str(exc)
                print(f"{name}: not measured ({exc})", flush=True)
                continue
            try:
                results[name] = measure(cl, args)
            except Exception as exc:   # noqa: BLE001 - reported; the seglog cluster's failure is fatal
                print(f"{name} failed: {type(exc).__name__}: {exc}\n{cl.log_tails()}", flush=True)
                if name == "seglog cluster":
                    raise
                skipped[name] = f"workload failed: {type(exc).__name__}: {exc}"
            finally:
                cl.close()
    if not args.no_kafka and not any(n.startswith("Apache Kafka") for n in results):
        with _workdir(args.workdir, "Apache Kafka (1 node)") as workdir:
            print("starting Apache Kafka (1 node, RF=1 anchor) ...", flush=True)
            try:
                cl = KafkaClusterRun(Path(workdir), 1)
                try:
                    results[cl.name + ", RF=1 only"] = measure(cl, args, with_failover=False)
                finally:
                    cl.close()
            except Unavailable as exc:
                skipped["Apache Kafka (1 node)"] = str(exc)
    return report(args, results, skipped, cmdline)


if __name__ == "__main__":
    main()
