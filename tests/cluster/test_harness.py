"""The cluster harness (harness.py): processes started, faulted and stopped by pid.

Without a cluster-capable broker the process faults are tested on one broker without
zookeeper.connect; the link faults need brokers that talk to each other and skip until then."""
from __future__ import annotations

import os
import socket
import time

import pytest

from harness import Cluster, ClusterError, cluster_support

pytest.importorskip("confluent_kafka")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie is gone for our purposes only once reaped; Popen.wait reaped it
    return False


def _produce(c, topic, values, timeout_ms=20000, pad=0):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": timeout_ms, "linger.ms": 1})
    results = []
    for v in values:
        p.produce(topic, value=str(v).encode() + b" " * pad, partition=0,
                  on_delivery=lambda err, msg: results.append((err, msg.offset())))
    p.flush(timeout_ms / 1000 + 5)
    return results


def _read_all(c, topic, partition=0, timeout=20):
    from confluent_kafka import Consumer, TopicPartition
    hw = c.end_offsets(topic, [partition])[partition][0]
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "harness-read",
                     "enable.auto.commit": False, "auto.offset.reset": "error"})
    cons.assign([TopicPartition(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < hw and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            out.append((m.offset(), int(m.value())))
    cons.close()
    return out


def test_single_broker_kill_restart_pause_and_teardown(tmp_path):
    c = Cluster(tmp_path, brokers=1, zookeepers=0)
    c.start()
    pids = []
    try:
        node = c.nodes[1]
        pids.append(node.pid)
        c.create_topic("h", partitions=1)
        assert [e for e, _o in _produce(c, "h", range(10))] == [None] * 10

        c.kill(1)
        assert _gone(pids[0]) and not node.alive()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", node.port), timeout=1).close()
        c.restart(1)
        pids.append(node.pid)
        c.wait_serving()
        assert _read_all(c, "h") == [(i, i) for i in range(10)]        # page cache survived kill -9

        c.pause(1)
        t0 = time.monotonic()
        res = _produce(c, "h", [10], timeout_ms=1500)
        assert res and res[0][0] is not None and time.monotonic() - t0 >= 1.4   # frozen broker: timeout
        c.resume(1)
        assert [e for e, _o in _produce(c, "h", [11])] == [None]
        assert "listening on PLAINTEXT://" in node.log_tail()
        assert node.log_path.read_text().count("---- start") == 2
    finally:
        c.stop()
    assert all(_gone(p) for p in pids)
    assert not c.hub.thread.is_alive()


def test_start_failure_reports_log_and_leaves_nothing_running(tmp_path, capsys):
    c = Cluster(tmp_path, brokers=1, zookeepers=0, props={"log.retention.ms": "not-a-number"})
    with pytest.raises(ClusterError, match="broker 1 exited") as info:
        c.start()
    assert "log.retention.ms" in str(info.value)
    assert c.nodes[1].proc is None
    assert "===== broker 1" in capsys.readouterr().out
    assert not c.hub.thread.is_alive()


def test_links_have_a_proxy_each_and_faults_switch_them(tmp_path):
    reason = cluster_support()
    if reason:
        pytest.skip(reason)
    with Cluster(tmp_path, brokers=3, zookeepers=1) as c:
        assert sorted(c.links) == [(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b]
        assert sorted(c.zk_links) == [(1, 1), (2, 1), (3, 1)]
        conf = c.nodes[1].conf.read_text()
        assert f"zookeeper.connect=127.0.0.1:{c.zk_links[(1, 1)].port}\n" in conf
        assert f"2=127.0.0.1:{c.links[(1, 2)].port}" in conf
        c.isolate(2)
        assert {p.mode for (a, b), p in c.links.items() if 2 in (a, b)} == {"blackhole"}
        assert {p.mode for (a, b), p in c.links.items() if 2 not in (a, b)} == {"pass"}
        assert c.zk_links[(2, 1)].mode == "blackhole" and c.zk_links[(1, 1)].mode == "pass"
        # broker 2's ZooKeeper session expires: it leaves /brokers/ids
        from harness import wait_until
        wait_until(lambda: c.registered() == {1, 3}, 30, "broker 2 to leave /brokers/ids")
        c.heal()
        wait_until(lambda: c.registered() == {1, 2, 3}, 60, "broker 2 to register again")
        c.bridge(1, 2, 3)
        assert c.links[(1, 3)].mode == c.links[(3, 1)].mode == "blackhole"
        assert c.links[(1, 2)].mode == c.links[(2, 3)].mode == "pass"
        c.heal()


def test_full_disk_stops_the_broker_and_a_restart_serves_every_acknowledged_record(tmp_path):
    """A write that fails on a full disk takes the (only) log dir offline: the broker logs why and
    exits at once, status 1 (KIP-112; Kafka halts once all its log dirs failed). Nothing it had
    acknowledged is lost, the write that failed is not acknowledged, and once space is freed a
    restarted broker recovers the log and takes writes again, with no offset skipped or reused."""
    c = Cluster(tmp_path, brokers=1, zookeepers=0, disk_size=64 << 20)
    c.start()
    try:
        if c.disk_error:
            pytest.skip(f"no tmpfs of its own: {c.disk_error}")
        node = c.nodes[1]
        assert os.path.ismount(node.disk) and node.log_dir.parent == node.disk
        c.create_topic("h", partitions=1)
        first = _produce(c, "h", range(10))
        assert [e for e, _o in first] == [None] * 10
        assert c.fill_disk(1) > 0 and c.disk_usage(1)["free"] < 1 << 20
        # 20 KB each: more than the room left in the last page of the segment file
        res = _produce(c, "h", range(10, 13), timeout_ms=3000, pad=20000)
        acked = [i for i, (e, _o) in zip(range(10, 13), res) if e is None]
        assert res and not acked                                    # none acknowledged
        node.proc.wait(10)
        assert node.proc.returncode == 1
        log = node.log_path.read_text(errors="replace")
        line = next(ln for ln in log.splitlines() if "Shutdown broker because all log dirs" in ln)
        assert str(node.log_dir) in line and "No space left on device" in line and " ERROR " in line
        assert "controlled shutdown" not in log.split(line, 1)[1] and "closed cleanly" not in log.split(line, 1)[1]
        c.free_disk(1)
        c.restart(1)
        c.wait_serving()
        assert [e for e, _o in _produce(c, "h", range(13, 23))] == [None] * 10
        got = _read_all(c, "h")
        assert [v for _o, v in got] == list(range(10)) + list(range(13, 23))
        assert [o for o, _v in got] == list(range(20))               # no offset skipped or reused
    finally:
        c.stop()
    assert not os.path.ismount(tmp_path / "broker-1-disk") and (tmp_path / "broker-1-data" / "h-0").is_dir()
