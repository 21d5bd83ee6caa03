"""A reader following another process's writer: `Log.refresh` picks up what was committed since
(new segments, a moved HW or log start, segments the cleaner replaced).

A mixin of `Log` (logcore.log.log).
"""
from __future__ import annotations

import os
import time

from logcore.errors import ResourceNotFoundError
from logcore.log.segment import LOG_SUFFIX, parse_segment_name, segment_name
from logcore.log.log_reader import _READ_ATTEMPTS


class LogRefresh:
    """A reader's view of another process's commits."""

    def _refreshed_cleaned_objects(self, plan: list[tuple[int, str | None]]) -> list:
        """The segment list of an object store's cleaned partition, by the segment plan."""
        # Cleaned segments are immutable under their unique names; an original at or above the
        # HW this reader knew may have been replaced by a new writer: open it afresh.
        known = {s.stem: s for s in self.segments
                 if s.base_offset < self.high_watermark or s.stem != segment_name(s.base_offset, "")}
        return [known.get(stem or segment_name(base, "")) or self._new_segment(base, writable=False, stem=stem)
                for base, stem in plan]

    def _without_replaced_local_segments(self) -> list:
        """Local disk: the segment list, with segments whose `.log` file was replaced (a cleaned
        segment swapped in under the same name) opened afresh; the listing's inode numbers tell,
        without a stat per file."""
        inodes = {}
        try:
            with os.scandir(self.storage.local_path(self.dir)) as it:
                for entry in it:
                    if entry.name.endswith(LOG_SUFFIX) and parse_segment_name(entry.name):
                        inodes[int(entry.name[:20])] = entry.inode()
        except FileNotFoundError:
            return list(self.segments)
        keep = []
        seen = {}
        for seg in self.segments:
            inode = inodes.get(seg.base_offset)
            known = self._seen_inodes.get(id(seg)) or getattr(seg.data, "inode", None)
            if known is not None and inode is not None and known != inode:
                seg = self._new_segment(seg.base_offset, writable=False)
            if inode is not None:
                seen[id(seg)] = inode
            keep.append(seg)
        self._seen_inodes = seen        # only segments still held: their ids are not reused
        return keep

    # ------------------------------------------------------------------ reading
    def refresh(self) -> None:
        """Readers: pick up new segments and the latest committed offsets (another process writes)."""
        if self.writer:
            return
        for attempt in range(_READ_ATTEMPTS):
            try:
                return self._refresh_once()
            except ResourceNotFoundError:
                # A segment file went away between the listing and the scan (a cleaner swap or
                # retention): list again.
                if attempt == _READ_ATTEMPTS - 1:
                    raise
                time.sleep(0.01 * attempt)

    def _refresh_once(self) -> None:
        with self._lock:
            state = self.state_store.load()
            names = self._list_files()
            bases = sorted({p[0] for p in map(parse_segment_name, names) if p and p[1] == LOG_SUFFIX})
            plan, txn_bases = self._segment_plan(names, bases, state)
            segments = self._without_replaced_local_segments() if self.storage.is_local else list(self.segments)
            if not self.storage.is_local and (
                    state.cleaned or any(s.stem != segment_name(s.base_offset, "") for s in segments)):
                segments = self._refreshed_cleaned_objects(plan)
            else:
                if not self.storage.is_local:
                    # An object segment at or above the HW this reader knew may since have been
                    # replaced (a new writer replacing a fenced writer's leftover): open those
                    # afresh. Segments below the HW are final.
                    segments = [s for s in segments if s.base_offset < self.high_watermark]
                known = {s.base_offset for s in segments}
                listed = set(bases)
                segments = [s for s in segments if s.base_offset in listed]
                segments += [self._new_segment(base, writable=False) for base in bases if base not in known]
            self.log_segments.reset(sorted(segments, key=lambda s: s.base_offset), txn_bases)
            for seg in self.segments[-2:]:
                seg._next_offset = None
            if not self.storage.is_local and self.segments:
                self._drop_unreachable_object_segments()
            first_base = self.segments[0].base_offset if self.segments else 0
            if self.remote is not None and (state.log_start_offset != self._seen_start_state
                                            or first_base != self._seen_first_base):
                # Local copies went (local retention) or remote segments expired (the log start
                # offset moved): the remote segments this reader knows may be stale.
                self.remote.refresh()
            self._seen_start_state, self._seen_first_base = state.log_start_offset, first_base
            self.log_start_offset = self._start_offset(self._checked_start(state), first_base)
            self._drop_segments_below_start(delete_files=False)
            hw = state.high_watermark if state.high_watermark is not None else self.log_start_offset
            self.high_watermark = min(max(hw, self.log_start_offset), self._readable_end(hw, self.log_end_offset))
            if self._producer_state_loaded:
                self._replay_producer_state(self.producer_state.map_end_offset)
            self.producer_state.on_high_watermark_updated(self.high_watermark)
            self._lso_floor.record_stored(state.last_stable_offset)   # a newer snapshot may settle it too
