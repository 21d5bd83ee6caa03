"""What the log cleaner (logcore.cleaner) reads of a log and does to it: a consistent snapshot
of its offsets, the producers' last offsets, the end of a pass recorded in the cleaner
checkpoint, and the swap of cleaned segments in (Kafka's replaceSegments).

`CleanerAccess` is a part of `Log` (logcore.log.log), holding the log: every step runs under
the log's lock, as the writer changes what it reads together.
"""
from __future__ import annotations

from logcore.log.cleaner_checkpoint import CleanerCheckpoint
from logcore.log.segment import LogSegment


class CleanerAccess:
    """The cleaner's view of one log, read and changed under the log's lock."""

    def __init__(self, log):
        self._log = log

    def cleaning_snapshot(self) -> tuple[list[LogSegment], int, int, int, int]:
        """(segments, log start offset, LEO, HW, LSO), read as one snapshot under the log's lock:
        the writer changes them together."""
        log = self._log
        with log.lock:
            return (list(log.segments), log.log_start_offset, log.log_end_offset, log.high_watermark,
                    log.last_stable_offset)

    def end_cleaning(self, truncations: int, first_dirty_offset: int) -> bool:
        """Write a finished pass's end to the cleaner checkpoint, under the log's lock, unless
        the log was truncated (`truncations`: the count read when the pass began) or closed
        meanwhile: a truncation has lowered the checkpoint and the pass must not raise it again.
        False when it was not written."""
        log = self._log
        with log.lock:
            if log.truncations != truncations or log.is_closed:
                return False
            CleanerCheckpoint(log).write(first_dirty_offset)
            return True

    def producer_last_offsets(self) -> dict[int, tuple[int, int]]:
        """producer id -> (last data offset, producer epoch) of the writer's producer state, read
        under the log's lock (the writer adds producers meanwhile)."""
        log = self._log
        with log.lock:
            return {pid: (entry.last_data_offset, entry.producer_epoch)
                    for pid, entry in log.producer_state.producers.items()}

    def has_aborted_transactions(self, base_offset: int) -> bool:
        """Whether the segment at `base_offset` has a transaction index (aborted transactions)."""
        return self._log.log_segments.has_txn_index(base_offset)

    def replace_segments(self, replacements: list, swap_files, truncations: int | None = None) -> bool:
        """Kafka's replaceSegments. `replacements`: (old segments, new base offset, new stem or
        None, whether the new segment has aborted transactions) for runs of consecutive
        segments of this log. Under the writer's critical section: False, changing nothing,
        when the log was closed or any old segment left it (truncation or retention) or, given
        `truncations` (the count read when the pass began), when the log was truncated since (a
        follower cut where it diverged from its leader: the pass's offset map may hold records
        that are gone); else `swap_files()` (the caller's crash-safe file steps) runs, then the
        new segments, opened read-only, take the old ones' places. Raises ReadOnlyLogError on a
        reader."""
        log = self._log
        with log.lock:
            if log.is_closed:
                return False           # closed under the pass (its folder may be gone)
            with log.critical():
                if truncations is not None and truncations != log.truncations:
                    return False
                current = {id(seg) for seg in log.segments}
                if any(id(seg) not in current for old, *_ in replacements for seg in old):
                    return False
                swap_files()
                log.local.replace_runs(replacements)
                return True
