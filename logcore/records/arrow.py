"""batches_to_arrow: a run of RecordBatch v2 bytes straight into Arrow columns.

The Spark source's hot path. Python walks the batch headers (CRC check, filters, decompression
through the codec libraries); the C extension `_fastcodec` scans every record and fills
Arrow-layout buffers, which become pyarrow arrays without a copy.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa

from logcore.errors import CorruptRecordError
from logcore.records import _fastcodec
from logcore.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    F_BASE_OFFSET,
    F_LAST_DELTA,
    batch_fields,
)
from logcore.records.compression import decompress

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

_BASE_FIELDS = [
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
]
SCHEMA = pa.schema(_BASE_FIELDS)
SCHEMA_WITH_HEADERS = pa.schema(_BASE_FIELDS + [pa.field("headers", HEADERS_TYPE)])

INT64_MAX = (1 << 63) - 1
CRC_COVERED_FROM = ATTRIBUTES_OFFSET    # a batch's CRC covers its bytes from the attributes on

# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, (epoch), (baseSequence), recordsCount


def _aborted_lookup(aborted: Iterable[tuple[int, int, int]] | None) -> dict[int, list[tuple[int, int]]]:
    ranges: dict[int, list[tuple[int, int]]] = {}
    for producer_id, first_offset, last_offset in aborted or ():
        ranges.setdefault(producer_id, []).append((first_offset, last_offset))
    return ranges


def _binary(type_, length: int, validity, offsets, data, null_count: int) -> pa.Array:
    return pa.Array.from_buffers(type_, length,
                                 [pa.py_buffer(validity) if null_count else None,
                                  pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=null_count)


def batches_to_arrow(data, *, min_offset: int = 0, max_offset: int = INT64_MAX, include_headers: bool = False,
                     aborted: Iterable[tuple[int, int, int]] | None = None, source: str | None = None,
                     base_position: int = 0) -> pa.RecordBatch:
    """Decode every complete data batch in `data` into one Arrow record batch.

    Control batches are skipped, compressed batches decompressed. Records with offsets outside
    [min_offset, max_offset) are dropped; transactional batches of a producer whose base offset lies
    in one of its `aborted` (producer_id, first_offset, last_offset) ranges are dropped. Bad bytes
    raise CorruptRecordError(file=source, position=base_position + batch position).
    """
    return decode_batches(data, min_offset=min_offset, max_offset=max_offset, include_headers=include_headers,
                          aborted=aborted, source=source, base_position=base_position).batch


@dataclass(frozen=True)
class DecodedBatches:
    """What `decode_batches` found in a run of batches."""
    batch: pa.RecordBatch       # the records kept, as batches_to_arrow gives them
    next_offset: int            # the offset after the last complete batch (control ones too), -1 if none


def decode_batches(data, *, min_offset: int = 0, max_offset: int = INT64_MAX, include_headers: bool = False,
                   aborted: Iterable[tuple[int, int, int]] | None = None, source: str | None = None,
                   base_position: int = 0, allocate: Callable[[int], object] | None = None) -> DecodedBatches:
    """batches_to_arrow, plus where the next read starts: one scan of the headers for both.

    `allocate(n)` gives the column buffers (a writable buffer of at least n bytes that does not
    move), by default from Arrow's memory pool; a `BufferRecycler` reuses buffers whose arrays
    are gone.
    """
    cols, next_offset = _decode_columns(data, min_offset=min_offset, max_offset=max_offset,
                                        include_headers=include_headers, aborted=aborted, source=source,
                                        base_position=base_position, allocate=allocate)
    return DecodedBatches(_to_record_batch(cols, include_headers), next_offset)


@dataclass(frozen=True)
class RecordColumns:
    """What validating a produced batch needs, without building Arrow arrays."""
    rows: int
    offsets: np.ndarray          # int64
    key_nulls: int
    key_validity: bytes | None   # Arrow validity bitmap of the keys (None when no null)
    timestamps_us: object        # int64 microseconds, the decoder's buffer

    @property
    def timestamps_ms(self) -> np.ndarray:
        """int64 per row (computed on demand: most topics set no timestamp bounds)."""
        return np.frombuffer(self.timestamps_us, dtype=np.int64, count=self.rows) // 1000


def record_columns(data, *, source: str | None = None, base_position: int = 0,
                   max_inflated: int | None = None) -> RecordColumns:
    """Validate every record of the data batches in `data` (CRC, layout) and return key columns.

    The produce path uses this: full validation in C at a fraction of the cost of Arrow arrays.
    `max_inflated`: a compressed batch whose records inflate past this many bytes raises
    RecordTooLargeError as soon as the limit is passed (streamed inflation).
    """
    # Keys and values are validated but not copied: the produce path needs neither.
    cols, _next = _decode_columns(data, source=source, base_position=base_position, copy_data=False,
                                  max_inflated=max_inflated)
    rows, offsets, timestamps, _types, k_valid, _ko, _kd, k_nulls = cols[:8]
    return RecordColumns(rows, np.frombuffer(offsets, dtype=np.int64, count=rows),
                         k_nulls, bytes(k_valid) if k_nulls else None, timestamps)


def _decode_columns(data, *, min_offset: int = 0, max_offset: int = INT64_MAX, include_headers: bool = False,
                     aborted: Iterable[tuple[int, int, int]] | None = None, source: str | None = None,
                     base_position: int = 0, copy_data: bool = True,
                     allocate: Callable[[int], object] | None = None,
                     max_inflated: int | None = None) -> tuple[tuple, int]:
    """The C decoder's raw column buffers (see _to_record_batch for their layout) and the offset
    after the last complete batch of `data` (-1 when it holds none)."""
    aborted_ranges = _aborted_lookup(aborted)
    # Headers only here: the decoder checks each batch's CRC right before reading its records,
    # while its bytes are in cache (one pass over the window instead of two).
    fields = batch_fields(data, source=source, verify_crc=False, allow_partial_tail=True,
                          base_position=base_position)
    next_offset = int(fields[-1, F_BASE_OFFSET] + fields[-1, F_LAST_DELTA]) + 1 if len(fields) else -1
    sections = []
    positions = []
    # Filtered here rather than with numpy masks: most calls (a produced batch, a fetch) see
    # a handful of batches, where the masks' fixed cost dominates.
    for pos, size, base_offset, delta, max_ts, producer_id, attrs, base_ts, count in fields.tolist():
        crc_from = pos + CRC_COVERED_FROM
        wanted = not (attrs & CONTROL_MASK or base_offset + delta < min_offset or base_offset >= max_offset)
        if wanted and aborted_ranges and attrs & TRANSACTIONAL_MASK and producer_id in aborted_ranges:
            wanted = not any(first <= base_offset <= last for first, last in aborted_ranges[producer_id])
        ts_type = 1 if attrs & TIMESTAMP_TYPE_MASK else 0
        codec = attrs & COMPRESSION_MASK
        if not wanted:
            # Skipped batches (control, out of range, aborted) are CRC-checked all the same,
            # as Kafka's consumer checks every batch it fetches.
            sections.append((data, pos + size, pos + size, base_offset, 0, 0, 0, 0, crc_from))
        elif codec:
            batch_fields(memoryview(data)[pos:pos + size], source=source, verify_crc=True,
                         base_position=base_position + pos)
            try:
                raw = decompress(codec, memoryview(data)[pos + HEADER_SIZE:pos + size], max_inflated)
            except CorruptRecordError as exc:
                raise CorruptRecordError(exc.reason, file=source, position=base_position + pos) from exc
            sections.append((raw, 0, len(raw), base_offset, base_ts, max_ts, ts_type, count))
        else:
            sections.append((data, pos + HEADER_SIZE, pos + size, base_offset, base_ts, max_ts, ts_type, count,
                             crc_from))
        positions.append(pos)
    try:
        # Column buffers from Arrow's memory pool, which keeps freed memory for the next call:
        # fresh multi-MiB bytearrays would cost a page fault per 4 KiB written. Without the
        # keys and values (validation) the buffers are small, and bytearrays cost a fifth of
        # the nine pool calls.
        cols = _fastcodec.decode_sections(sections, min_offset, max_offset, include_headers,
                                          (allocate or pa.allocate_buffer) if copy_data else None, copy_data)
    except _fastcodec.RecordError as exc:
        index, record, message = exc.args
        raise CorruptRecordError(f"record {record}: {message}" if record >= 0 else message, file=source,
                                 position=base_position + positions[index]) from None
    return cols, next_offset


class BufferRecycler:
    """An `allocate` for decode_batches that hands out again the buffers no array uses any more.

    A reader that decodes window after window into short-lived Arrow batches (a Spark task hands
    each to Spark, which drops it after sending it) would otherwise get memory the allocator has
    returned to the system in between, and pay a zeroed page for every 4 KiB it writes. Holds at
    most `max_buffers` buffers and `max_bytes` bytes; a buffer still in use is never handed out.
    """

    def __init__(self, max_buffers: int = 32, max_bytes: int = 96 << 20):
        self.max_buffers = max_buffers
        self.max_bytes = max_bytes
        self._held: list[bytearray] = []
        self._lock = threading.Lock()

    def __call__(self, size: int) -> bytearray:
        with self._lock:
            held = self._held
            best = -1
            for i in range(len(held)):
                # In use while an Arrow buffer (through a memoryview) refers to it: then its
                # count is above the list's reference and getrefcount's own.
                if len(held[i]) >= size and sys.getrefcount(held[i]) <= 2 and (
                        best < 0 or len(held[i]) < len(held[best])):
                    best = i
            if best >= 0:
                return held[best]
            fresh = bytearray(size)
            held.append(fresh)
            self._trim()
            return fresh

    def _trim(self) -> None:
        """Forget the oldest buffers beyond the limits (ones still in use live on with their arrays)."""
        total = sum(len(b) for b in self._held)
        while self._held and (len(self._held) > self.max_buffers or total > self.max_bytes):
            total -= len(self._held.pop(0))


def _to_record_batch(cols: tuple, include_headers: bool) -> pa.RecordBatch:
    (rows, offsets, timestamps, ts_types, k_valid, k_offsets, k_data, k_nulls,
     v_valid, v_offsets, v_data, v_nulls, headers) = cols
    arrays = [
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(TIMESTAMP_TYPE, rows, [None, pa.py_buffer(timestamps)]),
        pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(ts_types)]),
        _binary(pa.binary(), rows, k_valid, k_offsets, k_data, k_nulls),
        _binary(pa.binary(), rows, v_valid, v_offsets, v_data, v_nulls),
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)
    (l_valid, l_offsets, l_nulls, h_rows, hk_offsets, hk_data, hv_valid, hv_offsets, hv_data, hv_nulls) = headers
    h_keys = _binary(pa.string(), h_rows, None, hk_offsets, hk_data, 0)
    h_values = _binary(pa.binary(), h_rows, hv_valid, hv_offsets, hv_data, hv_nulls)
    entries = pa.StructArray.from_arrays([h_keys, h_values], fields=list(HEADER_TYPE))
    arrays.append(pa.Array.from_buffers(HEADERS_TYPE, rows,
                                        [pa.py_buffer(l_valid) if l_nulls else None, pa.py_buffer(l_offsets)],
                                        null_count=l_nulls, children=[entries]))
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA_WITH_HEADERS)
