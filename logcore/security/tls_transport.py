"""The broker's TLS transport: asyncio's TLS protocol, reading every complete TLS record that
has arrived in one call.

asyncio's SSLProtocol decrypts into the application's buffer with one SSLObject.read per TLS
record (a GIL release and retake and a memoryview slice each). librdkafka writes a produced
record's ~10 B header and its 1 KiB value as two TLS records, so the broker's TLS produce paid
that twice per record. `BatchedReads` serves a TLS listener with a subclass of asyncio's
SSLProtocol whose buffered read hands the whole buffer to `_tlsrecords.read_into` (C: SSL_read_ex
in a loop, the GIL released once, OpenSSL's read-ahead on). Everything else is asyncio's: the handshake, writes, flow
control, close_notify and shutdown, key updates. When read_into stops for anything but "no
complete record left" or "buffer full", asyncio's own read loop goes on from there, so
close_notify and errors surface exactly as they do without it.

`server_reads()` prefers `tls_socket.SocketListener` (OpenSSL reads the socket itself, no memory
BIO; the same C reader) when read_into can read an SSLSocket's object too, else BatchedReads.
SocketListener's protocol factory also has close(): the server calls it as the listener closes,
ending the connections still in their handshake.
`OneRecordReads` is asyncio's protocol unchanged (create_server's ssl=), the policy when the C
reader cannot be used in this process: not built, or its self-check against this Python's _ssl
failed (`server_reads()` says why, once, in the log).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
from asyncio import sslproto
from typing import Callable

logger = logging.getLogger(__name__)


class OneRecordReads:
    """asyncio's TLS protocol: one SSLObject.read per TLS record."""

    name = "asyncio"

    def serve(self, loop: asyncio.AbstractEventLoop, app_factory: Callable[[], asyncio.BaseProtocol],
              context: ssl.SSLContext) -> tuple[Callable[[], asyncio.BaseProtocol], dict]:
        """The protocol factory and the create_server keywords of a TLS listener."""
        return app_factory, {"ssl": context}


class BatchedReads:
    """asyncio's TLS protocol with every complete TLS record decrypted in one C call."""

    name = "batched"

    def __init__(self, records):
        self.records = records          # the bound _tlsrecords module

    def serve(self, loop: asyncio.AbstractEventLoop, app_factory: Callable[[], asyncio.BaseProtocol],
              context: ssl.SSLContext) -> tuple[Callable[[], asyncio.BaseProtocol], dict]:
        records = self.records

        def protocol() -> BatchedReadProtocol:
            # As create_server(ssl=context) builds it: server side, asyncio's default timeouts.
            return BatchedReadProtocol(records, loop, app_factory(), context, None, server_side=True)
        return protocol, {}


class BatchedReadProtocol(sslproto.SSLProtocol):
    """asyncio's SSLProtocol; only how many records one buffered read decrypts differs."""

    def __init__(self, records, loop, *args, **kwargs):
        super().__init__(loop, *args, **kwargs)
        self._records = records
        self._event_loop = loop

    def _do_read__buffered(self):
        # asyncio's method (3.11) with its first reads done by read_into: same buffer, same
        # buffer_updated and eof calls, same rescheduling when the buffer fills.
        buf = self._app_protocol_get_buffer(self._get_read_buffer_size())
        wants = len(buf)
        sslobj = self._sslobj
        offset = 0
        count = 1
        try:
            try:
                got = self._records.read_into(sslobj._sslobj, buf, wants) if wants else -1
            except ValueError:          # this object fails read_into's check: asyncio's reads
                got = -1
            if got >= 0:
                offset = got
                if offset == wants:
                    self._event_loop.call_soon(self._do_read)
            else:
                # Stopped on something else (close_notify, an error) or nothing to read into:
                # asyncio's loop from here reports it, after what was read before it.
                offset = -got - 1
                while True:
                    count = sslobj.read(wants - offset, buf[offset:])
                    if count <= 0:
                        break
                    offset += count
                    if offset >= wants:
                        self._event_loop.call_soon(self._do_read)
                        break
        except sslproto.SSLAgainErrors:
            pass
        if offset > 0:
            self._app_protocol_buffer_updated(offset)
        if not count:
            # close_notify
            self._call_eof_received()
            self._start_shutdown()


def choose_reads(ssl_module_path: str | None = None, probe=None, sockets: bool = True, socket_probe=None):
    """The policy for TLS listeners in this process: SocketListener if the C reader is built,
    binds to the libssl of Python's _ssl (at `ssl_module_path`, checked on `probe`, an
    SSLObject; both default to this process's) and reads an SSLSocket's object too (checked on
    `socket_probe`, a connected SSLSocket, by default one of its own; and `sockets`);
    BatchedReads if only the first holds; else OneRecordReads; why, in the log."""
    try:
        from logcore.security import _tlsrecords
    except ImportError as exc:
        return _fallback(f"the C reader is not built ({exc})")
    import _ssl
    if ssl_module_path is None:
        ssl_module_path = getattr(_ssl, "__file__", None)
        if ssl_module_path is None:
            return _fallback("Python's _ssl module is built into the interpreter, not a loadable file")
    if probe is None:
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO())
    inner = getattr(probe, "_sslobj", None)
    if inner is None:
        return _fallback("ssl.SSLObject has no _sslobj")
    reason = _tlsrecords.bind(ssl_module_path, inner)
    if reason is not None:
        return _fallback(reason)
    if not sockets:
        return BatchedReads(_tlsrecords)
    if not (_reads_sslsocket(_tlsrecords) if socket_probe is None else _checks(_tlsrecords, socket_probe)):
        logger.warning("TLS listeners read through asyncio's memory BIOs: the C reader cannot read"
                       " an ssl.SSLSocket's object in this Python")
        return BatchedReads(_tlsrecords)
    from logcore.security.tls_socket import SocketListener
    return SocketListener(_tlsrecords)


def _reads_sslsocket(records) -> bool:
    """Whether read_into's check passes on a connected SSLSocket's _sslobj."""
    left, right = socket.socketpair()
    try:
        wrapped = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).wrap_socket(left, server_side=True,
                                                                      do_handshake_on_connect=False)
        try:
            return _checks(records, wrapped)
        finally:
            wrapped.close()
    finally:
        left.close()
        right.close()


def _checks(records, ssl_socket: ssl.SSLSocket) -> bool:
    inner = getattr(ssl_socket, "_sslobj", None)
    return inner is not None and records.check(inner)


def _fallback(reason: str) -> OneRecordReads:
    logger.warning("TLS listeners decrypt one TLS record per read, asyncio's way: %s", reason)
    return OneRecordReads()


@functools.cache
def server_reads():
    """This process's policy, chosen once."""
    return choose_reads()
