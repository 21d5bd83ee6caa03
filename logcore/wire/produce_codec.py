"""Produce requests decoded and Produce responses encoded by hand (v3..v10).

kio copies every partition's records out of the frame into a new bytes object, and builds a
dataclass tree for every request and response; at tens of thousands of produce requests a
second that is a large part of the broker's CPU. This decoder leaves each partition's records
as a memoryview of the frame (the log stamps offsets into it and writes it: no copy), and the
encoder packs the response fields directly. The byte layouts are Kafka's ProduceRequest and
ProduceResponse schemas, the same that kio reads and writes (tests compare the two); the tagged
fields this broker never sets (current leader, node endpoints) are left out, as kio leaves out
a tagged field at its default.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from logcore.wire.primitives import WireReader, array_length, write_string

FLEXIBLE_FROM = 9
_HEADER_CLIENT = struct.Struct(">hhih")          # api_key, api_version, correlation_id, client_id length
_ACKS_TIMEOUT = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PARTITION_V3 = struct.Struct(">ihqq")           # index, error_code, base_offset, log_append_time
_PARTITION_V5 = struct.Struct(">ihqqq")          # ... log_start_offset
# v8+: an empty record_errors array and a null error_message (flexible: and no tagged field)
_NO_ERRORS = _I32.pack(0) + _I16.pack(-1)
_NO_ERRORS_FLEXIBLE = b"\x01\x00\x00"


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None       # a view of the request frame (writable if the frame is)


@dataclass(slots=True)
class TopicProduceData:
    name: str
    partition_data: list[PartitionProduceData]


@dataclass(slots=True)
class ProduceRequestBody:
    """The fields of a ProduceRequest that the broker uses (kio's names)."""
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


def decode_produce_request(frame, version: int) -> tuple[int, str | None, ProduceRequestBody]:
    """(correlation_id, client_id, body) of a Produce request frame (size prefix removed).

    Raises ValueError (with the position) on a malformed frame; trailing bytes are ignored, as
    Kafka's parser and parse_request ignore them.
    """
    flexible = version >= FLEXIBLE_FROM
    r = WireReader(frame)
    buf, end = r.buf, r.end
    if end < _HEADER_CLIENT.size:
        raise ValueError(f"a {end}-byte frame is shorter than a request header")
    _key, _version, correlation_id, n = _HEADER_CLIENT.unpack_from(buf, 0)
    pos = _HEADER_CLIENT.size
    client_id = None                                  # header v1/v2: client_id is never compact
    if n >= 0:
        if pos + n > end:
            raise ValueError(f"{n} bytes at byte {pos} run past the end of the {end}-byte frame")
        client_id = str(buf[pos:pos + n], "utf-8")
        pos += n
    r.pos = pos
    if flexible:
        r.skip_tagged_fields()
    transactional_id = r.string(flexible)
    acks, timeout_ms = r.unpack(_ACKS_TIMEOUT)
    topics = []
    for _ in range(r.array_length(flexible)):
        name = r.string(flexible)
        if name is None:
            raise ValueError(f"null topic name at byte {r.pos}")
        partitions = []
        for _ in range(r.array_length(flexible)):
            (index,) = r.unpack(_I32)
            partitions.append(PartitionProduceData(index, r.bytes_view(flexible)))
            if flexible:
                r.skip_tagged_fields()
        topics.append(TopicProduceData(name, partitions))
        if flexible:
            r.skip_tagged_fields()
    if flexible:
        r.skip_tagged_fields()
    return correlation_id, client_id, ProduceRequestBody(transactional_id, acks, timeout_ms, topics)


def encode_produce_response(correlation_id: int, version: int, body: dict) -> bytes:
    """The whole frame (size prefix included) of Produce response `version` for the handler's
    dict (Kafka field names: responses / partition_responses / index, error_code, ...)."""
    topics = [(topic["name"], [
        (p["index"], int(p["error_code"]), p["base_offset"], p["log_append_time"], p.get("log_start_offset", -1),
         p.get("error_message"), [(e["batch_index"], e.get("batch_index_error_message"))
                                  for e in p.get("record_errors") or ()])
        for p in topic["partition_responses"]]) for topic in body["responses"]]
    return encode_produce_results(correlation_id, version, topics, int(body.get("throttle_time", 0)))


def encode_produce_results(correlation_id: int, version: int, topics: list, throttle_time: int = 0) -> bytes:
    """The whole frame of Produce response `version` from tuples: topics is a list of (name,
    partitions), each partition (index, error_code, base_offset, log_append_time,
    log_start_offset, error_message[, record_errors as (batch_index, message) pairs])."""
    if not 3 <= version <= 10:
        raise ValueError(f"Produce response version {version} is not encoded here (3..10)")
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(b"\0\0\0\0")                       # size prefix, filled in at the end
    out += _I32.pack(correlation_id)
    if flexible:
        out.append(0)                                   # response header tagged fields
    array_length(out, len(topics), flexible)
    for name, partitions in topics:
        write_string(out, name, flexible)
        array_length(out, len(partitions), flexible)
        for p in partitions:
            index, error_code, base_offset, log_append_time, log_start_offset, message = p[:6]
            if version >= 5:
                out += _PARTITION_V5.pack(index, error_code, base_offset, log_append_time, log_start_offset)
            else:
                out += _PARTITION_V3.pack(index, error_code, base_offset, log_append_time)
            if version >= 8:
                errors = p[6] if len(p) > 6 else ()
                if not errors and message is None:    # no record error, no message: fixed bytes
                    out += _NO_ERRORS_FLEXIBLE if flexible else _NO_ERRORS
                    continue
                array_length(out, len(errors), flexible)
                for batch_index, batch_message in errors:
                    out += _I32.pack(batch_index)
                    write_string(out, batch_message, flexible)
                    if flexible:
                        out.append(0)
                write_string(out, message, flexible)
            if flexible:
                out.append(0)                           # partition tagged fields
        if flexible:
            out.append(0)                               # topic tagged fields
    out += _I32.pack(throttle_time)
    if flexible:
        out.append(0)                                   # response tagged fields
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
