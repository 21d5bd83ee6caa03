"""RecordBatch v2: the 61-byte header, building batches, walking and decoding them, in-place edits.

Layout and rules: Kafka's DefaultRecordBatch / DefaultRecord (see the storage reference, section 1).
Every error about the bytes of a batch is a CorruptRecordError naming the source and the byte
position of the batch (base_position + its offset in the buffer).
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Iterator

from logcore.errors import CorruptRecordError, InvalidRecordError, UnsupportedMagicError
from logcore.records.compression import Compression, codec_of, compress, decompress
from logcore.records.control import ControlType, EndTransactionMarker
from logcore.records.crc import crc32c
from logcore.records.varint import decode_varint, decode_varlong, encode_varint, encode_varlong

MAGIC = 2
LOG_OVERHEAD = 12              # baseOffset + batchLength
HEADER_SIZE = 61               # RECORD_BATCH_OVERHEAD
MIN_ENTRY_SIZE = 14            # smallest legal batchLength field (legacy RECORD_OVERHEAD_V0)
HEADER_PROBE = 17              # bytes needed to read baseOffset, batchLength and magic

PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int                      # ms
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    sequence: int = -1                  # baseSequence + offsetDelta, -1 when none


def _wrap_sequence(base: int, delta: int) -> int:
    # Kafka's DefaultRecordBatch.incrementSequence: INT_MAX wraps to 0.
    if base > INT32_MAX - delta:
        return delta - (INT32_MAX - base) - 1
    return base + delta


@dataclass(frozen=True)
class BatchHeader:
    """Every field of the 61-byte header, in layout order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        return codec_of(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        return self.base_timestamp if self.has_delete_horizon else -1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return _wrap_sequence(self.base_sequence, self.last_offset_delta)


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """The header at `pos`; no validation beyond there being 61 bytes."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"need {HEADER_SIZE} bytes for a batch header, have {len(buf) - pos}",
                                 position=pos)
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


# ---------------------------------------------------------------------------------------- building

def _as_bytes(value, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidRecordError(f"record {what} must be bytes or None, got {type(value).__name__}")


def _record_fields(item) -> tuple[bytes | None, bytes | None, tuple, int | None]:
    if isinstance(item, tuple):
        if len(item) != 4:
            raise InvalidRecordError(f"a record tuple is (key, value, headers, timestamp_ms), got {len(item)} items")
        key, value, headers, timestamp = item
    else:
        key, value, headers, timestamp = item.key, item.value, item.headers, item.timestamp
    return _as_bytes(key, "key"), _as_bytes(value, "value"), tuple(headers or ()), timestamp


def _encode_headers(headers: tuple) -> bytes:
    parts = [encode_varint(len(headers))]
    for header in headers:
        h_key, h_value = header
        if h_key is None:
            raise InvalidRecordError("record header keys must not be null")
        key_bytes = h_key.encode("utf-8") if isinstance(h_key, str) else bytes(h_key)
        parts.append(encode_varint(len(key_bytes)))
        parts.append(key_bytes)
        h_value = _as_bytes(h_value, "header value")
        if h_value is None:
            parts.append(b"\x01")  # zigzag(-1)
        else:
            parts.append(encode_varint(len(h_value)))
            parts.append(h_value)
    return b"".join(parts)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: tuple) -> bytes:
    """One DefaultRecord (its length varint first), for the records section of a v2 batch."""
    body = [b"\x00", encode_varlong(timestamp_delta), encode_varint(offset_delta)]
    for field in (key, value):
        if field is None:
            body.append(b"\x01")
        else:
            body.append(encode_varint(len(field)))
            body.append(field)
    body.append(_encode_headers(headers) if headers else b"\x00")
    payload = b"".join(body)
    return encode_varint(len(payload)) + payload


def assemble_batch(records_section: bytes, *, base_offset: int, attributes: int, last_offset_delta: int,
                   base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
                   base_sequence: int, records_count: int, partition_leader_epoch: int) -> bytes:
    """A whole v2 batch: the 61-byte header (CRC computed here) in front of a records section
    as given (already compressed when `attributes` names a codec)."""
    out = bytearray(HEADER_SIZE)
    out += records_section
    _HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0,
                      attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                      producer_epoch, base_sequence, records_count)
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_batch(records: Iterable, *, base_offset: int = 0, compression: Compression | int = Compression.NONE,
                compression_level: int | None = None,
                timestamp_type: TimestampType = TimestampType.CREATE_TIME, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, is_transactional: bool = False,
                partition_leader_epoch: int = -1, log_append_time: int | None = None,
                delete_horizon_ms: int | None = None) -> bytes:
    """One RecordBatch v2 from (key, value, headers, timestamp_ms) tuples or Record-like objects.

    offsetDelta is the index in the list; baseTimestamp is the first record's timestamp (or the
    delete horizon when given, which then sets the delete-horizon attribute bit). A timestamp of
    None means now. LogAppendTime batches get maxTimestamp = log_append_time (default now).
    """
    codec = codec_of(compression)
    items = [_record_fields(item) for item in records]
    if not items:
        raise InvalidRecordError("a record batch needs at least one record")
    if is_transactional and producer_id < 0:
        raise InvalidRecordError("a transactional batch needs a producer id >= 0")
    now_ms = None
    timestamps = []
    for _, _, _, ts in items:
        if ts is None:
            if now_ms is None:
                now_ms = int(time.time() * 1000)
            ts = now_ms
        timestamps.append(int(ts))
    base_timestamp = timestamps[0] if delete_horizon_ms is None else int(delete_horizon_ms)
    section = b"".join(
        encode_record(i, ts - base_timestamp, key, value, headers)
        for i, ((key, value, headers, _), ts) in enumerate(zip(items, timestamps)))
    attributes = int(codec)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
        max_timestamp = int(time.time() * 1000) if log_append_time is None else int(log_append_time)
    else:
        max_timestamp = max(timestamps)
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    if codec is not Compression.NONE:
        section = compress(codec, section, compression_level)
    return assemble_batch(section, base_offset=base_offset, attributes=attributes, last_offset_delta=len(items) - 1,
                          base_timestamp=base_timestamp, max_timestamp=max_timestamp, producer_id=producer_id,
                          producer_epoch=producer_epoch, base_sequence=base_sequence, records_count=len(items),
                          partition_leader_epoch=partition_leader_epoch)


def recompress_batch(batch, codec: Compression | int, level: int | None = None) -> bytearray:
    """A whole v2 batch with its records section in `codec` (at `level`), every other field kept
    (the records themselves, offsets and timestamps included): what Kafka's broker stores of a
    produced batch whose codec is not the topic's compression.type. The batch is checked already
    (its decompression bounded by the caller)."""
    h = parse_header(batch)
    codec = codec_of(codec)
    section = memoryview(batch)[HEADER_SIZE:h.size]
    old = h.attributes & COMPRESSION_MASK
    raw = decompress(old, section) if old else section
    new = compress(codec, raw, level) if codec is not Compression.NONE else bytes(raw)
    return bytearray(assemble_batch(
        new, base_offset=h.base_offset, attributes=(h.attributes & ~COMPRESSION_MASK) | int(codec),
        last_offset_delta=h.last_offset_delta, base_timestamp=h.base_timestamp, max_timestamp=h.max_timestamp,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        records_count=h.records_count, partition_leader_epoch=h.partition_leader_epoch))


def build_control_batch(control_type: ControlType | int, *, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int = 0, base_offset: int = 0, timestamp_ms: int,
                        partition_leader_epoch: int = -1) -> bytes:
    """A transactional control batch holding one end-transaction marker (ABORT or COMMIT)."""
    marker = EndTransactionMarker(ControlType(control_type), coordinator_epoch)
    section = encode_record(0, 0, marker.key(), marker.value(), ())
    return assemble_batch(section, base_offset=base_offset, attributes=TRANSACTIONAL_MASK | CONTROL_MASK,
                          last_offset_delta=0, base_timestamp=timestamp_ms, max_timestamp=timestamp_ms,
                          producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                          records_count=1, partition_leader_epoch=partition_leader_epoch)


# ----------------------------------------------------------------------------------------- walking

def _scan(buf, start: int, source: str | None, base_position: int, verify_crc: bool,
          allow_partial_tail: bool) -> Iterator[tuple[int, int]]:
    """Yield (position, size) of each complete, valid batch; the shared core of iter_batches."""
    end = len(buf)
    pos = start
    unpack_i32 = _I32.unpack_from
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_PROBE:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"partial batch: only {remaining} bytes left, need {HEADER_PROBE} to read a "
                                     "batch header", file=source, position=base_position + pos)
        (batch_length,) = unpack_i32(buf, pos + 8)
        if batch_length < MIN_ENTRY_SIZE:
            raise CorruptRecordError(f"batch length {batch_length} is smaller than the minimum {MIN_ENTRY_SIZE}",
                                     file=source, position=base_position + pos)
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"partial batch: declares {size} bytes but only {remaining} remain",
                                     file=source, position=base_position + pos)
        magic = buf[pos + MAGIC_OFFSET]
        if magic != MAGIC:
            if magic in (0, 1):
                raise UnsupportedMagicError(f"legacy message format (magic {magic}) is not supported; "
                                            "seglog reads RecordBatch v2 (magic 2) only",
                                            file=source, position=base_position + pos)
            raise CorruptRecordError(f"unknown record batch magic {magic}", file=source,
                                     position=base_position + pos)
        if size < HEADER_SIZE:
            raise CorruptRecordError(f"batch size {size} is smaller than the {HEADER_SIZE}-byte header",
                                     file=source, position=base_position + pos)
        if verify_crc:
            (stored,) = _U32.unpack_from(buf, pos + CRC_OFFSET)
            actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])
            if stored != actual:
                raise CorruptRecordError(f"CRC mismatch: stored {stored:#010x}, computed {actual:#010x}",
                                         file=source, position=base_position + pos)
        yield pos, size
        pos += size


def iter_batches(buf, start: int = 0, *, source: str | None = None, base_position: int = 0,
                 verify_crc: bool = True, allow_partial_tail: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position in buf, header) for each complete batch from `start`.

    A trailing partial batch (fewer than 17 bytes, or a declared size past the end) ends the
    iteration quietly when allow_partial_tail, else raises CorruptRecordError.
    """
    unpack = _HEADER.unpack_from
    for pos, _ in _scan(buf, start, source, base_position, verify_crc, allow_partial_tail):
        yield pos, BatchHeader(*unpack(buf, pos))


# Columns of batch_fields()
F_POSITION, F_SIZE, F_BASE_OFFSET, F_LAST_DELTA, F_MAX_TIMESTAMP, F_PRODUCER_ID, F_ATTRIBUTES, \
    F_BASE_TIMESTAMP, F_RECORDS = range(9)


def batch_fields(buf, *, source: str | None = None, verify_crc: bool = True, allow_partial_tail: bool = False,
                 base_position: int = 0):
    """The headers of a buffer of batches as an int64 array, one row per batch, with the columns
    F_POSITION, F_SIZE, F_BASE_OFFSET, F_LAST_DELTA, F_MAX_TIMESTAMP, F_PRODUCER_ID,
    F_ATTRIBUTES, F_BASE_TIMESTAMP, F_RECORDS.

    Checked as `iter_batches` checks (length, magic, CRC), in C and without the GIL; a partial
    last batch ends the scan when allow_partial_tail, else it is an error."""
    import numpy as np

    import logcore.records._fastcodec as _fastcodec

    try:
        raw = _fastcodec.scan_batches(buf, verify_crc, allow_partial_tail)
    except _fastcodec.RecordError as exc:
        message, position = exc.args[2], base_position + exc.args[1]
        cls = UnsupportedMagicError if message.startswith("legacy message format") else CorruptRecordError
        raise cls(message, file=source, position=position) from None
    return np.frombuffer(raw, dtype=np.int64).reshape(-1, 9)


def header_fields(buf) -> tuple:
    """The 13 header fields of the batch at the start of `buf` as a tuple, in BatchHeader's
    order (no dataclass: the produce path checks a few fields before it needs one)."""
    return _HEADER.unpack_from(buf, 0)


def check_produced_records(buf, *, source: str | None = None) -> tuple[int, int, int, int, int] | None:
    """Validate exactly one uncompressed batch as a produce request brings it: magic, CRC and
    every record (decode_records' rules), in one C call that builds nothing.

    Returns (first record whose offset delta is not its index or -1, that delta, first record
    with a null key or -1, smallest record timestamp, largest record timestamp), or None for a
    compressed batch (validate it through `logcore.records.arrow.record_columns`). The caller
    checks that `buf` holds exactly the batch its header declares."""
    # Imported here so that the package loads without the C extension until it is needed (the
    # plain form: `from logcore.records import` costs an import-system call per batch).
    import logcore.records._fastcodec as _fastcodec

    try:
        return _fastcodec.check_produced_batch(buf)
    except _fastcodec.RecordError as exc:
        section, where, message = exc.args
        if section < 0:
            cls = UnsupportedMagicError if message.startswith("legacy message format") else CorruptRecordError
            raise cls(message, file=source, position=0) from None
        raise CorruptRecordError(f"record {where}: {message}", file=source, position=0) from None


def check_inflated_records(raw, count: int, base_timestamp: int, max_timestamp: int, log_append_time: bool, *,
                           source: str | None = None) -> tuple[int, int, int, int, int]:
    """check_produced_records' checks and answer for a compressed batch's records once inflated
    (`raw`), with the header fields they depend on; its header and CRC are checked already."""
    import logcore.records._fastcodec as _fastcodec

    try:
        return _fastcodec.check_inflated_records(raw, count, base_timestamp, max_timestamp, log_append_time)
    except _fastcodec.RecordError as exc:
        _section, where, message = exc.args
        raise CorruptRecordError(f"record {where}: {message}", file=source, position=0) from None


def records_section(buf, pos: int, header: BatchHeader, *, source: str | None = None,
                    base_position: int = 0):
    """The (decompressed) record bytes of the batch at `pos`, as a buffer."""
    view = memoryview(buf)[pos + HEADER_SIZE:pos + header.size]
    codec_id = header.attributes & COMPRESSION_MASK
    if codec_id == 0:
        return view
    try:
        return decompress(codec_id, view)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, file=source, position=base_position + pos) from exc


# ---------------------------------------------------------------------------------------- decoding

class _Truncated(Exception):
    """A field runs past the end of its record; reported as a CorruptRecordError."""


def _wrap64(value: int) -> int:
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    return ((value - _INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + _INT64_MIN


def decode_records(buf, pos: int, header: BatchHeader | None = None, *, source: str | None = None,
                   base_position: int = 0, verify_crc: bool = True) -> list[Record]:
    """All records of the batch at `pos`, fully validated (record lengths, header counts, no trailing bytes).

    The reference decoder: plain Python, used by tools and tests; the Arrow path is in C.
    """
    where = {"file": source, "position": base_position + pos}
    if header is None or verify_crc:
        checked = next(_scan(buf, pos, source, base_position, verify_crc, False), None)
        if checked is None:
            raise CorruptRecordError("no batch at this position", **where)
        if header is None:
            header = parse_header(buf, pos)
    data = records_section(buf, pos, header, source=source, base_position=base_position)
    end = len(data)
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    base_sequence = header.base_sequence
    count = header.records_count
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}", **where)
    records: list[Record] = []
    p = 0
    index = 0
    try:
        for index in range(count):
            # Single-byte varints (the common case) are decoded inline; records.varint does the rest.
            b = data[p] if p < end else 0x80
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                length, p = decode_varint(data, p, end)
            if length < 0 or p + length > end:
                raise _Truncated(f"record length {length} does not fit the {end - p} bytes left")
            rec_end = p + length
            p += 1  # attributes: unused
            b = data[p] if p < rec_end else 0x80
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                ts_delta, p = decode_varlong(data, p, rec_end)
            b = data[p] if p < rec_end else 0x80
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                offset_delta, p = decode_varint(data, p, rec_end)
            fields = []
            for _ in range(2):  # key, value
                b = data[p] if p < rec_end else 0x80
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    n, p = decode_varint(data, p, rec_end)
                if n == -1:
                    fields.append(None)
                    continue
                if n < -1 or p + n > rec_end:
                    raise _Truncated(f"field length {n} does not fit the record")
                fields.append(bytes(data[p:p + n]))
                p += n
            b = data[p] if p < rec_end else 0x80
            if b < 0x80:
                header_count = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                header_count, p = decode_varint(data, p, rec_end)
            if header_count < 0:
                raise _Truncated(f"negative header count {header_count}")
            if header_count > rec_end - p:
                raise _Truncated(f"header count {header_count} is larger than the {rec_end - p} bytes left")
            headers = []
            for _ in range(header_count):
                n, p = decode_varint(data, p, rec_end)
                if n < 0 or p + n > rec_end:
                    raise _Truncated(f"header key length {n} is negative or does not fit the record")
                h_key = bytes(data[p:p + n]).decode("utf-8")
                p += n
                n, p = decode_varint(data, p, rec_end)
                if n == -1:
                    headers.append((h_key, None))
                    continue
                if n < -1 or p + n > rec_end:
                    raise _Truncated(f"header value length {n} does not fit the record")
                headers.append((h_key, bytes(data[p:p + n])))
                p += n
            if p != rec_end:
                raise _Truncated(f"record declares {length} bytes but its fields use {length - (rec_end - p)}")
            if log_append_time is None:
                timestamp = base_timestamp + ts_delta
                if not _INT64_MIN <= timestamp <= _INT64_MAX:
                    timestamp = _wrap64(timestamp)
            else:
                timestamp = log_append_time
            offset = base_offset + offset_delta
            if not _INT64_MIN <= offset <= _INT64_MAX:
                offset = _wrap64(offset)
            sequence = _wrap_sequence(base_sequence, offset_delta) if base_sequence >= 0 else -1
            records.append(Record(offset, timestamp, fields[0], fields[1], tuple(headers), sequence))
    except (_Truncated, ValueError, IndexError) as exc:  # ValueError: a varint (records.varint), UTF-8

        raise CorruptRecordError(f"record {index}: {exc}", **where) from None
    if p != end:
        raise CorruptRecordError(f"{end - p} trailing bytes after the last of {count} records", **where)
    return records


# -------------------------------------------------------------------------- search by timestamp
# ListOffsets by timestamp answers the first record (offset order) whose timestamp reaches the
# target, at or above a starting offset (the log start). Local and remote segments share this.

def may_hold_timestamp(header: BatchHeader, timestamp: int, starting_offset: int) -> bool:
    """Whether the batch can hold the answer: a data batch whose max timestamp reaches the
    target and whose last offset is not below the starting offset (control batches hold no
    records a consumer sees)."""
    return (not header.is_control and header.max_timestamp >= timestamp
            and header.last_offset >= starting_offset)


def first_record_at_or_after(buf, pos: int, timestamp: int, starting_offset: int, *,
                             source: str | None = None,
                             base_position: int = 0) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of the batch at `pos` with timestamp >= the
    target and offset >= starting_offset; None when it has none. The batch is fully checked."""
    for record in decode_records(buf, pos, source=source, base_position=base_position):
        if record.timestamp >= timestamp and record.offset >= starting_offset:
            return record.offset, record.timestamp
    return None


# ---------------------------------------------------------------------------------------- in place

def set_base_offset(buf, base_offset: int, pos: int = 0) -> None:
    """Assign offsets by rewriting baseOffset (outside the CRC, so the CRC stays valid)."""
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf, epoch: int, pos: int = 0) -> None:
    """Stamp the partitionLeaderEpoch (outside the CRC)."""
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf, timestamp_ms: int, pos: int = 0) -> None:
    """Turn the batch into LogAppendTime with maxTimestamp = timestamp_ms, recomputing the CRC."""
    (attributes,) = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    (batch_length,) = _I32.unpack_from(buf, pos + 8)
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    end = pos + batch_length + LOG_OVERHEAD
    _U32.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:end]))
