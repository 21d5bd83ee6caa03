"""A response's pieces reach the socket whole and in order, whether the socket takes a file range
at once (os.sendfile straight away) or only part of it (asyncio's sendfile sends the rest, or on
uvloop, which has none, reads and writes), and when bytes before a range still wait in the
transport."""
from __future__ import annotations

import asyncio
import os
import socket

import pytest

from logcore.broker.fetch_response import EncodedResponse
from logcore.broker.client_connections import _send_pieces, _sendfile_now
from logcore.broker.response_writer import ResponseWriter
from logcore.log.file_slice import FileSlice


def _slice(path: str, position: int, size: int) -> FileSlice:
    return FileSlice(os.open(path, os.O_RDONLY), position, size, 0, path)


async def _send_and_read(pieces: list, expected: bytes, sndbuf: int, read_after_s: float) -> bytes:
    """Send `pieces` over loopback TCP with send and receive buffers of `sndbuf`; the reader
    starts reading only after `read_after_s`, so that large ranges fill the socket first."""
    got = bytearray()
    done = asyncio.Event()

    async def reader(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(read_after_s)
        while len(got) < len(expected):
            chunk = await r.read(1 << 16)
            if not chunk:
                break
            got.extend(chunk)
        w.close()
        done.set()

    listening = socket.socket()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)   # inherited by the accepted one
    listening.bind(("127.0.0.1", 0))
    server = await asyncio.start_server(reader, sock=listening)
    port = server.sockets[0].getsockname()[1]
    try:
        _r, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        await _send_pieces(ResponseWriter(writer), EncodedResponse(pieces))
        await writer.drain()
        await asyncio.wait_for(done.wait(), 30)
        writer.close()
    finally:
        server.close()
    return bytes(got)


@pytest.mark.parametrize("sndbuf,read_after_s,rest_by_asyncio", [(1 << 23, 0.0, False), (16 << 10, 0.3, True)])
def test_pieces_arrive_in_order(tmp_path, monkeypatch, sndbuf, read_after_s, rest_by_asyncio):
    data = os.urandom(3 << 20)
    path = str(tmp_path / "segment")
    with open(path, "wb") as f:
        f.write(data)
    big_bytes = os.urandom(1 << 20)    # more than a small send buffer: the transport keeps some
    pieces = [b"head", _slice(path, 10, 2 << 20), b"mid", _slice(path, 5, 100), big_bytes,
              _slice(path, 3 << 19, 1 << 19), b"tail"]
    expected = (b"head" + data[10:10 + (2 << 20)] + b"mid" + data[5:105] + big_bytes
                + data[3 << 19:(3 << 19) + (1 << 19)] + b"tail")
    rests = []
    sendfile = asyncio.base_events.BaseEventLoop.sendfile

    async def counted(self, transport, file, offset=0, count=None, **kw):
        rests.append(count)
        return await sendfile(self, transport, file, offset, count, **kw)
    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "sendfile", counted)
    got = asyncio.run(_send_and_read(pieces, expected, sndbuf, read_after_s))
    assert got == expected
    assert bool(rests) == rest_by_asyncio, rests
    assert all(p.closed for p in pieces if isinstance(p, FileSlice))


@pytest.mark.parametrize("sndbuf,read_after_s", [(1 << 23, 0.0), (16 << 10, 0.3)])
def test_pieces_arrive_in_order_on_uvloop(tmp_path, sndbuf, read_after_s):
    """uvloop (event.loop's default) has no loop.sendfile: what the socket does not take at once
    is read and written through the transport, still whole and in order."""
    uvloop = pytest.importorskip("uvloop")
    data = os.urandom(3 << 20)
    path = str(tmp_path / "segment")
    with open(path, "wb") as f:
        f.write(data)
    big_bytes = os.urandom(1 << 20)
    pieces = [b"head", _slice(path, 10, 2 << 20), b"mid", _slice(path, 5, 100), big_bytes,
              _slice(path, 3 << 19, 1 << 19), b"tail"]
    expected = (b"head" + data[10:10 + (2 << 20)] + b"mid" + data[5:105] + big_bytes
                + data[3 << 19:(3 << 19) + (1 << 19)] + b"tail")
    got = uvloop.run(_send_and_read(pieces, expected, sndbuf, read_after_s))
    assert got == expected
    assert all(p.closed for p in pieces if isinstance(p, FileSlice))


def test_sendfile_now_waits_for_buffered_bytes(tmp_path):
    """With bytes still in the transport, the direct send sends nothing (they go first)."""
    path = str(tmp_path / "segment")
    with open(path, "wb") as f:
        f.write(b"x" * 1000)

    async def run() -> tuple[int, int]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            _r, writer = await asyncio.open_connection("127.0.0.1", port)
            sock = writer.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            writer.write(os.urandom(4 << 20))           # the peer does not read: most stays buffered
            assert writer.transport.get_write_buffer_size() > 0
            with _slice(path, 0, 1000) as piece:
                held = _sendfile_now(writer.transport, piece)
            writer.transport.abort()
            with _slice(path, 0, 1000) as piece:
                closed = _sendfile_now(writer.transport, piece)
            return held, closed
        finally:
            server.close()

    assert asyncio.run(run()) == (0, 0)


def test_the_bytes_after_a_range_leave_with_it(tmp_path):
    """A response with a file range is whole on the socket when its send returns: the bytes after
    the last range (the frame's last tagged fields) are not kept for the end of the event-loop
    pass, where the client would wait for them with the megabytes before them unusable. A
    response of bytes only is still kept, to leave with the other answers of the pass."""
    path = str(tmp_path / "segment")
    data = os.urandom(1 << 16)
    with open(path, "wb") as f:
        f.write(data)

    async def run() -> tuple[int, int, bytes]:
        got = bytearray()
        peer: asyncio.Future = asyncio.get_running_loop().create_future()
        server = await asyncio.start_server(lambda r, w: peer.set_result((r, w)), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            _r, writer = await asyncio.open_connection("127.0.0.1", port)
            accepted, _w = await asyncio.wait_for(peer, 10)
            out = ResponseWriter(writer)
            await _send_pieces(out, EncodedResponse([b"head", _slice(path, 0, len(data)), b"\0\0\0"]))
            kept_after_range = out.pending_bytes
            await _send_pieces(out, EncodedResponse([b"only bytes"]))
            kept_bytes_only = out.pending_bytes
            out.flush()
            while len(got) < 4 + len(data) + 3 + 10:
                chunk = await asyncio.wait_for(accepted.read(1 << 16), 10)
                assert chunk
                got.extend(chunk)
            writer.close()
            return kept_after_range, kept_bytes_only, bytes(got)
        finally:
            server.close()

    kept_after_range, kept_bytes_only, got = asyncio.run(run())
    assert kept_after_range == 0
    assert kept_bytes_only == len(b"only bytes")
    assert got == b"head" + data + b"\0\0\0" + b"only bytes"
