"""netproxy.py's one-direction modes (the Jepsen nemeses' one-way partitions and lost replies)
against a real echo server on 127.0.0.1."""
from __future__ import annotations

import socket
import socketserver
import threading

import pytest

from netproxy import ProxyHub


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
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
