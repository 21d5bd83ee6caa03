"""The ZooKeeper test infrastructure itself: standalone and ensemble servers from Debian's jars,
stopped by pid, with sessions and ephemerals behaving as the cluster code relies on; and its port
picker (free_ports), which every server a test starts on a chosen port takes its port from."""
from __future__ import annotations

import socket
import time

from kazoo.client import KazooClient, KazooState

import zookeeper_reference as zr
from zookeeper_reference import four_letter


def _wait(cond, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_standalone_serves_and_chroot_isolates(zk_server, zk_client):
    node = zk_server.nodes[0]
    assert node.mode() == "standalone"
    assert four_letter(node.client_port, "ruok") == "imok"
    zk_client.create("/x", b"1")
    # zk_client lives in its own chroot: the root of the server holds only chroots
    raw = KazooClient(hosts=zk_server.connect_string, timeout=2.0)
    raw.start(timeout=10)
    try:
        assert "x" not in raw.get_children("/")
    finally:
        raw.stop()
        raw.close()


def test_ensemble_survives_leader_kill_and_sigkill_stops_server(zk_ensemble):
    modes = sorted(n.mode() for n in zk_ensemble.nodes)
    assert modes == ["follower", "follower", "leader"]
    c = KazooClient(hosts=zk_ensemble.connect_string, timeout=6.0)
    states = []
    c.add_listener(states.append)
    c.start(timeout=15)
    try:
        c.create("/eph", b"", ephemeral=True)
        session = c.client_id
        leader = zk_ensemble.leader()
        leader.kill()
        assert not leader.alive() and leader.mode() is None
        rest = [n for n in zk_ensemble.nodes if n is not leader]
        new_leader = zk_ensemble.wait_quorum(30)
        assert new_leader in rest and new_leader.mode() == "leader"
        # the quorum of two keeps the session and its ephemeral
        _wait(lambda: c.state == KazooState.CONNECTED and c.exists("/eph") is not None,
              20, "client reconnected with its ephemeral")
        assert c.client_id == session
        assert KazooState.LOST not in states
    finally:
        c.stop()
        c.close()


def test_paused_standalone_suspends_clients(zk_server):
    node = zk_server.nodes[0]
    c = KazooClient(hosts=zk_server.connect_string, timeout=2.0)
    states = []
    c.add_listener(states.append)
    c.start(timeout=10)
    try:
        node.pause()
        try:
            _wait(lambda: KazooState.SUSPENDED in states, 10, "SUSPENDED while the server is paused")
        finally:
            node.resume()
        _wait(lambda: c.state == KazooState.CONNECTED, 15, "reconnect after SIGCONT")
        assert node.mode() == "standalone"
    finally:
        c.stop()
        c.close()


def test_each_xdist_worker_picks_from_its_own_slice(monkeypatch):
    low = zr._ephemeral_low()
    monkeypatch.setattr(zr, "_HANDED", {})
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = zr.free_ports(20)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = zr.free_ports(20)
    middle = 10_000 + (low - 10_000) // 2
    assert all(10_000 <= p < middle for p in first)
    assert all(middle <= p < low for p in second)


def test_a_port_handed_out_is_not_handed_out_again_before_its_server_binds(monkeypatch):
    monkeypatch.setattr(zr, "_HANDED", {})
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")       # a slice of a few thousand ports
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    seen: list[int] = []
    for _ in range(300):                                        # nothing binds them meanwhile
        seen += zr.free_ports(2)
    assert len(set(seen)) == len(seen)


def test_a_port_in_use_is_not_handed_out(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2000")    # a slice of about a dozen ports
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    monkeypatch.setattr(zr, "_HANDED", {})
    taken = zr.free_ports(1)[0]
    with socket.socket() as server:
        server.bind(("127.0.0.1", taken))
        server.listen()
        for _ in range(50):
            monkeypatch.setattr(zr, "_HANDED", {})              # only the bind check keeps it out
            assert taken not in zr.free_ports(5)
