"""Arrow columns straight into RecordBatch v2 bytes: the Spark sink's hot path.

`encode_batches` cuts a run of rows (Arrow `binary` key and value columns, int64 millisecond
timestamps) into batches of at most `batch_bytes` of records (Kafka's producer `batch.size`) and
`max_records` records, and returns the batches' bytes. Records without headers are encoded by the
C extension `_fastcodec.encode_records` (no per-row Python); a chunk that holds headers goes
through the reference encoder of `batch.py`. The result is byte-for-byte what `build_batch` makes
from the same records.

`group_rows` groups the rows by partition for the encoder (Kafka's default partitioner is in
records/partitioner.py).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from logcore.errors import InvalidRecordError
from logcore.records import _fastcodec
from logcore.records.batch import (
    assemble_batch,
    encode_record,
)
from logcore.records.compression import Compression, codec_of, compress

# Bytes a record costs besides its key and value, used only to cut batches (upper bound for
# small records: length, attributes, timestamp and offset deltas, key/value lengths, headers).
_RECORD_OVERHEAD = 21

_SEQUENCE_WRAP = 1 << 31


def binary_parts(arr: pa.Array):
    """(offsets int32 numpy from row 0, data buffer, validity uint8 numpy or None) of a binary array."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.binary())
    if not pa.types.is_binary(arr.type):
        raise TypeError(f"expected a binary or string column, got {arr.type}")
    n = len(arr)
    bufs = arr.buffers()
    if bufs[1] is None:            # all-null array of length 0 or a null-typed array
        offsets = np.zeros(n + 1, dtype=np.int32)
    else:
        offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4)
    data = bufs[2] if bufs[2] is not None else b""
    valid = None
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False).view(np.uint8)
    return offsets, data, valid


def group_rows(parts: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): the row numbers grouped by partition, input order kept within each
    (int64), and where each partition's rows start (int64[count + 1]): partition p's rows are
    order[starts[p]:starts[p + 1]]. `parts` holds each row's partition, 0..count-1."""
    order, starts = _fastcodec.group_rows(np.ascontiguousarray(parts, dtype=np.int32), int(count))
    return np.frombuffer(order, dtype=np.int64), np.frombuffer(starts, dtype=np.int64)


def _has_headers(headers: pa.Array | None, start: int, end: int) -> bool:
    if headers is None:
        return False
    part = headers.slice(start, end - start)
    if part.null_count == len(part):
        return False
    lengths = pa.compute.list_value_length(part)
    return bool(pa.compute.max(lengths).as_py() or 0)


def _chunk_bounds(sizes: np.ndarray, batch_bytes: int, max_records: int | None) -> list[tuple[int, int]]:
    """Row ranges whose estimated record bytes stay within batch_bytes (at least one row each)."""
    n = len(sizes)
    bounds = []
    cum = np.cumsum(sizes, dtype=np.int64)
    start = 0
    base = 0
    while start < n:
        end = int(np.searchsorted(cum, base + batch_bytes, side="right"))
        end = max(end, start + 1)
        if max_records is not None:
            end = min(end, start + max_records)
        end = min(end, n)
        bounds.append((start, end))
        base = int(cum[end - 1])
        start = end
    return bounds


def encode_batches(keys: pa.Array, values: pa.Array, timestamps_ms: np.ndarray, *,
                   headers: pa.Array | None = None, compression: Compression | int = Compression.NONE,
                   compression_level: int | None = None, batch_bytes: int = 16384,
                   max_records: int | None = None, partition_leader_epoch: int = -1,
                   producer_id: int = -1, producer_epoch: int = -1,
                   base_sequence: int = -1) -> list[bytes]:
    """RecordBatch v2 batches (CreateTime, base offset 0) for the rows of these columns.

    keys / values: Arrow binary or string arrays (nulls allowed); timestamps_ms: int64 per row;
    headers: optional list<struct<key string, value binary>> array. Offsets inside each batch
    start at 0: the log assigns real ones when the batch is appended.
    An idempotent producer gives its id, epoch and the sequence number of the first row: each
    batch's baseSequence is that of its first row (wrapping after 2**31 - 1, as Kafka's).
    """
    n = len(values)
    if len(keys) != n or len(timestamps_ms) != n or (headers is not None and len(headers) != n):
        raise InvalidRecordError("key, value, timestamp and header columns differ in length")
    if n == 0:
        return []
    if batch_bytes < 1:
        raise InvalidRecordError(f"batch_bytes must be >= 1, got {batch_bytes}")
    codec = codec_of(compression)
    ko, kd, kv = binary_parts(keys)
    vo, vd, vv = binary_parts(values)
    ts = np.ascontiguousarray(timestamps_ms, dtype=np.int64)
    sizes = (np.diff(ko).astype(np.int64) + np.diff(vo).astype(np.int64) + _RECORD_OVERHEAD)
    if headers is not None and headers.null_count < n:
        # headers count toward the batch size too (rarely used: estimate from the flattened values)
        lengths = pa.compute.list_value_length(headers).fill_null(0).to_numpy(zero_copy_only=False)
        sizes += lengths.astype(np.int64) * 16
    out = []
    attributes = int(codec)
    for start, end in _chunk_bounds(sizes, batch_bytes, max_records):
        base_ts = int(ts[start])
        if _has_headers(headers, start, end):
            section = _encode_python(keys, values, ts, headers, start, end, base_ts)
        else:
            section = _fastcodec.encode_records(n, ko, kd, kv, vo, vd, vv, ts, base_ts, start, end)
        if codec is not Compression.NONE:
            section = compress(codec, section, compression_level)
        out.append(assemble_batch(section, base_offset=0, attributes=attributes, last_offset_delta=end - start - 1,
                                  base_timestamp=base_ts, max_timestamp=int(ts[start:end].max()),
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  base_sequence=-1 if base_sequence < 0 else (base_sequence + start) % _SEQUENCE_WRAP,
                                  records_count=end - start, partition_leader_epoch=partition_leader_epoch))
    return out


def encode_batch_run(keys: pa.Array, values: pa.Array, timestamps_ms: np.ndarray, *,
                     rows: np.ndarray | None = None, headers: pa.Array | None = None,
                     compression: Compression | int = Compression.NONE, compression_level: int | None = None,
                     batch_bytes: int = 16384, max_records: int | None = None,
                     partition_leader_epoch: int = -1, producer_id: int = -1, producer_epoch: int = -1,
                     base_sequence: int = -1) -> tuple[bytes, int]:
    """The batches `encode_batches` makes, concatenated, and how many there are.

    `rows` (int64 row numbers) picks and orders the rows to encode without copying the columns:
    the result equals `encode_batches` of the columns taken in that order. Uncompressed rows
    without headers are encoded, batch headers and CRCs included, in one C call.
    """
    n = len(values)
    if len(keys) != n or len(timestamps_ms) != n or (headers is not None and len(headers) != n):
        raise InvalidRecordError("key, value, timestamp and header columns differ in length")
    codec = codec_of(compression)
    if codec is Compression.NONE and (headers is None or headers.null_count == n
                                      or not _has_headers(headers, 0, n)):
        ko, kd, kv = binary_parts(keys)
        vo, vd, vv = binary_parts(values)
        ts = np.ascontiguousarray(timestamps_ms, dtype=np.int64)
        order = None if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
        if batch_bytes < 1:
            raise InvalidRecordError(f"batch_bytes must be >= 1, got {batch_bytes}")
        return _fastcodec.encode_batch_run(n, ko, kd, kv, vo, vd, vv, ts, order, batch_bytes,
                                           max_records or 0, partition_leader_epoch, producer_id,
                                           producer_epoch, base_sequence)
    if rows is not None:
        idx = pa.array(np.asarray(rows, dtype=np.int64))
        keys, values = keys.take(idx), values.take(idx)
        headers = headers.take(idx) if headers is not None else None
        timestamps_ms = np.asarray(timestamps_ms)[np.asarray(rows, dtype=np.int64)]
    batches = encode_batches(keys, values, timestamps_ms, headers=headers, compression=codec,
                             compression_level=compression_level, batch_bytes=batch_bytes,
                             max_records=max_records, partition_leader_epoch=partition_leader_epoch,
                             producer_id=producer_id, producer_epoch=producer_epoch,
                             base_sequence=base_sequence)
    return b"".join(batches), len(batches)


def encode_batch_run_into(out: bytearray, pos: int, keys: pa.Array, values: pa.Array,
                          timestamps_ms: np.ndarray, *, rows: np.ndarray | None = None,
                          headers: pa.Array | None = None, compression: Compression | int = Compression.NONE,
                          compression_level: int | None = None, batch_bytes: int = 16384,
                          max_records: int | None = None, partition_leader_epoch: int = -1,
                          producer_id: int = -1, producer_epoch: int = -1,
                          base_sequence: int = -1) -> tuple[int, int]:
    """`encode_batch_run` into a writable buffer at `pos`, saving an allocation (and its page
    faults) per call: returns (size, batch count), or (size, -1) with nothing written when the
    batches need more than the `len(out) - pos` bytes there."""
    n = len(values)
    codec = codec_of(compression)
    fast = codec is Compression.NONE and (headers is None or headers.null_count == n
                                          or not _has_headers(headers, 0, n))
    if not fast or len(keys) != n or len(timestamps_ms) != n:
        data, count = encode_batch_run(
            keys, values, timestamps_ms, rows=rows, headers=headers, compression=codec,
            compression_level=compression_level, batch_bytes=batch_bytes, max_records=max_records,
            partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
            producer_epoch=producer_epoch, base_sequence=base_sequence)
        if len(out) - pos < len(data):
            return len(data), -1
        out[pos:pos + len(data)] = data
        return len(data), count
    if batch_bytes < 1:
        raise InvalidRecordError(f"batch_bytes must be >= 1, got {batch_bytes}")
    ko, kd, kv = binary_parts(keys)
    vo, vd, vv = binary_parts(values)
    ts = np.ascontiguousarray(timestamps_ms, dtype=np.int64)
    order = None if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
    return _fastcodec.encode_batch_run(n, ko, kd, kv, vo, vd, vv, ts, order, batch_bytes, max_records or 0,
                                       partition_leader_epoch, producer_id, producer_epoch, base_sequence,
                                       out, pos)


def plain_columns(keys: pa.Array, values: pa.Array, timestamps_ms: np.ndarray,
                  headers: pa.Array | None = None, compression: Compression | int = Compression.NONE):
    """Rows that encode without a codec and without record headers, as `encode_plain_run_into`
    takes them: their buffers, taken out of the Arrow arrays once for several runs over the same
    rows (one per target partition). None when the rows need `encode_batch_run_into`."""
    n = len(values)
    if codec_of(compression) is not Compression.NONE or len(keys) != n or len(timestamps_ms) != n:
        return None
    if headers is not None and headers.null_count != n and _has_headers(headers, 0, n):
        return None
    ko, kd, kv = binary_parts(keys)
    vo, vd, vv = binary_parts(values)
    return n, ko, kd, kv, vo, vd, vv, np.ascontiguousarray(timestamps_ms, dtype=np.int64)


def encode_plain_run_into(columns: tuple, out, pos: int, *, rows: np.ndarray | None = None,
                          batch_bytes: int = 16384, max_records: int | None = None,
                          fields_base: int = 0) -> tuple[int, int, bytes | None]:
    """`encode_batch_run_into` for `plain_columns`, also returning the batches' `batch_fields`
    rows (as bytes of native int64, each position fields_base + its offset in the run), so that
    a caller need not scan what it just wrote: (size, batch count, fields), or (size, -1, None)
    with nothing written when the batches need more than the `len(out) - pos` bytes there."""
    if batch_bytes < 1:
        raise InvalidRecordError(f"batch_bytes must be >= 1, got {batch_bytes}")
    order = rows
    if rows is not None and not (type(rows) is np.ndarray and rows.dtype == np.int64 and rows.flags.c_contiguous):
        order = np.ascontiguousarray(rows, dtype=np.int64)
    return _fastcodec.encode_batch_run(*columns, order, batch_bytes, max_records or 0, -1, -1, -1, -1,
                                       out, pos, max(0, fields_base))


def _encode_python(keys, values, ts, headers, start: int, end: int, base_ts: int) -> bytes:
    """The records section of rows [start, end) through the reference encoder (rows with headers)."""
    ks = keys.slice(start, end - start).to_pylist()
    vs = values.slice(start, end - start).to_pylist()
    hs = headers.slice(start, end - start).to_pylist()
    parts = []
    for i, (k, v, h) in enumerate(zip(ks, vs, hs)):
        if isinstance(k, str):
            k = k.encode()
        if isinstance(v, str):
            v = v.encode()
        hdrs = tuple((e["key"], e["value"]) for e in h) if h else ()
        parts.append(encode_record(i, int(ts[start + i]) - base_ts, k, v, hdrs))
    return b"".join(parts)


__all__ = ["encode_batch_run", "encode_batches", "encode_plain_run_into", "group_rows",
           "plain_columns"]
