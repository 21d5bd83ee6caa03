"""The local part of a partition's log (Kafka's LocalLog, a part of `Log`): its segments as they
sit in the segment store, the roll, the flush policy and flush, and the recovery point (how far
the data is known to be fsynced) with the value the last commit recorded.

What readers see (HW, LSO, log start offset), the epoch cache and the producer state are the
`Log`'s (Kafka's UnifiedLog): this part knows nothing of them. A truncation here cuts segments
and the recovery point; the Log moves its offsets around it.
"""
from __future__ import annotations

import logging
import time

from logcore.log.clock import now_ms as _now_ms
from logcore.log.log_flush import PendingFlushes
from logcore.log.log_segments import LogSegments
from logcore.log.segment import LogSegment
from logcore.log.segment_data import SegmentExists
from logcore.errors import FencedWriterError, SegLogError
from logcore.records.batch import parse_header

logger = logging.getLogger(__name__)


def remove_fenced_leftover(storage, fence, seg: LogSegment, epoch: int) -> None:
    """Object store: a segment object is already at `seg`'s name. Either this writer is fenced
    (FencedWriterError), or a fenced writer (an older epoch) left an uncommitted segment there,
    whose objects are deleted so that the caller can publish again."""
    fence.check()
    head = storage.read(seg.log_path, 0, 61)
    if len(head) < 61 or parse_header(head).partition_leader_epoch >= epoch:
        raise FencedWriterError(f"segment {seg.log_path} was published by another writer")
    logger.warning("replacing %s left by a fenced writer", seg.log_path)
    # Its index objects go first: a reader must never pair them with our `.log`.
    for path in (seg.index_path, seg.time_index_path, seg.txn_index_path, seg.log_path):
        storage.delete(path)


class LocalLog:
    """Segments, roll, flush and recovery point of one log (one per `Log`)."""

    def __init__(self, storage, directory: str, config, log_segments: LogSegments, segment_store, fence, *,
                 persist_rebuilt_index: bool, gapless: bool):
        self._storage = storage
        self._dir = directory
        self._config = config
        self._segments = log_segments       # shared with the Log, which reads it on every append
        self._store = segment_store
        self._fence = fence                 # a writer's (None for a reader)
        self._persist_rebuilt_index = persist_rebuilt_index
        self._gapless = gapless
        # The flush policy (flush.messages / flush.ms), copied: read on every append.
        self._flush_messages = config.flush_messages
        self._flush_ms = config.flush_ms
        self._unflushed = 0
        self._last_flush_ms = _now_ms()
        # fsyncs done and their time (Kafka's LogFlushRateAndTimeMs; the broker's metrics read them)
        self.flushes = 0
        self.flush_seconds = 0.0
        self.recovery_point = 0
        self._recorded_recovery_point = 0       # the recovery point the last commit wrote
        self.pending_flushes = PendingFlushes()  # rolled segments not yet fsynced, in roll order

    def reconfigure(self, config, *, gapless: bool) -> None:
        """A changed topic config (Log.reconfigure): new segments and the flush policy follow it."""
        self._config = config
        self._gapless = gapless
        self._flush_messages = config.flush_messages
        self._flush_ms = config.flush_ms

    # ------------------------------------------------------------------ segments
    def new_segment(self, base_offset: int, *, writable: bool, in_memory: bool = False,
                    stem: str | None = None) -> LogSegment:
        """A segment of this log at `base_offset`, not yet in its list."""
        seg = LogSegment(self._storage, self._dir, base_offset,
                         index_interval_bytes=self._config.index_interval_bytes,
                         max_index_size=self._config.segment_index_bytes,
                         writable=writable, in_memory=in_memory, stem=stem)
        seg.persist_rebuilt_index = self._persist_rebuilt_index
        seg.contiguous = self._gapless
        return seg

    def roll_to(self, base_offset: int) -> LogSegment:
        """Seal the active segment and start a new one at `base_offset` (an empty active
        segment at that base is kept)."""
        segments = self._segments
        if segments:
            active = segments.active
            if active.writable and not active.in_memory:
                self._store.seal(active)
                segments.replace_active(self.new_segment(active.base_offset, writable=False))
            if active.size() == 0 and active.base_offset == base_offset:
                return segments.active
            if active.in_memory and active.size() > 0:
                raise SegLogError("cannot roll an unpublished object-store segment")
            if active.in_memory and active.size() == 0:
                segments.pop_active()
        seg = self._store.new_active(base_offset)
        # Its next offset and indexes are there before the segment is published: a thread that
        # reads the LEO without the lock must not compute it lazily while this writer appends,
        # or its stale result, stored after the append, hands the same offset out twice.
        seg.fill_lazy_state()
        segments.add(seg)
        self._store.rolled(base_offset)
        return seg

    def truncate_to(self, offset: int) -> bool:
        """Remove every offset >= `offset` (below the LEO) from the segments; the recovery point
        comes down with them. True when every segment went and the log restarted at `offset`."""
        self.pending_flushes.truncated()    # a pending flush of a rolled segment must not move the recovery point now
        segments = self._segments
        first = segments.list[0]
        keep = [s for s in segments if s.base_offset < offset or s is first]
        for seg in segments.list:
            if seg not in keep:
                seg.close()
                seg.delete_files()
        segments.keep(keep)
        last = segments.active
        self.recovery_point = min(self.recovery_point, offset)
        if last.base_offset >= offset:
            last.close()
            last.delete_files()
            segments.clear()
            self.roll_to(offset)
            return True
        self._store.truncate_active(offset)
        return False

    def restart_at(self, offset: int) -> None:
        """Every segment goes and the log restarts, empty, at `offset` (synced to there)."""
        self.pending_flushes.truncated()    # a pending flush of a removed segment moves nothing
        self.pending_flushes.close_all()
        for seg in self._segments.list:
            seg.close()
            seg.delete_files()
        self._segments.clear()
        self.roll_to(offset)
        self.recovery_point = offset

    def retire(self, doomed: list[LogSegment], now: int) -> int:
        """The files of segments already out of the list go (renamed `*.deleted` until
        file.delete.delay.ms passes, or at once); returns their bytes."""
        deleted_bytes = 0
        for seg in doomed:
            deleted_bytes += seg.size()
            seg.close()
            self._store.retire_segment(seg.base_offset, now)
        if self._config.file_delete_delay_ms == 0:
            for seg in doomed:
                self._store.remove_retired(seg.base_offset)
        return deleted_bytes

    def replace_runs(self, replacements: list) -> None:
        """The cleaner's swap (its files already in place): each run of old segments gives way to
        one new read-only segment. `replacements`: (old segments, new base, new stem or None,
        whether the new segment has aborted transactions)."""
        for old, base, stem, has_aborted in replacements:
            self._segments.replace_run(old, self.new_segment(base, writable=False, stem=stem),
                                       has_txn_index=has_aborted)

    def publish(self, seg: LogSegment, epoch: int) -> None:
        """Object store: publish `seg` (If-None-Match) for a writer at `epoch`; a segment a
        fenced writer left at its base is replaced, one of a newer writer fences this one."""
        try:
            seg.publish()
        except SegmentExists:
            remove_fenced_leftover(self._storage, self._fence, seg, epoch)
            seg.in_memory = True
            seg.writable = True
            seg.publish()

    # ------------------------------------------------------------------ flush and recovery point
    def loaded(self, recovery_point: int, recorded: int) -> None:
        """The recovery point a load found, and the one the partition's checkpoint holds."""
        self.recovery_point = recovery_point
        self._recorded_recovery_point = recorded

    @property
    def recovery_point_unrecorded(self) -> bool:
        """The recovery point moved since the last commit recorded it."""
        return self.recovery_point != self._recorded_recovery_point

    def recovery_point_recorded(self) -> None:
        """A commit wrote the current recovery point."""
        self._recorded_recovery_point = self.recovery_point

    def add_unflushed(self, records: int) -> None:
        self._unflushed += records

    def flush_due(self, records: int, now: int) -> bool:
        return self._unflushed + records >= self._flush_messages or now - self._last_flush_ms >= self._flush_ms

    def maybe_flush(self, now: int) -> None:
        if self._unflushed >= self._flush_messages or now - self._last_flush_ms >= self._flush_ms:
            self.flush_locked()

    def flush_locked(self) -> None:
        """In the critical section: fsync what was appended (the rolled segments the flusher has
        not synced yet, then the segment store's flush); the recovery point moves to the LEO."""
        started = time.perf_counter()
        self.sync_rolled_segments()
        if self._store.flush() and self._segments:
            self.recovery_point = self._segments.active.next_offset()
        self.flushes += 1
        self.flush_seconds += time.perf_counter() - started
        self._unflushed = 0
        self._last_flush_ms = _now_ms()

    def rolled_segments_synced(self) -> None:
        """The flusher synced rolled segments: the recovery point passes those synced in order."""
        self._move_recovery_point(self.pending_flushes.synced_end())

    def sync_rolled_segments(self) -> None:
        """fsync every rolled segment the flusher has not synced yet, here and now."""
        self._move_recovery_point(self.pending_flushes.sync_all())

    def _move_recovery_point(self, end: int | None) -> None:
        if end is not None:
            self.recovery_point = max(self.recovery_point, end)
