"""The five RecordBatch codecs, with Kafka's exact stream formats.

gzip: RFC 1952. snappy: xerial snappy-java framing on write, xerial or raw snappy on read.
lz4: LZ4 frame with independent 64 KiB blocks, no checksums (Kafka rejects linked blocks).
zstd: standard frames, level 3 by default.
Decompression failures raise CorruptRecordError without a position; batch code adds it.

`decompress(..., max_size=n)` inflates streamed and stops as soon as the output passes n bytes
(RecordTooLargeError), holding at most about n bytes: the broker validates produced batches
this way, so a small batch that inflates to gigabytes (a decompression bomb) costs at most the
limit in memory and time. Each codec has a bounded-output decoder: zlib's and lz4's
`max_length`, zstd fed input in slices whose worst-case output (an RLE block: 4 bytes in,
128 KiB out) fits what is left of the limit, snappy's length preamble checked before a block
is inflated.
"""
from __future__ import annotations

import struct
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from logcore.errors import CorruptRecordError, RecordTooLargeError


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# A codec by its compression.type name (the topic config's and the producer's); "uncompressed" and
# "none" both name no codec. The topic config's "producer" (keep the producer's codec) is none here.
CODEC_BY_NAME = {"none": Compression.NONE, "uncompressed": Compression.NONE, "gzip": Compression.GZIP,
                 "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
# A codec id's name as Kafka's dump tool prints it.
CODEC_NAMES = {int(c): c.name.lower() for c in Compression}

# Kafka's default levels (CompressionType.*.defaultLevel).
DEFAULT_LEVELS = {Compression.GZIP: 6, Compression.LZ4: 9, Compression.ZSTD: 3}
# The topic config (and Kafka producer setting) that sets a codec's level, e.g. compression.zstd.level.
LEVEL_CONFIGS = {codec: f"compression.{codec.name.lower()}.level" for codec in DEFAULT_LEVELS}
_LZ4_FAST = 0       # lz4.frame's level for LZ4's fast (not high-compression) compressor

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_BLOCK_INDEPENDENT = 0x20

_zstd_local = threading.local()  # zstandard contexts are not thread-safe


def codec_of(codec: Compression | int | str) -> Compression:
    """A Compression from its id or (case-insensitive) name, e.g. 'zstd'."""
    if isinstance(codec, str):
        try:
            return Compression[codec.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown compression codec {codec!r}; expected one of "
                             f"{', '.join(c.name.lower() for c in Compression)}") from None
    try:
        return Compression(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec id {codec}") from None


def compress(codec: Compression | int, data, level: int | None = None) -> bytes:
    codec = codec_of(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        c = zlib.compressobj(DEFAULT_LEVELS[codec] if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec is Compression.SNAPPY:
        return _xerial_snappy_compress(data)
    if codec is Compression.LZ4:
        # At its default level Kafka compresses with LZ4's fast compressor, and with the
        # high-compression one (about 20 times slower) only at another level: the same here.
        if level is None or level == DEFAULT_LEVELS[codec]:
            level = _LZ4_FAST
        return lz4.frame.compress(
            data, compression_level=level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False,
            store_size=False)
    return _zstd_compressor(DEFAULT_LEVELS[codec] if level is None else level).compress(data)


def decompress(codec: Compression | int, data, max_size: int | None = None) -> bytes | bytearray:
    """Decompress a batch's record section; CorruptRecordError on any malformed stream.

    With `max_size`, inflate streamed and raise RecordTooLargeError as soon as the output
    would pass `max_size` bytes (the output is then a bytearray)."""
    codec = codec_of(codec)
    try:
        if codec is Compression.NONE:
            return bytes(data)
        if max_size is not None:
            out = bytearray()
            try:
                _BOUNDED[codec](memoryview(data), max_size, out)
            except BaseException:
                out.clear()     # the traceback keeps the frames: not the inflated bytes
                raise
            return out
        if codec is Compression.GZIP:
            return _gunzip(data)
        if codec is Compression.SNAPPY:
            return _snappy_decompress(data)
        if codec is Compression.LZ4:
            return _lz4_decompress(data)
        return _unzstd(data)
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except Exception as exc:  # every codec library has its own error types
        raise CorruptRecordError(f"cannot decompress {codec.name.lower()} data: {exc}") from exc


def _gunzip(data) -> bytes:
    # Java's GZIPInputStream reads concatenated members, so do we.
    out = []
    view = memoryview(data)
    while True:
        d = zlib.decompressobj(31)
        out.append(d.decompress(view))
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        view = memoryview(d.unused_data) if d.unused_data else None
        if not view:
            return b"".join(out)


def _unzstd(data) -> bytes:
    # Frames are decoded one by one so a truncated last frame is an error, not silently short.
    out = []
    view = memoryview(data)
    decompressor = _zstd_decompressor()
    while True:
        d = decompressor.decompressobj()
        out.append(d.decompress(view))
        if not d.eof:
            raise CorruptRecordError("truncated zstd stream")
        view = memoryview(d.unused_data) if d.unused_data else None
        if not view:
            return b"".join(out)


def _xerial_snappy_compress(data) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_blocks(view: memoryview) -> list[memoryview]:
    """The raw snappy blocks of `view`: its xerial-framed blocks, or `view` itself (plain snappy)."""
    if len(view) < 16 or view[:8] != XERIAL_MAGIC:
        return [view]
    blocks, pos, end = [], 16, len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = _INT32.unpack_from(view, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError(f"xerial snappy block of {n} bytes runs past the end of the data")
        blocks.append(view[pos:pos + n])
        pos += n
    return blocks


def _snappy_decompress(data) -> bytes:
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in _snappy_blocks(memoryview(data)))


def _lz4_decompress(data) -> bytes:
    view = memoryview(data)
    if len(view) < 5 or view[:4] != _LZ4_MAGIC:
        raise CorruptRecordError("lz4 data does not start with the LZ4 frame magic")
    if not view[4] & _LZ4_FLG_BLOCK_INDEPENDENT:
        raise CorruptRecordError("lz4 frame uses dependent (linked) blocks, which Kafka does not allow")
    out, consumed = lz4.frame.decompress(view, return_bytearray=False, return_bytes_read=True)
    if consumed != len(view):
        raise CorruptRecordError(f"{len(view) - consumed} bytes after the end of the lz4 frame")
    return out


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    cache = _zstd_local.__dict__.setdefault("compressors", {})
    comp = cache.get(level)
    if comp is None:
        comp = cache[level] = zstandard.ZstdCompressor(level=level)
    return comp


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_zstd_local, "decompressor", None)
    if d is None:
        d = _zstd_local.decompressor = zstandard.ZstdDecompressor()
    return d


# ------------------------------------------------------------------ bounded (streamed) inflation

_OUT_CHUNK = 1 << 20           # output taken from a decoder at a time


def _too_large(codec: str, limit: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"{codec} records inflate to more than {limit} bytes")


def _gunzip_bounded(view: memoryview, limit: int, out: bytearray) -> None:
    while True:
        d = zlib.decompressobj(31)
        tail = view
        while True:
            out += d.decompress(tail, min(_OUT_CHUNK, limit - len(out) + 1))
            if len(out) > limit:
                raise _too_large("gzip", limit)
            tail = d.unconsumed_tail
            if not tail:
                break
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        if not d.unused_data:
            return
        view = memoryview(d.unused_data)


_ZSTD_MAX_RATIO = 1 << 15       # an RLE block: a 3-byte header and 1 byte give 128 KiB
_ZSTD_MIN_SLICE = 128           # so one slice inflates to at most 4 MiB
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 << 10     # what one compressed block inflates to at most (RFC 8878)
_ZSTD_WALKED_BLOCKS = 64        # block headers read for a bound before slicing instead


def _zstd_frame_bound(view: memoryview, limit: int) -> int | None:
    """An upper bound on the bytes the zstd frame at the start of `view` inflates to, read from
    its block headers (RFC 8878: a raw or RLE block gives its stated size, a compressed one at
    most 128 KiB), when that bound is at most `limit`; None when it may be more, the frame has
    more than _ZSTD_WALKED_BLOCKS blocks, or its headers do not parse (the sliced inflation
    then decides, and reports what is wrong)."""
    if len(view) < 6 or view[:4] != _ZSTD_MAGIC:
        return None
    descriptor = view[4]
    if descriptor & 0x08:                               # the reserved bit
        return None
    single_segment = descriptor >> 5 & 1
    pos = (5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 3]
           + (single_segment, 2, 4, 8)[descriptor >> 6])
    bound = 0
    for _ in range(_ZSTD_WALKED_BLOCKS):
        if pos + 3 > len(view):
            return None
        header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        kind, size = header >> 1 & 3, header >> 3
        if kind == 3:
            return None
        bound += _ZSTD_BLOCK_MAX if kind == 2 else size
        if bound > limit:
            return None
        pos += 3 + (1 if kind == 1 else size)
        if header & 1:
            return bound
    return None


def _unzstd_bounded(view: memoryview, limit: int, out: bytearray) -> None:
    dctx = _zstd_decompressor()
    while True:
        d = dctx.decompressobj(write_size=_OUT_CHUNK // 16)
        pos, end = 0, len(view)
        if _zstd_frame_bound(view, limit - len(out)) is not None:
            # The frame cannot inflate past the limit: in one call (a produced batch's usual
            # frame: one or two blocks), not in slices of a few hundred bytes.
            out += d.decompress(view)
            pos = end
            if len(out) > limit:
                raise _too_large("zstd", limit)
        while not d.eof:
            if pos >= end:
                raise CorruptRecordError("truncated zstd stream")
            step = max(_ZSTD_MIN_SLICE, min(limit - len(out), _OUT_CHUNK * 4) // _ZSTD_MAX_RATIO)
            out += d.decompress(view[pos:pos + step])
            pos += step
            if len(out) > limit:
                raise _too_large("zstd", limit)
        pos = min(pos, end) - len(d.unused_data)
        view = view[pos:]
        if not view:
            return


def _snappy_raw_length(view: memoryview) -> int:
    """The uncompressed length a raw snappy block declares (its varint preamble)."""
    value = shift = 0
    for i in range(min(len(view), 5)):
        byte = view[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise CorruptRecordError("snappy block without a valid length preamble")


def _unsnappy_bounded(view: memoryview, limit: int, out: bytearray) -> None:
    for block in _snappy_blocks(view):
        # snappy checks that a block inflates to exactly its declared length
        if len(out) + _snappy_raw_length(block) > limit:
            raise _too_large("snappy", limit)
        out += cramjam.snappy.decompress_raw(block)


def _lz4_bounded(view: memoryview, limit: int, out: bytearray) -> None:
    if len(view) < 5 or view[:4] != _LZ4_MAGIC:
        raise CorruptRecordError("lz4 data does not start with the LZ4 frame magic")
    if not view[4] & _LZ4_FLG_BLOCK_INDEPENDENT:
        raise CorruptRecordError("lz4 frame uses dependent (linked) blocks, which Kafka does not allow")
    d = lz4.frame.LZ4FrameDecompressor()
    out += d.decompress(view, max_length=min(_OUT_CHUNK, limit + 1))
    while not d.eof:
        if len(out) > limit:
            raise _too_large("lz4", limit)
        if d.needs_input:
            raise CorruptRecordError("truncated lz4 frame")
        out += d.decompress(b"", max_length=min(_OUT_CHUNK, limit - len(out) + 1))
    if len(out) > limit:
        raise _too_large("lz4", limit)
    if d.unused_data:
        raise CorruptRecordError(f"{len(d.unused_data)} bytes after the end of the lz4 frame")


_BOUNDED = {Compression.GZIP: _gunzip_bounded, Compression.SNAPPY: _unsnappy_bounded,
            Compression.LZ4: _lz4_bounded, Compression.ZSTD: _unzstd_bounded}
