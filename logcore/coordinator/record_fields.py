"""The primitive fields of the coordinators' internal topics (`__consumer_offsets`,
`__transaction_state`), as Kafka lays them out, and the partition a key lives in.

Kept apart from logcore.wire.primitives on purpose: a damaged record is a CorruptRecordError
naming the record (not a request's ValueError), and text is decoded leniently, as Kafka's
own readers of these topics do not reject a key over its bytes.
"""
from __future__ import annotations

import functools
import struct

from logcore.errors import CorruptRecordError

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


def partition_for(key: str, partitions: int) -> int:
    """Kafka's choice: Utils.abs(key.hashCode()) % partitions (Java String.hashCode over
    UTF-16 code units)."""
    return _abs_java_hash(key) % partitions


@functools.lru_cache(maxsize=4096)
def _abs_java_hash(key: str) -> int:
    # Kept per key: a transactional producer's every request asks which partition (so which
    # coordinator) its id maps to, and the hash walks the id unit by unit in Python.
    h = 0
    for (unit,) in struct.iter_unpack(">H", key.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return 0 if h == -(1 << 31) else abs(h)


def string(value: str | None) -> bytes:
    """An int16-length string; None is null (-1)."""
    if value is None:
        return I16.pack(-1)
    data = value.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"a string of {len(data)} bytes does not fit an int16 length")
    return I16.pack(len(data)) + data


def bytes_(value: bytes | None) -> bytes:
    """Int32-length bytes; None is null (-1)."""
    if value is None:
        return I32.pack(-1)
    return I32.pack(len(value)) + bytes(value)


class RecordReader:
    """Reads one record's key or value; running short is a CorruptRecordError naming `where`."""

    def __init__(self, data: bytes, where: str):
        self.data = bytes(data)
        self.pos = 0
        self.where = where

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.where}: record of {len(self.data)} bytes ends at byte"
                                     f" {self.pos} where {n} more were expected")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return I8.unpack(self.take(1))[0]

    def i16(self) -> int:
        return I16.unpack(self.take(2))[0]

    def i32(self) -> int:
        return I32.unpack(self.take(4))[0]

    def i64(self) -> int:
        return I64.unpack(self.take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptRecordError(f"{self.where}: unsigned varint longer than 5 bytes")

    def nullable_string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode(errors="replace")

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CorruptRecordError(f"{self.where}: null string where a string is required")
        return value

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise CorruptRecordError(f"{self.where}: null string where a string is required")
        return self.take(n).decode(errors="replace")

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.take(n)


# ------------------------------------------------------------------------------ flexible fields
# The consumer-protocol group records (KIP-848) have flexible values: compact strings and arrays
# (an unsigned varint of length + 1, 0 for null), UUIDs as 16 bytes, and a tagged-fields section
# (a varint count, then tag, size, bytes for each) after every struct.

def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def compact_string(value: str | None) -> bytes:
    """A compact (nullable) string; None is null."""
    if value is None:
        return uvarint(0)
    data = value.encode()
    return uvarint(len(data) + 1) + data


def compact_array(items: list[bytes]) -> bytes:
    """A compact array of already encoded items."""
    return uvarint(len(items) + 1) + b"".join(items)


NO_TAGGED_FIELDS = b"\x00"


def read_compact_nullable_string(r: RecordReader) -> str | None:
    n = r.uvarint() - 1
    return None if n < 0 else r.take(n).decode(errors="replace")


def read_compact_array_length(r: RecordReader) -> int:
    """The number of items of a compact array (a null array reads as empty)."""
    return max(r.uvarint() - 1, 0)


def read_uuid(r: RecordReader) -> bytes:
    return r.take(16)


def skip_tagged_fields(r: RecordReader) -> dict[int, bytes]:
    """Read a tagged-fields section; {tag: its bytes}."""
    fields = {}
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        fields[tag] = r.take(r.uvarint())
    return fields
