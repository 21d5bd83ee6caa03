"""The suite's port picker (zookeeper_reference.free_ports), which every server a test starts
on a chosen port takes its port from."""
from __future__ import annotations

import socket

import zookeeper_reference as zr


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
