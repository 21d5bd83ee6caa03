"""A real Prometheus server (Debian's `prometheus` package, run by the test with its own config
and storage in the test's tmp dir, never the system service) scrapes the metrics endpoints of a
3-broker seglog cluster (tests/cluster/seglog_cluster.py, one ZooKeeper) every second while a
broker is SIGKILLed and restarted; the test reads Prometheus's query API and sees
- UnderReplicatedPartitions rise above 0 on the surviving leaders, and fall back to 0 once the
  restarted broker is back in every ISR;
- the controller's leader election count grow for the partitions the killed broker led, and the
  leaders count the ISR expansions that take the restarted broker back;
- a consumer group's lag rise while it is behind, and drop to 0 once it caught up and committed.
Skipped with the reason when the prometheus binary, ZooKeeper or kazoo is missing."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak   # Prometheus scraping a 3-broker cluster through a failover, ~25 s: -m soak


TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "cluster")]

from zookeeper_reference import free_ports, running_zookeeper  # noqa: E402

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo)")

PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    with running_zookeeper(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


class Prometheus:
    """One prometheus process of the test's: config and TSDB in `base`, on 127.0.0.1:port."""

    def __init__(self, base: Path, targets: list[str]):
        self.base = base
        self.port = free_ports(1)[0]
        config = base / "prometheus.yml"
        config.write_text(json.dumps({       # YAML is a superset of JSON
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "seglog", "static_configs": [{"targets": targets}]}]}))
        self.log = base / "prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{self.port}",
                 f"--storage.tsdb.path={base / 'tsdb'}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT, cwd=base)

    def query(self, expr: str) -> list[tuple[dict, float]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def scalar(self, expr: str) -> float | None:
        """The value of an expression with one series (a sum), None when it has none."""
        result = self.query(expr)
        return result[0][1] if result else None

    def wait(self, expr: str, check, timeout: float, what: str) -> float:
        t0 = time.monotonic()
        try:
            return self._wait(expr, check, timeout, what)
        finally:
            print(f"{time.monotonic() - t0:6.1f} s  {what}")

    def _wait(self, expr: str, check, timeout: float, what: str) -> float:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log.read_text(errors='replace')[-2000:]}")
            try:
                last = self.scalar(expr)
            except OSError as exc:          # not listening yet
                last = exc
            else:
                if last is not None and check(last):
                    return last
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}: {expr} = {last!r}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _consume(consumer, n: int, timeout: float = 30.0) -> None:
    got, deadline = 0, time.monotonic() + timeout
    while got < n:
        assert time.monotonic() < deadline, f"consumed {got} of {n}"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got += 1
    consumer.commit(asynchronous=False)


def test_prometheus_sees_a_failover(zookeeper, tmp_path):
    if PROMETHEUS is None:
        pytest.skip("the prometheus binary is not installed (Debian: apt-get install prometheus)")
    from seglog_cluster import SeglogCluster
    started = time.monotonic()
    ports = free_ports(3)
    per_broker = {i + 1: {"metrics.listener": f"http://127.0.0.1:{ports[i]}"} for i in range(3)}
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{p}" for p in ports])
    try:
        with SeglogCluster.running(tmp_path / "cluster", zookeeper.connect_string, 3,
                                   per_broker=per_broker) as cluster:
            prometheus.wait("sum(up)", lambda v: v == 3, 30, "three brokers scraped")
            cluster.create_topic("watched", partitions=3, rf=3)
            producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})

            def produce(n: int) -> None:
                for i in range(n):
                    producer.produce("watched", value=b"r%d" % i, key=b"k%d" % i)
                assert producer.flush(30) == 0

            produce(30)
            consumer = confluent_kafka.Consumer({
                "bootstrap.servers": cluster.bootstrap, "group.id": "watchers", "enable.auto.commit": False,
                "auto.offset.reset": "earliest"})
            consumer.subscribe(["watched"])
            try:
                _consume(consumer, 30)
                lag = 'sum(kafka_consumergroup_lag{consumergroup="watchers",topic="watched"})'
                prometheus.wait(lag, lambda v: v == 0, 20, "the group caught up at first")
                produce(60)
                prometheus.wait(lag, lambda v: v == 60, 20, "the group's lag after 60 more records")

                # A broker that leads partitions and is not the controller: SIGKILL.
                under = "sum(kafka_server_replicamanager_underreplicatedpartitions)"
                elections = "sum(kafka_controller_controllerstats_leaderelectionrateandtimems_count)"
                prometheus.wait(under, lambda v: v == 0, 20, "no under-replicated partition")
                before = prometheus.scalar(elections)
                leaders = {m["instance"]: v for m, v in prometheus.query("kafka_server_replicamanager_leadercount")}
                active = {m["instance"]: v for m, v in
                          prometheus.query("kafka_controller_kafkacontroller_activecontrollercount")}
                victim = next(b for b in cluster.brokers.values()
                              if leaders.get(f"127.0.0.1:{ports[b.id - 1]}", 0) > 0
                              and active.get(f"127.0.0.1:{ports[b.id - 1]}", 1) == 0)
                victim.kill()
                prometheus.wait(under, lambda v: v > 0, 30, "under-replicated partitions after the kill")
                prometheus.wait(elections, lambda v: v > before, 30, "the leader elections of the kill")
                assert prometheus.scalar("sum(kafka_controller_kafkacontroller_activecontrollercount)") == 1

                victim.start()
                prometheus.wait(under, lambda v: v == 0, 40, "every ISR full again after the restart")
                # the leaders took the restarted follower back into their ISRs
                prometheus.wait("sum(kafka_server_replicamanager_isrexpands_total)", lambda v: v > 0, 10,
                                "ISR expansions counted")
                prometheus.wait("sum(up)", lambda v: v == 3, 20, "the restarted broker scraped")
                _consume(consumer, 60)
                prometheus.wait(lag, lambda v: v == 0, 30, "the group's lag back to 0 once it caught up")
            finally:
                consumer.close()
    finally:
        prometheus.stop()
    assert time.monotonic() - started < 120
