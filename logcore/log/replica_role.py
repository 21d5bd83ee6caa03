"""A log's replica role: whether it leads and at which leader epoch, the transitions between
leading and following given from outside (a controller; the single-node writer fence is one
such source), the high watermark's moves by replication and the truncations a follower makes
(Kafka's Partition/UnifiedLog split: makeLeader/makeFollower, maybeIncrementHighWatermark,
updateHighWatermark, truncateTo, truncateFullyAndStartAt).

`ReplicaRole` is a part of `Log` (logcore.log.log), holding the log: the HW, the log start
offset, the epoch cache and the producer state stay the log's and are changed through its
operations, under its writer's critical section.
"""
from __future__ import annotations

import logging

from logcore.errors import (FencedWriterError, NotLeaderOrFollowerError, OffsetOutOfRangeError, ReadOnlyLogError,
                            SegLogError)
from logcore.log.cleaner_checkpoint import CleanerCheckpoint

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know


class ReplicaRole:
    """Leader or follower, at a leader epoch, and what moves with the role."""

    def __init__(self, log, *, leads: bool):
        self._log = log
        # Whether the log takes a leader's appends. A path-mode writer leads by its fence; a
        # replica leads only between become_leader and become_follower, and the check is made
        # under the lock of the append itself, so a replica being deposed never appends a
        # client's batch stamped with the new leader's epoch (Kafka's leaderIsrUpdateLock).
        # Both are read on every append: plain attributes, written only here.
        self.leads = leads
        self.leader_epoch = -1

    def opened_at(self, epoch: int) -> None:
        """The epoch the log holds when opened (its writer fence's, or a replica's latest)."""
        self.leader_epoch = epoch

    def require_local_writer(self, what: str) -> None:
        """The role's operations need a writer on local disk (an object-store log takes its
        epoch from its writer fence)."""
        log = self._log
        if not log.writer:
            raise ReadOnlyLogError(f"{log.topic}-{log.partition} was opened for reading only: cannot {what}")
        if not log.segment_store.in_place:
            raise SegLogError(f"{log.topic}-{log.partition}: {what} needs a log on local disk; an"
                              " object-store log takes its epoch from its writer fence")

    def require_follower(self, epoch: int, what: str) -> None:
        """Under the writer's lock: a follower's write for `epoch` goes ahead only while this
        replica still follows at that epoch. A fetch answered for an older epoch, or one that
        lands after become_leader, must not write a deposed leader's batches after the new
        epoch's entry (the epoch cache would then misdescribe the log)."""
        if self.leads or self.leader_epoch != epoch:
            now = "leads" if self.leads else "follows"
            log = self._log
            raise NotLeaderOrFollowerError(
                f"{log.topic}-{log.partition}: cannot {what} as a follower at leader epoch {epoch}:"
                f" this replica {now} at epoch {self.leader_epoch} now")

    # ------------------------------------------------------------------ high watermark
    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Leader: advance the HW to `offset` (Kafka's maybeIncrementHighWatermark; for a
        replicated partition, the smallest LEO of the in-sync replicas). Never backwards: an
        offset at or below the HW changes nothing and returns False. Never past the LEO:
        raises OffsetOutOfRangeError. Only visibility moves: the HW is recorded for other
        processes by the next commit."""
        log = self._log
        if not log.writer:
            raise ReadOnlyLogError(f"{log.topic}-{log.partition} was opened for reading only")
        with log.lock:
            leo = log.log_end_offset
            if offset > leo:
                raise OffsetOutOfRangeError(
                    f"{log.topic}-{log.partition}: cannot move the high watermark to {offset},"
                    f" past the log end offset {leo}", topic=log.topic, partition=log.partition,
                    offset=offset, log_start_offset=log.log_start_offset, log_end_offset=leo)
            if offset <= log.high_watermark:
                return False
            log.set_high_watermark(offset)
            return True

    def update_high_watermark(self, leader_high_watermark: int, *, follower_at: int | None = None) -> int:
        """Follower: take the HW from the leader's (Kafka's updateHighWatermark): it becomes
        min(leader's HW, own LEO), and never less than the log start offset. Returns it.
        `follower_at`: only while this replica follows at that leader epoch."""
        log = self._log
        if not log.writer:
            raise ReadOnlyLogError(f"{log.topic}-{log.partition} was opened for reading only")
        with log.lock:
            if follower_at is not None:
                self.require_follower(follower_at, "take the leader's high watermark")
            hw = max(log.log_start_offset, min(leader_high_watermark, log.log_end_offset))
            log.set_high_watermark(hw)
            return hw

    # ------------------------------------------------------------------ leadership
    def become_leader(self, epoch: int) -> None:
        """Lead the partition at `epoch`: the epoch cache records (epoch, LEO) at once and
        batches appended from now on are stamped with `epoch`. An epoch below the cache's
        latest raises FencedWriterError; the same epoch again changes nothing."""
        log = self._log
        self.require_local_writer("become leader")
        with log.critical():
            latest = log.epoch_cache.latest_epoch
            if latest is not None and epoch < latest:
                raise FencedWriterError(
                    f"{log.topic}-{log.partition}: leader epoch {epoch} is older than the latest"
                    f" epoch {latest} of its leader-epoch-checkpoint")
            self.leader_epoch = epoch
            try:
                log.epoch_cache.assign(epoch, log.log_end_offset)
            except OSError as exc:
                # A full disk: the cache is as it was, and the first append at this epoch
                # assigns it again (at the same LEO) or fails, writing nothing, until the
                # checkpoint can be written. Leading must not wait for the disk.
                logger.warning("%s-%d: leader epoch %d not written to the epoch checkpoint yet: %s",
                               log.topic, log.partition, epoch, exc)
            self.leads = True

    def become_follower(self, epoch: int) -> None:
        """Follow the partition's leader at `epoch` (given by the controller): the epoch is
        recorded for fencing, nothing is truncated and the epoch cache learns epochs only from
        the leader's batches (append_as_follower). From here on a leader's append raises
        NotLeaderOrFollowerError: the change is made under the append's lock, so no client
        batch lands after it stamped with `epoch`. An epoch below the current one raises
        FencedWriterError."""
        log = self._log
        self.require_local_writer("become a follower")
        with log.critical():
            if epoch < self.leader_epoch:
                raise FencedWriterError(
                    f"{log.topic}-{log.partition}: leader epoch {epoch} is older than the current"
                    f" epoch {self.leader_epoch}")
            self.leads = False
            self.leader_epoch = epoch

    def end_offset_for_epoch(self, epoch: int):
        """(epoch, end offset) for a follower's divergence check (Kafka's
        OffsetsForLeaderEpoch): the largest epoch <= `epoch` this log knows and the offset
        where the next epoch starts (the LEO for the latest)."""
        log = self._log
        with log.lock:
            return log.epoch_cache.end_offset_for(epoch, log.log_end_offset)

    # ------------------------------------------------------------------ truncation
    def truncate_to(self, offset: int, *, below_high_watermark: bool = False,
                    expected_end: int | None = None, follower_at: int | None = None) -> bool:
        """Remove every offset >= `offset` (a writer dropping uncommitted data, or a follower
        cutting where it diverged from the leader: the leader's `end_offset_for_epoch` of the
        follower's latest epoch). A cut below the HW removes committed data: it raises
        OffsetOutOfRangeError unless `below_high_watermark=True` says it is meant. The epoch
        cache loses its entries from `offset` on, also when `offset` is at or past the LEO.

        `expected_end`: do nothing and return False unless the LEO is that (checked under the
        writer's lock: a follower cuts only the log its decision was made on). Else True.
        `follower_at`: a follower's cut, made only while this replica follows at that leader
        epoch (else NotLeaderOrFollowerError: it leads now, or follows at another epoch)."""
        log = self._log
        with log.critical():
            if follower_at is not None:
                self.require_follower(follower_at, "truncate")
            if expected_end is not None and log.log_end_offset != expected_end:
                return False
            if offset >= log.log_end_offset:
                log.epoch_cache.truncate_from_end(offset)
                return True
            committed = log.high_watermark
            if offset < committed and not below_high_watermark and offset < log.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"{log.topic}-{log.partition}: truncating to offset {offset} would cut committed"
                    f" data below the high watermark {committed} (pass below_high_watermark=True to"
                    " mean it)", topic=log.topic, partition=log.partition, offset=offset,
                    log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset)
            log.truncate_locked(offset)
            if log.high_watermark < committed:
                log.segment_store.hw_lowered()
            if not log.gapless:
                # What is appended from `offset` on is dirty (Kafka's maybeTruncateCheckpoint).
                CleanerCheckpoint(log).truncate(offset)
            return True

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
        log = self._log
        self.require_local_writer("truncate fully")
        start = offset if log_start_offset is None else min(log_start_offset, offset)
        with log.critical():
            if follower_at is not None:
                self.require_follower(follower_at, "truncate fully")
            if expected_end is not None and log.log_end_offset != expected_end:
                return False
            if producer_snapshot is not None:         # checked before anything changes
                from logcore.log.producer_snapshot import decode_snapshot
                decode_snapshot(producer_snapshot, source=snapshot_source)
            log.state_store.commit(high_watermark=offset, log_start_offset=start,
                                   first_segment_base=offset, epoch=self.leader_epoch)
            log.restart_at(offset, start)
            log.epoch_cache.clear()
            for epoch, epoch_start in epochs or ():
                log.epoch_cache.assign(epoch, epoch_start)
            if epochs and start > 0:
                log.epoch_cache.truncate_from_start(start)
            if producer_snapshot is not None:
                log.producer_state.restore_snapshot(offset, producer_snapshot, source=snapshot_source)
            else:
                log.producer_state.truncate_fully_and_start_at(offset)
            log.set_high_watermark(offset)
            return True
