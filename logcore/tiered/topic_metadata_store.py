"""The remote log metadata of one partition kept in `__remote_log_metadata` (Kafka's
TopicBasedRemoteLogMetadataManager), with seglog's object-store records as a copy for readers
without a broker.

The same interface as `metadata_store.RemoteLogMetadataStore` (the reads are both stores'
`metadata_view.MetadataView`), which the remote log manager and the partitions' remote reads
use; the remote tier picks one or the other by `remote.log.metadata.manager.class.name`
(`remote_log.MetadataPolicy`).

- Source of truth: the topic. A write is checked against the replayed state, appended with
  acks=all, and stands once this process has replayed past it and the rules took it (a record
  another broker's record made invalid first is refused everywhere: CommitFailedError, as the
  object store's first-copy-wins).
- The copy (`mirror`): after each write the object-store records of the partition are brought to
  the topic's state (missing steps written in Kafka's transition order), so the Spark source,
  `seglog tiered` and `seglog dump --remote`, which read the remote root alone, see the same
  finished segments. A write whose copy fails fails (the remote log manager retries it; its next
  write brings the copy up to date first), so local data is never deleted for a segment the copy
  does not list, and a segment's data is never deleted before the copy hides it.
"""
from __future__ import annotations

from dataclasses import replace

from logcore.errors import CommitFailedError

from logcore.tiered.metadata import (DEFAULT_CUSTOM_METADATA_MAX_BYTES, RemoteLogSegmentId,
                                     RemoteLogSegmentMetadata, RemoteLogSegmentState,
                                     RemotePartitionDeleteState, TopicIdPartition,
                                     check_custom_metadata_size, now_ms)
from logcore.tiered.metadata_records import (PartitionDelete, encode_partition_delete,
                                             encode_segment_metadata, encode_segment_update)
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.metadata_topic import MetadataTopicCache
from logcore.tiered.metadata_view import MetadataView

S = RemoteLogSegmentState
FINISHED = S.COPY_SEGMENT_FINISHED


class TopicBasedMetadataStore(MetadataView):
    """One partition's remote segments as `__remote_log_metadata` records them (see the module)."""

    def __init__(self, cache: MetadataTopicCache, tip: TopicIdPartition, *,
                 mirror: RemoteLogMetadataStore | None = None,
                 custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES):
        self.cache = cache
        self.topic_id_partition = tip
        self.mirror = mirror
        self.custom_metadata_max_bytes = custom_metadata_max_bytes
        self.metadata_partition = cache.partition_of(tip)
        super().__init__(cache.states(tip))

    # -- reading -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Replay the metadata partition up to its high watermark."""
        self.cache.catch_up(self.metadata_partition)

    # -- writing -------------------------------------------------------------------------------

    def add_segment(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        """COPY_SEGMENT_STARTED, before any of the attempt's data is uploaded."""
        check_custom_metadata_size(metadata.custom_metadata, self.custom_metadata_max_bytes,
                                   metadata.segment_id)
        self.refresh()
        existing = self.states.check_add(metadata)
        if existing is not None:
            return existing
        self.cache.append(self.topic_id_partition, encode_segment_metadata(metadata))
        self.sync_mirror()
        return self.states.get(metadata.segment_id)

    def update_state(self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState, *,
                     custom_metadata: bytes | None = None, event_timestamp_ms: int | None = None,
                     broker_id: int | None = None) -> RemoteLogSegmentMetadata:
        """Move a segment to `state` (Kafka's transitions; repeating the current state is a no-op)."""
        state = RemoteLogSegmentState(state)
        check_custom_metadata_size(custom_metadata, self.custom_metadata_max_bytes, segment_id)
        self.refresh()
        new, changes = self.states.check_update(segment_id, state, event_timestamp_ms=event_timestamp_ms,
                                                 custom_metadata=custom_metadata, broker_id=broker_id)
        if changes:
            self.cache.append(self.topic_id_partition, encode_segment_update(new))
        self.sync_mirror()
        return self.states.get(segment_id)

    def put_partition_delete(self, state: RemotePartitionDeleteState, *, broker_id: int = -1,
                             event_timestamp_ms: int | None = None) -> RemotePartitionDeleteState:
        """A step of the partition's remote deletion: a RemotePartitionDeleteMetadataRecord
        (repeating the current step is a no-op)."""
        state = RemotePartitionDeleteState(state)
        self.refresh()
        if self.states.check_partition_delete(state):
            event = PartitionDelete(self.topic_id_partition, state, broker_id,
                                    now_ms() if event_timestamp_ms is None else event_timestamp_ms)
            self.cache.append(self.topic_id_partition, encode_partition_delete(event))
        self.sync_mirror()
        return state

    def sync_mirror(self) -> int:
        """Bring the object-store copy to the topic's state; the records it wrote. Deletes go
        first, so a segment the copy still lists as finished never blocks a newer finish."""
        if self.mirror is None:
            return 0
        mirror = self.mirror
        mirror.refresh()
        written = 0
        ordered = sorted(self.states.list_segments(None), key=lambda m: m.state is FINISHED)
        for meta in ordered:
            copy = mirror.find(meta.segment_id)
            if copy is None:
                if meta.state is S.DELETE_SEGMENT_FINISHED:
                    continue            # gone before the copy knew it: nothing to hide
                try:
                    copy = mirror.add_segment(replace(meta, state=S.COPY_SEGMENT_STARTED, custom_metadata=None))
                except CommitFailedError:
                    if meta.state is FINISHED:
                        raise
                    continue            # a losing attempt over finished offsets: never served
                written += 1
            steps = [meta.state]
            if meta.state is S.DELETE_SEGMENT_FINISHED and copy.state < S.DELETE_SEGMENT_STARTED:
                steps = [S.DELETE_SEGMENT_STARTED, meta.state]
            for step in steps:
                if copy.state is not step:
                    copy = mirror.update_state(meta.segment_id, step, custom_metadata=meta.custom_metadata,
                                               event_timestamp_ms=meta.event_timestamp_ms,
                                               broker_id=meta.broker_id)
                    written += 1
        # The partition's deletion steps follow its segments' (as they were written).
        wanted = self.states.partition_delete
        while wanted is not None and mirror.partition_delete is not wanted:
            step = (RemotePartitionDeleteState.DELETE_PARTITION_MARKED if mirror.partition_delete is None
                    else RemotePartitionDeleteState(mirror.partition_delete + 1))
            mirror.put_partition_delete(step)
            written += 1
        return written
