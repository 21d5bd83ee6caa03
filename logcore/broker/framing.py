"""One client connection's byte stream: size-prefixed request frames in, response bytes out.

asyncio's StreamReader copies every received byte into its buffer and again into each frame
(readexactly), then moves what is left to the buffer's start: three or four copies of every
produced record. This protocol receives into a scratch buffer (one per server: the event loop
runs one connection's receive at a time, and what is left of a frame is moved out before the
next), from which small frames are copied out once; a frame larger than what has arrived gets
its own buffer, and the kernel receives the rest of it straight there (recv_into). Frames are
writable (bytearrays, or views of a reused buffer): the produce path stamps offsets into the
records in place.

Memory follows the bytes that arrive, never the size a frame claims: a frame's buffer starts at
64 KiB (or what has arrived) and doubles as it fills, up to its size, each step admitted
against the server-wide request memory bound (`queued.max.request.bytes`, RequestMemory): past
it the connection stops reading until memory is released (the frame handled, a connection
closed). A frame must complete within `socket.request.read.timeout.ms` of its first byte, or
the connection is closed (a client trickling a byte now and then does not keep a buffer). A
large frame's buffer is reused for a later frame once nothing refers to it any more (the
request was handled): a fresh buffer of hundreds of KiB costs a page fault per 4 KiB, which
was most of the cost of receiving a produce request; the buffers kept for reuse are bounded per
connection and per server.

`max.connections` / `max.connections.per.ip` (ConnectionLimits) are enforced when a connection
is made: one over the limit is closed at once, logged at most once per interval.

Writes go to the transport, with flow control (`drain`) as a StreamWriter gives.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
SCRATCH_BYTES = 64 * 1024
MAX_QUEUED_BYTES = 4 << 20      # frames received but not yet taken: past this, stop reading
POOLED_MIN = 64 * 1024          # frames from this size on get a reused buffer
POOLED_MAX = 16 << 20           # ... up to this size (larger ones are rare: a fresh buffer)
POOL_BUFFERS = 4                # reusable buffers kept per connection
POOL_TOTAL_BYTES = 256 << 20    # ... and at most this much in all a server's connections
_POOL_GRANULE = 256 * 1024     # a pooled buffer's size is a multiple of this
FIRST_STEP = 64 * 1024          # a frame's first buffer (unless more has arrived)
MAX_STEP = 8 << 20              # a growing frame buffer adds at most this much at a time
_ZEROS = memoryview(bytes(MAX_STEP + _POOL_GRANULE))  # what a buffer grows by (calloc'd: no RSS)


def _unreferenced(buf: bytearray) -> bool:
    """No view of `buf` is alive (no frame, records slice or array made from one): a bytearray
    with buffer exports refuses to change size."""
    try:
        buf.append(0)
    except BufferError:
        return False
    buf.pop()
    return True


class RequestMemory:
    """The bound on request bytes a server holds (Kafka's queued.max.request.bytes): frame
    buffers being filled and frames received but not yet taken by their connection's reader.
    `limit` -1: unbounded. A connection that needs more while the bound is reached stops
    reading and is resumed, in order, as memory is released. Also holds the server's shared
    scratch buffer and the count of bytes kept in the connections' buffer pools."""

    def __init__(self, limit: int = -1):
        self.limit = limit
        self.used = 0
        self.peak = 0
        self.pooled = 0
        self.waiting: collections.deque = collections.deque()
        self.scratch = bytearray(SCRATCH_BYTES)
        self.scratch_view = memoryview(self.scratch)

    def room(self, n: int) -> bool:
        return self.limit < 0 or self.used + n <= self.limit

    def charge(self, n: int) -> None:
        self.used += n
        if self.used > self.peak:
            self.peak = self.used

    def release(self, n: int) -> None:
        self.used -= n
        while self.waiting and (self.limit < 0 or self.used < self.limit):
            conn = self.waiting.popleft()
            if not conn.memory_granted():
                self.waiting.appendleft(conn)
                break

    @property
    def over(self) -> bool:
        return 0 <= self.limit < self.used


class ConnectionLimits:
    """max.connections and max.connections.per.ip: a connection over either is closed as it is
    made; the refusals are logged at most once per `log_interval` seconds."""

    def __init__(self, max_connections: int, max_per_ip: int, log_interval: float = 10.0):
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.log_interval = log_interval
        self.count = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0
        self._unlogged = 0
        self._last_log = float("-inf")

    def admit(self, ip: str) -> bool:
        n = self.per_ip.get(ip, 0)
        if self.count >= self.max_connections:
            reason = f"max.connections={self.max_connections}"
        elif n >= self.max_per_ip:
            reason = f"max.connections.per.ip={self.max_per_ip}"
        else:
            self.count += 1
            self.per_ip[ip] = n + 1
            return True
        self.refused += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._last_log >= self.log_interval:
            logger.warning("connection limit: closed the connection from %s as it was accepted (%s reached);"
                           " %d closed so since the last such warning (logged at most every %.0f s)",
                           ip, reason, self._unlogged, self.log_interval)
            self._unlogged = 0
            self._last_log = now
        return False

    def leave(self, ip: str) -> None:
        self.count -= 1
        n = self.per_ip.get(ip, 0) - 1
        if n > 0:
            self.per_ip[ip] = n
        else:
            self.per_ip.pop(ip, None)


_IDLE = object()       # what the reader's waiter gets when the idle timeout fires


class FrameConnection(asyncio.BufferedProtocol):
    """Frames of at most `max_frame` bytes; `serve(connection)` runs for the connection's life.

    `handle_now(connection, frame) -> bool`, when given, is offered each frame that arrives
    while the reader is parked in read_frame with nothing queued (so no earlier frame is being
    handled): it may handle the frame right here, in the protocol callback (True), saving the
    reader task's wake-up, or leave it to the reader (False).

    `memory`: the server's RequestMemory (default: an unbounded one of this connection's own);
    `read_timeout`: seconds a frame may take from its first byte to its last (None: no limit);
    `limits`: the server's ConnectionLimits."""

    def __init__(self, max_frame: int, serve: Callable[[FrameConnection], Awaitable[None]],
                 handle_now: Callable[[FrameConnection, object], bool] | None = None, *,
                 memory: RequestMemory | None = None, read_timeout: float | None = None,
                 limits: ConnectionLimits | None = None):
        self.max_frame = max_frame
        self._serve = serve
        self._handle_now = handle_now
        self._memory = memory if memory is not None else RequestMemory()
        self._read_timeout = read_timeout
        self._limits = limits
        self._admitted = False
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self._scratch_len = 0                       # bytes in the shared scratch (one receive)
        self._prefix = b""                          # a frame's size prefix, not all arrived
        self._frame_buf: bytearray | None = None    # a frame larger than what had arrived
        self._pooled = False                        # ... in a pooled buffer (else a growing one)
        self._filled = 0
        self._frame_size = 0
        self._frame_cap = 0                         # bytes of the buffer usable for the frame
        self._frame_charge = 0                      # request memory charged for the frame
        self._grow = 0                              # admitted growth not yet made (get_buffer)
        self._frame_started: float | None = None    # loop time of the current frame's first byte
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._pool: list[bytearray] = []
        self._frames: collections.deque = collections.deque()
        self._queued_bytes = 0
        self._charged = 0                           # bytes of self._memory held by this connection
        self._reading_paused = False                # too much queued on this connection
        self._memory_paused = False                 # waiting for the server's request memory
        self._waiter: asyncio.Future | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed_reason: str | None = None      # why no more frames come (logged once taken)
        self._eof = False
        self._lost = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # The server's per-connection response queue and sender state (for handle_now).
        self.responses: asyncio.Queue | None = None
        self.sending = None
        self.session = None        # the server's security session of this connection
        self._half_close = True     # a TLS transport cannot stay half open

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._half_close = transport.get_extra_info("sslcontext") is None
        self.peer = transport.get_extra_info("peername")
        if self._limits is not None:
            ip = self.peer[0] if isinstance(self.peer, tuple) else str(self.peer)
            if not self._limits.admit(ip):
                self._eof = self._lost = True
                transport.abort()
                return
            self._admitted = True
        # The connection's loop for its whole life (asyncio.get_running_loop costs a getpid
        # system call per call on Python 3.11).
        self._loop = loop = asyncio.get_running_loop()
        self._loop_time = loop.time
        self._last_received = loop.time()
        loop.create_task(self._serve(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame_buf is not None:
            if not self._grow and self._filled == self._frame_cap:
                # Asked for while waiting for memory (reading paused): a minimal step.
                step = min(FIRST_STEP, self._frame_size - self._filled)
                self._memory.charge(step)
                self._charged += step
                self._frame_charge += step
                self._grow = step
            if self._grow:
                self._grow_frame()
            return memoryview(self._frame_buf)[self._filled:self._frame_cap]
        prefix = self._prefix
        if prefix:
            n = len(prefix)
            self._memory.scratch[:n] = prefix
            self._scratch_len = n
            return self._memory.scratch_view[n:]
        self._scratch_len = 0
        return self._memory.scratch_view

    def buffer_updated(self, nbytes: int) -> None:
        self._last_received = self._loop_time()
        if self._frame_buf is not None:
            self._filled += nbytes
            if self._filled == self._frame_size:
                self._frame_done()
            elif self._filled == self._frame_cap and not self._grow:
                self._ask_growth()
            return
        self._scratch_len += nbytes
        self._prefix = b""
        self._split_scratch()

    def eof_received(self) -> bool:
        self._finish(self._partial_reason())
        # Half-closed: the responses to frames already read still go out (TLS has no half-close).
        return self._half_close

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._admitted and self._limits is not None:
            return             # refused at accept: nothing was started
        if self._admitted:
            self._admitted = False
            ip = self.peer[0] if isinstance(self.peer, tuple) else str(self.peer)
            self._limits.leave(ip)
        self._lost = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._finish(self._partial_reason())
        self._release_all()
        for fut in self._drain_waiters:
            if not fut.done():
                fut.set_exception(ConnectionResetError("connection lost"))
        self._drain_waiters.clear()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for fut in self._drain_waiters:
            if not fut.done():
                fut.set_result(None)
        self._drain_waiters.clear()

    # ------------------------------------------------------------------ reading
    def _split_scratch(self) -> None:
        memory = self._memory
        buf, end, pos = memory.scratch, self._scratch_len, 0
        while end - pos >= 4 and not self._eof:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame:
                self._finish(f"frame of {size} bytes is outside 0..socket.request.max.bytes="
                             f"{self.max_frame}; closing the connection")
                self.transport.pause_reading()
                end = pos
                break
            start = pos + 4
            if end - start >= size:
                memory.charge(size)
                self._charged += size
                self._frame_started = None         # the next frame's clock starts at its first byte
                self._push(buf[start:start + size], size)
                pos = start + size
            else:
                self._start_frame(size, memory.scratch_view[start:end])
                pos = end
        self._scratch_len = 0
        if end > pos and not self._eof:       # part of a size prefix: kept until the next receive
            self._prefix = bytes(buf[pos:end])
            self._frame_begins()
        if memory.over and self._frame_buf is None:
            self._wait_for_memory()

    def _start_frame(self, size: int, have: memoryview) -> None:
        """A frame of `size` bytes of which `have` has arrived: its buffer (a pooled one that
        is free, else a fresh one the size of what has arrived or FIRST_STEP, growing later)."""
        memory = self._memory
        n = len(have)
        spare = None
        if POOLED_MIN <= size <= POOLED_MAX and memory.room(size):
            for buf in self._pool:
                if len(buf) >= size and (spare is None or len(buf) < len(spare)) and _unreferenced(buf):
                    spare = buf
        if spare is not None:
            buf, charge, self._pooled = spare, size, True
        else:
            charge = min(size, max(n, FIRST_STEP))
            buf, self._pooled = bytearray(charge), False
        with memoryview(buf) as view:   # a bytearray's own slice assignment copies `have` first
            view[:n] = have
        memory.charge(charge)
        self._charged += charge
        self._frame_charge = charge
        self._frame_buf, self._filled, self._frame_size = buf, n, size
        self._frame_cap = min(len(buf), size)
        self._frame_begins()
        if n == self._frame_cap:
            self._ask_growth()
        elif memory.over:
            self._wait_for_memory()

    def _frame_done(self) -> None:
        buf, size, charge = self._frame_buf, self._frame_size, self._frame_charge
        self._frame_buf = None
        self._frame_cap = self._frame_charge = 0
        self._frame_started = None
        # A pooled buffer is handed out as a view: a live view is what marks it as in use.
        if self._pooled or (not self._pooled and self._keep_buffer(buf)):
            frame = memoryview(buf)[:size]
        else:
            frame = buf if len(buf) == size else memoryview(buf)[:size]
        self._push(frame, charge)

    def _frame_begins(self) -> None:
        if self._frame_started is None:
            self._frame_started = self._loop_time()
            if self._read_timeout is not None and self._deadline_timer is None:
                self._deadline_timer = self._loop.call_later(self._read_timeout, self._check_deadline)

    def _growth_step(self) -> int:
        """Bytes the frame's buffer grows by next: it doubles (FIRST_STEP..MAX_STEP at a
        time); the last step of a frame that may be pooled rounds its size up to _POOL_GRANULE
        so that the buffer fits later frames of about the same size."""
        have, size = len(self._frame_buf), self._frame_size
        new = min(size, have + max(FIRST_STEP, min(have, MAX_STEP)))
        if new == size and POOLED_MIN <= size <= POOLED_MAX:
            rounded = -(-size // _POOL_GRANULE) * _POOL_GRANULE
            if self._memory.room(rounded - have):     # never what would not fit the bound
                new = rounded
        return new - have

    def _ask_growth(self) -> None:
        """The frame's buffer is full but the frame is not: admit the next step, or stop
        reading until the server's request memory has room."""
        step = self._growth_step()
        if self._memory.room(step):
            self._memory.charge(step)
            self._charged += step
            self._frame_charge += step
            self._grow = step
        else:
            self._wait_for_memory()

    def _wait_for_memory(self) -> None:
        if not self._memory_paused and not self._lost and not self._eof:
            self._memory_paused = True
            self.transport.pause_reading()
            self._memory.waiting.append(self)

    def memory_granted(self) -> bool:
        """RequestMemory released some: resume if what this connection waits for fits."""
        if self._lost or self._eof or not self._memory_paused:
            self._memory_paused = False
            return True
        if self._frame_buf is not None and self._filled == self._frame_cap and not self._grow:
            step = self._growth_step()
            if not self._memory.room(step):
                return False
            self._memory.charge(step)
            self._charged += step
            self._frame_charge += step
            self._grow = step
        self._memory_paused = False
        if not self._reading_paused:
            self.transport.resume_reading()
        return True

    def _grow_frame(self) -> None:
        step, self._grow = self._grow, 0
        buf = self._frame_buf
        try:
            buf += _ZEROS[:step]          # in place (a large block grows by mremap, no copy)
        except BufferError:               # a view of the buffer is still alive: copy
            new = bytearray(len(buf) + step)
            with memoryview(new) as view:
                view[:self._filled] = memoryview(buf)[:self._filled]
            buf = self._frame_buf = new
        self._frame_cap = min(len(buf), self._frame_size)

    def _check_deadline(self) -> None:
        self._deadline_timer = None
        started = self._frame_started
        if started is None or self._lost or self._eof:
            return
        age = self._loop_time() - started
        if age < self._read_timeout:
            self._deadline_timer = self._loop.call_later(self._read_timeout - age, self._check_deadline)
            return
        if self._frame_buf is not None:
            what = f"a frame of {self._frame_size} bytes ({self._filled} received)"
        else:
            what = f"a frame's size prefix ({len(self._prefix)} of 4 bytes)"
        logger.warning("connection %s: %s not completed within socket.request.read.timeout.ms=%d;"
                       " closing the connection", self.peer, what, round(self._read_timeout * 1000))
        self._eof = True
        self._closed_reason = None
        self._release_partial()
        self.transport.abort()           # responses still queued for a stalling client are dropped
        self._wake()

    def _keep_buffer(self, buf: bytearray) -> bool:
        """Keep a finished frame's buffer for reuse, within the per-connection and server
        bounds; whether it was kept."""
        size = len(buf)
        if not POOLED_MIN <= size or size > -(-POOLED_MAX // _POOL_GRANULE) * _POOL_GRANULE or self._lost:
            return False
        memory = self._memory
        if len(self._pool) >= POOL_BUFFERS:
            unused = [b for b in self._pool if len(b) < size and _unreferenced(b)]
            if not unused:
                return False
            old = min(unused, key=len)
            self._pool.remove(old)
            memory.pooled -= len(old)
        if memory.pooled + size > POOL_TOTAL_BYTES:
            return False
        self._pool.append(buf)
        memory.pooled += size
        return True

    def _push(self, frame, charged: int) -> None:
        """A whole frame; `charged`: the request memory its buffer holds (released when the
        reader takes it, or at once when handle_now handles it)."""
        if (self._handle_now is not None and not self._frames and self._waiter is not None
                and not self._waiter.done() and self._handle_now(self, frame)):
            self._release(charged)
            return
        self._frames.append((frame, charged))
        self._queued_bytes += len(frame)
        if self._queued_bytes > MAX_QUEUED_BYTES and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _release(self, n: int) -> None:
        if n and self._charged >= n:
            self._charged -= n
            self._memory.release(n)

    def _release_partial(self) -> None:
        if self._frame_buf is not None:
            self._frame_buf = None
            charge, self._frame_charge, self._frame_cap, self._grow = self._frame_charge, 0, 0, 0
            self._release(charge)

    def _release_all(self) -> None:
        """The connection is gone: its partial frame, pooled buffers and request memory."""
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        self._frame_buf = None
        self._frame_cap = self._grow = self._frame_charge = 0
        if self._charged:
            n, self._charged = self._charged, 0
            self._memory.release(n)
        if self._pool:
            self._memory.pooled -= sum(len(b) for b in self._pool)
            self._pool.clear()
        if self._memory_paused:
            self._memory_paused = False
            try:
                self._memory.waiting.remove(self)
            except ValueError:
                pass

    def _partial_reason(self) -> str | None:
        if self._frame_buf is not None:
            return f"truncated frame ({self._filled} of {self._frame_size} bytes); closing the connection"
        if self._prefix:
            return "closed inside a frame's size prefix"
        return None

    def _finish(self, reason: str | None) -> None:
        """No more frames: `reason` (if any) is logged when the reader gets to the end."""
        if not self._eof:
            self._eof = True
            self._closed_reason = reason
        self._wake()

    def _check_idle(self, idle_timeout: float) -> None:
        loop = self._loop
        quiet = loop.time() - self._last_received
        if quiet >= idle_timeout and self._waiter is not None and not self._waiter.done():
            self._idle_timer = None
            self._waiter.set_result(_IDLE)
        elif not self._lost:
            self._idle_timer = loop.call_later(max(idle_timeout - quiet, 0.001), self._check_idle,
                                               idle_timeout)
        else:
            self._idle_timer = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read_frame(self, idle_timeout: float) -> bytearray | memoryview | None:
        """The next frame, or None when the connection ends (EOF, a bad or truncated frame, no
        byte received for `idle_timeout` s while waiting; the reason is logged)."""
        while not self._frames:
            if self._eof:
                if self._closed_reason is not None:
                    logger.warning("connection %s: %s", self.peer, self._closed_reason)
                    self._closed_reason = None
                return None
            loop = self._loop
            self._waiter = loop.create_future()
            if self._idle_timer is None:
                # One timer per connection, re-armed when it fires early (cheaper than a
                # wait_for per read, which also costs an extra event-loop round).
                self._idle_timer = loop.call_later(idle_timeout, self._check_idle, idle_timeout)
            try:
                idle = await self._waiter
            finally:
                self._waiter = None
            if idle is _IDLE:
                if self._frame_buf is not None or self._prefix:
                    logger.warning("connection %s: a frame not completed in %.0f s; closing it",
                                   self.peer, idle_timeout)
                else:
                    logger.info("connection %s: idle for %.0f s; closing it", self.peer, idle_timeout)
                return None
        frame, charged = self._frames.popleft()
        self._queued_bytes -= len(frame)
        self._release(charged)
        if self._reading_paused and self._queued_bytes <= MAX_QUEUED_BYTES // 2:
            self._reading_paused = False
            if not self._eof and not self._memory_paused:
                self.transport.resume_reading()
        return frame

    # ------------------------------------------------------------------ writing
    @property
    def write_paused(self) -> bool:
        """The transport's buffer is above its high-water mark (drain() would wait)."""
        return self._write_paused

    def write(self, data) -> None:
        self.transport.write(data)

    async def drain(self) -> None:
        if self.transport.is_closing():
            # As StreamWriter: let the loop run the transport's close callbacks first.
            await asyncio.sleep(0)
            if self._lost:
                raise ConnectionResetError("connection lost")
        if self._write_paused:
            fut = self._loop.create_future()
            self._drain_waiters.append(fut)
            await fut

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        # Frames still queued are dropped with the connection: their memory is released now.
        while self._frames:
            frame, charged = self._frames.popleft()
            self._queued_bytes -= len(frame)
            self._release(charged)
