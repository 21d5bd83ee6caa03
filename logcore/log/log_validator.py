"""Validation of client-built batches before they are appended (Kafka's LogValidator): size,
record count, sequence, CRC, offsets deltas, keys on compacted topics, timestamps.

`LogValidator`, one per `Log` (its topic, partition and config), called by the leader's append.
"""
from __future__ import annotations

import numpy as np

from logcore.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from logcore.errors import RejectedRecordsError
from logcore.records.batch import (COMPRESSION_MASK, CONTROL_MASK, HEADER_SIZE, LOG_OVERHEAD,
                                   TIMESTAMP_TYPE_MASK, check_inflated_records, check_produced_records,
                                   header_fields)
from logcore.records.arrow import record_columns
from logcore.records.compression import decompress

# A produced batch's compressed records may inflate to at most this many times the topic's
# max.message.bytes (which Kafka applies to the compressed batch); past it the batch is refused
# with MESSAGE_TOO_LARGE, the error a Java producer answers by splitting the batch.
MAX_INFLATION = 32

# ... of which the broker's event loop inflates at most this much (the rest: a worker thread).
ON_LOOP_INFLATION = 256 * 1024


def _null_key_rows(columns) -> list[int]:
    """Row numbers of the records without a key (from a batch's record_columns)."""
    valid = np.unpackbits(np.frombuffer(columns.key_validity, dtype=np.uint8), bitorder="little")
    return np.flatnonzero(valid[:columns.rows] == 0).tolist()


class _WouldBlock(Exception):
    """append_and_commit_nowait reached a batch that would roll a segment or fsync."""


class LogValidator:
    """The checks of a client-built batch (Kafka's LogValidator), by one partition's config."""

    def __init__(self, topic: str, partition: int, config):
        self.topic = topic
        self.partition = partition
        self.config = config
        # Hot-path copies of the config (read on every append).
        self._max_message_bytes = config.max_message_bytes
        self._compact = config.compact
        self._before_max_ms = config.message_timestamp_before_max_ms
        self._after_max_ms = config.message_timestamp_after_max_ms

    def validate(self, data: bytearray, now: int, *, nonblocking: bool = False) -> tuple:
        """Every check of a client-built batch; returns its header fields (BatchHeader's order).
        `nonblocking` (the broker's event loop): raises _WouldBlock, having changed nothing,
        rather than inflate a large compressed batch here."""
        source = f"{self.topic}-{self.partition} append"
        if len(data) < HEADER_SIZE:
            raise CorruptRecordError(f"{len(data)} bytes is shorter than a batch header", file=source,
                                     position=0)
        fields = header_fields(data)
        (_base_offset, batch_length, _epoch, _magic, _crc, attributes, last_offset_delta, base_ts,
         max_ts, producer_id, _producer_epoch, base_sequence, records_count) = fields
        size = batch_length + LOG_OVERHEAD
        if size != len(data):
            raise InvalidRecordError(
                f"an append takes exactly one whole batch: the batch declares {size} bytes"
                f" but {len(data)} were given")
        max_bytes = self._max_message_bytes
        if size > max_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_bytes}")
        if attributes & CONTROL_MASK:
            raise InvalidRecordError("clients may not append control batches")
        if records_count <= 0 or records_count != last_offset_delta + 1:
            raise InvalidRecordError(
                f"batch record count {records_count} does not match lastOffsetDelta {last_offset_delta}")
        if producer_id >= 0 and base_sequence < 0:
            raise InvalidRecordError(f"producer {producer_id} sent a batch without a sequence number")
        # Magic, CRC and every record in one C call (the rules of decode_records).
        checked = check_produced_records(data, source=source)
        if checked is None:               # compressed: inflated, then the same checks in C
            checked = self._check_inflated(data, attributes, records_count, base_ts, max_ts, source,
                                           nonblocking)
        bad, delta, null_key, min_ts, max_ts = checked
        if bad >= 0:
            raise InvalidRecordError(f"record {bad} has offset delta {delta}, expected {bad}")
        if self._compact and null_key >= 0:
            self.refuse_null_keys(_null_key_rows(record_columns(data, source=source)), records_count)
        if not attributes & TIMESTAMP_TYPE_MASK:
            if now - min_ts > self._before_max_ms or max_ts - now > self._after_max_ms:
                self._refuse_timestamps(data, now, source)
        if attributes & TIMESTAMP_TYPE_MASK:
            raise InvalidRecordError("producers may not set LogAppendTime timestamps")
        return fields

    def _check_inflated(self, data, attributes: int, records_count: int, base_ts: int, max_ts: int,
                        source: str, nonblocking: bool) -> tuple[int, int, int, int, int]:
        """A compressed batch's records inflated and checked (check_inflated_records' answer).
        Inflating may take up to MAX_INFLATION x max.message.bytes of work: on the broker's
        event loop (`nonblocking`) only up to ON_LOOP_INFLATION (a fraction of a millisecond); a
        batch that inflates further raises _WouldBlock, left to the blocking path in a thread
        (nothing has changed yet)."""
        cap = self._max_message_bytes * MAX_INFLATION
        limit = ON_LOOP_INFLATION if nonblocking and cap > ON_LOOP_INFLATION else cap
        try:
            raw = decompress(attributes & COMPRESSION_MASK, memoryview(data)[HEADER_SIZE:], limit)
        except RecordTooLargeError as exc:
            if limit < cap:
                raise _WouldBlock() from None
            too_large = str(exc)      # raised below, out of this block: no chained traceback
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, file=source, position=0) from None
        else:
            return check_inflated_records(raw, records_count, base_ts, max_ts,
                                          bool(attributes & TIMESTAMP_TYPE_MASK), source=source)
        raise self._too_large(len(data), too_large)

    def _too_large(self, size: int, reason: str) -> RecordTooLargeError:
        return RecordTooLargeError(f"batch of {size} bytes: its {reason} (the limit is {MAX_INFLATION} x"
                                   f" max.message.bytes={self._max_message_bytes}); rejected")

    def _refuse_timestamps(self, data, now: int, source: str) -> None:
        """A batch with a record timestamp outside message.timestamp.before/after.max.ms
        refused, the first such timestamp named (decoded as columns: an error path only)."""
        ts = record_columns(data, source=source).timestamps_ms
        bad = (now - ts > self._before_max_ms) | (ts - now > self._after_max_ms)
        raise InvalidRecordError(
            f"record timestamp {int(ts[np.argmax(bad)])} is outside the allowed range around"
            f" {now} (message.timestamp.before.max.ms / message.timestamp.after.max.ms)")

    def refuse_null_keys(self, missing: list[int], total: int) -> None:
        """Kafka's answer to records without a key on a compacted topic (`compact` or
        `compact,delete`): the whole batch is refused, every such record named (INVALID_RECORD
        with record errors from the broker), instead of the cleaner dropping them later."""
        tp = f"{self.topic}-{self.partition}"
        kafka_message = f"Compacted topic cannot accept message without key in topic partition {tp}."
        which = (f"record {missing[0]} has none" if len(missing) == 1 else
                 f"{len(missing)} records have none, the first is record {missing[0]}")
        raise RejectedRecordsError(
            f"topic {self.topic} has cleanup.policy={','.join(self.config.cleanup_policy)}: a compacted"
            f" topic refuses records without a key (batch of {total} records to {tp}: {which})",
            record_errors=[(i, kafka_message) for i in missing])
