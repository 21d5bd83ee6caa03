"""FrameConnection cuts a byte stream into the same frames however it arrives: any chunking,
frames larger than the scratch buffer, many frames in one receive; and ends on bad sizes,
truncation and EOF with the reason."""
from __future__ import annotations

import asyncio
import logging
import os
import random
import struct

import pytest

from logcore.broker.framing import SCRATCH_BYTES, FrameConnection


class FakeTransport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.paused = False
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False

    def write(self, data):
        self.written += data

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True


def feed(conn: FrameConnection, data: bytes, rng: random.Random) -> None:
    """Deliver `data` as asyncio would: into get_buffer's view, in random chunk sizes."""
    pos = 0
    while pos < len(data):
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(data) - pos, rng.choice([1, 3, 7, 100, 5000, 1 << 20]))
        buf[:n] = data[pos:pos + n]
        conn.buffer_updated(n)
        pos += n


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _collect(payloads, seed, *, end=b"", max_frame=10 << 20):
    rng = random.Random(seed)
    got = []
    conn = FrameConnection(max_frame, lambda c: asyncio.sleep(0))
    conn.connection_made(FakeTransport())
    stream = b"".join(frame(p) for p in payloads) + end

    async def reader():
        while (f := await conn.read_frame(5)) is not None:
            got.append(bytes(f))
            assert not memoryview(f).readonly

    task = asyncio.create_task(reader())
    for i in range(0, len(stream), 300_000):           # let the reader run between deliveries
        feed(conn, stream[i:i + 300_000], rng)
        await asyncio.sleep(0)
    conn.eof_received()
    await asyncio.wait_for(task, 5)
    return got


@pytest.mark.parametrize("seed", range(6))
def test_any_chunking_gives_the_same_frames(seed):
    rng = random.Random(seed)
    payloads = [os.urandom(rng.choice([0, 1, 20, 4000, SCRATCH_BYTES - 4, SCRATCH_BYTES + 1, 3 << 20]))
                for _ in range(25)]
    assert asyncio.run(_collect(payloads, seed)) == payloads


def test_bad_size_and_truncation_end_the_stream_with_a_reason(caplog):
    caplog.set_level(logging.INFO)
    ok = [b"a" * 10, b"b" * 70_000]
    assert asyncio.run(_collect(ok, 1, end=struct.pack(">i", -3) + b"zzz")) == ok
    assert "outside 0..socket.request.max.bytes" in caplog.text
    caplog.clear()
    assert asyncio.run(_collect(ok, 2, end=struct.pack(">i", 11 << 20))) == ok
    assert "outside 0..socket.request.max.bytes=10485760" in caplog.text
    caplog.clear()
    assert asyncio.run(_collect(ok, 3, end=struct.pack(">i", 500_000) + b"x" * 1000)) == ok
    assert "truncated frame (1000 of 500000 bytes)" in caplog.text
    caplog.clear()
    assert asyncio.run(_collect(ok, 4, end=b"\0\0")) == ok
    assert "inside a frame's size prefix" in caplog.text


def test_reading_pauses_while_frames_wait():
    async def run():
        conn = FrameConnection(10 << 20, lambda c: asyncio.sleep(0))
        t = FakeTransport()
        conn.connection_made(t)
        feed(conn, b"".join(frame(b"x" * (1 << 20)) for _ in range(6)), random.Random(0))
        assert t.paused
        for _ in range(6):
            assert len(await conn.read_frame(1)) == 1 << 20
        assert not t.paused
        assert await conn.read_frame(0.05) is None          # idle
    asyncio.run(run())


def test_large_frame_buffers_are_reused_only_once_released():
    async def run():
        conn = FrameConnection(10 << 20, lambda c: asyncio.sleep(0))
        conn.connection_made(FakeTransport())
        rng = random.Random(5)
        payloads = [os.urandom(300_000) for _ in range(3)]
        feed(conn, frame(payloads[0]), rng)
        first = await conn.read_frame(1)
        records = first[100:200]                     # a handler still holds a slice
        del first
        feed(conn, frame(payloads[1]), rng)
        second = await conn.read_frame(1)
        assert records.obj is not second.obj         # not reused while a view is alive
        assert bytes(records) == payloads[0][100:200]
        held = records.obj
        del records
        feed(conn, frame(payloads[2]), rng)
        third = await conn.read_frame(1)
        assert third.obj is held and bytes(third) == payloads[2]
    asyncio.run(run())
