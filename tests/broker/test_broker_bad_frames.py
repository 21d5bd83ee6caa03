"""Bad frames close only the connection that sent them; everyone else keeps being served."""
from __future__ import annotations

import random
import struct
import time

import pytest

pytest.importorskip("confluent_kafka")

from broker_helpers import (api_versions_frame, connect, consume_all, create, parse_response,  # noqa: E402
                            ping, produce, recv_frame, request_frame)


def _closed(sock, wait: float = 5) -> bool:
    sock.settimeout(wait)
    try:
        return recv_frame(sock) is None
    except TimeoutError:
        return False


def test_bad_frames_close_only_their_connection(broker):
    create(broker, "bystander", 1)
    produce(broker, "bystander", [b"before"], acks="all")
    healthy = connect(broker)
    cases = {
        # Fixed garbage: bytes from os.urandom start with a length the broker may rightly wait
        # for the rest of (1 time in 37), which would leave the connection open.
        "random bytes": random.Random(64).randbytes(64),
        "oversized length": struct.pack(">i", 2**31 - 1) + b"x" * 16,
        "negative length": struct.pack(">i", -5),
        "frame shorter than a header": struct.pack(">i", 3) + b"abc",
        "unknown api key": struct.pack(">ihhi", 8, 9999, 0, 5),
        "unserved version": api_versions_frame()[:4] + struct.pack(">hhi", 0, 99, 3) + api_versions_frame()[12:],
        "garbage body": struct.pack(">ihhih", 30, 3, 12, 9, 3) + b"abc" + b"\xff" * 17,
    }
    for name, data in cases.items():
        with connect(broker) as s:
            s.sendall(data)
            assert _closed(s), name
        # The long-lived connection is still served, in order.
        healthy.sendall(api_versions_frame(11))
        frame = recv_frame(healthy)
        assert frame is not None and parse_response(18, 3, frame)[0] == 11, name
    # A truncated frame: the sender goes away mid-frame.
    with connect(broker) as s:
        s.sendall(struct.pack(">i", 1000) + b"\0" * 10)
        s.shutdown(1)
        assert _closed(s)
    healthy.close()
    assert ping(broker)
    log = broker.log_text()
    assert "outside 0..socket.request.max.bytes" in log and "truncated frame" in log
    assert "unsupported request" in log
    assert [v for *_, v, _ in consume_all(broker, "bystander", 1, 1)] == [b"before"]
    produce(broker, "bystander", [b"after"], acks="all")


def test_unknown_api_versions_version_is_answered_in_v0(broker):
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    frame = request_frame(18, 3, ApiVersionsRequest(client_software_name="x", client_software_version="1"), 42)
    frame = frame[:6] + struct.pack(">h", 77) + frame[8:]        # version 77
    with connect(broker) as s:
        s.sendall(frame)
        reply = recv_frame(s)
    cid, body = parse_response(18, 0, reply)
    assert cid == 42 and body.error_code == 35                   # UNSUPPORTED_VERSION
    keys = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert keys[0] == (0, 10) and keys[1] == (4, 16)       # Produce from v0: KAFKA-18659


def test_pipelined_requests_get_in_order_responses(broker):
    with connect(broker) as s:
        s.sendall(b"".join(api_versions_frame(i) for i in range(1, 21)))
        ids = [parse_response(18, 3, recv_frame(s))[0] for _ in range(20)]
    assert ids == list(range(1, 21))


def test_frame_over_socket_request_max_bytes(broker_factory):
    b = broker_factory(socket_request_max_bytes=1024)
    with connect(b) as s:
        s.sendall(struct.pack(">i", 1025) + b"\0" * 1025)
        assert _closed(s)
    assert ping(b)
    t0 = time.monotonic()
    assert "socket.request.max.bytes=1024" in b.log_text()
    assert time.monotonic() - t0 < 5


def _produce_frame(correlation_id: int, topic: str, value: bytes) -> bytes:
    """A Produce v9 request (acks=all) with one batch for partition 0, encoded by hand."""
    from logcore.records import build_batch
    batch = build_batch([(None, value, (), None)])
    body = struct.pack(">hhih", 0, 9, correlation_id, 3) + b"raw" + b"\0"        # header v2
    body += b"\0" + struct.pack(">hi", -1, 30000) + b"\x02"                     # no txn id, acks, 1 topic
    body += bytes([len(topic) + 1]) + topic.encode() + b"\x02" + struct.pack(">i", 0)
    size = len(batch) + 1
    body += bytes([size & 0x7F | 0x80, size >> 7]) + batch + b"\0\0\0"          # records, tagged fields
    return struct.pack(">i", len(body)) + body


def test_pipelined_produce_and_other_requests_keep_their_order(broker):
    """Produce requests handled as they arrive (no reader wake-up) and requests left to the
    connection's reader, interleaved in one write: responses in request order, offsets in
    produce order."""
    create(broker, "pipelined", 1)
    frames, kinds = [], []
    for i in range(1, 41):
        if i % 3 == 0:
            frames.append(api_versions_frame(i))
            kinds.append(18)
        else:
            frames.append(_produce_frame(i, "pipelined", b"v%d" % i))
            kinds.append(0)
    with connect(broker) as s:
        s.sendall(b"".join(frames))
        responses = [recv_frame(s) for _ in frames]
    assert [struct.unpack(">i", r[:4])[0] for r in responses] == list(range(1, 41))
    offsets = []
    for kind, r in zip(kinds, responses):
        if kind == 0:
            _, body = parse_response(0, 9, r)
            part = body.responses[0].partition_responses[0]
            assert part.error_code == 0
            offsets.append(part.base_offset)
    assert offsets == list(range(len(offsets)))
    values = [m[3] for m in consume_all(broker, "pipelined", 1, len(offsets))]
    assert values == [b"v%d" % i for i in range(1, 41) if i % 3]


def _hostile(key: int, version: int, body: bytes, flexible: bool) -> bytes:
    """A request frame (size prefix included) with header v1/v2 and `body` as given."""
    frame = struct.pack(">hhih", key, version, 77, 3) + b"raw" + (b"\0" if flexible else b"") + body
    return struct.pack(">i", len(frame)) + frame


_HUGE = b"\xff\xff\xff\xff\x0f"       # unsigned varint 2^32-1: a compact count or length of 2^32-2
_HUGE32 = struct.pack(">i", 2**31 - 1)

# Counts and lengths far past the frame's end, of each shape kio reads (each a ~20-byte frame):
# kio reserved room for an array's count before reading it, so these aborted the process.
HOSTILE = {
    "compact array (Metadata v12 topics)": _hostile(3, 12, _HUGE + b"\0\0\0", True),
    "legacy array (Metadata v4 topics)": _hostile(3, 4, _HUGE32 + b"\0\0", False),
    "legacy string (Metadata v4 topic name)": _hostile(3, 4, struct.pack(">ih", 1, 0x7FFF), False),
    "tagged field count (Metadata v12)": _hostile(3, 12, b"\x01\0\0" + _HUGE, True),
    "tagged field size (Metadata v12)": _hostile(3, 12, b"\x01\0\0\x01\x05" + _HUGE, True),
    "compact string (ApiVersions v3 client name)": _hostile(18, 3, _HUGE, True),
    "inner compact array (CreateTopics v5 assignments)":
        _hostile(19, 5, b"\x02\x02a" + struct.pack(">ih", 1, 1) + _HUGE, True),
    "compact array (OffsetCommit v8 topics)":
        _hostile(8, 8, b"\x02g" + struct.pack(">i", 1) + b"\x02m\x00" + _HUGE, True),
    "legacy array (JoinGroup v5 protocols)":
        _hostile(11, 5, struct.pack(">h", 1) + b"g" + struct.pack(">iihhh", 1000, 1000, 0, -1, 1) + b"c" + _HUGE32,
                 False),
    "legacy bytes (JoinGroup v5 protocol metadata)":
        _hostile(11, 5, struct.pack(">h", 1) + b"g" + struct.pack(">iihhh", 1000, 1000, 0, -1, 1) + b"c"
                 + struct.pack(">ih", 1, 1) + b"r" + _HUGE32, False),
    "compact array (DescribeConfigs v4 resources)": _hostile(32, 4, _HUGE, True),
    "compact bytes (SaslAuthenticate v2)": _hostile(36, 2, _HUGE, True),
    "legacy bytes (SaslAuthenticate v1)": _hostile(36, 1, _HUGE32, False),
}


def test_counts_past_the_frame_are_refused_and_the_broker_keeps_serving(broker):
    healthy = connect(broker)
    for name, data in HOSTILE.items():
        with connect(broker) as s:
            s.sendall(data)
            assert _closed(s), name
        assert broker.proc.poll() is None, f"the broker process died on {name}"
        healthy.sendall(api_versions_frame(12))
        frame = recv_frame(healthy)
        assert frame is not None and parse_response(18, 3, frame)[0] == 12, name
    healthy.close()
    log = broker.log_text()
    # The log line names the API, the version and where the count lies.
    for key, version in ((3, 12), (3, 4), (8, 8), (11, 5), (19, 5), (32, 4)):
        assert f"malformed api key {key} v{version} request (correlation id 77): LengthError: array count" in log
    assert "array count 4294967294 at byte 14 exceeds the 3 bytes left in the frame" in log  # Metadata v12
    assert "tagged field count 4294967295 at byte 17 exceeds" in log and "tagged field size 4294967295" in log
    assert "malformed api key 36 v2 request (correlation id 77): BufferUnderflow" in log     # before SASL
