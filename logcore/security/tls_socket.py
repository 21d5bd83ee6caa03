"""A TLS transport in which OpenSSL reads from and writes to the socket itself.

asyncio's TLS protocol feeds OpenSSL through memory BIOs: every socket read is copied into a
Python buffer (zero-filled by OpenSSL first), then into the BIO, then OpenSSL copies it again
into its record buffer. Here the connection is a non-blocking `ssl.SSLSocket` (a socket BIO)
driven by the event loop's add_reader / add_writer: OpenSSL's read-ahead takes ciphertext from
the kernel straight into its record buffer, and every complete record is decrypted into the
protocol's buffer by `_tlsrecords.read_into` in one C call.

After the handshake a buffering BIO goes in front of the socket on each side
(`_tlsrecords.buffer_socket`): OpenSSL writes each TLS record (16 KiB at most) to its write BIO
on its own, so on the bare socket a 256 KiB fetch chunk took 16 send() calls, each waking the
reader on loopback; buffered, a write's records leave in one send() when the write ends
(`_tlsrecords.flush`), and a read takes what has arrived in one recv() of up to the read
buffer's size instead of one per ~16 KiB that OpenSSL's read-ahead asks for. Ciphertext the
socket did not take stays in the write BIO (counted in the write buffer's size) and goes first
when it is writable.

`SocketTransport` speaks asyncio's transport interface to a protocol (a BufferedProtocol's
get_buffer / buffer_updated, or data_received), with the callbacks asyncio's TLS transport
makes: connection_made once the handshake is done (never for a handshake that fails or does
not finish within `handshake_timeout`), eof_received on close_notify or the peer's close,
pause_writing / resume_writing around its write buffer's high-water mark, connection_lost.
close() sends what is buffered, then close_notify, and closes the socket once the peer's
close_notify (or its close) arrives, what it sent meanwhile read and dropped: a socket closed on
unread data is reset, which can take our last bytes with it at the peer. A peer that takes none
of the buffered bytes for `close_timeout`, or does not answer close_notify within it, has its
socket closed then.

A TLS 1.2 client's renegotiation is refused (OpenSSL's no_renegotiation alert; the client then
ends the connection), as Kafka refuses it, whatever the context allowed: a write the socket did
not take whole leaves OpenSSL's SSL_write half done, and the handshake messages a renegotiation
makes OpenSSL write from inside a read then fail (BAD_LENGTH), killing the connection with the
replies still queued in it.

`SocketListener` is the listener policy: a plain asyncio server accepts, and each accepted
socket is handed to a SocketTransport (the descriptor duplicated, asyncio's plain transport
aborted before it ever read). The protocol factory it gives the server (`Handovers`) knows the
connections still in their handshake: its close(), as the listener shuts down, ends them at once
(the application never heard of them; their handshake timeout would keep them for a minute).
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import weakref
from typing import Callable

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 60.0        # seconds, asyncio's default for TLS servers
CLOSE_TIMEOUT = 5.0             # seconds of a peer's silence after which a closing connection ends
DROPPED_READS = 16              # reads in one go of what a peer sends after our close_notify
HIGH_WATER = 64 * 1024          # write buffer bytes above which the protocol is paused (asyncio's)
READ_SIZE = 256 * 1024          # buffer for a protocol that is not a BufferedProtocol
DROP_SIZE = 16 * 1024           # buffer for what a peer sends once the connection closes (a record)
READ_BUFFER = 256 * 1024        # ciphertext bytes one recv() may take (buffer_socket)
WRITE_BUFFER = 256 * 1024       # ciphertext bytes gathered for one send(): a fetch chunk's records


class SocketListener:
    """TLS listeners served by SocketTransport; `records` is the bound _tlsrecords module."""

    name = "socket"

    def __init__(self, records, handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 close_timeout: float = CLOSE_TIMEOUT,
                 read_buffer: int = READ_BUFFER, write_buffer: int = WRITE_BUFFER):
        self.records = records
        self.handshake_timeout = handshake_timeout
        self.close_timeout = close_timeout
        self.buffers = (read_buffer, write_buffer)      # 0: that side unbuffered

    def serve(self, loop: asyncio.AbstractEventLoop, app_factory: Callable[[], asyncio.BaseProtocol],
              context: ssl.SSLContext) -> tuple["Handovers", dict]:
        """The protocol factory and the create_server keywords of a TLS listener. The context
        is set to refuse a client's renegotiation (module doc)."""
        context.options |= ssl.OP_NO_RENEGOTIATION
        return Handovers(self, loop, app_factory, context), {}


class Handovers:
    """A TLS listener's protocol factory: every accepted socket goes to a SocketTransport.
    close() (the listener shuts down) ends the connections still in their handshake at once,
    and any accepted after it."""

    def __init__(self, policy: SocketListener, loop, app_factory, context):
        self._policy, self._loop, self._app_factory, self._context = policy, loop, app_factory, context
        self._transports: weakref.WeakSet[SocketTransport] = weakref.WeakSet()
        self.closed = False

    def __call__(self) -> asyncio.Protocol:
        return _Handover(self)

    def take(self, raw: socket.socket) -> None:
        """Serve the accepted socket `raw` (closed at once after close())."""
        if self.closed:
            raw.close()
            return
        policy = self._policy
        # The application's protocol is made at accept, as asyncio's TLS transport makes it.
        try:
            transport = SocketTransport(self._loop, raw, self._context, self._app_factory(), policy.records,
                                        policy.handshake_timeout, policy.close_timeout, policy.buffers)
        except OSError as exc:         # reset before it was taken (getpeername: not connected)
            logger.debug("TLS connection gone at accept: %s", exc)
            raw.close()
            return
        self._transports.add(transport)

    def close(self) -> None:
        self.closed = True
        for transport in list(self._transports):
            if transport.handshaking:
                transport.abort()


class _Handover(asyncio.Protocol):
    """The plain transport's protocol for an instant: it takes the socket and aborts it."""

    def __init__(self, handovers: Handovers):
        self._handovers = handovers

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio adds its reader after this callback, so the plain transport never reads; the
        # duplicate keeps the connection open when the transport closes its descriptor.
        fd = os.dup(transport.get_extra_info("socket").fileno())
        transport.abort()
        try:
            raw = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            raise
        self._handovers.take(raw)


class SocketTransport(asyncio.Transport):
    """One server-side TLS connection over a non-blocking SSLSocket (see the module doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, raw: socket.socket, context: ssl.SSLContext,
                 protocol: asyncio.BaseProtocol, records, handshake_timeout: float,
                 close_timeout: float = CLOSE_TIMEOUT,
                 buffers: tuple[int, int] = (READ_BUFFER, WRITE_BUFFER)):
        super().__init__()
        raw.setblocking(False)
        self._loop = loop
        self._records = records
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)
        self._made = False                  # connection_made called (the handshake is done)
        self._peername = raw.getpeername()
        self._sockname = raw.getsockname()
        self._ssl = context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        self._fd = self._ssl.fileno()
        self._buffers = buffers
        self._write_buf = bytearray()       # plaintext OpenSSL has not taken yet
        self._unflushed = 0                 # ciphertext in the write BIO the socket has not taken
        self._high, self._low = HIGH_WATER, HIGH_WATER // 4
        self._writing_paused = False        # the protocol was told pause_writing
        self._reading_paused = False
        self._reader = self._writer = None  # the callbacks registered with the loop now
        self._closing = False
        self._lost = False
        self._close_timeout = close_timeout
        # OpenSSL's other direction first: a read that must write (a TLS 1.3 key update's answer
        # to a full socket), a write that must read (TLS 1.2 renegotiation).
        self._read_needs_write = self._write_needs_read = False
        self._timer = loop.call_later(handshake_timeout, self._handshake_expired, handshake_timeout)
        self._watch(self._handshake, None)

    @property
    def handshaking(self) -> bool:
        return not self._made and not self._lost

    # ------------------------------------------------------------------ loop registration
    def _watch(self, reader, writer) -> None:
        """Register exactly `reader` for readable and `writer` for writable (None: neither)."""
        # != as bound methods compare: each attribute access makes a new one.
        if reader != self._reader:
            if self._reader is not None:
                self._loop.remove_reader(self._fd)
            if reader is not None:
                self._loop.add_reader(self._fd, reader)
            self._reader = reader
        if writer != self._writer:
            if self._writer is not None:
                self._loop.remove_writer(self._fd)
            if writer is not None:
                self._loop.add_writer(self._fd, writer)
            self._writer = writer

    # ------------------------------------------------------------------ handshake
    def _handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(self._handshake, None)
            return
        except ssl.SSLWantWriteError:
            self._watch(None, self._handshake)
            return
        except (ssl.SSLError, OSError) as exc:
            logger.debug("TLS handshake with %s failed: %s", self._peername, exc)
            self._force_close(None)
            return
        self._timer.cancel()
        self._timer = None
        self._watch(None, None)
        try:
            self._records.buffer_socket(self._ssl._sslobj, *self._buffers)
        except (ValueError, MemoryError) as exc:
            self._fatal(exc)
            return
        self._made = True
        self._protocol.connection_made(self)
        if not self._closing:
            self._schedule_read()        # records that came with the handshake's last flight

    def _handshake_expired(self, timeout: float) -> None:
        self._timer = None
        logger.debug("TLS handshake with %s not finished in %.1f s; closing", self._peername, timeout)
        self._force_close(None)

    # ------------------------------------------------------------------ reading
    def _schedule_read(self) -> None:
        self._watch(self._read_ready, self._writer)
        # OpenSSL may hold read-ahead records the socket will never signal again.
        self._loop.call_soon(self._read_ready)

    def _read_ready(self) -> None:
        if self._reading_paused or self._closing:
            return
        protocol = self._protocol
        buf = protocol.get_buffer(-1) if self._buffered else bytearray(READ_SIZE)
        wants = len(buf)
        got = self._records.read_into(self._ssl._sslobj, buf, wants)
        if got < 0:
            # Stopped on something other than "no complete record": SSLSocket's read says what.
            got = -got - 1
            try:
                more = self._ssl.recv_into(memoryview(buf)[got:], wants - got) if got < wants else None
            except ssl.SSLWantReadError:
                more = None
            except ssl.SSLWantWriteError:
                more = None
                self._read_needs_write = True
                self._watch(self._reader, self._write_ready)
            except (ssl.SSLError, OSError) as exc:
                self._deliver(buf, got)
                self._fatal(exc)
                return
            if more == 0:
                self._deliver(buf, got)
                self._eof()
                return
            got += more or 0
        self._deliver(buf, got)
        if got == wants and not self._reading_paused and not self._closing:
            self._loop.call_soon(self._read_ready)      # a full buffer: more may be waiting
        if self._write_needs_read and not self._lost:
            self._write_needs_read = False
            self._write_ready()

    def _deliver(self, buf, nbytes: int) -> None:
        if not nbytes or self._lost:
            return
        if self._buffered:
            self._protocol.buffer_updated(nbytes)
        else:
            self._protocol.data_received(bytes(memoryview(buf)[:nbytes]))

    def _eof(self) -> None:
        """close_notify or the peer's close: TLS cannot stay half open, so the connection ends."""
        self._watch(None, self._writer)
        self._protocol.eof_received()
        self.close()

    def pause_reading(self) -> None:
        if self._closing or self._reading_paused:
            return
        self._reading_paused = True
        if self._made:
            self._watch(None, self._writer)

    def resume_reading(self) -> None:
        if self._closing or not self._reading_paused:
            return
        self._reading_paused = False
        if self._made:
            self._schedule_read()

    def is_reading(self) -> bool:
        return not self._reading_paused and not self._closing

    # ------------------------------------------------------------------ writing
    def write(self, data) -> None:
        if self._closing or not data:
            return
        if self._write_buf or self._unflushed:
            self._write_buf += data         # behind what waits for the socket
            self._pause_protocol()
            return
        view = memoryview(data).cast("B")
        sent = self._send(view)
        if sent < 0:
            return
        if sent < len(view):
            # A retried SSL_write must start with the same bytes: the buffer keeps them first.
            self._write_buf += view[sent:]
        if not self._flush():
            return
        self._watch_writes()
        self._pause_protocol()

    def writelines(self, list_of_data) -> None:
        self.write(b"".join(list_of_data))

    def _send(self, view: memoryview) -> int:
        """Bytes of `view` OpenSSL took (encrypted into the write BIO, which sends what does not
        fit); -1 after a fatal error."""
        sent, total = 0, len(view)
        try:
            while sent < total:
                sent += self._ssl.send(view[sent:])
        except ssl.SSLWantWriteError:
            pass
        except ssl.SSLWantReadError:
            self._write_needs_read = True     # retried after the next read, not on writable
        except (ssl.SSLError, OSError) as exc:
            self._fatal(exc)
            return -1
        return sent

    def _flush(self) -> bool:
        """The write BIO's ciphertext to the socket, what it takes now; False after a fatal error."""
        try:
            self._unflushed = self._records.flush(self._ssl._sslobj)
        except OSError as exc:
            self._fatal(exc)
            return False
        return True

    def _watch_writes(self) -> None:
        """Writable wanted while a read waits to write, ciphertext waits for the socket, or
        plaintext for OpenSSL (unless that write waits for a read)."""
        waiting = (self._read_needs_write or self._unflushed
                   or (self._write_buf and not self._write_needs_read))
        self._watch(self._reader, self._write_ready if waiting else None)

    def _write_ready(self) -> None:
        if self._read_needs_write:
            self._read_needs_write = False
            self._read_ready()
            if self._lost:
                return
        if self._unflushed:
            if not self._flush():
                return
            if self._unflushed:                 # the socket is full again
                self._watch_writes()
                return
        if self._write_buf and not self._write_needs_read:
            with memoryview(self._write_buf) as view:
                sent = self._send(view)
            if sent < 0:
                return
            del self._write_buf[:sent]
            if not self._flush():
                return
            if self._closing and sent:
                self._arm_close_timer()         # the peer reads: silence is counted from now
        if self._writing_paused and self.get_write_buffer_size() <= self._low and not self._closing:
            self._writing_paused = False        # at the low-water mark, as asyncio's transports
            self._protocol.resume_writing()
        self._watch_writes()
        if self._closing and not self._lost and not self._write_buf and not self._unflushed:
            self._shutdown()

    def _pause_protocol(self) -> None:
        if not self._writing_paused and self.get_write_buffer_size() > self._high:
            self._writing_paused = True
            self._protocol.pause_writing()

    def get_write_buffer_size(self) -> int:
        return len(self._write_buf) + self._unflushed

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        high = HIGH_WATER if high is None else high
        low = high // 4 if low is None else low
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        if self._made:
            self._pause_protocol()

    def can_write_eof(self) -> bool:
        # TLS has no half-close (close_notify ends the session), so write_eof is refused, as by
        # asyncio's own TLS transport (the base class's write_eof).
        return False

    # ------------------------------------------------------------------ closing
    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """What is buffered goes out, then close_notify; the socket is closed on the peer's
        close_notify or close, or after close_timeout of its silence (module doc)."""
        if self._closing:
            return
        if not self._made:
            self._force_close(None)     # nothing to flush, no session to end
            return
        self._closing = True
        self._arm_close_timer()
        self._watch(None, self._writer)
        if not self._write_buf and not self._unflushed:
            self._shutdown()

    def _arm_close_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(self._close_timeout, self._close_expired)

    def _close_expired(self) -> None:
        self._timer = None
        logger.debug("TLS connection with %s: the peer silent for %.1f s while closing; closed",
                     self._peername, self._close_timeout)
        self._force_close(None)

    def _shutdown(self) -> None:
        self._arm_close_timer()
        self._send_close_notify()

    def _send_close_notify(self) -> None:
        """close_notify out (again when the socket was full); then the peer's is awaited."""
        if self._lost:
            return
        try:
            self._ssl.unwrap()          # returns once the peer's close_notify is in too
        except ssl.SSLWantWriteError:
            self._watch(None, self._send_close_notify)
            return
        except ssl.SSLWantReadError:
            self._watch(None, None)
            self._await_close_notify()
            return
        except (ssl.SSLError, OSError, ValueError) as exc:
            # E.g. data the peer sent before it saw ours: OpenSSL ends the session on it.
            logger.debug("TLS connection with %s: closing: %s", self._peername, exc)
            self._drain()
            return
        self._force_close(None)

    def _await_close_notify(self) -> None:
        """Ours is out: what the peer still sends is read and dropped until its close_notify
        (or its close)."""
        if self._lost:
            return
        dropped = bytearray(DROP_SIZE)
        for _ in range(DROPPED_READS):
            try:
                if not self._ssl.recv_into(dropped):
                    break                           # the peer's close, without close_notify
            except ssl.SSLWantReadError:
                self._watch(self._await_close_notify, None)
                return
            except ssl.SSLWantWriteError:
                self._watch(None, self._await_close_notify)
                return
            except ssl.SSLZeroReturnError:
                break                               # the peer's close_notify
            except (ssl.SSLError, OSError) as exc:
                logger.debug("TLS connection with %s: closing: %s", self._peername, exc)
                self._drain()
                return
        else:
            self._loop.call_soon(self._await_close_notify)     # records OpenSSL read ahead
            return
        self._force_close(None)

    def _drain(self) -> None:
        """The session is over: what the peer still sends is taken off the socket and dropped
        until it closes, as closing on unread data would reset the connection (and with it
        our last bytes still unread at the peer)."""
        if self._lost:
            return
        try:
            more = socket.socket.recv(self._ssl, DROP_SIZE) != b""     # the TCP socket itself
        except (BlockingIOError, InterruptedError):
            more = True
        except OSError:
            more = False
        if more:
            self._watch(self._drain, None)
        else:
            self._force_close(None)

    def abort(self) -> None:
        self._force_close(None)

    def _fatal(self, exc: BaseException) -> None:
        logger.debug("TLS connection with %s: %s", self._peername, exc)
        self._force_close(exc)

    def _force_close(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._closing = self._lost = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._watch(None, None)
        # A new buffer, not clear(): _write_ready's memoryview of the old one may still be open.
        self._write_buf = bytearray()
        self._unflushed = 0
        if self._made:
            self._loop.call_soon(self._connection_lost, exc)
        else:
            self._ssl.close()

    def _connection_lost(self, exc: BaseException | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._ssl.close()

    # ------------------------------------------------------------------ asyncio.Transport
    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)

    def get_extra_info(self, name: str, default=None):
        ssl_socket = self._ssl
        if name == "peername":
            return self._peername
        if name == "sockname":
            return self._sockname
        if name in ("sslcontext", "ssl_object", "socket"):
            return ssl_socket.context if name == "sslcontext" else ssl_socket
        if name == "peercert":
            return ssl_socket.getpeercert()
        if name == "cipher":
            return ssl_socket.cipher()
        if name == "compression":
            return ssl_socket.compression()
        return default
