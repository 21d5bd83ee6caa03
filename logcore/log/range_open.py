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

`RangePlan` is a mixin of the loader (logcore.log.log_loader), `RangeBoundedOpen` of `Log`.
"""
from __future__ import annotations

import bisect

from logcore.log.producer_state import load_latest_snapshot


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


class RangeBoundedOpen:
    """A range-bounded reader's lazily settled last stable offset (a mixin of `Log`)."""

    _read_range: tuple[int | None, int | None] | None = None
    _producer_state_loaded = True
    _lso_floor: int | None = None
    _lso_floor_known = False
    _stored_lso: int | None = None              # PartitionState.last_stable_offset (object stores)

    # ------------------------------------------------------------------ the last stable offset
    def _bounded_last_stable_offset(self) -> int | None:
        """The LSO of a range-bounded reader without its producer state, or None when the
        snapshot floor does not settle it (the caller rebuilds the producer state)."""
        hw = self.high_watermark
        end = self._read_range[1] if self._read_range is not None else None
        need = hw if end is None else min(end, hw)
        stored = self._stored_lso if self._stored_lso is not None else -1
        if stored >= need:                  # what an object store's last commit recorded
            return min(stored, hw)
        if not self._lso_floor_known:
            loaded = load_latest_snapshot(self.storage, self.dir, hw, above_offset=self.log_start_offset)
            self._lso_floor = self._floor_of_snapshot(loaded)
            self._lso_floor_known = True
        floor = max(stored, self._lso_floor)
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

    def _ensure_producer_state(self) -> None:
        """Rebuild the producer state of a range-bounded reader (first need of the exact LSO)."""
        if not self._producer_state_loaded:
            self._producer_state_loaded = True
            self._rebuild_producer_state()
