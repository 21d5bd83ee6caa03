"""Hostile inputs for the broker tests: decompression bombs in valid Produce requests, and the
broker process's memory as /proc reports it."""
from __future__ import annotations

import struct
import zlib

import lz4.frame

from logcore.records.crc import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")     # RecordBatch v2 header (61 bytes)
_CRC_FROM = 21                                # the CRC covers attributes to the end


def batch(records_section: bytes, codec: int, count: int = 1) -> bytes:
    """A RecordBatch v2 with a valid CRC around `records_section` (compressed with `codec`)."""
    length = _HEADER.size - 12 + len(records_section)
    head = bytearray(_HEADER.pack(0, length, -1, 2, 0, codec, count - 1, 0, 0, -1, -1, -1, count))
    body = bytes(head[_CRC_FROM:]) + records_section
    struct.pack_into(">I", head, 17, crc32c(body))
    return bytes(head) + records_section


def zstd_rle_bomb(compressed_bytes: int) -> bytes:
    """A zstd frame of RLE blocks (4 bytes each, each inflating to 128 KiB of zeros): 32,768:1,
    no content size declared. About 1 MB inflates to 32 GiB."""
    blocks = max(1, (compressed_bytes - 6) // 4)
    block = struct.pack("<I", (131072 << 3) | (1 << 1))[:3] + b"\0"
    last = struct.pack("<I", (131072 << 3) | (1 << 1) | 1)[:3] + b"\0"
    # magic, frame header descriptor (no content size, not single segment), window 128 KiB
    return b"\x28\xb5\x2f\xfd" + b"\x00" + bytes([7 << 3]) + block * (blocks - 1) + last


def gzip_bomb(inflated_bytes: int) -> bytes:
    """gzip of zeros (deflate's limit is about 1,000:1)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(16 << 20)
    out = []
    for _ in range(inflated_bytes // len(chunk)):
        out.append(c.compress(chunk))
    out.append(c.flush())
    return b"".join(out)


def lz4_bomb(inflated_bytes: int) -> bytes:
    """An LZ4 frame of zeros with independent 64 KiB blocks, as Kafka writes them."""
    c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    chunk = bytes(16 << 20)
    out = [c.begin()]
    for _ in range(inflated_bytes // len(chunk)):
        out.append(c.compress(chunk))
    out.append(c.flush())
    return b"".join(out)


def produce_frame(topic: str, partition: int, records: bytes, correlation_id: int = 1,
                  acks: int = 1) -> bytes:
    """A Produce v3 request frame (size prefix included) with one partition's records."""
    name = topic.encode()
    body = (struct.pack(">hhih", 0, 3, correlation_id, 3) + b"raw" + struct.pack(">hhi", -1, acks, 10000)
            + struct.pack(">ih", 1, len(name)) + name + struct.pack(">iii", 1, partition, len(records))
            + records)
    return struct.pack(">i", len(body)) + body


def produce_error(frame: bytes) -> int:
    """The error code of the one partition of a Produce v3 response frame."""
    from broker_helpers import parse_response
    _cid, body = parse_response(0, 3, frame)
    return body.responses[0].partition_responses[0].error_code


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (bytes) of a process, from /proc/<pid>/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out
