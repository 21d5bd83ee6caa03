"""The remote segments of one partition as their metadata events leave them, and the rules an
event must keep: what both remote log metadata stores (the object-store records and the
`__remote_log_metadata` topic) replay, check before they write, and answer from.

Rules (Kafka's RemoteLogMetadataCache, plus seglog's first-copy-wins):
- an add brings a new segment id in COPY_SEGMENT_STARTED;
- an update follows Kafka's transitions (RemoteLogSegmentState.isValidTransition);
- a segment is served (list_segments() by default, segment_for_offset, highest_offset) only in
  COPY_SEGMENT_FINISHED, and finishing a copy whose offsets overlap a finished segment is refused:
  the first copy to finish wins;
- DELETE_SEGMENT_FINISHED segments are forgotten by snapshots (`to_json`): their ids are random
  per attempt and never come back;
- a deleted partition's remote data goes DELETE_PARTITION_MARKED, _STARTED, _FINISHED (Kafka's
  RemotePartitionDeleteState transitions); once it is marked, no new copy attempt is taken.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from logcore.errors import CommitFailedError, RemoteResourceNotFoundError, RemoteStorageError
from logcore.tiered.metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata,
                                     RemoteLogSegmentState, RemotePartitionDeleteState,
                                     TopicIdPartition, is_valid_partition_delete_transition,
                                     is_valid_transition)

S = RemoteLogSegmentState
FINISHED = S.COPY_SEGMENT_FINISHED


class InvalidEvent(RemoteStorageError):
    """A metadata event the state does not allow (a bad add or transition)."""


class RemoteSegmentStates:
    """Segment id -> its latest metadata, for one partition; finished segments also by start
    offset, so the overlap check and offset lookups do not scan every segment."""

    def __init__(self, topic_id_partition: TopicIdPartition):
        self.topic_id_partition = topic_id_partition
        self._segments: dict[Any, RemoteLogSegmentMetadata] = {}
        self._finished_starts: list[int] = []                     # sorted
        self._finished: list[RemoteLogSegmentMetadata] = []       # in the same order
        self.partition_delete: RemotePartitionDeleteState | None = None

    def __len__(self) -> int:
        return len(self._segments)

    # -- events --------------------------------------------------------------------------------

    def apply(self, meta: RemoteLogSegmentMetadata, *, is_add: bool) -> None:
        """Take an add (`is_add`) or an update event; InvalidEvent when the rules refuse it."""
        if meta.topic_id_partition != self.topic_id_partition:
            raise InvalidEvent(f"event of {meta.topic_id_partition} among those of {self.topic_id_partition}")
        previous = self._segments.get(meta.segment_id.id)
        if is_add:
            if previous is not None or meta.state is not S.COPY_SEGMENT_STARTED:
                raise InvalidEvent(f"bad add of segment {meta.segment_id} (state {meta.state.name})")
            self._refuse_if_deleted(meta.segment_id)
        elif previous is None or meta.state is previous.state \
                or not is_valid_transition(previous.state, meta.state):
            was = "unknown" if previous is None else previous.state.name
            raise InvalidEvent(f"bad update of segment {meta.segment_id}: {was} -> {meta.state.name}")
        if meta.state is FINISHED:
            self.refuse_overlap(meta)
        if previous is not None and previous.state is FINISHED:
            self._drop_finished(previous)
        self._segments[meta.segment_id.id] = meta
        if meta.state is FINISHED:
            i = bisect.bisect_right(self._finished_starts, meta.start_offset)
            self._finished_starts.insert(i, meta.start_offset)
            self._finished.insert(i, meta)

    def apply_partition_delete(self, state: RemotePartitionDeleteState) -> None:
        """Take a partition-delete event; InvalidEvent for a repeat or a transition Kafka refuses."""
        if state is self.partition_delete or not is_valid_partition_delete_transition(self.partition_delete, state):
            was = "none" if self.partition_delete is None else self.partition_delete.name
            raise InvalidEvent(f"bad partition delete of {self.topic_id_partition}: {was} -> {state.name}")
        self.partition_delete = state

    def check_partition_delete(self, state: RemotePartitionDeleteState) -> bool:
        """Before recording a partition-delete step: whether it changes anything."""
        if state is self.partition_delete:
            return False
        if not is_valid_partition_delete_transition(self.partition_delete, state):
            was = "none" if self.partition_delete is None else self.partition_delete.name
            raise InvalidEvent(f"{self.topic_id_partition}: partition delete {was} -> {state.name} "
                               "is not a valid transition")
        return True

    def _refuse_if_deleted(self, segment_id: RemoteLogSegmentId) -> None:
        if self.partition_delete is not None:
            raise InvalidEvent(f"copy attempt {segment_id} refused: {self.topic_id_partition} is "
                               f"being deleted ({self.partition_delete.name})")

    def _drop_finished(self, meta: RemoteLogSegmentMetadata) -> None:
        i = bisect.bisect_left(self._finished_starts, meta.start_offset)
        while self._finished[i].segment_id != meta.segment_id:
            i += 1
        del self._finished_starts[i], self._finished[i]

    def refuse_overlap(self, meta: RemoteLogSegmentMetadata) -> None:
        """CommitFailedError when `meta` overlaps a finished segment other than itself."""
        i = bisect.bisect_right(self._finished_starts, meta.end_offset)
        # finished segments never overlap each other: only the one before the end can reach in
        for other in self._finished[max(0, i - 1):i]:
            if other.segment_id != meta.segment_id and other.end_offset >= meta.start_offset:
                raise CommitFailedError(
                    f"remote segment {meta.segment_id} (offsets {meta.start_offset}-{meta.end_offset}) "
                    f"overlaps finished segment {other.segment_id} ({other.start_offset}-"
                    f"{other.end_offset}) of {self.topic_id_partition}: the first copy wins; "
                    "delete this attempt's data")

    def check_add(self, meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """Before recording a copy attempt: the existing record of a retried add, else None."""
        if meta.state is not S.COPY_SEGMENT_STARTED:
            raise RemoteStorageError(f"add_segment needs state COPY_SEGMENT_STARTED, got "
                                     f"{meta.state.name} for {meta.segment_id}")
        if meta.topic_id_partition != self.topic_id_partition:
            raise RemoteStorageError(f"segment {meta.segment_id} is of "
                                     f"{meta.topic_id_partition}, not {self.topic_id_partition}")
        existing = self._segments.get(meta.segment_id.id)
        if existing is not None:
            if existing.state is S.COPY_SEGMENT_STARTED:
                return existing           # a retried add of the same attempt: idempotent
            raise RemoteStorageError(f"segment id {meta.segment_id} was already used "
                                     f"(state {existing.state.name}): use a fresh id per attempt")
        self._refuse_if_deleted(meta.segment_id)
        self.refuse_overlap(meta)
        return None

    def check_update(self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState, **update
                     ) -> tuple[RemoteLogSegmentMetadata, bool]:
        """(the metadata after the update, whether it changes anything); refuses what the rules do."""
        if state is S.COPY_SEGMENT_STARTED:
            raise RemoteStorageError(f"update_state cannot set COPY_SEGMENT_STARTED ({segment_id}); "
                                     "use add_segment")
        current = self.get(segment_id)
        if current.state is state:
            return current, False
        new = current.with_update(state, **update)
        if state is FINISHED:
            self.refuse_overlap(new)
        return new, True

    # -- answers -------------------------------------------------------------------------------

    def get(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata:
        found = self._segments.get(segment_id.id)
        if found is None:
            raise RemoteResourceNotFoundError(
                f"no remote segment {segment_id} in {self.topic_id_partition}")
        return found

    def find(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        return self._segments.get(segment_id.id)

    def list_segments(self, state: RemoteLogSegmentState | Iterable[RemoteLogSegmentState] | None = FINISHED,
                      *, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """Segments in the given state(s) (None: every state), by start offset then event time."""
        if state is FINISHED and leader_epoch is None:
            return list(self._finished)
        if state is None:
            wanted = set(S)
        elif isinstance(state, RemoteLogSegmentState):
            wanted = {state}
        else:
            wanted = set(state)
        found = [m for m in self._segments.values() if m.state in wanted
                 and (leader_epoch is None or leader_epoch in m.segment_leader_epochs)]
        return sorted(found, key=lambda m: (m.start_offset, m.event_timestamp_ms))

    def segment_for_offset(self, offset: int, leader_epoch: int | None = None
                           ) -> RemoteLogSegmentMetadata | None:
        """The finished segment holding `offset` (within `leader_epoch`'s range when given)."""
        i = bisect.bisect_right(self._finished_starts, offset) - 1
        if i < 0:
            return None
        meta = self._finished[i]
        if meta.end_offset < offset:
            return None
        if leader_epoch is not None and meta.epoch_for_offset(offset) != leader_epoch:
            return None
        return meta

    def highest_offset(self, leader_epoch: int | None = None) -> int | None:
        """The highest end offset of a finished segment (holding `leader_epoch` when given)."""
        if leader_epoch is None:
            return self._finished[-1].end_offset if self._finished else None
        ends = [m.end_offset for m in self.list_segments(FINISHED, leader_epoch=leader_epoch)]
        return max(ends) if ends else None

    def remote_log_size(self) -> int:
        return sum(m.segment_size_in_bytes for m in self._finished)

    # -- snapshots -----------------------------------------------------------------------------

    def to_json(self) -> list[dict[str, Any]]:
        """Every segment not yet DELETE_SEGMENT_FINISHED, in event order kept by id insertion."""
        return [m.to_json() for m in self._segments.values() if m.state is not S.DELETE_SEGMENT_FINISHED]

    def load(self, metas: Iterable[RemoteLogSegmentMetadata],
             partition_delete: RemotePartitionDeleteState | None = None) -> None:
        """Start from a snapshot's segments and partition-delete state (replacing any state),
        each segment checked as it goes in."""
        self._segments.clear()
        self._finished_starts.clear()
        self._finished.clear()
        self.partition_delete = partition_delete
        for meta in metas:
            if meta.topic_id_partition != self.topic_id_partition:
                raise InvalidEvent(f"snapshot segment of {meta.topic_id_partition} among those of "
                                   f"{self.topic_id_partition}")
            if meta.state is FINISHED:
                self.refuse_overlap(meta)
                i = bisect.bisect_right(self._finished_starts, meta.start_offset)
                self._finished_starts.insert(i, meta.start_offset)
                self._finished.insert(i, meta)
            self._segments[meta.segment_id.id] = meta
