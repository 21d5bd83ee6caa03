"""A connection's responses coalesced per event-loop pass (logcore/broker/response_writer.py):
the frames of one pass leave in one send and in order, a reader that does not read holds the
writer back through drain() with a bounded amount kept, and a connection closed while frames
are kept costs nothing but that connection. The broker half: pipelined Produce requests are
answered in order, and a client that sends many and goes away leaves the broker serving."""
from __future__ import annotations

import asyncio
import datetime
import socket
import struct

import pytest

from broker_helpers import connect, create, parse_response, ping, recv_frame, request_frame
from logcore.broker.framing import FrameConnection
from logcore.broker.response_writer import FLUSH_BYTES, ResponseWriter
from logcore.records.batch import build_batch


def _frame(i: int, size: int = 16) -> bytes:
    body = struct.pack(">i", i) + bytes([i % 251]) * (size - 4)
    return struct.pack(">i", len(body)) + body


async def _serve_once(scenario, *, client_reads_after_s: float = 0.0, client_abort_after: int | None = None):
    """A FrameConnection server on loopback whose one connection runs `scenario(conn)`; a
    client connects and reads every frame (after `client_reads_after_s`), or aborts (RST) after
    `client_abort_after` frames. Returns (the frames' numbers read, the scenario's result)."""
    loop = asyncio.get_running_loop()
    result = loop.create_future()

    async def serve(conn: FrameConnection) -> None:
        try:
            result.set_result(await scenario(conn))
        except Exception as exc:    # noqa: BLE001 - handed to the test
            result.set_exception(exc)

    server = await loop.create_server(lambda: FrameConnection(1 << 20, serve), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    got: list[int] = []
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(client_reads_after_s)
        while client_abort_after is None or len(got) < client_abort_after:
            try:
                head = await reader.readexactly(4)
            except asyncio.IncompleteReadError:
                break
            (size,) = struct.unpack(">i", head)
            body = await reader.readexactly(size)
            got.append(struct.unpack_from(">i", body)[0])
        if client_abort_after is not None:
            sock = writer.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()
        value = await asyncio.wait_for(result, 30)
    finally:
        server.close()
    return got, value


def test_frames_of_one_pass_leave_in_one_send_and_in_order():
    async def scenario(conn: FrameConnection):
        sends = []
        real_write = conn.write
        conn.write = lambda data: (sends.append(len(data)), real_write(data))
        out = ResponseWriter(conn)
        for i in range(5):                  # one pass: five answers released together
            out.write(_frame(i))
        kept = out.pending_bytes
        await asyncio.sleep(0)              # the pass ends: one send
        out.write(_frame(5))                # a later pass: a send of its own
        await asyncio.sleep(0)
        out.close()
        return sends, kept

    got, (sends, kept) = asyncio.run(_serve_once(scenario))
    assert got == list(range(6))
    assert kept == 5 * len(_frame(0))
    assert sends == [5 * len(_frame(0)), len(_frame(0))]


def test_a_reader_that_does_not_read_holds_the_writer_back():
    size, count = 8 << 10, 200                          # 1.6 MB against a small socket buffer

    async def scenario(conn: FrameConnection):
        conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 10)
        conn.transport.set_write_buffer_limits(high=64 << 10)
        out = ResponseWriter(conn)
        most, paused = 0, 0
        for i in range(count):
            out.write(_frame(i, size))
            most = max(most, out.pending_bytes + conn.transport.get_write_buffer_size())
            if out.write_paused:
                paused += 1
            await out.drain()
        out.close()
        return most, paused

    got, (most, paused) = asyncio.run(_serve_once(scenario, client_reads_after_s=0.3))
    assert got == list(range(count))
    assert paused > 0                                   # drain() did wait for the reader
    assert most <= (64 << 10) + FLUSH_BYTES + size + 4, most


def test_a_connection_closed_with_frames_kept_costs_only_itself():
    async def scenario(conn: FrameConnection):
        out = ResponseWriter(conn)
        out.write(_frame(0))
        await asyncio.sleep(0)
        for _ in range(200):                # the client is gone: wait until the transport knows
            if conn.transport.is_closing():
                break
            await asyncio.sleep(0.01)
        for i in range(1, 4):
            out.write(_frame(i))            # kept for the end of the pass ...
        await asyncio.sleep(0)              # ... and dropped there: nobody to answer
        flushed = out.pending_bytes
        out.close()
        return conn.transport.is_closing(), flushed

    got, (closing, flushed) = asyncio.run(_serve_once(scenario, client_abort_after=1))
    assert got == [0]
    assert closing and flushed == 0


# ------------------------------------------------------------------ through a broker
def _produce_frame(topic: str, correlation_id: int, acks: int) -> bytes:
    from kio.schema.produce.v9 import request as pr
    batch = build_batch([(b"k%d" % correlation_id, b"v" * 100, (), 1_700_000_000_000)])
    return request_frame(0, 9, pr.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
            pr.TopicProduceData(name=topic, partition_data=(pr.PartitionProduceData(index=0, records=batch),)),)),
        correlation_id=correlation_id)


def test_pipelined_produce_requests_are_answered_in_order(broker):
    pytest.importorskip("confluent_kafka")
    topic = "pipelined"
    create(broker, topic, 1)
    frames = b"".join(_produce_frame(topic, cid, -1 if cid % 3 else 1) for cid in range(1, 41))
    with connect(broker) as sock:
        sock.sendall(frames)                # one write: the broker reads several per receive
        answers = [parse_response(0, 9, recv_frame(sock)) for _ in range(40)]
    assert [cid for cid, _ in answers] == list(range(1, 41))
    parts = [body.responses[0].partition_responses[0] for _, body in answers]
    assert [p.error_code for p in parts] == [0] * 40
    assert [p.base_offset for p in parts] == list(range(40))


def test_a_client_gone_with_answers_pending_leaves_the_broker_serving(broker):
    pytest.importorskip("confluent_kafka")
    topic = "abandoned"
    create(broker, topic, 1)
    for _ in range(3):
        sock = connect(broker)
        sock.sendall(b"".join(_produce_frame(topic, cid, -1) for cid in range(1, 101)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()                        # reset while its answers are being written
    assert ping(broker)
    with connect(broker) as sock:
        sock.sendall(_produce_frame(topic, 7, -1))
        cid, body = parse_response(0, 9, recv_frame(sock))
    assert cid == 7 and body.responses[0].partition_responses[0].error_code == 0
    assert "unexpected error" not in broker.log_text()
    assert "Traceback" not in broker.log_text()
