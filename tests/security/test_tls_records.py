"""The TLS transport's batched record read (logcore/security/_tlsrecords.c, tls_transport.py):
read_into on real TLS 1.3 connections over memory BIOs (records split at every byte, partial
records, small and huge buffers, close_notify, a corrupted record, a key update), the self-check
and its fallback to asyncio's reads, and the three policies (OpenSSL reading the socket, batched
reads from asyncio's memory BIO, asyncio's own) serving a TLS listener (TLS 1.3, and 1.2)."""
from __future__ import annotations

import _ssl
import asyncio
import ctypes
import logging
import os
import socket
import ssl
import struct

import pytest

from pki import issue, make_ca

from logcore.security import tls_transport
from logcore.security.tls_socket import SocketListener

_tlsrecords = pytest.importorskip("logcore.security._tlsrecords",
                                  reason="the C TLS record reader is not built (pip install -e .)")


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls-records")
    ca = make_ca()
    ca_pem = folder / "ca.crt"
    ca_pem.write_bytes(ca.cert_pem())
    cert, key = issue(ca, "broker").write_pem(folder, "broker")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(ca_pem))
    return server, client


@pytest.fixture(scope="module")
def reads():
    policy = tls_transport.choose_reads(sockets=False)
    assert policy.name == "batched", "the C reader is built, so it must bind on this Python"
    return policy


class Pair:
    """A client and a server SSLObject, handshaken over memory BIOs."""

    def __init__(self, contexts, version: str = "TLSv1.3"):
        server_ctx, client_ctx = contexts
        if version != "TLSv1.3":
            client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
            client_ctx.maximum_version = ssl.TLSVersion[version.replace(".", "_")]
        self.c_in, self.c_out, self.s_in, self.s_out = (ssl.MemoryBIO() for _ in range(4))
        self.client = client_ctx.wrap_bio(self.c_in, self.c_out, server_hostname="localhost")
        self.server = server_ctx.wrap_bio(self.s_in, self.s_out, server_side=True)
        for _ in range(6):
            for side in (self.client, self.server):
                try:
                    side.do_handshake()
                except ssl.SSLWantReadError:
                    pass
            self.s_in.write(self.c_out.read())
            self.c_in.write(self.s_out.read())
        assert self.server.version() == version
        # The client takes the server's session tickets now, so the server's later reads see only data.
        try:
            self.client.read(1)
        except ssl.SSLWantReadError:
            pass

    def send(self, *pieces: bytes) -> bytes:
        """The ciphertext of `pieces`, one TLS record each (each under 16 KiB)."""
        for piece in pieces:
            self.client.write(piece)
        return self.c_out.read()


def read_all(reads, server: ssl.SSLObject, size: int = 1 << 20) -> tuple[bytes, int]:
    """Everything read_into gives, and its last return value."""
    buf = bytearray(size)
    out = bytearray()
    while True:
        got = reads.records.read_into(server._sslobj, buf, len(buf))
        n = got if got >= 0 else -got - 1
        out += buf[:n]
        if got != len(buf):
            return bytes(out), got


def record_ends(ciphertext: bytes) -> list[int]:
    ends, pos = [], 0
    while pos + 5 <= len(ciphertext):
        (length,) = struct.unpack_from(">H", ciphertext, pos + 3)
        pos += 5 + length
        ends.append(pos)
    assert pos == len(ciphertext)
    return ends


def test_split_at_every_byte(contexts, reads):
    """librdkafka's pattern (a 10 B and a 1 KiB record) then a 3 KiB one, the ciphertext cut
    at every position: the first read gives exactly the records wholly before the cut."""
    pair = Pair(contexts)
    pieces = (b"h" * 10, bytes(range(256)) * 4, b"t" * 3000)
    plain = b"".join(pieces)
    sizes = [len(p) for p in pieces]
    first = pair.send(*pieces)
    length = len(first)
    pair.s_in.write(first)
    assert read_all(reads, pair.server) == (plain, len(plain))
    for cut in range(length + 1):
        ciphertext = pair.send(*pieces)
        assert len(ciphertext) == length
        whole = sum(size for size, end in zip(sizes, record_ends(ciphertext)) if end <= cut)
        pair.s_in.write(ciphertext[:cut])
        first, got = read_all(reads, pair.server)
        assert (first, got) == (plain[:whole], whole)
        pair.s_in.write(ciphertext[cut:])
        rest, got = read_all(reads, pair.server)
        assert first + rest == plain and got == len(plain) - whole


def test_small_and_huge_buffers(contexts, reads):
    pair = Pair(contexts)
    pieces = [os.urandom(16384) for _ in range(8)] + [b"x" * 10, b"y" * 1024] * 50
    plain = b"".join(pieces)
    for size in (1, 100, 16383, 4 << 20):
        pair.s_in.write(pair.send(*pieces))
        data, _ = read_all(reads, pair.server, size)
        assert data == plain, size
    # nbytes caps the read; 0 or beyond the buffer means the whole buffer
    pair.s_in.write(pair.send(b"a" * 1000))
    buf = bytearray(600)
    assert reads.records.read_into(pair.server._sslobj, buf, 300) == 300
    assert reads.records.read_into(pair.server._sslobj, buf, 0) == 600
    assert reads.records.read_into(pair.server._sslobj, buf, 10**6) == 100
    assert reads.records.read_into(pair.server._sslobj, buf, 0) == 0     # nothing left: want read


def test_close_notify_is_left_for_sslobject_read(contexts, reads):
    pair = Pair(contexts)
    pair.client.write(b"last words")
    with pytest.raises(ssl.SSLWantReadError):
        pair.client.unwrap()
    pair.s_in.write(pair.c_out.read())
    buf = bytearray(1000)
    got = reads.records.read_into(pair.server._sslobj, buf, len(buf))
    assert got == -len(b"last words") - 1 and buf[:10] == b"last words"
    assert pair.server.read(1000) == b""               # what asyncio reads as close_notify


@pytest.mark.parametrize("batched", [False, True])
def test_corrupt_record_raises_as_without_it(contexts, reads, batched):
    pair = Pair(contexts)
    good = pair.send(b"fine")
    bad = bytearray(pair.send(b"tampered"))
    bad[-1] ^= 1
    pair.s_in.write(good + bytes(bad))
    buf = bytearray(1000)
    if batched:
        got = reads.records.read_into(pair.server._sslobj, buf, len(buf))
        assert got == -len(b"fine") - 1 and buf[:4] == b"fine"
    else:
        assert pair.server.read(1000, buf) == 4
    with pytest.raises(ssl.SSLError) as raised:
        pair.server.read(1000, buf)
    assert raised.value.reason == "DECRYPTION_FAILED_OR_BAD_RECORD_MAC"


def _libssl_and_ssl_pointer(sslobj: ssl.SSLObject):
    lib = ctypes.CDLL(_ssl.__file__, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    # _ssl's object: PyObject_HEAD, PyObject *Socket, SSL *ssl (as the C reader reads it)
    ptr = ctypes.c_void_p.from_address(id(sslobj._sslobj) + object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p))
    return lib, ctypes.c_void_p(ptr.value)


def test_read_ahead_keeps_records_for_later_reads(contexts, reads):
    """read_into turns on OpenSSL's read-ahead: its first read takes the whole BIO into
    OpenSSL, and the records it could not give (a full buffer) come from the next read_into,
    then from SSLObject.read (asyncio's own loop), and close_notify after them still ends it."""
    pair = Pair(contexts)
    lib, server_ssl = _libssl_and_ssl_pointer(pair.server)
    lib.SSL_get_read_ahead.argtypes = [ctypes.c_void_p]
    assert lib.SSL_get_read_ahead(server_ssl) == 0
    pieces = [b"%03d" % i * 4 for i in range(60)]        # 12 B records, as small as librdkafka's
    pair.s_in.write(pair.send(*pieces))
    buf = bytearray(30)
    assert reads.records.read_into(pair.server._sslobj, buf, 0) == 30
    assert lib.SSL_get_read_ahead(server_ssl) == 1
    assert pair.s_in.pending == 0                       # read ahead: all of it is in OpenSSL now
    data = bytes(buf)
    assert reads.records.read_into(pair.server._sslobj, buf, 0) == 30
    data += bytes(buf)
    pair.client.write(b"last")
    with pytest.raises(ssl.SSLWantReadError):
        pair.client.unwrap()
    pair.s_in.write(pair.c_out.read())
    while chunk := pair.server.read(1000):              # record by record, as asyncio reads
        data += chunk
    assert data == b"".join(pieces) + b"last"


def test_key_update_mid_stream(contexts, reads):
    """A TLS 1.3 KeyUpdate (update requested) among the records: read_into reads past it, the
    server answers with its own KeyUpdate, and the client reads the server's data after it."""
    pair = Pair(contexts)
    lib, client_ssl = _libssl_and_ssl_pointer(pair.client)
    lib.SSL_key_update.argtypes = [ctypes.c_void_p, ctypes.c_int]
    before = pair.send(b"b" * 10, b"c" * 1024)
    assert lib.SSL_key_update(client_ssl, 1) == 1      # SSL_KEY_UPDATE_REQUESTED
    after = pair.send(b"d" * 10, b"e" * 1024)
    pair.s_in.write(before + after)
    data, got = read_all(reads, pair.server)
    assert data == b"b" * 10 + b"c" * 1024 + b"d" * 10 + b"e" * 1024 and got >= 0
    pair.server.write(b"reply")
    pair.c_in.write(pair.s_out.read())                 # the server's KeyUpdate, then its data
    assert pair.client.read(100) == b"reply"
    pair.s_in.write(pair.send(b"more"))
    assert read_all(reads, pair.server)[0] == b"more"


def test_tls12_renegotiation_attempt_read_alike(contexts, reads):
    """A TLS 1.2 client asks to renegotiate between records: the server side's reads (OpenSSL
    refuses a client's renegotiation by default and says so with an alert) give the same data,
    the same end and the same answer to the client with read_into as with SSLObject.read."""
    def outcome(batched: bool):
        pair = Pair(contexts, "TLSv1.2")
        lib, client_ssl = _libssl_and_ssl_pointer(pair.client)
        lib.SSL_renegotiate.argtypes = [ctypes.c_void_p]
        first = pair.send(b"a" * 10, b"b" * 1024)
        assert lib.SSL_renegotiate(client_ssl) == 1
        with pytest.raises(ssl.SSLWantReadError):
            pair.client.do_handshake()                # the ClientHello, inside the session
        pair.s_in.write(first + pair.c_out.read())
        if batched:
            data, got = read_all(reads, pair.server)
            end = "want read" if got >= 0 else "stopped"
        else:
            data, end = b"", None
            while end is None:
                try:
                    data += pair.server.read(1 << 20)
                except ssl.SSLWantReadError:
                    end = "want read"
        return data, end, pair.s_out.read()[:5]         # the answer's record header
    data, end, answer = outcome(True)
    assert (data, end) == (b"a" * 10 + b"b" * 1024, "want read")
    assert answer[:1] == b"\x15"                        # an alert record (no_renegotiation)
    assert outcome(False) == (data, end, answer)


def test_self_check_failure_falls_back(contexts, reads, caplog):
    """An SSL* that does not point back at its object (as another layout would read) is
    refused: bind says why (the earlier binding stays), the policy is asyncio's, one log line."""
    pair = Pair(contexts)
    lib, server_ssl = _libssl_and_ssl_pointer(pair.server)
    lib.SSL_get_ex_data.restype = ctypes.c_void_p
    lib.SSL_get_ex_data.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.SSL_set_ex_data.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    app_data = lib.SSL_get_ex_data(server_ssl, 0)
    assert app_data == id(pair.server._sslobj)          # what the self-check relies on
    lib.SSL_set_ex_data(server_ssl, 0, None)
    try:
        assert not reads.records.check(pair.server._sslobj)
        assert "self-check failed" in reads.records.bind(_ssl.__file__, pair.server._sslobj)
        with pytest.raises(ValueError):
            reads.records.read_into(pair.server._sslobj, bytearray(10), 10)
        with caplog.at_level(logging.WARNING, logger=tls_transport.__name__):
            policy = tls_transport.choose_reads(probe=pair.server)
        assert policy.name == "asyncio"
        assert [r.getMessage() for r in caplog.records if r.name == tls_transport.__name__] == [
            "TLS listeners decrypt one TLS record per read, asyncio's way: self-check failed: the SSL* read"
            " from _ssl's object does not point back to it"]
    finally:
        lib.SSL_set_ex_data(server_ssl, 0, app_data)
    # still bound from before: a good object reads
    other = Pair(contexts)
    other.s_in.write(other.send(b"ok"))
    assert read_all(reads, other.server)[0] == b"ok"


def test_bind_refusals_keep_the_binding(contexts, reads):
    pair = Pair(contexts)
    assert "is not loaded" in reads.records.bind("/nonexistent/_ssl.so", pair.server._sslobj)
    assert "is not _ssl's socket object" in reads.records.bind(_ssl.__file__, ssl.MemoryBIO())
    assert tls_transport.choose_reads("/nonexistent/_ssl.so").name == "asyncio"
    assert not reads.records.check(pair.server)         # the Python wrapper, not _ssl's object
    pair.s_in.write(pair.send(b"still"))
    assert read_all(reads, pair.server)[0] == b"still"


class Collect(asyncio.BufferedProtocol):
    """Takes at most `step` bytes per buffer (so the TLS layer's buffer fills and reschedules)."""

    def __init__(self, step: int):
        self.buf = bytearray(step)
        self.data = bytearray()
        self.eof = asyncio.get_running_loop().create_future()
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        return memoryview(self.buf)

    def buffer_updated(self, nbytes):
        self.data += self.buf[:nbytes]

    def eof_received(self):
        self.eof.set_result(bytes(self.data))


@pytest.mark.parametrize("policy", ["socket", "batched", "asyncio"])
@pytest.mark.parametrize("step", [700, 256 * 1024])
def test_listener_through_asyncio(contexts, reads, policy, step):
    """The three policies serve a TLS listener alike: librdkafka's record pattern and full
    records arrive whole through buffers smaller and larger than a record, and close_notify
    reaches eof_received after the data."""
    chosen = _policy(reads, policy)
    received, transport = _serve_one(contexts, chosen, step, contexts[1])
    assert transport == ("SocketTransport" if policy == "socket" else "_SSLProtocolTransport")


def _policy(reads, name: str):
    if name == "socket":
        return SocketListener(reads.records)
    return reads if name == "batched" else tls_transport.OneRecordReads()


@pytest.mark.parametrize("policy", ["socket", "batched"])
def test_listener_tls12(contexts, reads, policy):
    """The same over TLS 1.2 (a listener may allow it: ssl.enabled.protocols)."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE     # the read path is under test
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    _serve_one(contexts, _policy(reads, policy), 700, client, version="TLSv1.2")


def _serve_one(contexts, chosen, step, client_ctx, version="TLSv1.3"):
    server_ctx = contexts[0]
    pieces = [b"%09d|" % i for i in range(2000)]
    pattern = [p for piece in pieces for p in (piece, piece * 100)] + [os.urandom(16384) for _ in range(20)]

    async def run():
        loop = asyncio.get_running_loop()
        protocols = []

        def app():
            protocols.append(Collect(step))
            return protocols[-1]
        factory, options = chosen.serve(loop, app, server_ctx)
        assert options == ({"ssl": server_ctx} if chosen.name == "asyncio" else {})
        server = await loop.create_server(factory, "127.0.0.1", 0, **options)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                       server_hostname="localhost")
        assert writer.get_extra_info("ssl_object").version() == version
        for piece in pattern:
            writer.write(piece)          # one TLS record per write
        await writer.drain()
        writer.close()                   # close_notify after the data
        data = await asyncio.wait_for(protocols[0].eof, 30)
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return data, type(protocols[0].transport).__name__

    received, transport = asyncio.run(run())
    assert received == b"".join(pattern)
    return received, transport


def test_sslsocket_check_failure_keeps_batched_reads(contexts, reads, caplog):
    """An SSLSocket whose SSL* does not point back at its object: the socket transport is not
    used, TLS listeners keep asyncio's protocol with batched reads, one warning says so."""
    left, right = socket.socketpair()
    wrapped = contexts[0].wrap_socket(left, server_side=True, do_handshake_on_connect=False)
    try:
        lib, server_ssl = _libssl_and_ssl_pointer(wrapped)
        lib.SSL_get_ex_data.restype = ctypes.c_void_p
        lib.SSL_get_ex_data.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.SSL_set_ex_data.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        assert tls_transport.choose_reads(socket_probe=wrapped).name == "socket"
        app_data = lib.SSL_get_ex_data(server_ssl, 0)
        lib.SSL_set_ex_data(server_ssl, 0, None)
        try:
            with caplog.at_level(logging.WARNING, logger=tls_transport.__name__):
                policy = tls_transport.choose_reads(socket_probe=wrapped)
        finally:
            lib.SSL_set_ex_data(server_ssl, 0, app_data)
        assert policy.name == "batched"
        assert [r.getMessage() for r in caplog.records if r.name == tls_transport.__name__] == [
            "TLS listeners read through asyncio's memory BIOs: the C reader cannot read an"
            " ssl.SSLSocket's object in this Python"]
    finally:
        wrapped.close()
        right.close()
