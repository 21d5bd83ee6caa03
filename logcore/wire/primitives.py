"""Kafka's primitive wire types, for the messages the broker encodes or decodes by hand.

Non-flexible versions length-prefix strings with an int16 and arrays and bytes with an int32
(-1: null); flexible versions use an unsigned varint of length + 1 (0: null) and end every
struct with tagged fields (a varint count, then tag, size, bytes each).
"""
from __future__ import annotations

import struct

from logcore.records.varint import decode_uvarint, encode_uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        out.append(value)
    else:
        out += encode_uvarint(value)


def array_length(out: bytearray, n: int | None, flexible: bool) -> None:
    """An array's (or bytes') length prefix; None is null."""
    if flexible:
        uvarint(out, 0 if n is None else n + 1)
    else:
        out += _I32.pack(-1 if n is None else n)


def write_string(out: bytearray, value: str | None, flexible: bool) -> None:
    data = None if value is None else value.encode()
    if flexible:
        uvarint(out, 0 if data is None else len(data) + 1)
    else:
        out += _I16.pack(-1 if data is None else len(data))
    if data:
        out += data


class WireReader:
    """Reads primitives from a buffer, checking every length against the bytes left; errors are
    ValueError naming the position."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0):
        self.buf = memoryview(buf)
        self.pos = pos
        self.end = len(self.buf)

    def _take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise ValueError(f"{n} bytes at byte {start} run past the end of the {self.end}-byte frame")
        self.pos = start + n
        return start

    def unpack(self, fmt: struct.Struct) -> tuple:
        return fmt.unpack_from(self.buf, self._take(fmt.size))

    def uvarint(self) -> int:
        pos = self.pos
        if pos < self.end:
            b = self.buf[pos]
            if b < 0x80:                # one byte: nearly every length and count
                self.pos = pos + 1
                return b
        try:
            value, self.pos = decode_uvarint(self.buf, pos, self.end)
        except ValueError as exc:
            raise ValueError(f"{exc}: at byte {pos} of the {self.end}-byte frame") from None
        return value

    def _length(self, flexible: bool, wide: bool) -> int:
        """A length prefix: -1 for null."""
        if flexible:
            return self.uvarint() - 1
        fmt = _I32 if wide else _I16
        (n,) = fmt.unpack_from(self.buf, self._take(fmt.size))
        if n < -1:
            raise ValueError(f"negative length {n} at byte {self.pos - fmt.size}")
        return n

    def array_length(self, flexible: bool) -> int:
        n = self._length(flexible, wide=True)
        if n < 0:
            raise ValueError(f"null array at byte {self.pos}")
        if n > self.end - self.pos:       # every element takes at least one byte
            raise ValueError(f"array of {n} elements at byte {self.pos} cannot fit the frame")
        return n

    def string(self, flexible: bool) -> str | None:
        n = self._length(flexible, wide=False)
        if n < 0:
            return None
        start = self._take(n)
        try:
            return str(self.buf[start:start + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"string at byte {start} is not UTF-8: {exc}") from None

    def bytes_view(self, flexible: bool) -> memoryview | None:
        """Nullable bytes as a view of the buffer (no copy)."""
        n = self._length(flexible, wide=True)
        if n < 0:
            return None
        start = self._take(n)
        return self.buf[start:start + n]

    def skip_tagged_fields(self) -> None:
        pos = self.pos
        if pos < self.end and self.buf[pos] == 0:     # no tagged field: nearly always
            self.pos = pos + 1
            return
        for _ in range(self.uvarint()):
            self.uvarint()                               # tag
            self._take(self.uvarint())                   # size, then the field's bytes
