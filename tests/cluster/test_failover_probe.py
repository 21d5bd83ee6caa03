"""Failover before the ZooKeeper session expires (broker.failure.probe.enable): a SIGKILLed
leader is taken for dead as soon as its listener refuses connections, a paused one (SIGSTOP) is
not, and with the setting off a kill waits for the session. Real brokers, real ZooKeeper, a
librdkafka producer."""
from __future__ import annotations

import socket
import time

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

SESSION_MS = 10000          # the longest the test ZooKeeper allows (tickTime 500 ms x 20)


@pytest.fixture
def cluster(tmp_path, zk_hosts, request):
    marker = request.node.get_closest_marker("cluster_props")
    props = marker.args[0] if marker else {}
    size = marker.kwargs.get("size", 3) if marker else 3
    with SeglogCluster.running(tmp_path, zk_hosts, size=size, props={"min.insync.replicas": "2", **props}) as c:
        yield c


def _producer(cluster):
    return ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                        "linger.ms": 0, "message.timeout.ms": 60000})


def _send(producer, topic, value: bytes, timeout: float = 60.0) -> float:
    """Produce one record and wait for its acknowledgment; the monotonic time it came."""
    result = {}

    def report(err, msg):
        result["err"], result["t"] = err, time.monotonic()
    producer.produce(topic, value=value, on_delivery=report)
    deadline = time.monotonic() + timeout
    while "t" not in result and time.monotonic() < deadline:
        producer.poll(0.01)
    assert "t" in result, f"{value!r} was not acknowledged within {timeout} s"
    assert result["err"] is None, f"{value!r} failed: {result['err']}"
    return result["t"]


def _zk(cluster):
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=cluster.zk_hosts, timeout=5)
    zk.start(timeout=15)
    return zk


def _controller(zk) -> bytes | None:
    from kazoo.exceptions import NoNodeError
    try:
        return zk.get("/controller")[0]
    except NoNodeError:
        return None


@pytest.mark.cluster_props({"zookeeper.session.timeout.ms": str(SESSION_MS)})
def test_pause_is_not_death_and_kill_fails_over_before_the_session_ends(cluster):
    cluster.create_topic("t", 1, 3, {"min.insync.replicas": "2"})
    producer = _producer(cluster)
    _send(producer, "t", b"before")
    zk = _zk(cluster)
    try:
        # SIGSTOP: the process keeps its sockets (connections are still accepted into its
        # backlog), so only its session could end it: no election, the controller stays.
        leader = cluster.leader_of("t")
        controller = _controller(zk)
        cluster.brokers[leader].pause()
        time.sleep(2.0)
        others = [b for b in cluster.brokers if b != leader]
        assert cluster.metadata("t", broker=others[0])[0][0] == leader, "a paused leader was replaced"
        assert _controller(zk) == controller, "the controller changed while a broker was paused"
        cluster.brokers[leader].resume()
        _send(producer, "t", b"after pause")

        # SIGKILL: the listener refuses connections at once; with a 10 s session the new leader
        # acknowledges acks=all writes within a few seconds, while the dead broker's
        # registration is still in ZooKeeper (its session has not expired, and nobody deletes it).
        cluster.wait_for(lambda: len(cluster.metadata("t")[0][2]) == 3, 30, "a full ISR")
        leader = cluster.leader_of("t")
        t_kill = time.monotonic()
        cluster.brokers[leader].kill()
        t_ack = _send(producer, "t", b"after kill")
        assert t_ack - t_kill < SESSION_MS / 2000, \
            f"first acknowledgment {t_ack - t_kill:.2f} s after the kill (session {SESSION_MS} ms)"
        assert zk.exists(f"/brokers/ids/{leader}") is not None, "the dead broker's registration was deleted"
        new_leader, _replicas, isr = cluster.metadata("t")[0]
        assert new_leader not in (leader, -1) and leader not in isr
    finally:
        zk.stop()
        zk.close()
        producer.flush(10)


@pytest.mark.cluster_props({"zookeeper.session.timeout.ms": "3000", "broker.failure.probe.enable": "false"},
                           size=2)
def test_without_the_probe_a_kill_waits_for_the_session(cluster):
    cluster.create_topic("t", 1, 2, {"min.insync.replicas": "1"})
    leader = cluster.leader_of("t")
    other = next(b for b in cluster.brokers if b != leader)
    t_kill = time.monotonic()
    cluster.brokers[leader].kill()
    moved = cluster.wait_for(lambda: cluster.metadata("t", broker=other)[0][0] not in (leader, -1)
                             and time.monotonic(), 30, "a new leader")
    assert moved - t_kill >= 2.5, f"a new leader {moved - t_kill:.2f} s after the kill, before the 3 s session ended"


def test_listener_probe_refusals_pauses_and_reinstatement():
    """ListenerProbe on plain sockets: a closed listener is dead after repeated refusals, a
    listener that never accepts (a paused process) is not, and one that listens again on the
    same registration is live again."""
    from logcore.cluster.liveness import ListenerProbe

    changes = []
    probe = ListenerProbe(lambda: changes.append(time.monotonic()), refusals=3, spacing_s=0.05,
                          interval_s=0.2)
    closed = socket.create_server(("127.0.0.1", 0))
    port_closed = closed.getsockname()[1]
    paused = socket.create_server(("127.0.0.1", 0), backlog=64)     # never accept(): like SIGSTOP
    port_paused = paused.getsockname()[1]
    probe.start()
    try:
        probe.set_targets({1: ("127.0.0.1", port_closed, 101), 2: ("127.0.0.1", port_paused, 102)})
        conn, _ = closed.accept()                  # the probe's watch connection
        time.sleep(0.3)
        assert probe.dead() == {}
        conn.close()
        closed.close()                             # "killed": the watch ends, connects are refused
        deadline = time.monotonic() + 5
        while probe.dead() != {1: 101} and time.monotonic() < deadline:
            time.sleep(0.02)
        assert probe.dead() == {1: 101}
        time.sleep(0.5)
        assert 2 not in probe.dead()
        again = socket.create_server(("127.0.0.1", port_closed))      # listening again
        try:
            deadline = time.monotonic() + 5
            while probe.dead() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert probe.dead() == {}
            # the change callback runs on the probe's thread after the dead set is updated
            while len(changes) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(changes) == 2
            # A new registration (larger czxid) of a dead-marked id clears the mark too.
            again.close()
            deadline = time.monotonic() + 5
            while 1 not in probe.dead() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert probe.dead() == {1: 101}
            probe.set_targets({1: ("127.0.0.1", port_closed, 205), 2: ("127.0.0.1", port_paused, 102)})
            assert 1 not in probe.dead()
        finally:
            again.close()
    finally:
        probe.stop()
        paused.close()


def test_the_setting_is_checked_and_on_by_default(tmp_path, capsys):
    """broker.failure.probe.enable is a boolean: another value stops `seglog broker`, naming
    the file, the setting and the value."""
    from logcore.broker.config import BrokerConfig
    from logcore.tools.cli import main
    props = tmp_path / "broker.properties"
    props.write_text(f"log.dirs={tmp_path / 'logs'}\n")
    assert BrokerConfig.load(str(props))["broker.failure.probe.enable"] is True
    props.write_text(f"log.dirs={tmp_path / 'logs'}\nbroker.failure.probe.enable=sometimes\n")
    assert main(["broker", "--config", str(props)]) == 1
    err = capsys.readouterr().err
    assert "broker.failure.probe.enable" in err and "sometimes" in err and str(props) in err, err
