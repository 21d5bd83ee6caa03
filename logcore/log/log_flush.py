"""Durability and commit: the flush policy (flush.messages / flush.ms), background fsync of rolled
segments and the recovery point, and `commit`, which publishes (object store), records the HW
and the marker in the state store (today's single-node HW policy: the HW follows the commit).

A mixin of `Log` (logcore.log.log).
"""
from __future__ import annotations

import logging

from logcore.errors import FencedWriterError
from logcore.records.batch import parse_header
from logcore.log.segment_flusher import PendingFlush
from logcore.log.segment import LogSegment, _SegmentExists
from logcore.log.clock import now_ms as _now_ms

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know


class PendingFlushes:
    """A writer's rolled segments not yet known to be fsynced, in roll order, and its truncation
    generation (one per `Log`). The recovery point passes a segment only once it and every
    older one are synced, and only if no truncation came after it was sealed."""

    def __init__(self):
        self._pending: list[PendingFlush] = []
        self._generation = 0        # bumped by truncation: older pending flushes move nothing

    def seal(self, fd: int, end_offset: int, source: str) -> PendingFlush:
        """A sealed segment (its descriptor, owned from here) waiting for its fsync."""
        pending = PendingFlush(fd, end_offset, self._generation, source)
        self._pending.append(pending)
        return pending

    def truncated(self) -> None:
        """The log was cut: what is pending now moves the recovery point no more."""
        self._generation += 1

    def synced_end(self) -> int | None:
        """Take the synced head off (roll order); the end offset the recovery point may move
        to, or None."""
        end = None
        while self._pending and self._pending[0].synced:
            pending = self._pending.pop(0)
            if pending.generation == self._generation:
                end = pending.end_offset if end is None else max(end, pending.end_offset)
            pending.close()
        return end

    def sync_all(self) -> int | None:
        """fsync every pending segment the flusher has not synced yet, here and now; then as
        `synced_end`."""
        for pending in self._pending:
            pending.sync()
        return self.synced_end()

    def close_all(self) -> None:
        """Let go of every descriptor (a close, a full truncation)."""
        for pending in self._pending:
            pending.close()
        self._pending = []


class LogFlushing:
    """Flush policy, fsync of rolled segments, commit and publish."""

    def _maybe_flush(self, now: int) -> None:
        if self._flush_due(0, now):
            self._flush_locked()

    def segment_synced(self, pending: PendingFlush) -> None:
        """The flusher thread synced a rolled segment: move the recovery point (under the lock)."""
        with self._lock:
            if not self._closed:
                self._move_recovery_point(self.pending_flushes.synced_end())

    def _move_recovery_point(self, end: int | None) -> None:
        if end is not None:
            self.recovery_point = max(self.recovery_point, end)

    def sync_rolled_segments(self) -> None:
        """fsync every rolled segment the flusher has not synced yet, here and now."""
        self._move_recovery_point(self.pending_flushes.sync_all())

    def _flush_locked(self) -> None:
        self.segment_store.flush()
        self._unflushed = 0
        self._last_flush_ms = _now_ms()

    def flush(self) -> None:
        """fsync appended data (local disk); on object stores data is durable once committed."""
        with self._critical():
            self._flush_locked()
            self.state_store.set_recovery_point(self.recovery_point)

    # ------------------------------------------------------------------ commit
    def commit(self, marker: dict | None = None, *, durable: bool = True) -> None:
        """Make everything appended visible (and durable): the high watermark moves to the LEO.

        `marker` (a small JSON-able dict) is recorded with this commit and becomes the log's
        `commit_marker` exactly when the new HW does, crash or not: the Spark sink records its
        (query, batch) there so that a replayed batch is recognised as already committed.

        durable=False (local disk; Kafka's default, the broker's commit): no fsync. The HW
        checkpoint is still replaced (write + rename) before the HW moves, so a writer that
        takes the partition after a crash of this process keeps what was committed; the data
        is fsynced per flush.messages / flush.ms, at rolls and at close, and a commit after such
        a flush writes the checkpoints durably. A power cut may lose what was not fsynced. A
        commit with a marker is always durable. Object stores are durable at every commit.

        A replica log (a cluster member's) records its current HW instead: replication moves
        its HW (maybe_increment_high_watermark / update_high_watermark), a commit never does.
        """
        if marker is not None and not durable:
            raise ValueError("a commit with a marker must be durable (durable=True)")
        with self._critical():
            self._commit_locked(marker, durable=durable)

    def _commit_locked(self, marker: dict | None = None, *, durable: bool = True, root: bool = False) -> None:
        durable = self.segment_store.before_commit(durable)
        leo = self.log_end_offset
        first_base = self.segments[0].base_offset if self.segments else leo
        # A replica records its HW as replication moved it; the single-node policy makes
        # everything appended visible once recorded.
        hw = leo if self.mode.commit_moves_high_watermark else self.high_watermark
        # The LSO at the new HW, counting every transaction not yet ended as open (a floor).
        unstable = self.producer_state.first_unstable_offset
        self.state_store.commit(high_watermark=hw, log_start_offset=self.log_start_offset,
                                first_segment_base=first_base, epoch=self.leader_epoch,
                                recovery_point=self.segment_store.recovery_point_to_record(),
                                marker=marker, durable=durable, root=root,
                                last_stable_offset=hw if unstable is None else min(unstable, hw))
        self._checkpointed_recovery_point = self.recovery_point
        self._state_unsynced = not durable
        # The single-node policy: once durable and recorded, everything appended is visible.
        if self.mode.commit_moves_high_watermark:
            self._set_high_watermark(leo)
        if marker is not None:
            self.commit_marker = marker

    def _publish(self, seg: LogSegment) -> None:
        try:
            seg.publish()
        except _SegmentExists:
            # Either we are fenced, or a fenced writer left an uncommitted segment at this base.
            self.fence.check()
            head = self.storage.read(seg.log_path, 0, 61)
            if len(head) == 61 and parse_header(head).partition_leader_epoch < self.leader_epoch:
                logger.warning("replacing %s left by a fenced writer", seg.log_path)
                # Its index objects go first: a reader must never pair them with our `.log`.
                for path in (seg.index_path, seg.time_index_path, seg.txn_index_path, seg.log_path):
                    self.storage.delete(path)
                seg.in_memory = True
                seg.writable = True
                seg.publish()
            else:
                raise FencedWriterError(f"segment {seg.log_path} was published by another writer")
