"""Fetches over TLS read the log's bytes at the positions asked for. TLS encrypts in user space,
so a fetched range of a segment is read and sent through the TLS transport instead of sendfile;
reading it must not depend on the file position the segment's descriptors share (a consumer
reading from offset 0 after another one had read the segment got 0 bytes and its connection
closed: librdkafka's 0018 over SASL_SSL). Produce requests over TLS, whose records arrive split
across TLS records of every size, are read whole."""
from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")

TOPIC = "tls-fetch"
COUNT, SIZE = 300, 1000         # ~300 KB in one segment: several fetches per consumer


def _read_all(conf: dict, group: str) -> list[bytes]:
    consumer = ck.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "fetch.max.bytes": 1_000_000, "message.max.bytes": 100_000,
                            "max.partition.fetch.bytes": 100_000})
    values: list[bytes] = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while len(values) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_consumers_over_tls_read_a_segment_from_its_start_one_after_another(secure_broker, pki):
    plain = {"bootstrap.servers": secure_broker.bootstrap("PLAINTEXT")}
    producer = ck.Producer(plain)
    expected = [f"{i:06d}".encode() + b"x" * (SIZE - 6) for i in range(COUNT)]
    for value in expected:
        producer.produce(TOPIC, value)
    assert producer.flush(30) == 0
    tls = {"bootstrap.servers": secure_broker.bootstrap("SSL"), "security.protocol": "SSL",
           "ssl.ca.location": str(pki.ca_pem)}
    for group in ("first", "second", "third"):
        assert _read_all(tls, group) == expected, group
    assert "closing the connection" not in secure_broker.log_text()


BIG_TOPICS = ("tls-big-a", "tls-big-b")
BIG_COUNT, BIG_SIZE = 700, 4096          # ~2.8 MB per topic: each fetched range spans several TLS chunks


def _fetch(offsets: dict[str, int]) -> dict:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": o, "log_start_offset": -1,
                                                     "current_leader_epoch": -1, "partition_max_bytes": 8 << 20}]}
                       for t, o in offsets.items()]}


def test_large_fetches_pipelined_on_one_tls_connection_arrive_whole_and_in_order(secure_broker, pki):
    """Several Fetch requests sent at once on one TLS connection, each answering two file ranges
    of megabytes: the responses come back in request order and byte for byte what PLAINTEXT
    (sendfile) answers. The client reads only after sending them all, so the broker's sends
    fill the socket and wait for it between chunks."""
    from logcore.broker.client_connections import TLS_CHUNK
    from logcore.security.client_security import ClientSecurity
    from logcore.wire.api_keys import FETCH
    from logcore.wire.client import KafkaConnection

    producer = ck.Producer({"bootstrap.servers": secure_broker.bootstrap("PLAINTEXT"), "linger.ms": 20,
                            "batch.size": 1 << 20})
    for topic in BIG_TOPICS:
        for i in range(BIG_COUNT):
            producer.produce(topic, f"{topic}-{i:06d}".encode().ljust(BIG_SIZE, b"."))
    assert producer.flush(30) == 0
    asked = [dict.fromkeys(BIG_TOPICS, 0), {BIG_TOPICS[0]: 350, BIG_TOPICS[1]: 10}, dict.fromkeys(BIG_TOPICS, 0),
             {BIG_TOPICS[1]: 600, BIG_TOPICS[0]: 1}]

    def records(listener: str, security) -> list[list[bytes]]:
        host, port = secure_broker.endpoints[listener]
        with KafkaConnection(host, port, timeout_s=30, security=security) as conn:
            for offsets in asked:
                conn.send(FETCH, _fetch(offsets), 12)
            answers = [conn.receive() for _ in asked]
        return [[t.partitions[0].records for t in a.responses] for a in answers]

    tls = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                          "ssl.truststore.location": str(pki.ca_pem)}, "test")
    over_tls, plain = records("SSL", tls), records("PLAINTEXT", None)
    assert [[len(r) for r in a] for a in over_tls] == [[len(r) for r in a] for a in plain]
    assert min(len(r) for a in plain for r in a) > TLS_CHUNK          # each range: more than one chunk
    assert over_tls == plain
    assert "closing the connection" not in secure_broker.log_text()


def test_a_file_range_over_tls_goes_in_order_and_a_short_one_is_refused(pki, tmp_path):
    """The TLS send path alone: bytes and file ranges interleaved reach a reader that starts late
    (the sender waits for the socket between chunks) byte for byte; a range that runs past its
    file's end stops the send with _ShortSend (the response announced bytes that do not exist);
    a reader gone in the middle of a range stops it with a ConnectionError; every slice is
    closed whatever happens."""
    import asyncio
    import os
    import ssl

    from logcore.broker.client_connections import TLS_CHUNK, _send_pieces, _ShortSend
    from logcore.broker.fetch_response import EncodedResponse
    from logcore.log.file_slice import FileSlice

    data = os.urandom(40 * TLS_CHUNK + 123)
    path = tmp_path / "segment"
    path.write_bytes(data)

    def piece(position: int, size: int) -> FileSlice:
        return FileSlice(os.open(path, os.O_RDONLY), position, size, 0, str(path))

    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(pki.broker_pem)
    client_tls = ssl.create_default_context(cafile=str(pki.ca_pem))

    async def send(pieces: list, give_up_after: int | None = None) -> tuple[bytes, BaseException | None]:
        got, done = bytearray(), asyncio.Event()

        async def reader(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await asyncio.sleep(0.2)
            while chunk := await r.read(1 << 16):
                got.extend(chunk)
                if give_up_after is not None and len(got) >= give_up_after:
                    w.transport.abort()             # a client gone in the middle of a response
                    break
            w.close()
            done.set()

        server = await asyncio.start_server(reader, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        failure = None
        try:
            _r, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls, server_hostname="127.0.0.1")
            try:
                await _send_pieces(writer, EncodedResponse(pieces))
                await writer.drain()
            except (_ShortSend, ConnectionError) as exc:
                failure = exc
            writer.close()
            await asyncio.wait_for(done.wait(), 30)
        finally:
            server.close()
        return bytes(got), failure

    pieces = [b"head", piece(7, 3 * TLS_CHUNK + 5), b"mid", piece(0, 100), piece(TLS_CHUNK, 2 * TLS_CHUNK), b"tail"]
    got, failure = asyncio.run(send(pieces))
    assert failure is None
    assert got == (b"head" + data[7:7 + 3 * TLS_CHUNK + 5] + b"mid" + data[:100]
                   + data[TLS_CHUNK:3 * TLS_CHUNK] + b"tail")
    assert all(p.closed for p in pieces if isinstance(p, FileSlice))

    short = [b"head", piece(39 * TLS_CHUNK, 2 * TLS_CHUNK), b"tail"]
    got, failure = asyncio.run(send(short))
    assert isinstance(failure, _ShortSend) and "ended at" in str(failure), failure
    assert got == b"head" + data[39 * TLS_CHUNK:]
    assert short[1].closed

    whole = [b"head", piece(0, len(data)), b"tail"]       # more than the sockets hold
    got, failure = asyncio.run(send(whole, give_up_after=1 << 16))
    assert isinstance(failure, ConnectionError), failure
    assert whole[1].closed


# Produce over TLS through the broker's batched TLS record reads (tls_transport.py, _tlsrecords.c,
# read-ahead on): librdkafka writes a request's small pieces (a record's header, a value it appends
# by reference) as TLS records of their own and the rest as full 16 KiB records, so requests of
# small and large records arrive split across TLS records of every size and across socket reads.
PRODUCE_TOPIC = "tls-produce"
# value sizes in turn: librdkafka's small TLS records (header + value), 1 KiB values, and values
# of many 16 KiB records (the largest fills most of a request: about 55 full TLS records)
PRODUCE_SIZES = (3, 10, 1024, 5000, 70_000, 900_000)
PRODUCE_COUNT = 120


def _produced_value(i: int) -> bytes:
    size = PRODUCE_SIZES[i % len(PRODUCE_SIZES)]
    return f"{i:06d}".encode().ljust(size, bytes([i % 251]))


def test_requests_split_across_tls_records_arrive_whole(secure_broker, pki):
    tls = {"bootstrap.servers": secure_broker.bootstrap("SSL"), "security.protocol": "SSL",
           "ssl.ca.location": str(pki.ca_pem), "linger.ms": 20, "batch.size": 1 << 20,
           "acks": "all"}
    producer = ck.Producer(tls)
    expected = [_produced_value(i) for i in range(PRODUCE_COUNT)]
    errors = []
    for value in expected:
        producer.produce(PRODUCE_TOPIC, value, on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(60) == 0 and errors == []
    consumer = ck.Consumer({"bootstrap.servers": secure_broker.bootstrap("PLAINTEXT"), "group.id": "tls-produce",
                            "enable.auto.commit": False, "fetch.max.bytes": 4 << 20})
    try:
        consumer.assign([ck.TopicPartition(PRODUCE_TOPIC, 0, 0)])
        values = []
        while len(values) < PRODUCE_COUNT:
            msg = consumer.poll(30)
            assert msg is not None, f"{len(values)} of {PRODUCE_COUNT} records read back"
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    assert values == expected
    log = secure_broker.log_text()
    assert "decrypt one TLS record per read" not in log     # the batched reads served the listener
    assert "closing the connection" not in log
