"""A reader's range-bounded open: what a read of offsets [start, end) needs, and nothing else.

`LogRoot.log(topic, partition, read_range=(start, end))` (Spark source tasks, `seglog consume`)
loads the committed state (HW, log start), lists the segment names (a `LogSegment` per name,
which opens no file), and prepares only the segments that a read of the range touches: the
index check and, after an unclean shutdown, the recovery scan run on those, plus the last
segment when the HW lies in it (the HW is capped at the log end). The aborted-transaction
indexes are opened on use. Segments outside the range stay unprepared: a read that goes there
anyway still works, with the checks a read does on use (the offset index entry it uses, the
batches it returns).

No producer-state rebuild at open. The last stable offset of a read_committed reader comes
from the newest producer-state snapshot at or below the HW when that settles it: every
transaction still open at the HW began at or after the snapshot's offset or is listed in it
as open, so the LSO is at least min(snapshot offset, first offsets of its open transactions).
On an object store (no snapshots) the writer records the LSO with each commit's HW.
When that floor reaches the range end (or the HW), reads of the range are bounded exactly as
with the true LSO; otherwise the producer state is rebuilt then (today's full replay).

`RangePlan` is a mixin of the loader (logcore.log.log_loader); `LsoFloor` a part of `Log`.
"""
from __future__ import annotations

import bisect

from logcore.log.producer_snapshot import load_latest_snapshot


class RangePlan:
    """Which segments a load prepares (a mixin of the loader, `LogLoader`)."""

    _read_range: tuple[int | None, int | None] | None = None
    _needed: set[int] | None = None             # base offsets of the prepared segments (None: all)

    def _needs(self, seg) -> bool:
        """Whether the open prepares `seg` (index check, recovery scan)."""
        return self._needed is None or seg.base_offset in self._needed

    def _plan_range(self, state) -> None:
        """The base offsets of the segments a read of the range touches (self.bases set)."""
        if self._read_range is None or not self.bases:
            return
        start, end = self._read_range
        hw = state.high_watermark if state.high_watermark is not None else 0
        if start is None:
            start = hw                      # from the HW on (a consumer's "latest")
        start = max(start, state.log_start_offset or 0)
        bases = self.bases
        first = max(0, bisect.bisect_right(bases, start) - 1)
        last = len(bases) - 1 if end is None else max(first, bisect.bisect_right(bases, max(start, end - 1)) - 1)
        # The segment after the range too: its base ends the range's last segment (strict reads).
        needed = set(bases[first:last + 2])
        if max(hw, state.log_start_offset or 0) > bases[-1]:
            needed.add(bases[-1])           # the HW lies in the last segment: the LEO caps it
        self._needed = needed


class LsoFloor:
    """A range-bounded reader's last stable offset without its producer state (one per `Log`):
    the LSO an object store's last commit recorded, or the floor of the newest producer-state
    snapshot at or below the HW, when either settles it for the range."""

    def __init__(self, storage, directory: str, read_range: tuple[int | None, int | None] | None):
        self._storage = storage
        self._dir = directory
        self._end = read_range[1] if read_range is not None else None
        self._stored: int | None = None         # PartitionState.last_stable_offset (object stores)
        self._floor: int | None = None
        self._floor_known = False

    def record_stored(self, last_stable_offset: int | None) -> None:
        """The LSO the partition state records now (a load, a reader's refresh); a newer
        snapshot may settle the LSO too."""
        self._stored = last_stable_offset
        self._floor_known = False

    def settle(self, high_watermark: int, log_start_offset: int) -> int | None:
        """The LSO, or None when neither floor settles it (the caller rebuilds the producer state)."""
        hw = high_watermark
        need = hw if self._end is None else min(self._end, hw)
        stored = self._stored if self._stored is not None else -1
        if stored >= need:                  # what an object store's last commit recorded
            return min(stored, hw)
        if not self._floor_known:
            loaded = load_latest_snapshot(self._storage, self._dir, hw, above_offset=log_start_offset)
            self._floor = self._floor_of_snapshot(loaded)
            self._floor_known = True
        floor = max(stored, self._floor)
        if floor >= need:
            return min(floor, hw)
        return None

    @staticmethod
    def _floor_of_snapshot(loaded) -> int:
        """min(offset, first offsets of its open transactions) of a producer-state snapshot."""
        if loaded is None:
            return -1
        offset, entries = loaded
        open_firsts = [e.current_txn_first_offset for e in entries if e.current_txn_first_offset is not None]
        return min([offset, *open_firsts])
