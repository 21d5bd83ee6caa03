"""The segment list of one log (Kafka's LogSegments): the segments in offset order, their base
offsets and which of them have a transaction index (`.txnindex`, aborted transactions).

The three used to be kept in step by hand wherever a segment came or went; this object is now
their only writer. Readers get the live lists (`list`, `bases`) and must not change them: a
write either changes them in place (append, replace the active segment) or swaps in new lists
(trim, reset), as a thread reading without the log's lock saw before.
"""
from __future__ import annotations

import bisect
from typing import Iterable

from logcore.log.segment import LogSegment


class LogSegments:
    """The only writer of a log's segment list, base offsets and transaction-index bases."""

    def __init__(self, segments: Iterable[LogSegment] = (), txn_bases: Iterable[int] = ()):
        self._segments: list[LogSegment] = list(segments)
        self._bases: list[int] = [s.base_offset for s in self._segments]
        self._txn_bases: set[int] = set(txn_bases)
        self._ts_running: list[int] | None = None       # running max timestamps of the sealed segments

    # ------------------------------------------------------------------ reading
    @property
    def list(self) -> list[LogSegment]:
        """The segments, oldest first (the live list: read it, never change it)."""
        return self._segments

    @property
    def bases(self) -> list[int]:
        """Their base offsets (the live list: read it, never change it)."""
        return self._bases

    def __len__(self) -> int:
        return len(self._segments)

    def __bool__(self) -> bool:
        return bool(self._segments)

    def __iter__(self):
        return iter(self._segments)

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    def index_of(self, offset: int) -> int:
        """The index of the segment that holds `offset` (the last with base <= offset; 0 below the first)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def position_of(self, base: int) -> int | None:
        """The index of the segment whose base is `base`, or None."""
        i = bisect.bisect_left(self._bases, base)
        return i if i < len(self._bases) and self._bases[i] == base else None

    def has_txn_index(self, base: int) -> bool:
        return base in self._txn_bases

    @property
    def any_txn_index(self) -> bool:
        return bool(self._txn_bases)

    def txn_bases_from(self, start: int) -> list[int]:
        """The bases >= `start` of segments that have a transaction index, ascending."""
        return sorted(b for b in self._txn_bases if b >= start)

    @property
    def txn_bases(self) -> frozenset[int]:
        return frozenset(self._txn_bases)

    def sealed_running_max_timestamps(self) -> list[int]:
        """Running maximum of the largest timestamps of every segment but the active one; kept
        until the list changes (a sealed segment's timestamps do not)."""
        if self._ts_running is None:
            running, current = [], -1
            for seg in self._segments[:-1]:
                current = max(current, seg.largest_timestamp)
                running.append(current)
            self._ts_running = running
        return self._ts_running

    # ------------------------------------------------------------------ writing
    def _changed(self) -> None:
        self._ts_running = None

    def add(self, seg: LogSegment) -> None:
        """A new last segment (a roll, an adopted file)."""
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._changed()

    def replace_active(self, seg: LogSegment) -> None:
        """The last segment reopened (sealed, or writable again) under the same base."""
        self.replace_at(len(self._segments) - 1, seg)

    def replace_at(self, i: int, seg: LogSegment) -> None:
        """Segment i reopened under the same base (an index rebuilt, a file replaced)."""
        assert seg.base_offset == self._bases[i]
        self._segments[i] = seg
        self._changed()

    def pop_active(self) -> LogSegment:
        """Take the last segment out (an empty active segment another takes the place of)."""
        seg = self._segments.pop()
        self._bases.pop()
        self._changed()
        return seg

    def replace_run(self, old: list[LogSegment], new: LogSegment, *, has_txn_index: bool) -> None:
        """Consecutive segments `old` become `new` (the cleaner's replaceSegments)."""
        i = next(k for k, seg in enumerate(self._segments) if seg is old[0])
        segments = list(self._segments)
        segments[i:i + len(old)] = [new]
        txn = self._txn_bases - {seg.base_offset for seg in old}
        if has_txn_index:
            txn.add(new.base_offset)
        self._set(segments, txn)

    def keep(self, segments: Iterable[LogSegment]) -> None:
        """Keep only `segments` (a subset, in order): the others left the log; their
        transaction-index bases go with them."""
        segments = list(segments)
        kept = {s.base_offset for s in segments}
        gone = {s.base_offset for s in self._segments if s.base_offset not in kept}
        self._set(segments, self._txn_bases - gone)

    def keep_first(self, count: int) -> None:
        """Keep the first `count` segments (a recovery cut the rest)."""
        self.keep(self._segments[:count])

    def remove_first(self, count: int) -> list[LogSegment]:
        """Take the oldest `count` segments out (retention, the log start offset moved); returns them."""
        doomed = self._segments[:count]
        self.keep(self._segments[count:])
        return doomed

    def clear(self) -> None:
        self._set([], set())

    def reset(self, segments: Iterable[LogSegment], txn_bases: Iterable[int] | None = None) -> None:
        """A new list, in offset order (a reader's refresh, a load); `txn_bases` None keeps the
        transaction-index bases but those of segments no longer listed."""
        segments = list(segments)
        if txn_bases is None:
            self.keep(segments)
        else:
            self._set(segments, set(txn_bases))

    def set_txn_bases(self, txn_bases: Iterable[int]) -> None:
        """Which segments have a transaction index, as a listing of the folder found it."""
        self._txn_bases = set(txn_bases)

    def mark_txn_index(self, base: int) -> None:
        """The segment at `base` got its first aborted-transaction entry."""
        self._txn_bases.add(base)

    def _set(self, segments: list[LogSegment], txn_bases: set[int]) -> None:
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._txn_bases = txn_bases
        self._changed()
