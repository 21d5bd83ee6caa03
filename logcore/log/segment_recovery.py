"""A segment's recovery scan: every batch of its `.log` validated from the start (length, CRC,
offsets where it lies), up to the first that is torn or corrupt.

The scan reads and judges; the segment (`LogSegment.recover`) indexes each valid batch as it
comes and decides what to cut.
"""
from __future__ import annotations

from dataclasses import dataclass

from logcore.errors import CorruptRecordError
from logcore.records.batch import HEADER_SIZE, iter_batches

SCAN_CHUNK = 64 * 1024
INT32_MAX = 2**31 - 1


@dataclass
class ScanResult:
    """What a validating scan of a segment found."""
    valid_bytes: int
    truncated_bytes: int
    next_offset: int | None
    error: str | None


class RecoveryScan:
    """One validating pass over a segment's bytes (`data`, of `file_size` bytes): `batches()`
    yields (position, header, bytes) of each valid batch; after it, `valid_bytes`,
    `next_offset` and `error` say where and why it stopped."""

    def __init__(self, data, file_size: int, *, base_offset: int, contiguous: bool, source: str):
        self.data = data
        self.file_size = file_size
        self.base_offset = base_offset
        self.contiguous = contiguous
        self.source = source
        self.valid_bytes = 0
        self.next_offset: int | None = None
        self.error: str | None = None

    def batches(self):
        file_size, pos = self.file_size, 0
        while pos < file_size:
            head = self.data.read(pos, min(file_size, pos + SCAN_CHUNK))
            if len(head) < 17:
                self.error = f"{file_size - pos} trailing bytes, shorter than a batch header"
                return
            size_field = int.from_bytes(head[8:12], "big", signed=True) + 12
            if size_field < HEADER_SIZE or pos + size_field > file_size:
                self.error = (f"batch at position {pos} declares {size_field} bytes"
                              + (", past the end of the file" if pos + size_field > file_size else ""))
                return
            data = head[:size_field] if size_field <= len(head) else self.data.read(pos, pos + size_field)
            try:
                batches = list(iter_batches(data, source=self.source, base_position=pos,
                                            verify_crc=True, allow_partial_tail=False))
            except CorruptRecordError as exc:
                self.error = str(exc)
                return
            _, header = batches[0]
            self.error = self._offsets_error(pos, header)
            if self.error is not None:
                return
            yield pos, header, data
            self.next_offset = header.next_offset
            pos += size_field
            self.valid_bytes = pos

    def _offsets_error(self, pos: int, header) -> str | None:
        base, next_offset = self.base_offset, self.next_offset
        if header.base_offset < base or header.last_offset - base > INT32_MAX:
            return (f"batch at position {pos} has offsets {header.base_offset}..{header.last_offset}"
                    f" outside segment base {base}")
        if next_offset is not None and header.base_offset < next_offset:
            return f"batch at position {pos} has base offset {header.base_offset} below {next_offset}"
        if self.contiguous and header.base_offset != (base if next_offset is None else next_offset):
            return (f"batch at position {pos} has base offset {header.base_offset}, expected"
                    f" {base if next_offset is None else next_offset} (no gaps: never compacted)")
        return None

    def result(self, truncated: int) -> ScanResult:
        return ScanResult(self.valid_bytes, truncated, self.next_offset, self.error)
