"""A leader's append of its clients' batches (Kafka's appendAsLeader) and the one write every
batch goes through, the leader's and the follower's alike (`append_batch_locked`).

`ClientAppend` is a part of `Log` (logcore.log.log), holding the log and its `ReplicaRole`
(whether it leads, at which epoch: read under the append's own lock). `FollowerAppend`
(replication.py) and `StagedAdoption` (adoption.py) write through it too.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

from logcore.errors import InvalidRecordError, NotLeaderOrFollowerError, RecordTooLargeError
from logcore.records.batch import (ATTRIBUTES_OFFSET, COMPRESSION_MASK, CONTROL_MASK, LOG_OVERHEAD,
                                   TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, BatchHeader, Record,
                                   TimestampType, build_batch, build_control_batch, parse_header,
                                   recompress_batch, set_base_offset, set_log_append_time,
                                   set_partition_leader_epoch)
from logcore.records.compression import CODEC_BY_NAME, Compression
from logcore.records.control import ControlType
from logcore.log.clock import now_ms as _now_ms
from logcore.log.log_reader import _end_marker
from logcore.log.log_validator import LogValidator, _WouldBlock
from logcore.log.producer_state import ProducerBatch
from logcore.log.segment import LogSegment

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    log_append_time: int = -1
    duplicate: bool = False


class ClientAppend:
    """Client batches checked, stamped with offsets and the leader epoch, deduplicated by the
    producer state and written at the LEO."""

    def __init__(self, log, role):
        self._log = log
        self._role = role
        config = log.config
        # Hot-path copies of the config (read on every append).
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._compact = config.compact
        self._log_append_time = log.log_append_time()
        self._validator = LogValidator(log.topic, log.partition, config)     # a client batch's checks
        self._stored = _stored_codec(config)
        self._nonblocking = False                   # inside append_and_commit_nowait
        # The open policy is the log's for life: whether a commit moves the HW (single node).
        self._commit_moves_hw = log.mode.commit_moves_high_watermark

    def reconfigure(self, config) -> None:
        """A changed topic config (Log.reconfigure): new hot-path copies and checks."""
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._compact = config.compact
        self._log_append_time = getattr(config, "message_timestamp_type", "CreateTime") == "LogAppendTime"
        self._validator = LogValidator(self._log.topic, self._log.partition, config)
        self._stored = _stored_codec(config)

    def _compression(self, compression) -> tuple[Compression, int | None]:
        """An appended batch's codec and level, as Kafka's broker stores a produced batch: a
        topic whose compression.type names a codec holds its batches in that codec at its
        compression.<codec>.level, whatever the caller's; a `producer` topic keeps the caller's
        (at the codec's default level; uncompressed when none is given)."""
        stored = self._stored
        if stored is not None:
            return stored
        return (Compression.NONE if compression is None else Compression(compression)), None

    def append_records(self, records: Iterable, *, compression: Compression | None = None,
                       producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                       is_transactional: bool = False) -> AppendInfo:
        """Append records as one batch: offsets from the LEO, this writer's epoch stamped.

        `records`: (key, value, headers, timestamp_ms or None) tuples or Record-like objects.
        """
        log = self._log
        now = _now_ms()
        items = []
        for item in records:
            if isinstance(item, Record):
                items.append((item.key, item.value, item.headers, item.timestamp))
            else:
                key, value, headers, ts = (tuple(item) + (None, None, None, None))[:4]
                items.append((key, value, headers or (), now if ts is None else ts))
        if not items:
            raise InvalidRecordError("cannot append an empty batch")
        if self._compact:
            missing = [i for i, item in enumerate(items) if item[0] is None]
            if missing:
                self._validator.refuse_null_keys(missing, len(items))
        log_append = log.log_append_time()
        codec, level = self._compression(compression)
        with log.critical():
            batch = build_batch(items, base_offset=log.log_end_offset,
                                compression=codec, compression_level=level,
                                producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=base_sequence, is_transactional=is_transactional,
                                partition_leader_epoch=self._role.leader_epoch,
                                timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                                log_append_time=now if log_append else None)
            return self.append_locked(bytearray(batch), now, validated=True)

    def append_batch(self, batch: bytes) -> AppendInfo:
        """Append one client-built RecordBatch v2: validated, offsets assigned, epoch stamped."""
        with self._log.critical():
            return self.append_locked(bytearray(batch), _now_ms(), validated=False)

    def append_control(self, control_type: ControlType, *, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int = 0) -> AppendInfo:
        """Write a transaction marker (COMMIT/ABORT) for a producer's open transaction."""
        log = self._log
        with log.critical():
            batch = build_control_batch(control_type, producer_id=producer_id, producer_epoch=producer_epoch,
                                        coordinator_epoch=coordinator_epoch, base_offset=log.log_end_offset,
                                        timestamp_ms=_now_ms(), partition_leader_epoch=self._role.leader_epoch)
            return self.append_locked(bytearray(batch), _now_ms(), validated=True)

    def append_and_commit_nowait(self, batches: list[bytes],
                                 written: list | None = None) -> tuple[list, bool]:
        """append_batch() each of `batches`, then commit(durable=False), for a caller that must
        not block (the broker's event loop): only what takes no fsync, roll, root checkpoint
        write or wait for a lock is done here.

        A batch given as a writable buffer (a bytearray, or a writable memoryview such as a
        slice of the request frame) gets its offsets and epoch stamped in place (no copy).
        `written`, when given, receives the buffer of each batch written, as written (stamped),
        in log order: a duplicate or a refused batch adds none.

        Returns (results, committed): one AppendInfo or exception per batch handled (a prefix
        of `batches`; it stops before a batch that would roll a segment or reach the flush
        policy), and whether the HW now covers everything appended. The caller finishes what
        is left (the other batches, the commit) where it may block.
        """
        log = self._log
        lock = log.lock
        if not (log.writer and log.segment_store.in_place) or not lock.acquire(blocking=False):
            return [], False
        try:
            try:
                if log.is_closed or not log.fence.try_enter_critical():
                    return [], False
            except Exception:  # noqa: BLE001 - e.g. fenced: the blocking path reports it per batch
                return [], False
            try:
                results: list = []
                self._nonblocking = True
                try:
                    for batch in batches:
                        try:
                            data = batch if _writable(batch) else bytearray(batch)
                            info = self.append_locked(data, _now_ms(), validated=False)
                            results.append(info)
                            if written is not None and not info.duplicate:
                                written.append(data)
                        except _WouldBlock:
                            return results, False
                        except Exception as exc:  # noqa: BLE001 - that batch's own error
                            results.append(exc)
                finally:
                    self._nonblocking = False
                if self._commit_moves_hw and log.high_watermark < log.log_end_offset:
                    # A replica's HW moves with replication, and its checkpoint is written on
                    # its own schedule (replica.high.watermark.checkpoint.interval.ms).
                    # A moved recovery point is written durably (fsync); the root files are
                    # replaced under the root lock: both are left to the blocking path.
                    if (log.local.recovery_point_unrecorded
                            or log.state_store.root_write_due()):
                        return results, False
                    try:
                        log.commit_locked(durable=False)
                    except Exception:  # noqa: BLE001 - the HW did not move: the blocking path retries
                        logger.debug("non-blocking commit of %s-%d failed; retrying in a thread",
                                     log.topic, log.partition, exc_info=True)
                        return results, False
                return results, True
            finally:
                log.fence.exit_critical()
        finally:
            lock.release()

    def append_locked(self, data: bytearray, now: int, *, validated: bool,
                      assign: bool = False) -> AppendInfo:
        """A leader's append of one batch: checked (validated=False: a client's batch), its
        offsets and epoch stamped, deduplicated by producer state, then written by
        `append_batch_locked`, the append every batch goes through."""
        log = self._log
        role = self._role
        log.check_open()
        if not role.leads:
            raise NotLeaderOrFollowerError(
                f"{log.topic}-{log.partition}: this replica follows at leader epoch"
                f" {role.leader_epoch}; only the leader appends")
        if validated:
            header = parse_header(data)
            size = header.size
        else:
            stored = self._stored
            recompress = (stored is not None and len(data) > ATTRIBUTES_OFFSET + 1
                          and data[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK != stored[0])
            if recompress and self._nonblocking:
                raise _WouldBlock()         # CPU work for a thread, not the event loop; nothing changed
            fields = self._validator.validate(data, now, nonblocking=self._nonblocking)
            size = fields[1] + LOG_OVERHEAD
            if recompress:
                data, size, fields = self._recompressed(data, stored)
        if size > self._segment_bytes:
            raise RecordTooLargeError(
                f"batch of {size} bytes exceeds segment.bytes={self._segment_bytes}")
        leo = log.log_end_offset
        epoch = role.leader_epoch
        if not validated or assign:
            set_base_offset(data, leo)
            set_partition_leader_epoch(data, epoch)
            if self._log_append_time:
                set_log_append_time(data, now)
                header = parse_header(data)
            elif validated or fields is None:
                header = parse_header(data)
            else:                           # the stamped header without parsing it again
                header = BatchHeader(leo, fields[1], epoch, *fields[3:])
        analysis = None
        next_batch = False
        producer_state = log.producer_state
        if header.producer_id >= 0:
            next_batch = (not header.attributes & CONTROL_MASK
                          and producer_state.is_next_batch(header.producer_id, header.producer_epoch,
                                                           header.base_sequence,
                                                           bool(header.attributes & TRANSACTIONAL_MASK)))
        if header.producer_id >= 0 and not next_batch:
            marker = _end_marker(data, header, "append", 0) if header.is_control else None
            analysis = producer_state.analyze([ProducerBatch.from_header(header, marker)])
            if analysis.duplicate is not None:
                d = analysis.duplicate
                return AppendInfo(d.first_offset, d.last_offset, d.timestamp, header.records_count,
                                  duplicate=True)
        self.append_batch_locked(data, header, now, epoch, analysis, next_batch=next_batch)
        if not self._nonblocking:       # (non-blocking: append_batch_locked found no flush due)
            log.local.maybe_flush(now)
        log_append = now if header.attributes & TIMESTAMP_TYPE_MASK else -1
        return AppendInfo(header.base_offset, header.base_offset + header.last_offset_delta,
                          header.max_timestamp, header.records_count, log_append)

    def _recompressed(self, data: bytearray, stored: tuple) -> tuple[bytearray, int, None]:
        """A checked client batch in the topic's codec at its level, as Kafka's broker stores
        one produced in another codec (`uncompressed` inflates it): (batch, size, no fields).
        Its size is checked again, as Kafka's is after recompression."""
        data = recompress_batch(data, *stored)
        limit = self._log.config.max_message_bytes
        if len(data) > limit:
            raise RecordTooLargeError(
                f"batch of {len(data)} bytes once in the topic's compression.type="
                f"{self._log.config.compression_type} exceeds max.message.bytes={limit}")
        return data, len(data), None

    def append_batch_locked(self, data, header: BatchHeader, now: int, epoch: int, analysis, *,
                            next_batch: bool = False) -> None:
        """Write one checked batch that starts at the LEO, for a leader's and a follower's append
        alike: roll first when due, the epoch cache learns `epoch` (the leader's, or the
        leader's batch's) at the batch, the producer state its producer fields (`analysis`, or
        `next_batch`: the producer's next in-sequence batch, which needs none)."""
        log = self._log
        local = log.local
        log_segments = log.log_segments
        active = log_segments.active
        base_offset = header.base_offset
        last_offset = base_offset + header.last_offset_delta
        roll = active.should_roll(header.batch_length + LOG_OVERHEAD, header.max_timestamp, last_offset,
                                  segment_bytes=self._segment_bytes,
                                  segment_ms=self._segment_ms, now_ms=now)
        if self._nonblocking and (roll or local.flush_due(header.records_count, now)):
            raise _WouldBlock()     # nothing changed yet: the blocking path appends this batch
        if roll:
            if active.in_memory:
                # An object-store segment is published at commit; rolling it means committing.
                log.commit_locked()
            else:
                local.roll_to(base_offset)
            active = log_segments.active
        log.note_epoch_start(epoch, base_offset)
        active.append(data, [header])
        if next_batch:
            log.producer_state.append_next_batch(header.producer_id, header.last_sequence,
                                                 base_offset, last_offset, header.max_timestamp)
        elif analysis is not None:
            self._complete_producer_append(active, analysis, header)
        local.add_unflushed(header.records_count)

    def append_next_run_locked(self, data, headers: list[BatchHeader]) -> None:
        """Write a follower's run of checked batches that starts at the LEO in one write, as
        `append_batch_locked` would one by one, for a run the caller found needs neither a
        roll, nor a new epoch in the epoch cache, nor a producer state analysis (every batch
        with a producer is that producer's next in sequence: `append_next_batch`)."""
        log = self._log
        log.log_segments.active.append(data, headers)
        producer_state = log.producer_state
        records = 0
        for h in headers:
            if h.producer_id >= 0:
                producer_state.append_next_batch(h.producer_id, h.last_sequence, h.base_offset,
                                                 h.last_offset, h.max_timestamp)
            records += h.records_count
        log.local.add_unflushed(records)

    def _complete_producer_append(self, active: LogSegment, analysis, header: BatchHeader) -> None:
        """The producer state's part of an append whose batch is in `active` already, and the
        aborted transactions it ends into the `.txnindex`. If that write fails (a full disk),
        the batch is taken out again and the producer state rebuilt from the log, so a failed
        append leaves nothing behind (a marker without its index entry would show aborted
        data to read_committed readers)."""
        log = self._log
        try:
            for aborted in log.producer_state.complete_append(analysis, header.next_offset):
                active.txn_index.append(aborted)
                log.log_segments.mark_txn_index(active.base_offset)
        except OSError:
            active.truncate_to(header.base_offset)
            log.rebuild_producer_state()
            raise


def _stored_codec(config) -> tuple[Compression, int | None] | None:
    """The codec and level the topic's compression.type stores batches in; None for `producer`
    (each batch as its producer compressed it)."""
    codec = CODEC_BY_NAME.get(getattr(config, "compression_type", "producer"))
    return None if codec is None else (codec, getattr(config, "compression_level", None))


def _writable(buf) -> bool:
    return isinstance(buf, bytearray) or isinstance(buf, memoryview) and not buf.readonly and buf.contiguous
