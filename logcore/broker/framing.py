"""One client connection's byte stream: size-prefixed request frames in, response bytes out.

asyncio's StreamReader copies every received byte into its buffer and again into each frame
(readexactly), then moves what is left to the buffer's start: three or four copies of every
produced record. This protocol receives into a scratch buffer, from which small frames are
copied out once; a frame larger than what has arrived gets its own buffer, and the kernel
receives the rest of it straight there (recv_into). Frames are writable (bytearrays, or views
of a reused buffer): the produce path stamps offsets into the records in place.

A large frame's buffer is reused for a later frame once nothing refers to it any more (the
request was handled): a fresh buffer of hundreds of KiB costs a page fault per 4 KiB, which
was most of the cost of receiving a produce request.

Writes go to the transport, with flow control (`drain`) as a StreamWriter gives.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import struct
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
SCRATCH_BYTES = 64 * 1024
MAX_QUEUED_BYTES = 4 << 20      # frames received but not yet taken: past this, stop reading
POOLED_MIN = 64 * 1024          # frames from this size on get a reused buffer
POOLED_MAX = 16 << 20           # ... up to this size (larger ones are rare: a fresh buffer)
POOL_BUFFERS = 4                # reusable buffers kept per connection
_POOL_GRANULE = 256 * 1024


def _unreferenced(buf: bytearray) -> bool:
    """No view of `buf` is alive (no frame, records slice or array made from one): a bytearray
    with buffer exports refuses to change size."""
    try:
        buf.append(0)
    except BufferError:
        return False
    buf.pop()
    return True


_IDLE = object()       # what the reader's waiter gets when the idle timeout fires


class FrameConnection(asyncio.BufferedProtocol):
    """Frames of at most `max_frame` bytes; `serve(connection)` runs for the connection's life.

    `handle_now(connection, frame) -> bool`, when given, is offered each frame that arrives
    while the reader is parked in read_frame with nothing queued (so no earlier frame is being
    handled): it may handle the frame right here, in the protocol callback (True), saving the
    reader task's wake-up, or leave it to the reader (False)."""

    def __init__(self, max_frame: int, serve: Callable[[FrameConnection], Awaitable[None]],
                 handle_now: Callable[[FrameConnection, object], bool] | None = None):
        self.max_frame = max_frame
        self._serve = serve
        self._handle_now = handle_now
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._scratch_view = memoryview(self._scratch)
        self._scratch_len = 0                       # received bytes not yet made into frames
        self._frame: bytearray | memoryview | None = None   # a frame larger than what had arrived
        self._filled = 0
        self._frame_size = 0
        self._pool: list[bytearray] = []
        self._frames: collections.deque = collections.deque()
        self._queued_bytes = 0
        self._reading_paused = False
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

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        # The connection's loop for its whole life (asyncio.get_running_loop costs a getpid
        # system call per call on Python 3.11).
        self._loop = loop = asyncio.get_running_loop()
        self._loop_time = loop.time
        self._last_received = loop.time()
        loop.create_task(self._serve(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return self._frame[self._filled:]
        return self._scratch_view[self._scratch_len:]

    def buffer_updated(self, nbytes: int) -> None:
        self._last_received = self._loop_time()
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == self._frame_size:
                frame, self._frame = self._frame, None
                self._push(frame)
            return
        self._scratch_len += nbytes
        self._split_scratch()

    def eof_received(self) -> bool:
        self._finish(self._partial_reason())
        return True            # half-closed: the responses to frames already read still go out

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._finish(self._partial_reason())
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
        buf, end, pos = self._scratch, self._scratch_len, 0
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
                self._push(buf[start:start + size])
                pos = start + size
            else:
                have = end - start
                frame = self._buffer(size)
                frame[:have] = self._scratch_view[start:end]
                self._frame, self._filled, self._frame_size = frame, have, size
                pos = end
        rest = end - pos
        if rest and pos:
            buf[:rest] = self._scratch_view[pos:end]
        self._scratch_len = rest

    def _buffer(self, size: int) -> memoryview:
        """A writable view of exactly `size` bytes for a frame that has not all arrived."""
        if not POOLED_MIN <= size <= POOLED_MAX:
            return memoryview(bytearray(size))
        spare = None
        for buf in self._pool:
            if _unreferenced(buf) and len(buf) >= size and (spare is None or len(buf) < len(spare)):
                spare = buf
        if spare is None:
            spare = bytearray(-(-size // _POOL_GRANULE) * _POOL_GRANULE)
            if len(self._pool) >= POOL_BUFFERS:
                unused = [b for b in self._pool if _unreferenced(b)]
                if not unused:
                    return memoryview(spare)[:size]     # all busy: this one is not kept
                self._pool.remove(min(unused, key=len))
            self._pool.append(spare)
        return memoryview(spare)[:size]

    def _push(self, frame) -> None:
        if (self._handle_now is not None and not self._frames and self._waiter is not None
                and not self._waiter.done() and self._handle_now(self, frame)):
            return
        self._frames.append(frame)
        self._queued_bytes += len(frame)
        if self._queued_bytes > MAX_QUEUED_BYTES and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _partial_reason(self) -> str | None:
        if self._frame is not None:
            return f"truncated frame ({self._filled} of {self._frame_size} bytes); closing the connection"
        if self._scratch_len >= 4:
            (size,) = _SIZE.unpack_from(self._scratch, 0)
            return f"truncated frame ({self._scratch_len - 4} of {size} bytes); closing the connection"
        if self._scratch_len:
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
                if self._frame is not None or self._scratch_len:
                    logger.warning("connection %s: a frame not completed in %.0f s; closing it",
                                   self.peer, idle_timeout)
                else:
                    logger.info("connection %s: idle for %.0f s; closing it", self.peer, idle_timeout)
                return None
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        if self._reading_paused and self._queued_bytes <= MAX_QUEUED_BYTES // 2:
            self._reading_paused = False
            if not self._eof:
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
