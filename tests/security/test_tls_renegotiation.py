"""A TLS 1.2 client asking to renegotiate mid-connection, on the TLS transport in which OpenSSL
reads and writes the socket through buffering BIOs (logcore/security/tls_socket.py,
_tlsrecords.c). A broker's SSL listener refuses it: the client hears a no_renegotiation alert
and ends the connection, the broker closes it at once and keeps serving. The transport refuses
it even where its context would allow it, with megabytes of replies in flight: the replies
reach the client intact up to the alert."""
from __future__ import annotations

import asyncio
import ctypes
import socket
import ssl
import struct
import time

import pytest

from in_process_broker import InProcessBroker
from test_tls_records import _libssl_and_ssl_pointer
from test_tls_socket import App, _bio_client, _closed_by_peer

from logcore.security import tls_transport
from logcore.security.tls_socket import SocketListener
from logcore.wire.protocol import build, decode_response, encode_request, request_type

_tlsrecords = pytest.importorskip("logcore.security._tlsrecords",
                                  reason="the C TLS record reader is not built (pip install -e .)")

# OpenSSL 3's SSL_OP_ALLOW_CLIENT_RENEGOTIATION (ssl.h; not exported by Python's ssl module).
OP_ALLOW_CLIENT_RENEGOTIATION = 1 << 8
REPLY = 512 * 1024              # reply bytes per request byte: several socket buffers in flight
SOCKET_BUFFER = 32 * 1024


def _tls12_client() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE     # not under test
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    return context


def _connect(port: int, context: ssl.SSLContext, rcvbuf: int | None = None):
    """test_tls_socket's client over memory BIOs, on TLS 1.2, and its SSL* with its libssl
    (for SSL_renegotiate)."""
    sock, tls, incoming, outgoing = _bio_client(port, context, rcvbuf)
    assert tls.version() == "TLSv1.2"
    lib, client_ssl = _libssl_and_ssl_pointer(tls)
    lib.SSL_renegotiate.argtypes = [ctypes.c_void_p]
    return sock, tls, incoming, outgoing, lib, client_ssl


def _ask_to_renegotiate(sock, tls, outgoing, lib, client_ssl) -> None:
    """The client's ClientHello, inside the session."""
    assert lib.SSL_renegotiate(client_ssl) == 1
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    sock.sendall(outgoing.read())


def _read(sock, tls, incoming, size: int) -> bytes:
    """At least `size` bytes of plaintext from the connection."""
    got = bytearray()
    while len(got) < size:
        try:
            got += tls.read(1 << 20)
        except ssl.SSLWantReadError:
            chunk = sock.recv(1 << 20)
            assert chunk, f"closed after {len(got)} bytes of {size}"
            incoming.write(chunk)
    return bytes(got)


def _api_versions(sock, tls, incoming, outgoing, correlation: int) -> int:
    """One ApiVersions round trip on the connection; the response's error code."""
    tls.write(encode_request(18, 3, correlation, "reneg", build(request_type(18, 3), {
        "client_software_name": "reneg", "client_software_version": "1"})))
    sock.sendall(outgoing.read())
    data = _read(sock, tls, incoming, 4)
    data += _read(sock, tls, incoming, 4 + struct.unpack(">i", data[:4])[0] - len(data))
    got, response = decode_response(18, 3, data[4:])
    assert got == correlation
    return response.error_code


def test_broker_refuses_renegotiation_and_keeps_serving(pki, tmp_path):
    running = InProcessBroker({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                               "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                               "log.dirs": str(tmp_path / "logs"), "ssl.keystore.type": "PEM",
                               "ssl.keystore.location": str(pki.broker_pem)})
    try:
        port = running.server.bound["SSL"][1]
        sock, tls, incoming, outgoing, lib, client_ssl = _connect(port, _tls12_client())
        assert _api_versions(sock, tls, incoming, outgoing, 1) == 0
        _ask_to_renegotiate(sock, tls, outgoing, lib, client_ssl)
        started = time.monotonic()
        with pytest.raises(ssl.SSLError, match="NO_RENEGOTIATION"):
            while True:                         # the broker's answer: a no_renegotiation alert
                try:
                    tls.do_handshake()
                except ssl.SSLWantReadError:
                    chunk = sock.recv(65536)
                    assert chunk, "closed without an answer"
                    incoming.write(chunk)
        sock.sendall(outgoing.read())           # the client's fatal alert: it ends the session
        assert _closed_by_peer(sock)            # and the broker closes the connection at once
        assert time.monotonic() - started < 5
        sock.close()
        other = _connect(port, _tls12_client())
        assert _api_versions(*other[:4], 2) == 0
        other[0].close()
    finally:
        running.stop()


def test_refused_with_replies_in_flight_even_when_the_context_allows_it(pki):
    """The client sends four request bytes, each answered by 512 KiB, and asks to renegotiate
    before reading any reply, on a listener whose context allows a client's renegotiation: the
    server's socket, write BIO and write buffer are full when the ClientHello comes (an
    SSL_write half done, under which OpenSSL's handshake writes failed with BAD_LENGTH). The
    transport refuses it: the client reads replies intact up to the no_renegotiation alert,
    ends the session, and the server closes the connection and serves the next one."""
    def answer(app, chunk):
        # Small socket buffers on both sides: most of the replies wait in the transport when
        # the ClientHello comes.
        app.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        for byte in chunk:
            app.transport.write(bytes([byte]) * REPLY)

    async def run():
        assert tls_transport.server_reads().name == "socket"       # _tlsrecords bound
        loop = asyncio.get_running_loop()
        apps: list[App] = []

        def app():
            apps.append(App(answer))
            return apps[-1]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.broker_pem)
        context.options |= OP_ALLOW_CLIENT_RENEGOTIATION
        factory, options = SocketListener(_tlsrecords).serve(loop, app, context)
        server = await loop.create_server(factory, "127.0.0.1", 0, **options)
        port = server.sockets[0].getsockname()[1]

        def client() -> bytes:
            sock, tls, incoming, outgoing, lib, client_ssl = _connect(port, _tls12_client(),
                                                                      rcvbuf=SOCKET_BUFFER)
            tls.write(b"0123")
            sock.sendall(outgoing.read())
            _ask_to_renegotiate(sock, tls, outgoing, lib, client_ssl)
            got = bytearray()
            with pytest.raises(ssl.SSLError, match="NO_RENEGOTIATION"):
                while True:
                    try:
                        got += tls.read(1 << 20)    # replies, until the alert
                    except ssl.SSLWantReadError:
                        chunk = sock.recv(1 << 20)
                        assert chunk, f"closed without an answer after {len(got)} reply bytes"
                        incoming.write(chunk)
            sock.sendall(outgoing.read())           # the client's fatal alert
            while not _closed_by_peer(sock):        # replies sent before the server read it
                pass
            sock.close()
            return bytes(got)

        def next_client() -> bytes:
            sock, tls, incoming, outgoing, _, _ = _connect(port, _tls12_client())
            tls.write(b"4")
            sock.sendall(outgoing.read())
            got = _read(sock, tls, incoming, REPLY)
            sock.close()
            return got
        got = await asyncio.wait_for(asyncio.to_thread(client), 20)
        assert got == b"".join(bytes([b]) * REPLY for b in b"0123")[:len(got)]
        assert isinstance(await asyncio.wait_for(apps[0].lost, 10), (ssl.SSLError, OSError))   # the client's alert
        assert await asyncio.wait_for(asyncio.to_thread(next_client), 20) == b"4" * REPLY
        server.close()
    asyncio.run(run())
