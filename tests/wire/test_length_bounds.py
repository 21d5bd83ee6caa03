"""The walk before kio decodes: it follows kio's own layout for every request and response kio
knows, and refuses a count that the frame cannot hold without reading the rest."""
from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid

import pytest
from kio.index import api_key_map, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field

from logcore.wire.length_bounds import LengthError, _walk, check_lengths, entity_plan
from logcore.wire.protocol import ProtocolError, decode_response, parse_request


def _value(kafka_type: str):
    return {"string": "ab", "bytes": b"xy", "records": b"xy", "uuid": uuid.UUID(int=5), "bool": True,
            "timedelta_i32": datetime.timedelta(milliseconds=7), "timedelta_i64": datetime.timedelta(milliseconds=7),
            "datetime_i64": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)}.get(kafka_type, 3)


def _sample(cls: type):
    """`cls` with every array holding two elements, every optional entity present and every
    tagged field set (so written): each op of the walk meets bytes."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        c = classify_field(f)
        if isinstance(c, EntityTupleField):
            kwargs[f.name] = (_sample(c.type_), _sample(c.type_))
        elif isinstance(c, PrimitiveTupleField):
            kwargs[f.name] = (_value(f.metadata["kafka_type"]),) * 2
        elif isinstance(c, EntityField):
            kwargs[f.name] = _sample(c.type_)
        elif f.metadata.get("kafka_type") == "error_code":
            from kio.schema.errors import ErrorCode
            kwargs[f.name] = ErrorCode.unknown_server_error
        else:
            kwargs[f.name] = _value(f.metadata["kafka_type"])
    return cls(**kwargs)


def _schemas():
    for key in sorted(api_key_map):
        for load in (load_request_schema, load_response_schema):
            found = False
            for version in range(0, 20):
                try:
                    cls = load(key, version)
                except Exception:
                    if found:
                        break                   # versions are consecutive
                    continue
                found = True
                yield cls


def test_walk_ends_where_kio_ends_for_every_schema():
    walked = 0
    for cls in _schemas():
        plan = entity_plan(cls)
        if plan is None:
            continue
        buf = io.BytesIO()
        try:
            sample = _sample(cls)
            entity_writer(cls)(buf, sample)
        except Exception:           # a sample kio's writer refuses (a range it checks): not ours
            continue
        data = buf.getvalue()
        _, used = entity_reader(cls)(data, 0)
        assert _walk(plan, data, 0, len(data)) == used == len(data), cls
        walked += 1
    assert walked > 300


def test_no_plan_for_an_entity_without_arrays():
    from kio.schema.heartbeat.v4.request import HeartbeatRequest
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    assert entity_plan(HeartbeatRequest) is None and entity_plan(ApiVersionsRequest) is None


def _header(key: int, version: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", key, version, 7, 1) + b"c" + (b"\0" if flexible else b"")


@pytest.mark.parametrize("key, version, body, flexible", [
    (3, 12, b"\xff\xff\xff\xff\x0f" + b"\0" * 4, True),          # Metadata: compact array 2^32-2
    (3, 4, b"\x7f\xff\xff\xff" + b"\0" * 4, False),              # Metadata: legacy array 2^31-1
    (3, 4, b"\xff\xff\xff\xfe", False),                          # a negative count other than -1
    (19, 5, b"\x02\x02a\x01\x00\x00\x00\x01\x00\x01\xff\xff\xff\x7f", True),   # CreateTopics: inner
    (32, 4, b"\x02\x02\x02a\x00\x00\xff\xff\xff\x7f", True),     # DescribeConfigs: names inside
])
def test_refused_before_kio_allocates(key, version, body, flexible):
    frame = _header(key, version, flexible) + body
    with pytest.raises(ProtocolError, match=rf"api key {key} v{version} .*LengthError: .* at byte \d+"):
        parse_request(frame, {key: (0, 20)})


def test_a_count_that_fits_still_decodes():
    from kio.schema.metadata.v12.request import MetadataRequest
    frame = _header(3, 12, True) + b"\x01\x00\x00\x00"           # no topics (empty, not null)
    assert parse_request(frame, {3: (0, 20)}).body == MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    check_lengths(MetadataRequest, frame, len(_header(3, 12, True)))


def test_hostile_response_refused_on_the_client_side():
    # A Metadata v12 response: header v1 (correlation id, no tags), throttle, brokers 2^32-2.
    frame = struct.pack(">ib", 9, 0) + struct.pack(">i", 0) + b"\xff\xff\xff\xff\x0f"
    with pytest.raises(ProtocolError, match=r"api key 3 v12 response .*LengthError: array count"):
        decode_response(3, 12, frame)


def test_tagged_field_size_past_the_end():
    from kio.schema.metadata.v12.request import MetadataRequest
    body = b"\x01\x00\x00" + b"\x01\x05\xff\xff\xff\x0f"         # one tag, size 2^32-1
    with pytest.raises(LengthError, match="tagged field size"):
        check_lengths(MetadataRequest, body, 0)


# Counts or lengths far past any frame's end: an i32, 5-byte varints (2^32-1, 2^31), an i16.
COUNTS = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08", b"\x7f\xff")
SWEPT = [(3, 4), (3, 12), (18, 3), (19, 5), (8, 8), (11, 5), (11, 9), (14, 5), (32, 4), (36, 2), (2, 7), (10, 4)]

_SWEEP = """
import io, sys
from logcore.wire.protocol import ProtocolError, encode_request, parse_request, request_type
from tests.wire.test_length_bounds import COUNTS, SWEPT, _sample
refused = 0
for key, version in SWEPT:
    frame = encode_request(key, version, 5, "c", _sample(request_type(key, version)))[4:]
    for at in range(8, len(frame)):
        for count in COUNTS:
            bad = frame[:at] + count + frame[at + len(count):]
            try:
                parse_request(bad, {key: (0, 20)})
            except ProtocolError:
                refused += 1
print(refused)
"""


def test_a_huge_count_at_every_position_of_several_requests_is_refused():
    """Every position of a populated request of several APIs overwritten with a count or length
    far past the frame's end: the decode refuses or reads it, never aborts the process (run in
    a child, whose exit status tells an abort)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _SWEEP], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    assert int(done.stdout) > 1000


def test_null_array_where_the_schema_allows_none():
    # OffsetCommit v8: group "g", generation 1, member "m", no instance id, topics null (0).
    frame = _header(8, 8, True) + b"\x02g" + struct.pack(">i", 1) + b"\x02m\x00" + b"\x00\x00"
    with pytest.raises(ProtocolError, match=r"api key 8 v8 .*null array at byte 21 "):
        parse_request(frame, {8: (0, 20)})
    # Metadata's topics may be null (all topics).
    assert parse_request(_header(3, 12, True) + b"\x00\x00\x00\x00", {3: (0, 20)}).body.topics is None
