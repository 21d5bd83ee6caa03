"""The fault-injection TCP proxy (netproxy.py) against a real echo server on 127.0.0.1: its modes
for both directions, and one direction at a time (the Jepsen nemeses' one-way partitions and
lost replies)."""
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
            self.server.received += len(data)
            self.request.sendall(data)


@pytest.fixture
def echo():
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    srv.daemon_threads = True
    srv.accepted = 0
    srv.received = 0
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


def _wait(pred, timeout=5.0):
    import time
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_discarded_replies_reach_the_target_and_the_connection_is_reset_at_heal(echo, hub):
    p = hub.add(echo.server_address, name="1->zk1")
    s = _conn(p)
    s.sendall(b"a")
    assert _recv_n(s, 1) == b"a"
    p.set_mode("discard", direction="down")
    assert p.mode == "up:pass,down:discard"
    s.sendall(b"write")
    assert _wait(lambda: echo.received == 6)          # the request got there
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):               # its reply never comes back
        s.recv(10)
    assert _wait(lambda: p.bytes_discarded == 5)
    p.set_mode("pass")
    s.settimeout(5)
    try:                                              # the broken stream is closed with a reset
        assert s.recv(10) == b""
    except ConnectionResetError:
        pass
    s.close()
    with _conn(p) as s2:                              # new connections pass again
        s2.sendall(b"back")
        assert _recv_n(s2, 4) == b"back"


def test_one_direction_blackhole_holds_only_that_direction(echo, hub):
    p = hub.add(echo.server_address)
    p.set_mode("blackhole", direction="down")
    s = _conn(p)                                      # connects: only replies are held
    s.sendall(b"req")
    assert _wait(lambda: echo.received == 3)
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):
        s.recv(10)
    p.set_mode("pass", direction="down")
    s.settimeout(5)
    assert _recv_n(s, 3) == b"req"                    # held, not lost
    p.set_mode("blackhole", direction="up")
    s.sendall(b"more")
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):
        s.recv(10)
    assert echo.received == 3
    p.set_mode("pass")
    s.settimeout(5)
    assert _recv_n(s, 4) == b"more"
    s.close()


def test_bad_directions_are_refused(hub, echo):
    p = hub.add(echo.server_address, name="2->3")
    with pytest.raises(ValueError, match="2->3.*unknown direction 'sideways'"):
        p.set_mode("blackhole", direction="sideways")
    with pytest.raises(ValueError, match="direction both only"):
        p.set_mode("reset", direction="up")


def test_discard_after_a_matching_request_passes_replies_until_then(echo, hub):
    p = hub.add(echo.server_address)
    s = _conn(p)
    p.set_mode("discard", direction="down", after=lambda chunk: chunk.startswith(b"W"))
    s.sendall(b"read")
    assert _recv_n(s, 4) == b"read"                   # not armed yet: replies pass
    s.sendall(b"Write")
    assert _wait(lambda: echo.received == 9)          # the write got there
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):               # its reply is lost, and all after it
        s.recv(10)
    s.sendall(b"read")
    with pytest.raises(socket.timeout):
        s.recv(10)
    with _conn(p) as s2:                              # another connection is not armed
        s2.sendall(b"r2")
        assert _recv_n(s2, 2) == b"r2"
    p.set_mode("pass")
    s.close()


def test_zookeeper_write_tells_writes_from_reads_pings_and_connects():
    import struct
    from netproxy import zookeeper_write
    frame = lambda xid, kind: struct.pack(">iii", 20, xid, kind) + b"x" * 12   # noqa: E731
    assert zookeeper_write(frame(7, 5))                        # setData
    assert zookeeper_write(frame(3, 14))                       # multi
    assert zookeeper_write(frame(7, 4) + frame(8, 1))          # getData then create
    assert not zookeeper_write(frame(7, 4))                    # getData
    assert not zookeeper_write(struct.pack(">iii", 8, -2, 11))  # ping
    assert not zookeeper_write(struct.pack(">iiq", 44, 0, (1 << 32) + 5) + b"y" * 32)   # ConnectRequest


def test_zookeeper_write_to_names_the_znodes():
    import struct
    from netproxy import zookeeper_write_to
    path = b"/brokers/topics/t/partitions/1/state"
    set_data = struct.pack(">iiii", 16 + len(path), 9, 5, len(path)) + path + b"{}"
    match = zookeeper_write_to(["/brokers/topics/t/partitions/1/state"])
    assert match(set_data)
    assert not zookeeper_write_to(["/brokers/topics/t/partitions/0/state"])(set_data)
    get_data = struct.pack(">iiii", 16 + len(path), 9, 4, len(path)) + path
    assert not match(get_data)
