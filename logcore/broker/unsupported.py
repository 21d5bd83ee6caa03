"""Answers to requests this broker does not serve, so that clients fail fast with Kafka's error.

Kafka answers a request whose version it does not support with UNSUPPORTED_VERSION (35) when it
can still write a response of that version; seglog does the same:

- Produce v0..v2 (message format v0/v1): answered per partition with UNSUPPORTED_VERSION. These
  versions are advertised in ApiVersions although they are refused, as Apache Kafka 4.0 does
  (KAFKA-18659): librdkafka before 2.8 enables gzip, snappy and lz4 only when the broker's
  Produce window starts at 0, and would otherwise send those batches uncompressed.
- any other API key or version that kio can write a response for, whose response has a
  top-level error_code: answered with error_code 35 and empty contents.

Anything else (an API key unknown to kio, a response without a top-level error code) cannot be
answered meaningfully; the caller closes the connection as before.
"""
from __future__ import annotations

import struct

from kio.index import UnknownAPIKey, UnknownEntity, load_response_schema

from logcore.wire import error_codes as E
from logcore.wire.primitives import WireReader, write_string
from logcore.wire.protocol import encode_response, response

_HEADER_CLIENT = struct.Struct(">hhih")
_ACKS_TIMEOUT = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_PARTITION_V0 = struct.Struct(">ihq")       # index, error_code, base_offset
_I64 = struct.Struct(">q")


def old_produce_response(frame, version: int, correlation_id: int) -> bytes | None:
    """The Produce v0..v2 response refusing every partition of `frame` with UNSUPPORTED_VERSION;
    None for acks=0 (no response is expected). Raises ValueError on a malformed frame."""
    r = WireReader(frame)
    buf, end = r.buf, r.end
    if end < _HEADER_CLIENT.size:
        raise ValueError(f"a {end}-byte frame is shorter than a request header")
    n = _HEADER_CLIENT.unpack_from(buf, 0)[3]
    r.pos = _HEADER_CLIENT.size + max(n, 0)
    acks, _timeout = r.unpack(_ACKS_TIMEOUT)
    topics = []
    for _ in range(r.array_length(False)):
        name = r.string(False)
        partitions = []
        for _ in range(r.array_length(False)):
            (index,) = r.unpack(_I32)
            r.bytes_view(False)
            partitions.append(index)
        topics.append((name, partitions))
    if acks == 0:
        return None
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(correlation_id)               # response header v0
    out += _I32.pack(len(topics))
    for name, partitions in topics:
        write_string(out, name, False)
        out += _I32.pack(len(partitions))
        for index in partitions:
            out += _PARTITION_V0.pack(index, E.UNSUPPORTED_VERSION, -1)
            if version >= 2:
                out += _I64.pack(-1)               # log_append_time
    if version >= 1:
        out += _I32.pack(0)                        # throttle_time_ms
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def error_response(api_key: int, api_version: int, correlation_id: int) -> bytes | None:
    """A response of (api_key, api_version) with error_code UNSUPPORTED_VERSION, or None when
    kio does not know that response or it has no top-level error_code."""
    try:
        cls = load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity, KeyError, ValueError):    # kio does not know it: cannot answer
        return None
    if "error_code" not in getattr(cls, "__dataclass_fields__", {}):
        return None
    return encode_response(correlation_id, response(api_key, api_version,
                                                    {"error_code": E.UNSUPPORTED_VERSION}))
