"""The TLS transport in which OpenSSL reads the socket itself (logcore/security/tls_socket.py),
served through asyncio on loopback: large writes against a slow reader (pause_writing /
resume_writing) and reads paused and resumed by the protocol, many small requests each split
across TLS records, a client closing mid-record, a handshake never finished (closed after the
handshake timeout, or at once when the listener or the broker shuts down), close_notify
exchanged at close (a silent peer closed after the close timeout), the peer certificate's
principal (client auth required), a TLS 1.3 key update answered by OpenSSL's write to the
socket; the buffering BIOs in front of the socket (records kept until flushed, flushes the
socket takes in part, a peer closing mid-write), and one large write through a small socket
buffer."""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import select
import socket
import ssl
import threading
import time

import pytest

from in_process_broker import InProcessBroker
from pki import issue, make_ca

from logcore.security import tls_transport
from logcore.security.principal import certificate_principal
from logcore.security.tls_socket import SocketListener, SocketTransport

_tlsrecords = pytest.importorskip("logcore.security._tlsrecords",
                                  reason="the C TLS record reader is not built (pip install -e .)")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls-socket")
    ca = make_ca()
    ca_pem = folder / "ca.crt"
    ca_pem.write_bytes(ca.cert_pem())
    broker = issue(ca, "broker").write_pem(folder, "broker")
    alice = issue(ca, "alice").write_pem(folder, "alice")
    return ca_pem, broker, alice


def server_context(pki, client_auth: bool = False) -> ssl.SSLContext:
    ca_pem, (cert, key), _ = pki
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if client_auth:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(str(ca_pem))
    return context


def client_context(pki, with_cert: bool = False) -> ssl.SSLContext:
    ca_pem, _, (cert, key) = pki
    context = ssl.create_default_context(cafile=str(ca_pem))
    if with_cert:
        context.load_cert_chain(cert, key)
    return context


class App(asyncio.BufferedProtocol):
    """Records what the transport tells it; `on_data(app, bytes)` reacts to each delivery."""

    def __init__(self, on_data=None, step: int = 64 * 1024):
        loop = asyncio.get_running_loop()
        self.buf = bytearray(step)
        self.data = bytearray()
        self.on_data = on_data
        self.made = loop.create_future()
        self.lost = loop.create_future()
        self.eof = False
        self.pauses = 0
        self.resumed: asyncio.Future | None = None
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.made.set_result(transport)

    def get_buffer(self, sizehint):
        return memoryview(self.buf)

    def buffer_updated(self, nbytes):
        chunk = bytes(self.buf[:nbytes])
        self.data += chunk
        if self.on_data is not None:
            self.on_data(self, chunk)

    def eof_received(self):
        self.eof = True

    def pause_writing(self):
        self.pauses += 1
        self.resumed = asyncio.get_running_loop().create_future()

    def resume_writing(self):
        self.resumed.set_result(None)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


async def serve(pki, on_data=None, *, client_auth=False, handshake_timeout=60.0, close_timeout=5.0,
                handovers=None):
    """A listener with SocketListener; its port and the list of App protocols it made.
    `handovers`, a list, receives the listener's protocol factory."""
    assert tls_transport.server_reads().name == "socket"       # _tlsrecords bound to this libssl
    loop = asyncio.get_running_loop()
    apps: list[App] = []

    def app():
        apps.append(App(on_data))
        return apps[-1]
    factory, options = SocketListener(_tlsrecords, handshake_timeout, close_timeout).serve(
        loop, app, server_context(pki, client_auth))
    if handovers is not None:
        handovers.append(factory)
    server = await loop.create_server(factory, "127.0.0.1", 0, **options)
    return server, server.sockets[0].getsockname()[1], apps


def test_this_process_serves_tls_listeners_with_it():
    assert tls_transport.server_reads().name == "socket"


def test_large_writes_against_a_slow_reader_and_paused_reads(pki):
    """8 MiB written by the server while the client does not read: the write buffer passes its
    high-water mark (pause_writing), the rest goes once the client reads (resume_writing), in
    order. Then 4 MiB from the client with the server's protocol pausing reads after every
    delivery: records OpenSSL read ahead while paused still arrive after resume_reading."""
    blob = os.urandom(8 << 20)

    def pausing(app, chunk):
        app.transport.pause_reading()
        asyncio.get_running_loop().call_later(0.001, app.transport.resume_reading)

    async def run():
        server, port, apps = await serve(pki, pausing)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(pki),
                                                       server_hostname="localhost")
        transport = await asyncio.wait_for(apps[0].made, 10)
        app = apps[0]
        for start in range(0, len(blob), 1 << 18):
            transport.write(blob[start:start + (1 << 18)])
            if app.resumed is not None and not app.resumed.done():
                break
        assert app.pauses == 1 and transport.get_write_buffer_size() > 64 * 1024
        got = await reader.readexactly(start + (1 << 18))
        await asyncio.wait_for(app.resumed, 10)
        for rest in range(start + (1 << 18), len(blob), 1 << 18):
            transport.write(blob[rest:rest + (1 << 18)])
            if not app.resumed.done():
                await asyncio.wait_for(app.resumed, 10)
        got += await reader.readexactly(len(blob) - len(got))
        assert got == blob
        upload = blob[:4 << 20]
        writer.write(upload)
        await writer.drain()
        deadline = time.monotonic() + 20
        while len(app.data) < len(upload) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert bytes(app.data) == upload
        writer.close()
        assert await asyncio.wait_for(app.lost, 10) is None and app.eof
        server.close()
    asyncio.run(run())


def test_small_requests_split_across_records_each_answered(pki):
    """2000 requests (a 4 B size, then the body in two writes: three TLS records each), answered
    one response per request as soon as it is whole; the responses come back in order."""
    def answering(app, chunk):
        pending = app.pending = getattr(app, "pending", b"") + chunk
        while len(pending) >= 4 and len(pending) >= 4 + int.from_bytes(pending[:4], "big"):
            size = int.from_bytes(pending[:4], "big")
            app.transport.write(b"ok:" + pending[4:4 + size] + b"\n")
            pending = pending[4 + size:]
        app.pending = pending

    async def run():
        server, port, apps = await serve(pki, answering)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(pki),
                                                       server_hostname="localhost")
        bodies = [b"request %d " % i + b"x" * (i % 300) for i in range(2000)]
        for body in bodies:
            writer.write(len(body).to_bytes(4, "big"))
            writer.write(body[:5])
            writer.write(body[5:])
        await writer.drain()
        for body in bodies:
            assert await asyncio.wait_for(reader.readline(), 10) == b"ok:" + body + b"\n"
        writer.close()
        await asyncio.wait_for(apps[0].lost, 10)
        server.close()
    asyncio.run(run())


def _bio_client(port: int, context: ssl.SSLContext, rcvbuf: int | None = None):
    """A blocking socket (with a receive buffer of `rcvbuf` bytes when given) and a client
    SSLObject over memory BIOs, handshaken: the test sends exactly the ciphertext bytes it
    chooses."""
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            incoming.write(sock.recv(65536))
    sock.sendall(outgoing.read())
    return sock, tls, incoming, outgoing


def test_client_closing_mid_record(pki):
    """A whole record, then half of the next one, then the client's close: the whole record is
    delivered, the half is not, and the connection ends (eof, then connection_lost)."""
    async def run():
        server, port, apps = await serve(pki)

        def client():
            sock, tls, _, outgoing = _bio_client(port, client_context(pki))
            tls.write(b"whole record")
            tls.write(b"h" * 1000)
            ciphertext = outgoing.read()
            sock.sendall(ciphertext[:-500])
            time.sleep(0.2)
            sock.close()
        await asyncio.to_thread(client)
        app = apps[0]
        await asyncio.wait_for(app.lost, 10)
        assert bytes(app.data) == b"whole record"
        assert app.transport.is_closing()
        server.close()
    asyncio.run(run())


def test_handshake_never_finished_is_closed_after_the_timeout(pki):
    """A client that connects and sends half a ClientHello: after the handshake timeout the
    server closes the socket; the application's protocol never hears of the connection."""
    async def run():
        server, port, apps = await serve(pki, handshake_timeout=0.3)

        def client():
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = client_context(pki).wrap_bio(incoming, outgoing, server_hostname="localhost")
            with pytest.raises(ssl.SSLWantReadError):
                tls.do_handshake()
            hello = outgoing.read()
            sock.sendall(hello[:len(hello) // 2])
            started = time.monotonic()
            assert sock.recv(100) == b""          # closed by the server
            sock.close()
            return time.monotonic() - started
        waited = await asyncio.to_thread(client)
        assert 0.2 < waited < 5
        await asyncio.sleep(0.05)
        assert not apps[0].made.done() and not apps[0].lost.done()
        server.close()
    asyncio.run(run())


def _half_hello(port: int, context: ssl.SSLContext) -> socket.socket:
    """A connection that sent half of its ClientHello: its handshake cannot finish."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    sock.sendall(hello[:len(hello) // 2])
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    """The peer's close: its FIN, or its reset when it closed with our bytes unread."""
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


def test_listener_shutdown_ends_handshakes_at_once(pki):
    """The listener's factory closed (as the broker's listener shuts down): a connection stuck
    in its handshake is closed at once, not at the handshake timeout, and so is one accepted
    after; a connection already served is the application's and goes on."""
    def echo(app, chunk):
        app.transport.write(b"re:" + chunk)

    async def run():
        handovers = []
        server, port, apps = await serve(pki, echo, handovers=handovers)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(pki),
                                                       server_hostname="localhost")
        await asyncio.wait_for(apps[0].made, 10)
        stuck = await asyncio.to_thread(_half_hello, port, client_context(pki))
        deadline = time.monotonic() + 10
        while len(apps) < 2 and time.monotonic() < deadline:     # accepted, in its handshake
            await asyncio.sleep(0.005)
        started = time.monotonic()
        handovers[0].close()
        assert await asyncio.to_thread(_closed_by_peer, stuck)            # closed by the server
        assert time.monotonic() - started < 3      # not the handshake timeout (60 s)
        stuck.close()
        late = await asyncio.to_thread(_half_hello, port, client_context(pki))
        assert await asyncio.to_thread(_closed_by_peer, late)
        late.close()
        assert not apps[1].made.done() and not apps[1].lost.done()
        writer.write(b"still served")
        assert await asyncio.wait_for(reader.readexactly(15), 10) == b"re:still served"
        writer.close()
        await asyncio.wait_for(apps[0].lost, 10)
        server.close()
    asyncio.run(run())


def test_broker_stop_closes_connections_in_their_handshake(tmp_path):
    """A broker's stop closes a TLS connection stuck in its handshake with its listener, not
    after the 60 s handshake timeout (nor never: the loop ends with the broker)."""
    keystore = issue(make_ca(), "broker").write_keystore_pem(tmp_path, "broker")
    running = InProcessBroker({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                               "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                               "log.dirs": str(tmp_path / "logs"), "ssl.keystore.type": "PEM",
                               "ssl.keystore.location": str(keystore)})
    try:
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.check_hostname, client.verify_mode = False, ssl.CERT_NONE     # never gets that far
        stuck = _half_hello(running.server.bound["SSL"][1], client)
        time.sleep(0.1)                                     # accepted and handed over
    finally:
        started = time.monotonic()
        running.stop()
    assert _closed_by_peer(stuck)
    assert time.monotonic() - started < 5
    stuck.close()


def _read_close_notify(sock: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO) -> None:
    """Read until the server's close_notify (SSLObject.read's b"")."""
    while True:
        try:
            assert tls.read(1000) == b"", "data instead of close_notify"
            return
        except ssl.SSLWantReadError:
            data = sock.recv(65536)
            assert data, "closed without close_notify"
            incoming.write(data)


def _still_open(sock: socket.socket, wait: float) -> bool:
    sock.settimeout(wait)
    try:
        return sock.recv(1) != b""
    except TimeoutError:
        return True
    finally:
        sock.settimeout(10)


@pytest.mark.parametrize("peer", ["close_notify", "tcp_close", "unread_data"])
def test_close_sends_close_notify_and_waits_for_the_peers(pki, peer):
    """close(): the client gets close_notify while the server's socket stays open, until the
    client's close_notify (a record it sent in between is dropped), or its TCP close; then the
    server closes at once, not at the close timeout (30 s here). unread_data: a record the
    client sent before, left unread (reads paused), ends OpenSSL's session at the close; the
    server still reads what comes until the client's close, so that the client sees the close
    and not a reset."""
    import threading
    paused, sent = threading.Event(), threading.Event()

    async def run():
        server, port, apps = await serve(pki, close_timeout=30.0)

        def client():
            sock, tls, incoming, outgoing = _bio_client(port, client_context(pki))
            if peer == "unread_data":
                assert paused.wait(10)
                tls.write(b"sent before the server's close_notify")
                sock.sendall(outgoing.read())
                sent.set()
            _read_close_notify(sock, tls, incoming)
            assert _still_open(sock, 0.1)          # waiting for the client
            if peer == "tcp_close":
                sock.close()
                return None
            if peer == "close_notify":
                tls.write(b"sent after the server's close_notify")
            tls.unwrap()
            sock.sendall(outgoing.read())
            if peer == "unread_data":
                sock.shutdown(socket.SHUT_WR)
            started = time.monotonic()
            assert sock.recv(100) == b""                # the server's close, not a reset
            sock.close()
            return time.monotonic() - started
        task = asyncio.ensure_future(asyncio.to_thread(client))
        transport = await asyncio.wait_for(apps_made(apps), 10)
        if peer == "unread_data":
            transport.pause_reading()
            paused.set()
            assert await asyncio.to_thread(sent.wait, 10)
            await asyncio.sleep(0.05)
        transport.close()
        assert transport.is_closing() and not apps[0].lost.done()
        waited = await asyncio.wait_for(task, 10)
        started = time.monotonic()
        assert await asyncio.wait_for(apps[0].lost, 10) is None
        assert (waited if waited is not None else time.monotonic() - started) < 3      # not the close timeout (30 s)
        assert bytes(apps[0].data) == b""
        server.close()
    asyncio.run(run())


def test_close_does_not_hang_on_a_silent_peer(pki):
    """A client that never answers the server's close_notify: its socket is closed after the
    close timeout (0.2 s here), and the application hears connection_lost then."""
    async def run():
        server, port, apps = await serve(pki, close_timeout=0.2)

        def client():
            sock, tls, incoming, _ = _bio_client(port, client_context(pki))
            _read_close_notify(sock, tls, incoming)
            started = time.monotonic()
            assert sock.recv(100) == b""
            sock.close()
            return time.monotonic() - started
        task = asyncio.ensure_future(asyncio.to_thread(client))
        transport = await asyncio.wait_for(apps_made(apps), 10)
        transport.close()
        waited = await asyncio.wait_for(task, 10)
        assert 0.15 < waited < 3
        assert await asyncio.wait_for(apps[0].lost, 1) is None
        server.close()
    asyncio.run(run())


async def apps_made(apps: list) -> asyncio.Transport:
    """The first connection's transport, once the application heard of it."""
    while not apps:
        await asyncio.sleep(0.005)
    return await apps[0].made


def test_peer_certificate_principal_and_a_client_without_one(pki):
    """Client auth required: a client with alice's certificate is served, its principal read
    from the transport as the broker reads it; one without a certificate never reaches the
    application and its connection is closed."""
    async def run():
        server, port, apps = await serve(pki, client_auth=True)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context(pki, with_cert=True), server_hostname="localhost")
        transport = await asyncio.wait_for(apps[0].made, 10)
        der = transport.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert str(certificate_principal(der)) == "User:CN=alice,O=seglog tests"
        assert dict(pair[0] for pair in transport.get_extra_info("peercert")["subject"])["commonName"] == "alice"
        assert transport.get_extra_info("peername")[0] == "127.0.0.1"
        assert transport.get_extra_info("sslcontext") is not None
        writer.close()
        await asyncio.wait_for(apps[0].lost, 10)

        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(pki),
                                                       server_hostname="localhost")
        # TLS 1.3: the client's handshake ends before the server checks its (absent) certificate;
        # the server's alert and close end the connection at the client's first read.
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), 10)
        writer.close()
        await asyncio.sleep(0.05)
        assert not apps[1].made.done()
        server.close()
    asyncio.run(run())


def test_key_update_answered_through_the_socket(pki):
    """A TLS 1.3 KeyUpdate (update requested) between two requests: the server's read answers it
    with its own KeyUpdate, written to the socket by OpenSSL, and the client reads the server's
    replies to both requests after it."""
    from test_tls_records import _libssl_and_ssl_pointer

    def echo(app, chunk):
        app.transport.write(b"re:" + chunk)

    async def run():
        server, port, apps = await serve(pki, echo)

        def client():
            sock, tls, incoming, outgoing = _bio_client(port, client_context(pki))
            lib, client_ssl = _libssl_and_ssl_pointer(tls)
            lib.SSL_key_update.argtypes = [ctypes.c_void_p, ctypes.c_int]
            tls.write(b"one")
            sock.sendall(outgoing.read())
            replies = _read_until(sock, tls, incoming, b"re:one")
            assert lib.SSL_key_update(client_ssl, 1) == 1      # SSL_KEY_UPDATE_REQUESTED
            tls.write(b"two")
            sock.sendall(outgoing.read())
            replies += _read_until(sock, tls, incoming, b"re:two")
            sock.close()
            return replies
        assert await asyncio.to_thread(client) == b"re:onere:two"
        await asyncio.wait_for(apps[0].lost, 10)
        server.close()
    asyncio.run(run())


def _read_until(sock: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, expected: bytes) -> bytes:
    got = b""
    while len(got) < len(expected):
        try:
            got += tls.read(1000)
        except ssl.SSLWantReadError:
            data = sock.recv(65536)
            assert data, "closed before the reply"
            incoming.write(data)
    assert got == expected
    return got


def _handshaken_pair(pki) -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    """A server SSLSocket (non-blocking, after its handshake) and a client SSLSocket (blocking)
    on the two ends of a socketpair; the client has read the server's session tickets."""
    left, right = socket.socketpair()
    server = server_context(pki).wrap_socket(left, server_side=True, do_handshake_on_connect=False)
    client = client_context(pki).wrap_socket(right, server_hostname="localhost",
                                             do_handshake_on_connect=False)
    shaking = threading.Thread(target=client.do_handshake)
    shaking.start()
    server.do_handshake()
    shaking.join(10)
    server.setblocking(False)
    client.setblocking(False)
    with pytest.raises(ssl.SSLWantReadError):
        client.recv(1)              # takes the session tickets
    client.setblocking(True)
    client.settimeout(10)
    return server, client


def _readable(sock: socket.socket, wait: float) -> bool:
    return bool(select.select([sock], [], [], wait)[0])


def test_write_buffer_keeps_records_until_flushed_and_flushes_in_parts(pki):
    """Behind buffer_socket, what OpenSSL writes stays in the write BIO until flush: nothing
    reaches the peer before it, everything after it, in order. Written past what the socket
    takes, the write BIO is flushed in parts: flush says what it still holds, and a reader
    draining the socket gets every byte."""
    server, client = _handshaken_pair(pki)
    try:
        _tlsrecords.buffer_socket(server._sslobj, 64 * 1024, 256 * 1024)
        assert server.send(b"a" * 1000) == 1000 and server.send(b"b" * 20000) == 20000
        assert not _readable(client, 0.2)
        assert _tlsrecords.flush(server._sslobj) == 0
        assert _read_exactly(client, 21000) == b"a" * 1000 + b"b" * 20000

        blob = os.urandom(4 << 20)
        sent, held = 0, []
        while sent < len(blob):
            try:
                sent += server.send(blob[sent:sent + (1 << 18)])
            except ssl.SSLWantWriteError:
                break                      # the socket and the write BIO are full
        held.append(_tlsrecords.flush(server._sslobj))
        assert held[0] > 0                 # the socket took part of it
        got = bytearray()
        reading = threading.Thread(target=lambda: got.extend(_read_exactly(client, len(blob))))
        reading.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            held.append(_tlsrecords.flush(server._sslobj))
            if held[-1] == 0 and sent == len(blob):
                break
            if held[-1] == 0:
                try:
                    # a retried SSL_write starts with the same bytes, as the transport's buffer keeps them
                    sent += server.send(blob[sent:sent + (1 << 18)])
                    continue
                except ssl.SSLWantWriteError:
                    pass
            select.select([], [server], [], 1)
        reading.join(20)
        assert bytes(got) == blob and held[-1] == 0
    finally:
        server.close()
        client.close()


def test_flush_to_a_closed_peer_raises(pki):
    """A write buffered while the peer has gone: flush raises the socket's error."""
    server, client = _handshaken_pair(pki)
    try:
        _tlsrecords.buffer_socket(server._sslobj, 0, 256 * 1024)
        client.close()
        assert server.send(b"late" * 100) == 400          # into the write BIO
        with pytest.raises(OSError):
            _tlsrecords.flush(server._sslobj)
    finally:
        server.close()


def test_buffer_socket_refuses_what_is_not_on_a_socket_bio(pki):
    """A memory-BIO SSLObject (asyncio's kind) and a socket already buffered are refused."""
    bio_obj = client_context(pki).wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="localhost")
    with pytest.raises(ValueError):
        _tlsrecords.buffer_socket(bio_obj._sslobj, 0, 4096)
    server, client = _handshaken_pair(pki)
    try:
        _tlsrecords.buffer_socket(server._sslobj, 4096, 4096)
        with pytest.raises(ValueError):
            _tlsrecords.buffer_socket(server._sslobj, 4096, 4096)
        assert server.send(b"still served") == 12 and _tlsrecords.flush(server._sslobj) == 0
        assert _read_exactly(client, 12) == b"still served"
    finally:
        server.close()
        client.close()


def _read_exactly(sock: ssl.SSLSocket, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = sock.recv(size - len(got))
        assert chunk, "closed before all of it"
        got += chunk
    return bytes(got)


def test_one_large_write_through_a_small_socket_buffer(pki):
    """One 3 MiB write with the server's send buffer and the client's receive buffer small: the
    socket takes the write BIO's ciphertext in many parts; what waits (plaintext and ciphertext)
    counts in the write buffer's size, pauses the protocol, and resumes it once flushed; the
    client reads every byte in order."""
    blob = os.urandom(3 << 20)

    async def run():
        server, port, apps = await serve(pki)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.connect(("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, ssl=client_context(pki),
                                                       server_hostname="localhost")
        transport = await asyncio.wait_for(apps[0].made, 10)
        assert isinstance(transport, SocketTransport)
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
        transport.write(blob)
        assert apps[0].pauses == 1 and transport.get_write_buffer_size() > 64 * 1024
        got = bytearray()
        while len(got) < len(blob):
            got += await asyncio.wait_for(reader.read(64 * 1024), 10)
        assert bytes(got) == blob
        await asyncio.wait_for(apps[0].resumed, 10)
        assert transport.get_write_buffer_size() == 0
        writer.close()
        await asyncio.wait_for(apps[0].lost, 10)
        server.close()
    asyncio.run(run())


def test_peer_closing_mid_write(pki, caplog):
    """The client resets the connection while the server's 8 MiB write is partly unsent: the
    transport ends the connection with the socket's error (connection_lost gets it, once), its
    write buffer is emptied, and nothing escapes to the event loop's error handler."""
    async def run():
        server, port, apps = await serve(pki)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(pki),
                                                       server_hostname="localhost")
        transport = await asyncio.wait_for(apps[0].made, 10)
        transport.write(os.urandom(8 << 20))
        assert transport.get_write_buffer_size() > 0
        await reader.readexactly(100_000)
        raw = writer.get_extra_info("socket")
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        writer.transport.abort()            # RST: the unread rest is refused
        exc = await asyncio.wait_for(apps[0].lost, 10)
        assert isinstance(exc, OSError)
        assert transport.is_closing() and transport.get_write_buffer_size() == 0
        transport.write(b"after the end")   # ignored, as by asyncio's transports
        await asyncio.sleep(0.05)
        server.close()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(run())
    assert not [r for r in caplog.records if r.name == "asyncio"]
