"""What a segment checks of its batches before serving them: offsets where they lie, CRCs of
ranges read (remembered once good), offset-index entries against the batches they name, and
where the next good batch lies after damage.

Functions over bytes and header columns, and the segment's memory of verified ranges; the
segment (`segment.py`) calls them with its base offset and its no-gaps rule.
"""
from __future__ import annotations

import numpy as np

from logcore.errors import CorruptRecordError
from logcore.records.batch import (F_BASE_OFFSET, F_LAST_DELTA, HEADER_SIZE, batch_fields,
                                   parse_header)

INT32_MAX = 2**31 - 1


class VerifiedRanges:
    """Byte ranges [start, end) of a segment's file whose batches were verified (CRC, offsets)
    or written by this process, until a truncation cuts them: a range is checked once, not at
    every fetch."""

    MAX_SPANS = 64

    def __init__(self):
        self._spans: list[list[int]] = []

    def covers(self, start: int, end: int) -> bool:
        for lo, hi in self._spans:
            if lo <= start and end <= hi:
                return True
        return False

    def forget_from(self, position: int) -> None:
        """The file was cut at `position`: what is written there next was never checked."""
        self._spans = [[lo, min(hi, position)] for lo, hi in self._spans if lo < position]

    def mark(self, start: int, end: int) -> None:
        for span in self._spans:
            if span[0] <= end and start <= span[1]:       # touching or overlapping: merge
                span[0], span[1] = min(span[0], start), max(span[1], end)
                break
        else:
            self._spans.append([start, end])
            if len(self._spans) > self.MAX_SPANS:
                self._spans.pop(0)


def first_bad_row(fields, base_offset: int, contiguous: bool, prev_next: int | None,
                  next_base: int | None):
    """(row, why) of the first `batch_fields` row whose offsets are wrong where it lies in the
    segment at `base_offset` (below it, past its int32 range, not rising, a gap when
    `contiguous`, at or past `next_base`), else None."""
    if not len(fields):
        return None
    base = fields[:, F_BASE_OFFSET]
    delta = fields[:, F_LAST_DELTA]
    last = base + delta
    bad = (base < base_offset) | (delta < 0) | (last - base_offset > INT32_MAX)
    if len(fields) > 1:
        bad[1:] |= (base[1:] != last[:-1] + 1) if contiguous else (base[1:] <= last[:-1])
    if prev_next is not None:
        bad[0] |= base[0] < prev_next
    if next_base is not None:
        bad |= last >= next_base
    if bad.any():
        i = int(np.argmax(bad))
        prev = int(last[i - 1]) + 1 if i else prev_next
        why = (f"batch has offsets {int(base[i])}..{int(last[i])}: not in segment {base_offset}"
               f"{'' if next_base is None else f' (next segment at {next_base})'}"
               f"{'' if prev is None else f' or not above the previous next offset {prev}'}")
        return i, why
    return None


def index_entry_problem(head: bytes, entry_offset: int, position: int, log_size: int) -> str | None:
    """Why the offset-index entry (entry_offset, position) is wrong, given the `head` bytes
    read at its position: it must point at a batch whose last offset is the entry's."""
    if len(head) < HEADER_SIZE:
        return f"entry ({entry_offset}, {position}) points past the end of the log ({log_size} bytes)"
    header = parse_header(head)
    if header.magic != 2 or header.size < HEADER_SIZE or header.last_offset != entry_offset:
        return (f"entry ({entry_offset}, {position}) does not point at the batch ending at offset"
                f" {entry_offset}")
    return None


def next_good_batch(data: bytes, min_base: int) -> tuple[int, int] | None:
    """(position in `data`, base offset) of the first whole batch after the damage at its start
    that passes every check (magic, length, CRC, base offset at or above `min_base`), else None."""
    at = 1
    while True:
        at = data.find(b"\x02", at + 16) - 16 if at + 16 < len(data) else -1
        if at < 0:
            return None
        if at + HEADER_SIZE <= len(data):
            header = parse_header(data, at)
            if (header.size >= HEADER_SIZE and at + header.size <= len(data)
                    and header.base_offset >= min_base and header.last_offset_delta >= 0):
                try:
                    batch_fields(memoryview(data)[at:at + header.size], verify_crc=True)
                    return at, header.base_offset
                except CorruptRecordError:
                    pass
        at += 1


def verify_mapped(verify, mapped, view: memoryview) -> int:
    """`verify(view)` over a mapped range, then the map released; a CorruptRecordError is
    re-raised without the frames that still hold the map (closing it would fail)."""
    error = None
    good = 0
    try:
        good = verify(view)
    except CorruptRecordError as exc:
        error = CorruptRecordError(exc.reason, file=exc.file, position=exc.position)
    view.release()
    try:
        mapped.close()
    except BufferError:     # a view still alive somewhere: the map goes with it
        pass
    if error is not None:
        raise error
    return good


def batch_offsets_error(header, base_offset: int, contiguous: bool, prev_next: int | None,
                        position: int) -> str | None:
    """Why the offsets of a batch are wrong where it lies (below the segment's base, outside its
    relative range, not above the previous batch's, a gap in a topic never compacted), or None."""
    if (header.base_offset < base_offset or header.last_offset_delta < 0
            or header.last_offset - base_offset > INT32_MAX):
        return (f"batch has offsets {header.base_offset}..{header.last_offset}, outside segment"
                f" {base_offset}'s range")
    if prev_next is not None and header.base_offset < prev_next:
        return (f"batch base offset {header.base_offset} is below the previous batch's next"
                f" offset {prev_next} (offsets must rise)")
    if contiguous and header.base_offset != (base_offset if position == 0 else prev_next
                                             if prev_next is not None else header.base_offset):
        return (f"batch base offset {header.base_offset} leaves a gap after offset"
                f" {(base_offset if position == 0 else prev_next) - 1} in a topic that was never"
                " compacted")
    return None


def offset_index_from_headers(index, headers, index_interval_bytes: int) -> None:
    """Fill an empty offset index from (position, header) of a segment's batches, as appends
    with `index_interval_bytes` would have."""
    since = 0
    for pos, header in headers:
        if since > index_interval_bytes and not index.is_full():
            index.append(header.last_offset, pos)
            since = 0
        since += header.size
