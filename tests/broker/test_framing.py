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

from logcore.broker.framing import SCRATCH_BYTES, ConnectionLimits, FrameConnection, RequestMemory


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

    def abort(self):
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


def _deliver(conn: FrameConnection, t: FakeTransport, data: bytes, chunk: int = 16384) -> int:
    """Deliver as much of `data` as the connection reads before it pauses; bytes delivered."""
    pos = 0
    while pos < len(data) and not t.paused and not t.closed:
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(data) - pos, chunk)
        buf[:n] = data[pos:pos + n]
        del buf
        conn.buffer_updated(n)
        pos += n
    return pos


def test_a_frame_costs_what_has_arrived_not_what_it_claims():
    async def run():
        memory = RequestMemory(200 << 20)
        conns = []
        for _ in range(10):
            conn = FrameConnection(100 << 20, lambda c: asyncio.sleep(0), memory=memory)
            conn.connection_made(FakeTransport())
            feed(conn, struct.pack(">i", 100 << 20) + b"\0" * 68, random.Random(1))
            conns.append(conn)
        assert memory.used <= 10 * 64 * 1024
        # the buffer grows as bytes arrive, and the frame comes out whole
        payload = os.urandom(3 << 20)
        conn = FrameConnection(100 << 20, lambda c: asyncio.sleep(0), memory=memory)
        conn.connection_made(FakeTransport())
        feed(conn, frame(payload)[:1 << 20], random.Random(2))
        assert memory.used <= 10 * 64 * 1024 + (2 << 20)
        feed(conn, frame(payload)[1 << 20:], random.Random(3))
        assert bytes(await conn.read_frame(1)) == payload
        for c in conns + [conn]:
            c.connection_lost(None)
        assert memory.used == 0
    asyncio.run(run())


def test_request_memory_bound_pauses_reading_until_memory_is_released():
    async def run():
        memory = RequestMemory(1 << 20)
        a, b = FakeTransport(), FakeTransport()
        ca = FrameConnection(1 << 20, lambda c: asyncio.sleep(0), memory=memory)
        cb = FrameConnection(1 << 20, lambda c: asyncio.sleep(0), memory=memory)
        ca.connection_made(a)
        cb.connection_made(b)
        first = os.urandom(700_000)
        assert _deliver(ca, a, frame(first)) == len(first) + 4        # whole, queued, charged
        second = os.urandom(900_000)
        sent = _deliver(cb, b, frame(second))
        assert b.paused and sent < len(second)                      # no room for the rest
        assert memory.used <= 1 << 20
        assert bytes(await ca.read_frame(1)) == first               # taken: memory released
        assert not b.paused
        assert _deliver(cb, b, frame(second)[sent:]) == len(second) + 4 - sent
        assert bytes(await cb.read_frame(1)) == second
        assert memory.peak <= (1 << 20) + 64 * 1024
    asyncio.run(run())


def test_a_frame_not_completed_in_time_closes_its_connection(caplog):
    caplog.set_level(logging.INFO)

    async def run():
        conn = FrameConnection(10 << 20, lambda c: asyncio.sleep(0), read_timeout=0.2)
        t = FakeTransport()
        conn.connection_made(t)
        reader = asyncio.ensure_future(conn.read_frame(60))
        for _ in range(10):                       # a byte every 0.05 s keeps it from idling
            if t.closed:
                break
            feed(conn, b"\0" if _ else struct.pack(">i", 5000), random.Random(0))
            await asyncio.sleep(0.05)
        assert t.closed
        assert await asyncio.wait_for(reader, 1) is None
    asyncio.run(run())
    assert "a frame of 5000 bytes (" in caplog.text
    assert "not completed within socket.request.read.timeout.ms=200" in caplog.text


def test_connection_limits_refuse_at_accept_and_log_once(caplog):
    caplog.set_level(logging.INFO)

    async def run():
        limits = ConnectionLimits(max_connections=5, max_per_ip=2)
        made = []
        for _ in range(4):
            t = FakeTransport()
            conn = FrameConnection(1000, lambda c: asyncio.sleep(0), limits=limits)
            conn.connection_made(t)
            made.append((conn, t))
        assert [t.closed for _, t in made] == [False, False, True, True]
        assert limits.count == 2 and limits.refused == 2
        made[0][0].connection_lost(None)
        made[2][0].connection_lost(None)             # a refused one leaves nothing to undo
        assert limits.count == 1
        t = FakeTransport()
        FrameConnection(1000, lambda c: asyncio.sleep(0), limits=limits).connection_made(t)
        assert not t.closed
    asyncio.run(run())
    assert caplog.text.count("connection limit:") == 1 and "max.connections.per.ip=2 reached" in caplog.text


def test_a_frame_as_large_as_the_memory_bound_still_arrives():
    async def run():
        memory = RequestMemory(1_000_000)           # not a multiple of the pooled-buffer granule
        t = FakeTransport()
        conn = FrameConnection(1_000_000, lambda c: asyncio.sleep(0), memory=memory)
        conn.connection_made(t)
        payload = os.urandom(999_000)
        assert _deliver(conn, t, frame(payload)) == len(payload) + 4 and not t.paused
        assert bytes(await conn.read_frame(1)) == payload
        assert memory.used == 0 and memory.peak <= 1_000_000
    asyncio.run(run())
