"""The fault-injection TCP proxy (netproxy.py) against a real echo server on 127.0.0.1."""
from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from netproxy import ProxyHub


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        self.server.accepted += 1
        while True:
            try:
                data = self.request.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.request.sendall(data)


@pytest.fixture
def echo():
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    srv.daemon_threads = True
    srv.accepted = 0
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def hub():
    h = ProxyHub().start()
    yield h
    h.stop()


def _conn(proxy, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)
    s.settimeout(timeout)
    return s


def _recv_n(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def _closed(s) -> bool:
    """The peer closed or reset the connection (within the socket's timeout)."""
    try:
        s.sendall(b"y")
        return s.recv(10) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _new_connection_closed(proxy) -> bool:
    try:
        c = _conn(proxy)
    except ConnectionResetError:        # the reset can beat connect() itself
        return True
    with c:
        return _closed(c)


def test_pass_forwards_both_ways(echo, hub):
    p = hub.add(echo.server_address, name="a->b")
    with _conn(p) as s:
        payload = bytes(range(256)) * 1000
        s.sendall(payload)
        assert _recv_n(s, len(payload)) == payload
    deadline = time.monotonic() + 5        # the counter is updated after the last write drained
    while p.bytes_forwarded < 2 * len(payload) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.connections == 1 and p.bytes_forwarded == 2 * len(payload)


def test_blackhole_is_silent_and_heals_without_losing_bytes(echo, hub):
    p = hub.add(echo.server_address)
    s = _conn(p)
    s.sendall(b"before")
    assert _recv_n(s, 6) == b"before"
    p.set_mode("blackhole")
    s.sendall(b"during")
    s.settimeout(0.7)
    with pytest.raises(socket.timeout):           # silence, not a reset
        s.recv(10)
    # a new connection is accepted but never reaches the server while blackholed
    accepted_before = echo.accepted
    s2 = _conn(p)
    s2.sendall(b"new")
    s2.settimeout(0.7)
    with pytest.raises(socket.timeout):
        s2.recv(10)
    assert echo.accepted == accepted_before
    p.set_mode("pass")
    s.settimeout(5)
    s2.settimeout(5)
    assert _recv_n(s, 6) == b"during"
    assert _recv_n(s2, 3) == b"new"
    s.close()
    s2.close()


def test_reset_closes_existing_and_new_connections(echo, hub):
    p = hub.add(echo.server_address)
    s = _conn(p)
    s.sendall(b"x")
    assert _recv_n(s, 1) == b"x"
    p.set_mode("reset")
    assert _closed(s)
    s.close()
    assert _new_connection_closed(p)
    assert echo.accepted == 1
    p.set_mode("pass")
    with _conn(p) as s3:
        s3.sendall(b"back")
        assert _recv_n(s3, 4) == b"back"


def test_delay_holds_each_direction_and_keeps_order(echo, hub):
    p = hub.add(echo.server_address)
    p.set_mode("delay", 0.3)
    with _conn(p) as s:
        t0 = time.monotonic()
        for i in range(5):
            s.sendall(b"%d;" % i)
            time.sleep(0.02)
        got = _recv_n(s, 10)
        elapsed = time.monotonic() - t0
    assert got == b"0;1;2;3;4;"
    assert elapsed >= 0.6                     # 0.3 s out + 0.3 s back
    p.set_mode("pass")
    with _conn(p) as s:
        t0 = time.monotonic()
        s.sendall(b"q")
        assert _recv_n(s, 1) == b"q"
        assert time.monotonic() - t0 < 0.3


def test_bad_modes_are_refused(hub, echo):
    p = hub.add(echo.server_address, name="1->2")
    with pytest.raises(ValueError, match="1->2.*unknown mode 'drop'"):
        p.set_mode("drop")
    with pytest.raises(ValueError, match="delay > 0"):
        p.set_mode("delay")


def test_unreachable_target_closes_the_client(hub):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead_port = s.getsockname()[1]
    s.close()
    p = hub.add(("127.0.0.1", dead_port))
    assert _new_connection_closed(p)
