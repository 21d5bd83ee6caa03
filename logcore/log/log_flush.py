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


class LogFlushing:
    """Flush policy, fsync of rolled segments, commit and publish."""

    def _maybe_flush(self, now: int) -> None:
        if self._flush_due(0, now):
            self._flush_locked()

    def _flushed_in_background(self, pending: PendingFlush) -> None:
        """The flusher thread synced `pending`: move the recovery point (under the lock)."""
        with self._lock:
            if not self._closed:
                self._advance_past_synced()

    def _advance_past_synced(self) -> None:
        """Move the recovery point past the synced head of the pending flushes (roll order: a
        segment counts only once every older one is on disk too)."""
        while self._pending_flushes and self._pending_flushes[0].synced:
            pending = self._pending_flushes.pop(0)
            if pending.generation == self._flush_generation:
                self.recovery_point = max(self.recovery_point, pending.end_offset)
            pending.close()

    def _sync_pending_flushes(self) -> None:
        """fsync every rolled segment the flusher has not synced yet, here and now."""
        for pending in self._pending_flushes:
            pending.sync()
        self._advance_past_synced()

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
