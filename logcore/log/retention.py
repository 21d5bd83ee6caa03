"""Retention policy: which of a log's oldest segments go (Kafka's `deleteOldSegments`).

The policy (`deletable_segments`) is pure: it looks at a description of the segments and the
log's offsets and says how many of the oldest segments are deletable and why. `LogRetention`, a
part of `Log`, applies it (`apply_retention`), moves the log start offset (DeleteRecords) and
removes the files of deleted segments after file.delete.delay.ms; the log itself deletes the
segments it is told to (`LogRetention.delete_oldest_locked`: the log start offset checkpointed
first, `Log.checkpoint_log_start_offset`, files after). Kafka applies
three breaches in order, each a walk from the oldest segment that stops at the first segment that
does not qualify: the log start offset (a segment wholly below it), the size limit
(`retention.bytes`) and the time limit (`retention.ms`, by the segment's largest timestamp).
A segment is never deletable unless all of it is below the high watermark, and an empty last
segment never goes (a log keeps at least one segment; the caller rolls a new empty one when
every segment goes).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

from logcore.errors import OffsetOutOfRangeError, PolicyViolationError
from logcore.log.clock import now_ms as _now_ms

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know


BREACH_LOG_START = "log start offset"
BREACH_SIZE = "retention.bytes"
BREACH_TIME = "retention.ms"


@dataclass(frozen=True)
class SegmentInfo:
    """What the policy needs to know of one segment."""
    base_offset: int
    next_offset: int              # the offset after its last batch (its base when empty)
    size: int                     # bytes of its .log
    largest_timestamp: int        # ms; the file's modification time when no record has one


@dataclass(frozen=True)
class RetentionDecision:
    count: int                                      # the oldest `count` segments go
    reasons: tuple[str, ...] = ()                   # one breach name per deleted segment


@dataclass(frozen=True)
class RetentionResult:
    """What one retention pass (or delete_records_before) did to a partition."""
    segments_deleted: int
    bytes_deleted: int
    log_start_offset: int                           # the log start offset after the pass
    deleted_base_offsets: tuple[int, ...] = ()
    reasons: tuple[str, ...] = field(default_factory=tuple)


def deletable_segments(segments: Sequence[SegmentInfo], *, high_watermark: int,
                       log_start_offset: int, now_ms: int, retention_ms: int,
                       retention_bytes: int, delete_policy: bool) -> RetentionDecision:
    """How many of the oldest `segments` (ascending base offsets) retention deletes.

    With `delete_policy` False (a `compact`-only topic) only the log-start-offset breach applies.
    """
    reasons: list[str] = []
    start = 0

    def walk(predicate, reason: str) -> None:
        nonlocal start
        i = start
        while i < len(segments):
            seg = segments[i]
            upper = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
            last = i == len(segments) - 1
            if high_watermark < upper or (last and seg.size == 0) or not predicate(i, seg):
                break
            reasons.append(reason)
            i += 1
        start = i

    walk(lambda i, seg: i + 1 < len(segments) and segments[i + 1].base_offset <= log_start_offset,
         BREACH_LOG_START)
    if delete_policy and retention_bytes >= 0:
        total = sum(s.size for s in segments[start:])
        excess = total - retention_bytes

        def over_size(_i: int, seg: SegmentInfo) -> bool:
            nonlocal excess
            if excess - seg.size < 0:
                return False
            excess -= seg.size
            return True

        if excess >= 0:
            walk(over_size, BREACH_SIZE)
    if delete_policy and retention_ms >= 0:
        walk(lambda _i, seg: now_ms - seg.largest_timestamp > retention_ms, BREACH_TIME)
    return RetentionDecision(start, tuple(reasons))


class LogRetention:
    """Retention, DeleteRecords (log start offset moves) and delayed deletion of segment files:
    a part of `Log` that decides which segments go and deletes them (`delete_oldest_locked`)."""

    def __init__(self, log):
        self._log = log

    # ------------------------------------------------------------------ retention
    def apply_retention(self, now_ms: int | None = None) -> RetentionResult:
        """Delete the oldest whole segments that breach the log start offset, retention.bytes or
        retention.ms (the last two only with `delete` in cleanup.policy), never anything at or
        above the high watermark. When every segment goes, a new empty active segment is rolled
        first, as Kafka does. The log start offset and its checkpoint move before any file goes;
        then the files are renamed `.deleted` (local disk) or marked deleted (object stores) and
        removed after file.delete.delay.ms (`delete_expired_files`)."""
        now = _now_ms() if now_ms is None else now_ms
        with self._log.critical():
            if self._log.tiered or self._remote_copy_disabled_with_remote_data():
                return self._apply_local_retention_locked(now)
            decision = deletable_segments(
                self._segment_infos(), high_watermark=self._log.high_watermark,
                log_start_offset=self._log.log_start_offset, now_ms=now,
                retention_ms=self._log.config.retention_ms, retention_bytes=self._log.config.retention_bytes,
                delete_policy=self._log.config.delete)
            if decision.count == 0:
                return RetentionResult(0, 0, self._log.log_start_offset)
            if decision.count == len(self._log.segments):
                self._log.roll_to(self._log.log_end_offset)
            return self.delete_oldest_locked(decision.count, self._log.log_start_offset, now,
                                                  decision.reasons)

    def _remote_copy_disabled_with_remote_data(self) -> bool:
        """remote.log.copy.disable=true while remote segments remain: local copies go by local
        retention (equal to the total one then) and the remote tier's expiration moves the log
        start offset, oldest first, so the remote data stays readable until it expires. Once it
        has, total retention runs on the local segments as for a local topic."""
        remote = self._log.remote
        if remote is None or not self._log.config.remote_storage_enable:
            return False
        remote.refresh()
        end = remote.end_offset()
        return end is not None and end >= self._log.log_start_offset

    def _apply_local_retention_locked(self, now: int) -> RetentionResult:
        """Tiered storage (Kafka's local retention): delete local copies of segments already in
        the remote tier that breach local.retention.ms / local.retention.bytes (-2: retention.*);
        the log start offset stays where the remote segments start. Total retention is the
        remote tier's (logcore.tiered.remote_log_manager), which moves the log start offset."""
        self._log.remote.refresh()
        highest = self._log.remote.end_offset()
        copied_end = highest + 1 if highest is not None else 0
        # A segment may go only when all of it is in the remote tier, or below the log start offset.
        bound = min(self._log.high_watermark, max(copied_end, self._log.log_start_offset))
        decision = deletable_segments(
            self._segment_infos(), high_watermark=bound, log_start_offset=self._log.log_start_offset,
            now_ms=now, retention_ms=self._log.config.effective_local_retention_ms,
            retention_bytes=self._log.config.effective_local_retention_bytes, delete_policy=True)
        if decision.count == 0:
            return RetentionResult(0, 0, self._log.log_start_offset)
        reasons = tuple(f"local {r}" if r != "log start offset" else r for r in decision.reasons)
        return self.delete_oldest_locked(decision.count, self._log.log_start_offset, now, reasons,
                                              move_start=False)

    def move_log_start_offset(self, offset: int, reason: str = "log start offset") -> RetentionResult:
        """Move the log start offset up to `offset` (at most the HW) and delete the local
        segments wholly below it, whatever the cleanup policy: the remote tier's total retention
        expiring remote segments. A lower offset than the current one changes nothing."""
        now = _now_ms()
        with self._log.critical():
            target = min(offset, self._log.high_watermark)
            if target <= self._log.log_start_offset:
                return RetentionResult(0, 0, self._log.log_start_offset)
            count = self._segments_wholly_below(target)
            return self.delete_oldest_locked(count, target, now, (reason,) * count)

    def delete_records_before(self, offset: int) -> RetentionResult:
        """Kafka's DeleteRecords: move the log start offset up to `offset` (-1: the high
        watermark), at most the high watermark, and delete the segments wholly below it.

        PolicyViolationError unless cleanup.policy contains `delete`; OffsetOutOfRangeError for an
        offset below 0 (other than -1) or above the high watermark. A lower offset than the
        current log start offset changes nothing."""
        if not self._log.config.delete:
            raise PolicyViolationError(
                f"cannot delete records of {self._log.topic}-{self._log.partition}: its cleanup.policy is"
                f" {','.join(self._log.config.cleanup_policy)}, and deleting records needs `delete`")
        now = _now_ms()
        with self._log.critical():
            target = self._log.high_watermark if offset == -1 else offset
            if target < 0 or target > self._log.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self._log.topic}-{self._log.partition} before offset {offset}:"
                    f" it must be between 0 and the high watermark {self._log.high_watermark} (or -1)",
                    topic=self._log.topic, partition=self._log.partition, offset=offset,
                    log_start_offset=self._log.log_start_offset, log_end_offset=self._log.log_end_offset)
            if target <= self._log.log_start_offset:
                return RetentionResult(0, 0, self._log.log_start_offset)
            count = self._segments_wholly_below(target)
            return self.delete_oldest_locked(count, target, now, ("delete records",) * count)

    def delete_oldest_locked(self, count: int, start_offset: int, now: int,
                             reasons: tuple[str, ...], *, move_start: bool = True) -> RetentionResult:
        """In the critical section: delete the oldest `count` segments and move the log start
        offset to at least `start_offset` and the first remaining segment's base: checkpoint
        first, files after.

        move_start=False (tiered storage, local retention): the segments' data lives on in the
        remote tier, so the log start offset stays; the checkpoint still goes first, as it must
        now record a log start offset below the first local segment."""
        log = self._log
        segments = log.segments
        doomed = segments[:count]
        new_start = max(log.log_start_offset, start_offset,
                        segments[count].base_offset if 0 < count < len(segments) and move_start
                        else start_offset)
        if new_start > log.log_start_offset or (not move_start and count):
            log.checkpoint_log_start_offset(new_start, segments[0 if move_start else count].base_offset)
        log.log_segments.remove_first(count)       # files after (LocalLog.retire)
        if not log.read_only:
            log.epoch_cache.truncate_from_start(log.log_start_offset)
            # Snapshots below the first local segment are no use locally (a remote segment
            # carries its own); the one at the first local base is where replay starts.
            log.producer_state.delete_snapshots_before(log.local_log_start_offset)
        log.producer_state.on_log_start_offset_incremented(log.log_start_offset)
        deleted_bytes = log.local.retire(doomed, now)
        if doomed:
            logger.info("%s-%d: deleted %d segments (%d bytes) below offset %d (%s)", log.topic,
                        log.partition, len(doomed), deleted_bytes, log.log_start_offset,
                        ", ".join(sorted(set(reasons))))
        return RetentionResult(len(doomed), deleted_bytes, log.log_start_offset,
                               tuple(s.base_offset for s in doomed), reasons)

    def _segments_wholly_below(self, offset: int) -> int:
        """How many of the oldest segments end at or below `offset` (the active one never counts)."""
        count = 0
        while count + 1 < len(self._log.segments) and self._log.segments[count + 1].base_offset <= offset:
            count += 1
        return count

    def _segment_infos(self) -> list[SegmentInfo]:
        infos = []
        for i, seg in enumerate(self._log.segments):
            ts = seg.largest_timestamp
            if ts < 0:
                # Kafka's fallback for a segment without timestamps: the file's modification time.
                ts = self._log.segment_store.modified_ms(seg)
            last = i == len(self._log.segments) - 1
            following = seg.next_offset() if last else self._log.segments[i + 1].base_offset
            infos.append(SegmentInfo(seg.base_offset, following, seg.size(), ts))
        return infos

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Remove deleted segments whose file.delete.delay.ms has passed; returns how many.

        Local disk: `*.deleted` files by their change time (set by the rename). Object stores:
        segments with a `.log.deleted` marker older than the delay, and segment objects below
        the log start offset that have no marker yet (a pass interrupted between the log start
        offset and the marker) get one now."""
        now = _now_ms() if now_ms is None else now_ms
        with self._log.critical():
            return self._log.segment_store.delete_expired(now)
