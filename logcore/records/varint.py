"""Zigzag varint (int32) and varlong (int64) codecs of the RecordBatch v2 record layout, and the
unsigned varint of Kafka's flexible protocol versions.

The one Python varint codec: the pure-Python record decoder (records/batch.py) and the broker's
wire reader use it; the C side has its counterpart in records/varint.h. Used off the hot path
(building batches, the pure-Python decoder). Decoders return (value, next_position) and raise ValueError on a truncated or overlong
encoding; callers turn that into a CorruptRecordError with the batch position.
"""
from __future__ import annotations

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _encode_unsigned(raw: int) -> bytes:
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 32-bit integer (1 to 5 bytes)."""
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"varint value {value} is outside the int32 range")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & _MASK32)


def encode_varlong(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit integer (1 to 10 bytes)."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong value {value} is outside the int64 range")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & _MASK64)


def encode_uvarint(value: int) -> bytes:
    """An unsigned varint (flexible-version lengths and counts: no zigzag)."""
    if value < 0:
        raise ValueError(f"unsigned varint value {value} is negative")
    return _encode_unsigned(value)


def size_of_varint(value: int) -> int:
    return len(encode_varint(value))


def _decode_unsigned(buf, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise ValueError("varint runs past the end of the data")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return raw, pos
        shift += 7
    raise ValueError(f"varint longer than {max_bytes} bytes")


def decode_varint(buf, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag int32 at `pos`; bits past 32 of a 5-byte encoding are dropped (as Java does)."""
    raw, pos = _decode_unsigned(buf, pos, len(buf) if end is None else end, 5)
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag int64 at `pos` (at most 10 bytes)."""
    raw, pos = _decode_unsigned(buf, pos, len(buf) if end is None else end, 10)
    raw &= _MASK64
    return (raw >> 1) ^ -(raw & 1), pos


def decode_uvarint(buf, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Decode an unsigned varint of at most 5 bytes at `pos` (no zigzag, no masking)."""
    return _decode_unsigned(buf, pos, len(buf) if end is None else end, 5)
