"""The responses of one client connection on their way to its socket, coalesced: the frames
written during one event-loop pass go out in one send.

Every send on loopback costs a system call and a wake-up of the receiving process, and answers
often complete together: one high-watermark move releases several in-flight Produce requests
of a Java producer's connection (five by default), and the produce frames of one receive are
answered in the same protocol callback. So a frame is kept until the end of the pass (a
`call_soon` scheduled by the first one) and the frames kept are written as one buffer, in the
order they were written. What is kept is bounded (`FLUSH_BYTES`: more is written at once), so
the transport's own high-water mark still applies back-pressure through `drain()`. Anything
that reaches the socket by another way (sendfile) or ends the connection calls `flush()` first.
"""
from __future__ import annotations

import asyncio

from logcore.forwarding import forwarded

FLUSH_BYTES = 64 * 1024      # bytes kept before they are written at once


class ResponseWriter:
    """Over a connection (`write`, `drain`, `close`, `write_paused`, `transport`: a
    FrameConnection); made while its event loop runs."""

    def __init__(self, conn):
        self._conn = conn
        self._loop = asyncio.get_running_loop()
        self._pending: list = []
        self._size = 0
        self._scheduled: asyncio.Handle | None = None

    transport = forwarded("_conn.transport", "The connection's asyncio.Transport.")
    write_paused = forwarded("_conn.write_paused",
                             "The transport is above its high-water mark (drain() would wait).")

    @property
    def pending_bytes(self) -> int:
        """Bytes written here and not yet handed to the transport."""
        return self._size

    def write(self, data) -> None:
        self._pending.append(data)
        self._size += len(data)
        if self._size >= FLUSH_BYTES:
            self.flush()
        elif self._scheduled is None:
            self._scheduled = self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand what is kept to the transport now, as one buffer."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        pending = self._pending
        if not pending:
            return
        self._pending, self._size = [], 0
        transport = self._conn.transport
        if transport is None or transport.is_closing():
            return          # closed by the peer or aborted meanwhile: nobody to answer
        self._conn.write(pending[0] if len(pending) == 1 else b"".join(pending))

    async def drain(self) -> None:
        await self._conn.drain()

    def close(self) -> None:
        """What is kept goes out first (a transport's close sends its buffer), then the close."""
        self.flush()
        self._conn.close()
