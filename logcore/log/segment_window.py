"""A fetch window of one segment: the whole batches from the one holding an offset, each wholly
below a bound (the high watermark or the LSO), within a byte budget.

Two ways to find it, both through the segment's public reads and checks: `read_window` reads the
window's bytes in one read and walks their headers in one C scan; `locate_window` finds its file
range from the offset index and the batch headers alone, for a zero-copy send. As Kafka, a batch
that straddles the bound is not served at all.
"""
from __future__ import annotations

import numpy as np

from logcore.errors import CorruptRecordError
from logcore.records.batch import F_BASE_OFFSET, F_LAST_DELTA, F_POSITION, F_SIZE, HEADER_SIZE, batch_fields
from logcore.log.segment_verification import first_bad_row, index_entry_problem

INT32_MAX = 2**31 - 1


def read_window(seg, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool,
                view: bool, buffer: bytearray | None, strict: bool,
                next_base: int | None) -> tuple[int, bytes | memoryview]:
    """(file position of the data, data): see `LogSegment.read_window`."""
    if _remote(seg):
        one = _one_read_window(seg, offset, max_bytes, max_offset, view, buffer, next_base)
        if one is not None:
            return one
    found = seg.translate_offset(offset, strict=strict)
    if found is None:
        return 0, b""
    start, first = found
    if first.last_offset >= max_offset:
        seg.check_straddling(start, first, strict)
        return start, b""
    # One read for the whole window; the batch headers are walked in that buffer.
    want = max(max_bytes, first.size) if min_one_batch else max_bytes
    buf = seg.read_bytes(start, start + want, buffer)
    # The window's headers in one C scan (no CRC here: the decoder checks it), cut before
    # the first batch that reaches `max_offset`.
    try:
        fields = batch_fields(buf, source=seg.log_path, verify_crc=False, allow_partial_tail=True,
                              base_position=start)
    except CorruptRecordError as exc:
        if not exc.position or exc.position <= start:
            raise
        # an invalid header inside the window: serve the batches before it (the decoder
        # checks their CRCs; a damaged length before it shows there), fail at the next read
        fields = batch_fields(memoryview(buf)[:exc.position - start], source=seg.log_path,
                              verify_crc=False, allow_partial_tail=True, base_position=start)
    bad = first_bad_row(fields, seg.base_offset, seg.contiguous, None, next_base)
    if bad is not None:
        if bad[0] == 0:
            raise CorruptRecordError(bad[1], file=seg.log_path, position=start)
        fields = fields[:bad[0]]        # serve the good batches; the next read fails there
    last_offsets = fields[:, F_BASE_OFFSET] + fields[:, F_LAST_DELTA]
    stop = int(np.searchsorted(last_offsets, max_offset, side="left"))
    if stop < len(fields):
        end = int(fields[stop, F_POSITION])
    elif len(fields):
        end = int(fields[-1, F_POSITION] + fields[-1, F_SIZE])
    else:
        end = 0
    if end == len(buf):
        return start, buf
    return start, (memoryview(buf)[:end] if view else buf[:end])


def _remote(seg) -> bool:
    """A published segment of an object store: each read is a request (a round trip)."""
    storage = getattr(seg, "storage", None)
    return (not seg.is_local_file and storage is not None and not storage.is_local
            and not getattr(seg, "writable", False))


def _one_read_window(seg, offset: int, max_bytes: int, max_offset: int, view: bool,
                     buffer: bytearray | None, next_base: int | None):
    """The window in one ranged read from the offset index's entry, on an object store (the
    general path reads the entry's header to check it, scans headers to the offset, then
    reads the window: three round trips). The entry's check, the headers' offsets and the
    bound are checked in the bytes read. None when that read cannot settle the window alone
    (the first batch not whole in it, damage, an entry to rebuild, a straddling batch, a
    reader's resume point): the general path then answers, with its precise errors."""
    if seg.resume_points:
        return None
    entry_offset, position = seg.offset_index.lookup(offset)
    buf = seg.read_bytes(position, position + max_bytes, buffer)
    if len(buf) < HEADER_SIZE:
        return None
    if not (position == 0 and entry_offset == seg.base_offset) and \
            index_entry_problem(bytes(buf[:HEADER_SIZE]), entry_offset, position, seg.size()) is not None:
        return None
    try:
        fields = batch_fields(buf, source=seg.log_path, verify_crc=False, allow_partial_tail=True,
                              base_position=position)
    except CorruptRecordError:
        return None
    if not len(fields) or int(fields[0, F_POSITION]) != 0:     # positions in `buf`
        return None
    if position == 0 and seg.contiguous and int(fields[0, F_BASE_OFFSET]) != seg.base_offset:
        return None                     # a gap at the segment's start (batch_offsets_error's check)
    last_offsets = fields[:, F_BASE_OFFSET] + fields[:, F_LAST_DELTA]
    first = int(np.searchsorted(last_offsets, offset, side="left"))
    if first == len(fields) or int(last_offsets[first]) >= max_offset:
        return None
    bad = first_bad_row(fields, seg.base_offset, seg.contiguous, None, next_base)
    if bad is not None and bad[0] <= first:
        return None
    if bad is not None:
        fields = fields[:bad[0]]        # serve the good batches; the next read fails there
        last_offsets = last_offsets[:bad[0]]
    begin = int(fields[first, F_POSITION])
    stop = int(np.searchsorted(last_offsets, max_offset, side="left"))
    if stop < len(fields):
        end = int(fields[stop, F_POSITION])
    else:
        end = int(fields[-1, F_POSITION] + fields[-1, F_SIZE])
    if begin == 0 and end == len(buf):
        return position, buf
    window = memoryview(buf)[begin:end]
    return position + begin, (window if view else bytes(window))


def locate_window(seg, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool,
                  strict: bool) -> tuple[int, int, int]:
    """(start, end, next offset) of the window, its data not read: see `LogSegment.locate`."""
    found = seg.translate_offset(offset, strict=strict)
    if found is None:
        return 0, 0, offset
    start, first = found
    if first.last_offset >= max_offset:
        seg.check_straddling(start, first, strict)
        return start, start, offset
    want = max(max_bytes, first.size) if min_one_batch else max_bytes
    size = seg.size()
    limit = min(start + want, size)
    # Jump to the last index entry whose batch starts at or below `limit` and ends below
    # `max_offset` (entries are (last offset, position) of batch starts): every batch before
    # it is whole within the window. Then walk headers from there.
    # The keys searched for are the columns' own int32: a Python int makes numpy cast the whole
    # column to int64 first, a search linear in the index's size (tens of microseconds per
    # read at a large active segment's tens of thousands of entries).
    index = seg.offset_index
    positions, keys = index.value_column(), index.key_column()
    k = min(int(positions.searchsorted(np.int32(min(limit, INT32_MAX)), side="right")),
            int(keys.searchsorted(np.int32(min(max(max_offset - seg.base_offset, -1), INT32_MAX)),
                                  side="left"))) - 1
    pos = max(start, int(positions[k])) if k >= 0 else start
    if pos > start:
        problem = seg.index_entry_problem(seg.base_offset + int(keys[k]), pos)
        if problem is not None:
            try:
                seg.rebuild_offset_index(problem)
            except CorruptRecordError:
                pos = start     # the batch there is damaged, not the index: walk from the start
            else:
                return locate_window(seg, offset, max_bytes, max_offset, min_one_batch, strict)
    end, next_offset = pos, None if pos > start else offset
    while pos + HEADER_SIZE <= (size if next_offset is None else limit):
        try:
            header = seg.header_at(pos)
        except CorruptRecordError:
            if end > start and next_offset is not None:
                break       # serve the batches before it; a read from here fails
            raise
        if next_offset is None:
            next_offset = header.base_offset      # where the batches before `pos` end
        if header.last_offset >= max_offset or pos + header.size > limit:
            break
        pos += header.size
        end, next_offset = pos, header.next_offset
    if next_offset is None:
        raise CorruptRecordError(f"offset index entry points past the end ({size} bytes)",
                                 file=seg.log_path, position=pos)
    return start, end, next_offset
