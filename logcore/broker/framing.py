"""One client connection's byte stream: size-prefixed request frames in, response bytes out.

asyncio's StreamReader copies every received byte into its buffer and again into each frame
(readexactly), then moves what is left to the buffer's start: three or four copies of every
produced record. This protocol receives into a scratch buffer, from which small frames are
copied out once; a frame larger than what has arrived gets its own buffer, and the kernel
receives the rest of it straight there (recv_into). Frames are bytearrays: the produce path
stamps offsets into the records in place.

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
SCRATCH_BYTES = 256 * 1024      # as asyncio's own receive size
MAX_QUEUED_BYTES = 4 << 20      # frames received but not yet taken: past this, stop reading


class FrameConnection(asyncio.BufferedProtocol):
    """Frames of at most `max_frame` bytes; `serve(connection)` runs for the connection's life."""

    def __init__(self, max_frame: int, serve: Callable[[FrameConnection], Awaitable[None]]):
        self.max_frame = max_frame
        self._serve = serve
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._scratch_view = memoryview(self._scratch)
        self._scratch_len = 0                       # received bytes not yet made into frames
        self._frame: bytearray | None = None        # a frame larger than what had arrived
        self._filled = 0
        self._frames: collections.deque[bytearray] = collections.deque()
        self._queued_bytes = 0
        self._reading_paused = False
        self._waiter: asyncio.Future | None = None
        self._closed_reason: str | None = None      # why no more frames come (logged once taken)
        self._eof = False
        self._lost = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future] = []

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        asyncio.get_running_loop().create_task(self._serve(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        return self._scratch_view[self._scratch_len:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
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
                frame = bytearray(size)
                frame[:have] = self._scratch_view[start:end]
                self._frame, self._filled = frame, have
                pos = end
        rest = end - pos
        if rest and pos:
            buf[:rest] = self._scratch_view[pos:end]
        self._scratch_len = rest

    def _push(self, frame: bytearray) -> None:
        self._frames.append(frame)
        self._queued_bytes += len(frame)
        if self._queued_bytes > MAX_QUEUED_BYTES and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _partial_reason(self) -> str | None:
        if self._frame is not None:
            return f"truncated frame ({self._filled} of {len(self._frame)} bytes); closing the connection"
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

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read_frame(self, idle_timeout: float) -> bytearray | None:
        """The next frame, or None when the connection ends (EOF, a bad or truncated frame,
        idle for `idle_timeout` s; the reason is logged)."""
        while not self._frames:
            if self._eof:
                if self._closed_reason is not None:
                    logger.warning("connection %s: %s", self.peer, self._closed_reason)
                    self._closed_reason = None
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._waiter, idle_timeout)
            except asyncio.TimeoutError:
                if self._frame is not None or self._scratch_len:
                    logger.warning("connection %s: a frame not completed in %.0f s; closing it",
                                   self.peer, idle_timeout)
                else:
                    logger.info("connection %s: idle for %.0f s; closing it", self.peer, idle_timeout)
                return None
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        if self._reading_paused and self._queued_bytes <= MAX_QUEUED_BYTES // 2:
            self._reading_paused = False
            if not self._eof:
                self.transport.resume_reading()
        return frame

    # ------------------------------------------------------------------ writing
    def write(self, data) -> None:
        self.transport.write(data)

    async def drain(self) -> None:
        if self.transport.is_closing():
            # As StreamWriter: let the loop run the transport's close callbacks first.
            await asyncio.sleep(0)
            if self._lost:
                raise ConnectionResetError("connection lost")
        if self._write_paused:
            fut = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(fut)
            await fut

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
