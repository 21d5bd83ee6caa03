"""A reader following another process's writer: what was committed since it opened (new
segments, a moved HW or log start, segments the cleaner replaced).

`LogRefresh` (one per reader `Log`) computes a `RefreshedView` from the committed state and the
folder's listing; the `Log` applies it under its lock (`Log.refresh`). What differs between
local disk and an object store (which held segments are still valid) is the segment store's.
"""
from __future__ import annotations

from dataclasses import dataclass

from logcore.log.log_segments import LogSegments
from logcore.log.segment import LOG_SUFFIX, parse_segment_name


@dataclass(frozen=True)
class RefreshedView:
    """What a refresh found: applied to the reader `Log` in one place."""
    log_segments: LogSegments       # the segments to hold now (those wholly below the log start dropped)
    log_start_offset: int
    committed_hw: int | None        # the stored HW (None: none stored)
    stored_lso: int | None          # the LSO an object store's last commit recorded


class LogRefresh:
    """A reader's view of another process's commits. Owns what it saw last (to tell when the
    remote tier's view may be stale)."""

    def __init__(self, state_store, listing, segment_store, epoch_cache, remote=None):
        self.state_store = state_store
        self.listing = listing
        self.segment_store = segment_store
        self.epoch_cache = epoch_cache
        self.remote = remote
        self._seen_start_state: int | None = None
        self._seen_first_base: int | None = None

    def attach_remote(self, remote) -> None:
        self.remote = remote

    def view(self, segments: list, high_watermark: int) -> RefreshedView:
        """The reader's segments and offsets now; `segments` and `high_watermark`: what it holds."""
        state = self.state_store.load()
        names = self.listing.list_files()
        bases = sorted({p[0] for p in map(parse_segment_name, names) if p and p[1] == LOG_SUFFIX})
        plan, txn_bases = self.listing.segment_plan(names, bases, state)
        held = self.segment_store.refreshed_segments(list(segments), plan, bases, state, high_watermark)
        log_segments = LogSegments(sorted(held, key=lambda s: s.base_offset), txn_bases)
        for seg in log_segments.list[-2:]:
            seg.forget_next_offset()        # the writer may have appended since
        self.listing.drop_unreachable_segments(log_segments, self.epoch_cache, delete=False)
        first_base = log_segments.list[0].base_offset if log_segments else 0
        if self.remote is not None and (state.log_start_offset != self._seen_start_state
                                        or first_base != self._seen_first_base):
            # Local copies went (local retention) or remote segments expired (the log start
            # offset moved): the remote segments this reader knows may be stale.
            self.remote.refresh()
        self._seen_start_state, self._seen_first_base = state.log_start_offset, first_base
        start = self.listing.start_offset(self.listing.checked_start(state, log_segments.bases), first_base)
        self.listing.drop_segments_below_start(log_segments, start, delete_files=False)
        return RefreshedView(log_segments, start, state.high_watermark, state.last_stable_offset)
