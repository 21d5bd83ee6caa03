"""What the remote log manager and the partitions' remote reads ask of one partition's remote
log metadata, answered from its replayed states (`segment_states.RemoteSegmentStates`). Both
metadata stores are views of this kind: the object-store records (`metadata_store`) and the
`__remote_log_metadata` topic (`topic_metadata_store`); each keeps its states current its own
way (`refresh`) and writes them its own way.
"""
from __future__ import annotations

from collections.abc import Iterable

from logcore.tiered.metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState,
                                     RemotePartitionDeleteState)
from logcore.tiered.segment_states import RemoteSegmentStates

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


class MetadataView:
    def __init__(self, states: RemoteSegmentStates):
        self.states = states              # the partition's segments as replayed so far

    def get(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata:
        return self.states.get(segment_id)

    def find(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        return self.states.find(segment_id)

    def list_segments(self, state: RemoteLogSegmentState | Iterable[RemoteLogSegmentState] | None = FINISHED,
                      *, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """Segments in the given state(s) (None: every state), by start offset then event time."""
        return self.states.list_segments(state, leader_epoch=leader_epoch)

    def segment_for_offset(self, offset: int, leader_epoch: int | None = None
                           ) -> RemoteLogSegmentMetadata | None:
        """The finished segment holding `offset` (within `leader_epoch`'s range when given)."""
        return self.states.segment_for_offset(offset, leader_epoch)

    def highest_offset(self, leader_epoch: int | None = None) -> int | None:
        """The highest end offset of a finished segment (holding `leader_epoch` when given)."""
        return self.states.highest_offset(leader_epoch)

    def remote_log_size(self) -> int:
        return self.states.remote_log_size()

    @property
    def partition_delete(self) -> RemotePartitionDeleteState | None:
        """How far the partition's remote deletion went (None: the partition is not deleted)."""
        return self.states.partition_delete
