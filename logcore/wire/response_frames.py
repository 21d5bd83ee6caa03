"""The I/O of one asyncio Kafka connection (wire.client.AsyncKafkaConnection): the transport's
protocol, which cuts the size-prefixed response frames and hands each whole frame to the
connection (`frame_received`), fails it when the stream breaks (`fail`), and lets its writes wait
while the transport's buffer is full.
"""
from __future__ import annotations

import asyncio
import struct

from logcore.wire.kafka_error import KafkaConnectionError, KafkaError

_SIZE = struct.Struct(">i")


class ResponseFrames(asyncio.BufferedProtocol):
    """The I/O of one AsyncKafkaConnection: size-prefixed response frames handed to the
    connection as they complete, in the protocol callback (no reader task to wake). Small
    frames are cut from one receive buffer; a frame larger than it (a fetch response with
    records) is received straight into a buffer of its own (kept for the next one: no
    allocation and page faults per frame), so its bytes are copied once from the kernel and
    then only where the decoder takes the records out.
    Writes wait while the transport's buffer is full (pause_writing / resume_writing)."""

    RECEIVE_BYTES = 64 * 1024
    KEEP_BYTES = 16 << 20                         # a larger frame's buffer is not kept for smaller ones

    def __init__(self, conn):
        # The connection (an AsyncKafkaConnection): frame_received(frame), fail(error),
        # where() for messages, reads_through(self) while this is its I/O.
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray(self.RECEIVE_BYTES)
        self._view = memoryview(self._buf)
        self._used = 0                            # bytes in _buf not yet cut into frames
        self._frame: bytearray | None = None      # the large frames' buffer, reused
        self._frame_view: memoryview | None = None    # the frame being received in it
        self._filled = 0
        self._paused = False
        self._drained: list[asyncio.Future] = []
        self._lost: BaseException | None = None

    # ------------------------------------------------------------------ transport callbacks
    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int):
        if self._frame_view is not None:
            return self._frame_view[self._filled:]
        return self._view[self._used:]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._frame_view is not None:
                self._filled += nbytes
                if self._filled == len(self._frame_view):
                    view, self._frame_view = self._frame_view, None
                    frame = view.toreadonly()
                    try:
                        self.conn.frame_received(frame)
                    finally:
                        # The decoded response holds copies of what it took (records come
                        # out as bytes): the buffer serves the next large frame.
                        try:
                            frame.release()
                            view.release()
                        except BufferError:
                            self._frame = None
                return
            self._used += nbytes
            self._cut_frames()
        except KafkaError as exc:
            self.conn.fail(exc)

    def _cut_frames(self) -> None:
        buf, pos, end = self._buf, 0, self._used
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0:
                raise KafkaError(f"{self.conn.where()} sent a negative response size {size}")
            if end - pos - 4 >= size:
                frame = bytes(self._view[pos + 4:pos + 4 + size])
                pos += 4 + size
                self.conn.frame_received(frame)
                if not self.conn.reads_through(self):
                    return                        # the connection was closed meanwhile
                continue
            if 4 + size > len(buf):
                # Larger than the receive buffer: into a buffer of its own from here on.
                have = end - pos - 4
                if self._frame is None or len(self._frame) < size or len(self._frame) > max(
                        4 * size, self.KEEP_BYTES):
                    self._frame = bytearray(size)
                self._frame_view = memoryview(self._frame)[:size]
                self._frame_view[:have] = self._view[pos + 4:end]
                self._filled = have
                pos = end
            break
        if pos:
            rest = end - pos
            self._view[:rest] = self._view[pos:end]
            self._used = rest

    def eof_received(self) -> bool:
        return False                              # connection_lost follows

    def connection_lost(self, exc) -> None:
        self._lost = exc or ConnectionResetError("the broker closed the connection")
        self._wake_writers()
        if self.conn.reads_through(self):
            what = "the broker closed the connection" if exc is None else exc
            self.conn.fail(KafkaConnectionError(f"lost the connection to {self.conn.where()}: {what}"))

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers()

    # ------------------------------------------------------------------ for the connection
    def writable(self) -> bool:
        """A write now would neither fail nor wait: open, and below the high-water mark."""
        return self._lost is None and not self._paused and self.transport is not None \
            and not self.transport.is_closing()

    async def write(self, frame: bytes) -> None:
        if self._lost is not None or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection is closed")
        self.transport.write(frame)
        while self._paused and self._lost is None:
            fut = asyncio.get_running_loop().create_future()
            self._drained.append(fut)
            await fut
        if self._lost is not None:
            raise ConnectionResetError(str(self._lost))

    def close(self, error: BaseException) -> None:
        if self._lost is None:
            self._lost = error
        self._wake_writers()
        if self.transport is not None:
            self.transport.close()

    def _wake_writers(self) -> None:
        waiters, self._drained = self._drained, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
