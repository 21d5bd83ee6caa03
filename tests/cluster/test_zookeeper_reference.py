"""The ZooKeeper test infrastructure itself: standalone and ensemble servers from Debian's jars,
stopped by pid, with sessions and ephemerals behaving as the cluster code relies on."""
from __future__ import annotations

import time

from kazoo.client import KazooClient, KazooState

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
