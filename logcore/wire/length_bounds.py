"""Array counts of a kio-decoded frame checked against the bytes left, before kio reads it.

kio's native reader reserves room for an array's elements as soon as it reads the count: a
20-byte Metadata request whose topics count says 2^32-1 makes it ask for 34 GB and the process
aborts (an allocation failure is not an exception in kio's native code). So every frame kio
decodes, a request the broker receives or a response a client receives, is first walked here
with the layout kio will read, and an array whose count exceeds the bytes left in the frame is
refused: Kafka's own generated readers apply the same rule (each element takes a byte at least).
So is a null array where the schema allows none (kio reads None, which no handler expects).
Strings, bytes and tagged fields need no check of their own (kio compares their length with the
buffer before it copies), but their lengths are followed to find where the next count lies.

Only entities with an array somewhere (their tagged fields included) are walked: a Heartbeat or
an ApiVersions request costs nothing more.
"""
from __future__ import annotations

import dataclasses
import struct
from functools import cache

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

_FIXED = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
          "uuid": 16}
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from

# Ops of a plan, each a tuple (kind, ...): ("skip", n) fixed-size fields; ("str16",) a legacy
# string (i16 length, -1 null); ("bytes32",) legacy bytes (i32 length); ("compact",) a compact
# string or bytes (unsigned varint length + 1, 0 null); ("array", compact, element plan, nullable);
# ("nullable", plan) an optional entity behind its i8 marker; ("tags", {tag: plan}) the tagged
# fields of a flexible entity.


class LengthError(ValueError):
    """A count or length that does not fit in the bytes left of the frame."""


def check_lengths(cls: type, frame, offset: int) -> None:
    """Raise LengthError naming the byte position when an array count of the `cls` entity read
    from `frame` at `offset` exceeds the bytes left (struct.error or LengthError on a frame that
    ends early). No-op for an entity without arrays."""
    plan = entity_plan(cls)
    if plan is not None:
        _walk(plan, frame, offset, len(frame))


@cache
def entity_plan(cls: type) -> tuple | None:
    """The ops kio's reader follows for the entity `cls`, or None when it has no array anywhere
    (no header has one: the request header's legacy client_id needs no special case here)."""
    plan = tuple(_entity_ops(cls))
    return plan if _has_array(plan) else None


def _field_plan(f: dataclasses.Field, flexible: bool, optional: bool) -> tuple:
    c = classify_field(f)
    if isinstance(c, EntityTupleField | PrimitiveTupleField):
        element = _entity_ops(c.type_) if isinstance(c, EntityTupleField) else \
            _value_ops(f.metadata["kafka_type"], flexible)
        return (("array", flexible, tuple(element), optional),)
    if isinstance(c, EntityField):
        return (("nullable", tuple(_entity_ops(c.type_))),) if optional else tuple(_entity_ops(c.type_))
    return tuple(_value_ops(f.metadata["kafka_type"], flexible))


def _entity_ops(cls: type) -> list:
    flexible = cls.__flexible__
    ops, tags = [], {}
    for f in dataclasses.fields(cls):
        tag = f.metadata.get("tag")
        if tag is not None:                     # tagged fields are never nullable (as kio)
            tags[tag] = _field_plan(f, flexible, optional=False)
        else:
            ops.extend(_field_plan(f, flexible, optional=is_optional(f)))
    if flexible:
        ops.append(("tags", {t: p for t, p in tags.items() if _has_array(p)}))
    return _merge_skips(ops)


def _value_ops(kafka_type: str, flexible: bool) -> list:
    if kafka_type in _FIXED:
        return [("skip", _FIXED[kafka_type])]
    if flexible:
        return [("compact",)]
    return [("str16",)] if kafka_type == "string" else [("bytes32",)]


def _merge_skips(ops: list) -> list:
    out = []
    for op in ops:
        if op[0] == "skip" and out and out[-1][0] == "skip":
            out[-1] = ("skip", out[-1][1] + op[1])
        else:
            out.append(op)
    return out


def _has_array(ops) -> bool:
    for op in ops:
        kind = op[0]
        if kind == "array" or kind == "nullable" and _has_array(op[1]) or \
                kind == "tags" and any(_has_array(p) for p in op[1].values()):
            return True
    return False


def _uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise LengthError(f"varint runs past the end of the frame at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise LengthError(f"varint longer than 5 bytes at byte {pos - 5}")


def _length(what: str, n: int, at: int, pos: int, end: int) -> int:
    if n > end - pos:
        raise LengthError(f"{what} {n} at byte {at} exceeds the {end - pos} bytes left in the frame")
    return pos + n


def _walk(ops: tuple, buf, pos: int, end: int) -> int:
    for op in ops:
        kind = op[0]
        if kind == "skip":
            pos += op[1]
        elif kind == "str16" or kind == "bytes32":
            at = pos
            n = _I16(buf, pos)[0] if kind == "str16" else _I32(buf, pos)[0]
            pos += 2 if kind == "str16" else 4
            if n > 0:
                pos = _length("length", n, at, pos, end)
        elif kind == "compact":
            n = buf[pos]                            # a one-byte varint inline: the usual case
            if n < 0x80:                            # the byte, then n - 1 bytes (0: null)
                if n > end - pos:
                    _length("length", n - 1, pos, pos + 1, end)
                pos += n or 1
            else:
                at = pos
                n, pos = _uvarint(buf, pos, end)
                pos = _length("length", n - 1, at, pos, end)
        elif kind == "array":
            at = pos
            if op[1]:
                n, pos = _uvarint(buf, pos, end)
                n -= 1                              # 0 is a null array
            else:
                n = _I32(buf, pos)[0]
                pos += 4
                if n < -1:
                    raise LengthError(f"array count {n} at byte {at}")
            if n == -1 and not op[3]:
                # kio reads it as None, which no handler expects (Kafka refuses it too)
                raise LengthError(f"null array at byte {at} for a field that cannot be null")
            if n > 0:
                _length("array count", n, at, pos, end)
                element = op[2]
                if len(element) == 1 and element[0][0] == "skip":
                    pos = _length("array count", n * element[0][1], at, pos, end)
                else:
                    for _ in range(n):
                        pos = _walk(element, buf, pos, end)
        elif kind == "nullable":
            marker = buf[pos]                       # i8: -1 is a null entity
            pos += 1
            if marker != 0xFF:
                pos = _walk(op[1], buf, pos, end)
        elif buf[pos] == 0:                         # tags: none, the usual case
            pos += 1
        else:
            at = pos
            n, pos = _uvarint(buf, pos, end)
            _length("tagged field count", n, at, pos, end)
            for _ in range(n):
                tag, pos = _uvarint(buf, pos, end)
                at = pos
                size, pos = _uvarint(buf, pos, end)
                stop = _length("tagged field size", size, at, pos, end)
                plan = op[1].get(tag)               # only the tags with an array inside
                if plan is not None:
                    _walk(plan, buf, pos, stop)
                pos = stop
        if pos > end:
            raise LengthError(f"frame of {end} bytes ends before byte {pos}")
    return pos
