"""Kafka wire protocol envelope with kio: request parsing and response encoding (the broker's
side), request encoding and response parsing (the client's side).

A frame is a 4-byte big-endian size followed by that many bytes. A request starts with its
header (v1, or v2 for flexible versions); kio picks the header from the request schema. A
response carries header v0 (ApiVersions, non-flexible versions) or v1 (flexible versions).

Handlers describe responses as plain dicts with Kafka's field names; `build()` turns them into
the kio dataclass of the version being answered: fields that version lacks are dropped, fields
it has but the dict does not give take their schema default, or a zero value. One handler then
serves every version of its window.
"""
from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import sys
import uuid
from functools import cache
from typing import Any, Callable

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from logcore.records import wire_codec
from logcore.wire.api_keys import FETCH, PRODUCE
from logcore.wire.fetch_request import DECODED_FIRST, DECODED_LAST, FetchRequestTemplate, decode_fetch_request
from logcore.wire.fetch_request import encode_fetch_request
from logcore.wire.fetch_request import FIRST_VERSION as FETCH_FIRST, LAST_VERSION as FETCH_LAST
from logcore.wire.length_bounds import check_lengths
from logcore.wire.produce_codec import decode_produce_request
from logcore.errors import SegLogError

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
ZERO_UUID = uuid.UUID(int=0)
ANONYMOUS = "User:ANONYMOUS"      # Kafka's principal of a connection nobody authenticated


class ProtocolError(SegLogError):
    """A frame that cannot be parsed as a request: the connection that sent it is closed."""


class UnsupportedRequest(ProtocolError):
    """An API key or version this broker does not serve."""

    def __init__(self, message: str, *, api_key: int, api_version: int, correlation_id: int):
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclasses.dataclass(frozen=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any                  # the kio request dataclass
    # Who sent it and where (the connection's session: logcore.security.session): Kafka's
    # principal ("User:ANONYMOUS" until authenticated, "User:alice" after SASL, "User:CN=..."
    # for a TLS client certificate), the client's address and the listener's name.
    principal: str = ANONYMOUS
    client_host: str = ""
    listener: str = ""


# A parsed request's Request made without the dataclass's __init__ (a frozen dataclass's __init__
# sets each of its eight fields through object.__setattr__: 1 us, more than decoding a Fetch).
_REQUEST_FIELDS = tuple(sys.intern(f.name) for f in dataclasses.fields(Request))
_new_instance = wire_codec.new_instance


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame (without its size prefix)."""
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    return _KEY_VERSION_CORRELATION.unpack_from(frame, 0)


@cache
def _request_reader(api_key: int, api_version: int):
    schema = load_request_schema(api_key, api_version)
    return entity_reader(schema.__header_schema__), entity_reader(schema), schema


def parse_request(frame: bytes | bytearray, windows: dict[int, tuple[int, int]], session=None) -> Request:
    """Parse one request frame (size prefix removed) whose API and version lie in `windows`.
    Produce records are views of `frame` (writable if it is). `session` (any object with
    `principal`, `client_host` and `listener`): the connection's, stamped on the request."""
    who = (ANONYMOUS, "", "") if session is None else (session.principal, session.client_host, session.listener)
    api_key, api_version, correlation_id = peek_header(frame)
    window = windows.get(api_key)
    if window is None or not window[0] <= api_version <= window[1]:
        raise UnsupportedRequest(
            f"unsupported request: api key {api_key} version {api_version}"
            + ("" if window is None else f" (this broker serves versions {window[0]}..{window[1]})"),
            api_key=api_key, api_version=api_version, correlation_id=correlation_id)
    decode = decode_produce_request if api_key == PRODUCE else \
        decode_fetch_request if api_key == FETCH and DECODED_FIRST <= api_version <= DECODED_LAST else None
    if decode is not None:
        # In C: a Produce's records stay views of the frame (see produce_codec); a Fetch is read
        # several times per record in a cluster (see fetch_request).
        try:
            _, client_id, body = decode(frame, api_version)
        except (ValueError, struct.error) as exc:
            raise ProtocolError(f"malformed api key {api_key} v{api_version} request"
                                f" (correlation id {correlation_id}): {exc}") from None
        return _new_instance(Request, _REQUEST_FIELDS, (api_key, api_version, correlation_id, client_id, body, *who))
    try:
        read_header, read_body, schema = _request_reader(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity) as exc:   # a window wider than kio knows: a bug of ours
        raise UnsupportedRequest(str(exc), api_key=api_key, api_version=api_version,
                                 correlation_id=correlation_id) from None
    if not isinstance(frame, bytes):
        frame = memoryview(frame).toreadonly()           # kio reads only read-only buffers
    try:
        header, header_size = read_header(frame, 0)      # readers return (value, bytes read)
        check_lengths(schema, frame, header_size)        # before kio reserves room for a count
        body, body_size = read_body(frame, header_size)
    except Exception as exc:   # kio raises several types (struct, ValueError, its own): all malformed
        raise ProtocolError(f"malformed api key {api_key} v{api_version} request"
                            f" (correlation id {correlation_id}): {type(exc).__name__}: {exc}") from None
    # Trailing bytes are ignored, as Kafka's own parser does: librdkafka 2.16 sends Metadata v12
    # with fields that version no longer has.
    return _new_instance(Request, _REQUEST_FIELDS, (api_key, api_version, correlation_id, header.client_id, body,
                                                    *who))


@cache
def response_type(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


@cache
def _response_writers(cls: type) -> tuple[type, Callable, Callable]:
    header_type = cls.__header_schema__
    return header_type, entity_writer(header_type), entity_writer(cls)


def encode_response(correlation_id: int, response: Any) -> bytes:
    """The whole frame (size prefix included) of `response` to the request `correlation_id`."""
    header_type, write_header, write_body = _response_writers(type(response))
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, header_type(correlation_id=correlation_id))
    write_body(buf, response)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    data = bytes(out)
    del out
    return data


# ------------------------------------------------------------------------------ the client's side

@cache
def request_type(api_key: int, api_version: int) -> type:
    return load_request_schema(api_key, api_version)


@cache
def _request_writers(cls: type) -> tuple[type, Callable, Callable]:
    header_type = cls.__header_schema__
    return header_type, entity_writer(header_type), entity_writer(cls)


@cache
def _response_readers(api_key: int, api_version: int) -> tuple[Callable, Callable, type]:
    cls = load_response_schema(api_key, api_version)
    return entity_reader(cls.__header_schema__), entity_reader(cls), cls


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """The whole frame (size prefix included) of a request: `body` is the kio request dataclass
    of that version, or a dict of Kafka field names (see `build`)."""
    if api_key == FETCH and isinstance(body, FetchRequestTemplate):
        return body.encode(correlation_id, client_id, api_version)      # a follower's, patched
    if api_key == FETCH and FETCH_FIRST <= api_version <= FETCH_LAST and isinstance(body, dict):
        # By hand: a follower sends one per round (see fetch_request).
        try:
            return encode_fetch_request(correlation_id, client_id, api_version, body)
        except KeyError as exc:
            raise ValueError(f"the Fetch v{api_version} request has no {exc.args[0]!r} field") from None
        except struct.error as exc:
            raise ValueError(f"a Fetch v{api_version} request field is out of range: {exc}") from None
    cls = request_type(api_key, api_version)
    if not isinstance(body, cls):
        body = build(cls, body)
    header_type, write_header, write_body = _request_writers(cls)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, header_type(request_api_key=api_key, request_api_version=api_version,
                                  correlation_id=correlation_id, client_id=client_id))
    write_body(buf, body)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    data = bytes(out)
    del out
    return data


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation_id, kio response dataclass) of a response frame (size prefix removed).
    Raises ProtocolError naming the API and version when the bytes do not read as that response;
    `records` fields come back as the bytes of the frame, untouched."""
    read_header, read_body, cls = _response_readers(api_key, api_version)
    try:
        header, used = read_header(frame, 0)
        check_lengths(cls, frame, used)                  # a broken broker must not abort us
        body, _ = read_body(frame, used)
    except Exception as exc:     # kio raises several types (struct, ValueError, its own)
        raise ProtocolError(f"unreadable api key {api_key} v{api_version} response of {len(frame)} bytes:"
                            f" {type(exc).__name__}: {exc}") from None
    return header.correlation_id, body


# ------------------------------------------------------------------------------ building responses

@dataclasses.dataclass(frozen=True)
class _FieldPlan:
    name: str
    kind: str                          # "entity", "entities", "value"
    entity: type | None
    kafka_type: str | None
    optional: bool
    has_default: bool
    default: Any


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    plans = []
    for f in dataclasses.fields(cls):
        c = classify_field(f)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = (f.default if f.default is not dataclasses.MISSING
                   else f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        kind = "entities" if isinstance(c, EntityTupleField) else "entity" if isinstance(c, EntityField) else "value"
        plans.append(_FieldPlan(f.name, kind, c.type_ if kind != "value" else None,
                                f.metadata.get("kafka_type"), is_optional(f), has_default, default))
    return tuple(plans)


def build(cls: type, values: dict) -> Any:
    """The kio dataclass `cls` from a dict of Kafka field names (see the module docstring)."""
    kwargs = {}
    for p in _plan(cls):
        if p.name in values:
            kwargs[p.name] = _convert(p, values[p.name])
        elif not p.has_default:
            kwargs[p.name] = _zero(p)
    return cls(**kwargs)


def _convert(p: _FieldPlan, value: Any) -> Any:
    if value is None:
        return None if p.optional or p.kind == "entities" and p.optional else _zero(p)
    if p.kind == "entities":
        return tuple(v if dataclasses.is_dataclass(v) else build(p.entity, v) for v in value)
    if p.kind == "entity":
        return value if dataclasses.is_dataclass(value) else build(p.entity, value)
    t = p.kafka_type
    if t == "error_code":
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if t in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    if t == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        if value < 0:
            return None if p.optional else _EPOCH
        return _EPOCH + datetime.timedelta(milliseconds=value)
    if t == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value))
    if isinstance(value, tuple | list):
        return tuple(value)
    return value


def _zero(p: _FieldPlan) -> Any:
    if p.kind == "entities":
        return ()
    if p.kind == "entity":
        return None if p.optional else build(p.entity, {})
    if p.optional:
        return None
    t = p.kafka_type
    if t == "error_code":
        return ErrorCode.none
    if t in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if t == "datetime_i64":
        return _EPOCH
    if t == "uuid":
        return ZERO_UUID
    if t == "bool":
        return False
    if t in ("string",):
        return ""
    if t in ("bytes", "records"):
        return b""
    return 0


def response(api_key: int, api_version: int, values: dict) -> Any:
    return build(response_type(api_key, api_version), values)
