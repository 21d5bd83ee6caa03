"""Replication contracts of a partition's log, after Kafka's UnifiedLog: the follower's append
(the leader's batches kept byte for byte), the high watermark as its own operation (the leader
advances it, a follower takes it from the leader), and the leader epoch given from outside.

A mixin of `Log` (logcore.log.log). Local disk only: an object-store log takes its epoch from
its writer fence, which the partition state checks at every commit.

Durability stays separate: `flush` / `commit` make data durable; today's single-node policy
(`commit` moves the HW to the LEO) sits on top of the HW operations here.
"""
from __future__ import annotations

import logging

from logcore.errors import (FencedWriterError, InvalidRecordError, NotLeaderOrFollowerError,
                            OffsetOutOfRangeError, ReadOnlyLogError, RecordTooLargeError, SegLogError)
from logcore.records.batch import iter_batches
from logcore.log.clock import now_ms as _now_ms
from logcore.log.log_reader import _end_marker
from logcore.log.producer_state import AppendOrigin, ProducerBatch

logger = logging.getLogger(__name__)


class LogReplication:
    """Follower append, HW operations, leadership and epoch-based truncation."""

    def _require_local_writer(self, what: str) -> None:
        if not self.writer:
            raise ReadOnlyLogError(
                f"{self.topic}-{self.partition} was opened for reading only: cannot {what}")
        if not self.segment_store.in_place:
            raise SegLogError(f"{self.topic}-{self.partition}: {what} needs a log on local disk; an"
                              " object-store log takes its epoch from its writer fence")

    def _require_follower(self, epoch: int, what: str) -> None:
        """Under the writer's lock: a follower's write for `epoch` goes ahead only while this
        replica still follows at that epoch. A fetch answered for an older epoch, or one that
        lands after become_leader, must not write a deposed leader's batches after the new
        epoch's entry (the epoch cache would then misdescribe the log)."""
        if self.leads or self.leader_epoch != epoch:
            now = "leads" if self.leads else "follows"
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.partition}: cannot {what} as a follower at leader epoch {epoch}:"
                f" this replica {now} at epoch {self.leader_epoch} now")

    # ------------------------------------------------------------------ follower append
    def append_as_follower(self, records, *, follower_at: int | None = None) -> tuple[int, int]:
        """Append the leader's batches verbatim (Kafka's appendAsFollower).

        `records`: bytes of whole RecordBatch v2 batches (or a list of such bytes), as a fetch
        from the leader returns them. Offsets, partition leader epochs, timestamps and producer
        fields are kept: nothing is restamped, so the follower's segments hold the leader's
        bytes. Each batch's length, magic and CRC are checked. The first batch must start at
        the LEO and each one right after the previous one; a batch below that (overlap) raises
        InvalidRecordError, and so does one above it (a gap) unless the log may be compacted
        (the leader's cleaner leaves gaps). Nothing is written when a check fails.

        The epoch cache learns every epoch newer than its latest at the batch that starts it;
        producer state is updated without sequence checks (AppendOrigin.REPLICATION) and
        aborted transactions go to the transaction index. Segments roll by the same rules as
        the leader's appends. The HW does not move (`update_high_watermark` does that).
        Returns (first offset, last offset), or (-1, -1) for no batch.

        `follower_at`: the leader epoch the fetch was made at; the append happens only while
        this replica still follows at it (else NotLeaderOrFollowerError, nothing written).
        """
        self._require_local_writer("append as a follower")
        buf, batches = self._follower_batches(records)
        if not batches:
            return -1, -1
        with self._critical():
            if follower_at is not None:
                self._require_follower(follower_at, "append")
            return self._append_follower_locked(buf, batches, nonblocking=False)

    def append_as_follower_nowait(self, records, *, follower_at: int | None = None) -> tuple[int, int] | None:
        """append_as_follower() for a caller that must not block (the broker's event loop):
        None, with nothing written, when the append would wait for a lock, roll a segment,
        reach the flush policy or write the epoch cache (a batch of a new leader epoch); the
        caller then appends in a worker thread. Raises as append_as_follower does."""
        self._require_local_writer("append as a follower")
        buf, batches = self._follower_batches(records)
        if not batches:
            return -1, -1
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if not self.fence.try_enter_critical():
                return None
            try:
                if follower_at is not None:
                    self._require_follower(follower_at, "append")
                return self._append_follower_locked(buf, batches, nonblocking=True)
            finally:
                self.fence.exit_critical()
        finally:
            self._lock.release()

    def _follower_batches(self, records) -> tuple[bytes | bytearray, list]:
        source = f"{self.topic}-{self.partition} follower append"
        if isinstance(records, (list, tuple)):
            buf = b"".join(records)
        elif isinstance(records, bytes):
            buf = records                   # immutable: written as it is, no copy
        else:
            buf = bytearray(records)        # a buffer its owner may reuse: a copy of its bytes
        return buf, list(iter_batches(buf, source=source, allow_partial_tail=False))

    def _append_follower_locked(self, buf: bytes | bytearray, batches: list, *,
                                nonblocking: bool) -> tuple[int, int] | None:
        """A follower's append of the leader's batches: each checked to follow the LEO, then
        written by `_append_batch_locked`, as a leader's batch is."""
        source = f"{self.topic}-{self.partition} follower append"
        self._check_open()
        expected = self.log_end_offset
        for pos, header in batches:
            if header.base_offset < expected:
                raise InvalidRecordError(
                    f"{source}: the batch at position {pos} starts at offset {header.base_offset},"
                    f" below the next offset {expected}: it overlaps what the log holds")
            if header.base_offset > expected and self._gapless:
                raise InvalidRecordError(
                    f"{source}: the batch at position {pos} starts at offset {header.base_offset},"
                    f" leaving a gap after {expected - 1}")
            if header.size > self._segment_bytes:
                raise RecordTooLargeError(
                    f"{source}: batch of {header.size} bytes at position {pos} exceeds"
                    f" segment.bytes={self._segment_bytes}")
            expected = header.next_offset
        now = _now_ms()
        if nonblocking and self._follower_append_blocks(batches, now):
            return None
        view = memoryview(buf)
        for pos, header in batches:
            data = view[pos:pos + header.size]
            analysis = None
            if header.producer_id >= 0:
                marker = _end_marker(bytes(data), header, source, pos) if header.is_control else None
                analysis = self.producer_state.analyze([ProducerBatch.from_header(header, marker)],
                                                       AppendOrigin.REPLICATION)
            self._append_batch_locked(data, header, now, header.partition_leader_epoch, analysis)
        self._maybe_flush(now)
        return batches[0][1].base_offset, batches[-1][1].last_offset

    def _follower_append_blocks(self, batches: list, now: int) -> bool:
        """Whether appending `batches` would do blocking work: roll a segment (checked for the
        batches as one run), reach the flush policy, or write the epoch cache."""
        active = self.segments[-1]
        records = 0
        latest = self.epoch_cache.latest_epoch
        pending = 0
        first_ts = None
        for i, (_pos, header) in enumerate(batches):
            if active.should_roll(header.size, header.max_timestamp, header.last_offset,
                                  segment_bytes=self._segment_bytes, segment_ms=self._segment_ms,
                                  now_ms=now, pending_bytes=pending, pending_batches=i,
                                  pending_first_timestamp=first_ts):
                return True
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                return True
            pending += header.size
            records += header.records_count
            if first_ts is None:
                first_ts = header.max_timestamp
        return self._flush_due(records, now)

    # ------------------------------------------------------------------ high watermark
    def _set_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset
        self.producer_state.on_high_watermark_updated(offset)

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Leader: advance the HW to `offset` (Kafka's maybeIncrementHighWatermark; for a
        replicated partition, the smallest LEO of the in-sync replicas). Never backwards: an
        offset at or below the HW changes nothing and returns False. Never past the LEO:
        raises OffsetOutOfRangeError. Only visibility moves: the HW is recorded for other
        processes by the next commit."""
        if not self.writer:
            raise ReadOnlyLogError(f"{self.topic}-{self.partition} was opened for reading only")
        with self._lock:
            leo = self.log_end_offset
            if offset > leo:
                raise OffsetOutOfRangeError(
                    f"{self.topic}-{self.partition}: cannot move the high watermark to {offset},"
                    f" past the log end offset {leo}", topic=self.topic, partition=self.partition,
                    offset=offset, log_start_offset=self.log_start_offset, log_end_offset=leo)
            if offset <= self.high_watermark:
                return False
            self._set_high_watermark(offset)
            return True

    def update_high_watermark(self, leader_high_watermark: int, *, follower_at: int | None = None) -> int:
        """Follower: take the HW from the leader's (Kafka's updateHighWatermark): it becomes
        min(leader's HW, own LEO), and never less than the log start offset. Returns it.
        `follower_at`: only while this replica follows at that leader epoch."""
        if not self.writer:
            raise ReadOnlyLogError(f"{self.topic}-{self.partition} was opened for reading only")
        with self._lock:
            if follower_at is not None:
                self._require_follower(follower_at, "take the leader's high watermark")
            hw = max(self.log_start_offset, min(leader_high_watermark, self.log_end_offset))
            self._set_high_watermark(hw)
            return hw

    # ------------------------------------------------------------------ leadership
    def become_leader(self, epoch: int) -> None:
        """Lead the partition at `epoch`, given from outside (a controller; the single-node
        writer fence is one such source): the epoch cache records (epoch, LEO) at once and
        batches appended from now on are stamped with `epoch`. An epoch below the cache's
        latest raises FencedWriterError; the same epoch again changes nothing."""
        self._require_local_writer("become leader")
        with self._critical():
            latest = self.epoch_cache.latest_epoch
            if latest is not None and epoch < latest:
                raise FencedWriterError(
                    f"{self.topic}-{self.partition}: leader epoch {epoch} is older than the latest"
                    f" epoch {latest} of its leader-epoch-checkpoint")
            self.leader_epoch = epoch
            try:
                self.epoch_cache.assign(epoch, self.log_end_offset)
            except OSError as exc:
                # A full disk: the cache is as it was, and the first append at this epoch
                # assigns it again (at the same LEO) or fails, writing nothing, until the
                # checkpoint can be written. Leading must not wait for the disk.
                logger.warning("%s-%d: leader epoch %d not written to the epoch checkpoint yet: %s",
                               self.topic, self.partition, epoch, exc)
            self.leads = True

    def become_follower(self, epoch: int) -> None:
        """Follow the partition's leader at `epoch` (given by the controller): the epoch is
        recorded for fencing, nothing is truncated and the epoch cache learns epochs only from
        the leader's batches (append_as_follower). From here on a leader's append raises
        NotLeaderOrFollowerError: the change is made under the append's lock, so no client
        batch lands after it stamped with `epoch`. An epoch below the current one raises
        FencedWriterError."""
        self._require_local_writer("become a follower")
        with self._critical():
            if epoch < self.leader_epoch:
                raise FencedWriterError(
                    f"{self.topic}-{self.partition}: leader epoch {epoch} is older than the current"
                    f" epoch {self.leader_epoch}")
            self.leads = False
            self.leader_epoch = epoch

    def truncate_fully_and_start_at(self, offset: int, *, log_start_offset: int | None = None,
                                    epochs: list[tuple[int, int]] | None = None,
                                    producer_snapshot: bytes | None = None,
                                    snapshot_source: str | None = None,
                                    expected_end: int | None = None,
                                    follower_at: int | None = None) -> bool:
        """A follower that cannot catch up by fetching (Kafka's truncateFullyAndStartAt): every
        local segment goes and the log restarts, empty, at `offset`; the HW and recovery point
        are `offset`. Without the other arguments (the leader's log start moved past this
        replica, replication.md 1.5) the log start offset is `offset`, the epoch cache is empty
        and so is the producer state. With tiered storage (KIP-405's follower catch-up) the
        caller gives what the remote segment ending at `offset` - 1 holds: the leader's
        `log_start_offset` (at most `offset`; the offsets below `offset` are the remote
        tier's), its leader-epoch entries and its producer snapshot, which become this log's
        epoch cache and producer state at `offset`.

        `expected_end`: do nothing and return False unless the LEO is that (checked under the
        writer's lock). The new log start offset is checkpointed before any file goes.
        `follower_at`: only while this replica follows at that leader epoch (as truncate_to)."""
        self._require_local_writer("truncate fully")
        start = offset if log_start_offset is None else min(log_start_offset, offset)
        with self._critical():
            if follower_at is not None:
                self._require_follower(follower_at, "truncate fully")
            if expected_end is not None and self.log_end_offset != expected_end:
                return False
            if producer_snapshot is not None:         # checked before anything changes
                from logcore.log.producer_state import decode_snapshot
                decode_snapshot(producer_snapshot, source=snapshot_source)
            self.state_store.commit(high_watermark=offset, log_start_offset=start,
                                    first_segment_base=offset, epoch=self.leader_epoch)
            self.pending_flushes.truncated()    # a pending flush of a removed segment moves nothing
            self.truncations += 1
            self.pending_flushes.close_all()
            for seg in self.segments:
                seg.close()
                seg.delete_files()
            self.log_segments.clear()
            self.log_start_offset = start
            self._roll_to(offset)
            self.recovery_point = offset
            self.epoch_cache.clear()
            for epoch, epoch_start in epochs or ():
                self.epoch_cache.assign(epoch, epoch_start)
            if epochs and start > 0:
                self.epoch_cache.truncate_from_start(start)
            if producer_snapshot is not None:
                self.producer_state.restore_snapshot(offset, producer_snapshot, source=snapshot_source)
            else:
                self.producer_state.truncate_fully_and_start_at(offset)
            self._set_high_watermark(offset)
            return True

    def checkpoint_high_watermark(self) -> None:
        """Write the HW (and log start, recovery point) to the partition's checkpoints without
        fsync, as Kafka's replication-offset-checkpoint task does; for replica logs, whose HW
        moves with replication rather than at commits."""
        with self._critical():
            self._commit_locked(durable=False, root=True)

    def end_offset_for_epoch(self, epoch: int):
        """(epoch, end offset) for a follower's divergence check (Kafka's
        OffsetsForLeaderEpoch): the largest epoch <= `epoch` this log knows and the offset
        where the next epoch starts (the LEO for the latest)."""
        with self._lock:
            return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)
