"""A seglog cluster for tests: N `seglog broker` processes (the CLI, as a user starts them) on
127.0.0.1 with one ZooKeeper, each with its own log.dirs; kill / pause / restart by pid; every
process it started is stopped at close, and each broker's log is kept for the failure report.
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import broker_spawner
from broker_process import subprocess_env
from zookeeper_reference import free_ports


# Fast failure detection for tests (the reference note's test values).
FAST = {
    "zookeeper.session.timeout.ms": "2000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "3000",
    "replica.high.watermark.checkpoint.interval.ms": "500",
    "controlled.shutdown.retry.backoff.ms": "500",
    "auto.leader.rebalance.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}


class Broker:
    def __init__(self, cluster: "SeglogCluster", broker_id: int, port: int, host: str = "127.0.0.1"):
        self.cluster = cluster
        self.id = broker_id
        self.port = port
        self.host = host            # another loopback address (127.0.0.2) stands for another host
        self.dir = cluster.base / f"broker-{broker_id}"
        self.log_dir = self.dir / "logs"
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self._log_mark = 0          # where log_since_mark() starts (SeglogCluster.mark_logs)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def properties(self) -> dict[str, str]:
        props = {"broker.id": str(self.id), "listeners": f"PLAINTEXT://{self.host}:{self.port}",
                 "log.dirs": str(self.log_dir), "zookeeper.connect": self.cluster.zk_hosts,
                 **FAST, **self.cluster.props}
        props.update(self.cluster.per_broker.get(self.id, {}))
        return props

    def start(self, wait: bool = True) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "broker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        out = open(self.dir / "broker.log", "ab")
        self._log_start = out.tell()        # this run's lines start here
        # Forked from an interpreter that has the CLI imported (broker_spawner.py): the same
        # command, ~1.5 CPU seconds less per start.
        self.proc = broker_spawner.popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(config)],
                                         stdout=out, stderr=subprocess.STDOUT, cwd=str(self.dir), env=subprocess_env())
        out.close()
        self.paused = False
        if wait:
            self.wait_serving()

    def wait_serving(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.id} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if f"listening on PLAINTEXT://{self.host}:{self.port}" in self.log_text()[self._log_start:]:
                return
            time.sleep(0.05)
        raise RuntimeError(f"broker {self.id} did not start within {timeout} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self.paused = False

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (a clean stop: controlled shutdown), then wait."""
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # What the stop was waiting for, in the failing test's captured output: the broker's
            # stack dump (SIGQUIT) and its log.
            self.proc.send_signal(signal.SIGQUIT)
            time.sleep(2)
            print(f"broker {self.id} did not stop within {timeout} s of SIGTERM; its log ends:\n"
                  f"{self.log_tail(250)}", file=sys.stderr)
            self.proc.kill()
            return self.proc.wait(10)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def restart(self) -> None:
        self.kill()
        self.start()

    def log_text(self) -> str:
        try:
            return (self.dir / "broker.log").read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_since_mark(self) -> str:
        """The log written since the cluster's last mark_logs() (a test's own lines when the
        cluster is shared by several)."""
        try:
            with open(self.dir / "broker.log", "rb") as f:
                f.seek(self._log_mark)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def mark_log(self) -> None:
        try:
            self._log_mark = (self.dir / "broker.log").stat().st_size
        except FileNotFoundError:
            self._log_mark = 0


class SeglogCluster:
    def __init__(self, base: Path, zk_hosts: str, size: int = 3, props: dict[str, str] | None = None,
                 per_broker: dict[int, dict[str, str]] | None = None, hosts: dict[int, str] | None = None):
        self.base = Path(base)
        self.zk_hosts = zk_hosts
        self.props = dict(props or {})
        self.per_broker = per_broker or {}
        ports = free_ports(size)
        self.brokers = {i + 1: Broker(self, i + 1, ports[i], (hosts or {}).get(i + 1, "127.0.0.1"))
                        for i in range(size)}
        self._admin = None              # admin(): one AdminClient, made on first need

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    @classmethod
    @contextlib.contextmanager
    def running(cls, *args, **kwargs):
        """A started cluster for a `with` block; at its end every broker is stopped and the
        brokers' logs are printed (pytest shows them when the test failed)."""
        c = cls(*args, **kwargs)
        try:
            c.start()
            yield c
        finally:
            c.close()
            print(c.logs())

    def start(self) -> "SeglogCluster":
        for b in self.brokers.values():
            b.start(wait=False)
        for b in self.brokers.values():
            b.wait_serving()
        return self

    def heal(self, timeout: float = 60.0) -> None:
        """Every broker serving again (a paused one resumed, a stopped or killed one restarted)
        and listed by every broker's Metadata: what the next test sharing the cluster starts
        from."""
        restarted = []
        for b in self.brokers.values():
            if b.paused:
                b.resume()
            if not b.alive():
                b.start(wait=False)
                restarted.append(b)
        for b in restarted:
            b.wait_serving()
        from logcore.wire.client import KafkaConnection

        def registered(b: Broker) -> bool:
            with KafkaConnection(b.host, b.port, timeout_s=3.0) as conn:
                return set(conn.metadata_brokers()[0]) == set(self.brokers)
        self.wait_for(lambda: all(registered(b) for b in self.brokers.values()), timeout,
                      "every broker registered and listed by every broker")

    def mark_logs(self) -> None:
        """Broker.log_since_mark() starts here."""
        for b in self.brokers.values():
            b.mark_log()

    def add_internal_listener(self) -> None:
        """Each broker listens on PLAINTEXT (its port) and on an INTERNAL listener of a free port
        of its own (the listener settings, e.g. inter.broker.listener.name, are the caller's)."""
        taken = {b.port for b in self.brokers.values()}
        internal = [p for p in free_ports(6) if p not in taken][:len(self.brokers)]
        for (i, b), port in zip(sorted(self.brokers.items()), internal):
            self.per_broker[i] = {"listeners": f"PLAINTEXT://{b.host}:{b.port},INTERNAL://127.0.0.1:{port}"}

    def close(self) -> None:
        # The admin client goes first: kept, it would retry the stopped brokers' ports for as
        # long as this object lives (the brokers refer back to it, so only a gc cycle ends it).
        self._admin = None
        for b in self.brokers.values():
            if b.alive():
                b.kill()

    def logs(self) -> str:
        return "\n".join(f"----- broker {b.id}\n{b.log_tail(150)}" for b in self.brokers.values())

    # ------------------------------------------------------------------ client-side views
    def read_partition(self, topic: str, partition: int = 0, timeout: float = 30.0, **config) -> list:
        """Every record a consumer reads from the partition's leader, from the earliest offset to
        the high watermark: [(offset, key, value)]. `config` adds consumer settings."""
        import confluent_kafka as ck
        c = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "auto.offset.reset": "error", "enable.partition.eof": True, **config})
        try:
            c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
            out, deadline = [], time.monotonic() + timeout
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        return out
                    raise AssertionError(f"consumer error {m.error()}")
                out.append((m.offset(), m.key(), m.value()))
            raise AssertionError(f"{topic}-{partition}: did not reach the end (read {len(out)} records)")
        finally:
            c.close()

    def admin(self):
        """One AdminClient for the cluster (its futures need it alive)."""
        from confluent_kafka.admin import AdminClient
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def metadata(self, topic: str, timeout: float = 3.0, broker: int | None = None):
        """{partition: (leader, replicas, isr)} as a client sees it, asked of one running broker
        (not a paused one: a client would wait for it)."""
        from logcore.wire.client import KafkaConnection
        candidates = [self.brokers[broker]] if broker is not None else \
            [b for b in self.brokers.values() if b.alive() and not b.paused]
        last = None
        for b in candidates:
            try:
                with KafkaConnection(b.host, b.port, timeout_s=timeout) as conn:
                    md = conn.request(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
            except Exception as exc:   # noqa: BLE001 - try the next broker
                last = exc
                continue
            t = md.topics[0]
            if int(t.error_code) != 0:
                raise AssertionError(f"Metadata of {topic} from broker {b.id}: error {int(t.error_code)}")
            return {p.partition_index: (p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
                    for p in t.partitions}
        raise AssertionError(f"no broker answered Metadata: {last}")

    def create_topic(self, name: str, partitions: int = 1, rf: int = 3, config: dict | None = None,
                     timeout: float = 30.0) -> None:
        from confluent_kafka.admin import NewTopic
        fs = self.admin().create_topics([NewTopic(name, partitions, rf, config=config or {})],
                                        request_timeout=timeout)
        fs[name].result(timeout)
        self.wait_for(lambda: all(leader >= 0 and len(isr) == rf
                                  for leader, _r, isr in self.metadata(name).values()), timeout,
                      f"leaders and full ISRs of {name}")

    def wait_for(self, condition, timeout: float, what: str, interval: float = 0.1):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                result = condition()
                if result:
                    return result
            except Exception as exc:   # noqa: BLE001 - the cluster may be between states
                last_error = exc
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}"
                             f" (last error: {last_error!r})\n{self.logs()}")

    def leader_of(self, topic: str, partition: int = 0) -> int:
        return self.metadata(topic)[partition][0]
