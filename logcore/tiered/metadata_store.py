"""The remote log metadata of one partition, kept beside the remote data.

An append-only, totally ordered sequence of small JSON records, one object each:

    <topic>-<topic id>/<partition>/metadata/<20-digit sequence number>.json

Record n+1 is created with put_if_absent only after the writer has read records 0..n and checked
its change against them, so two writers (a zombie and a new leader) cannot both append the same
number: the loser re-reads and re-checks. Everything is derived by replaying the records in order,
so the store needs no broker: a reader opens it from the remote URL alone (`open`).

Visibility rules:
- a segment is served (segment_for_offset, highest_offset, list_segments() by default) only in
  COPY_SEGMENT_FINISHED: a half-done copy attempt (COPY_SEGMENT_STARTED) is invisible;
- the first attempt to finish wins: finishing a copy whose offsets overlap a finished segment is
  refused (CommitFailedError), and the caller deletes that attempt's data;
- DELETE_SEGMENT_STARTED hides a segment at once, before its data is deleted.
"""
from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterable
from typing import Any

from logcore.errors import (CommitFailedError, CorruptIndexError, RemoteResourceNotFoundError,
                            RemoteStorageError)
from logcore.log.partition_metadata import format_topic_id, parse_topic_id
from logcore.storage import Storage, open_storage
from logcore.tiered.metadata import (DEFAULT_CUSTOM_METADATA_MAX_BYTES, RemoteLogSegmentId,
                                     RemoteLogSegmentMetadata, RemoteLogSegmentState,
                                     TopicIdPartition, check_custom_metadata_size,
                                     is_valid_transition)

METADATA_FOLDER = "metadata"
_RECORD_NAME = re.compile(r"(\d{20})\.json\Z")
_MAX_RACE_RETRIES = 100
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def partition_prefix(tip: TopicIdPartition) -> str:
    """The folder of a partition's remote data and metadata, relative to the remote root."""
    return f"{tip.topic}-{format_topic_id(tip.topic_id)}/{tip.partition}"


def find_topic_ids(storage: Storage, topic: str) -> list[uuid.UUID]:
    """Topic ids that have remote data under `storage` for `topic` (a re-created topic has two)."""
    found = []
    prefix = f"{topic}-"
    for name in storage.list_dir(""):
        # The id's text is URL-safe base64, which may itself hold "-": split by length.
        tail = name[len(prefix):]
        if name.startswith(prefix) and len(tail) == 22:
            try:
                found.append(parse_topic_id(tail))
            except CorruptIndexError:
                continue
    return found


class RemoteLogMetadataStore:
    """Durable, ordered metadata of one partition's remote segments (see the module docstring)."""

    def __init__(self, storage: Storage, topic: str, topic_id: uuid.UUID, partition: int, *,
                 custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES):
        self.storage = storage
        self.topic_id_partition = TopicIdPartition(topic_id, topic, partition)
        self.folder = storage.join(partition_prefix(self.topic_id_partition), METADATA_FOLDER)
        self.custom_metadata_max_bytes = custom_metadata_max_bytes
        self._segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        self._next_seq = 0
        self._lock = threading.Lock()
        self.refresh()

    @classmethod
    def open(cls, url: str, topic: str, partition: int, *, topic_id: uuid.UUID | None = None,
             storage_options: dict[str, Any] | None = None, read_only: bool = True
             ) -> "RemoteLogMetadataStore":
        """A store from the remote URL alone; without topic_id the topic must have exactly one."""
        storage = open_storage(url, storage_options, read_only=read_only)
        if topic_id is None:
            ids = find_topic_ids(storage, topic)
            if not ids:
                raise RemoteResourceNotFoundError(f"no remote data for topic {topic!r} under {storage.url}")
            if len(ids) > 1:
                names = ", ".join(format_topic_id(i) for i in ids)
                raise RemoteStorageError(
                    f"topic {topic!r} has remote data under several topic ids ({names}) in "
                    f"{storage.url}: pass topic_id")
            topic_id = ids[0]
        return cls(storage, topic, topic_id, partition)

    # -- reading -------------------------------------------------------------------------------

    def _record_path(self, seq: int) -> str:
        return self.storage.join(self.folder, f"{seq:020d}.json")

    def refresh(self) -> None:
        """Replay records written since the last refresh (by this or any other process)."""
        with self._lock:
            self._refresh_locked()

    def _refresh_locked(self) -> None:
        names = self.storage.list_dir(self.folder)
        seqs = sorted(int(m.group(1)) for n in names if (m := _RECORD_NAME.match(n)))
        for seq in seqs:
            if seq < self._next_seq:
                continue
            if seq != self._next_seq:
                raise CorruptIndexError(f"remote metadata record {self._next_seq} is missing "
                                        f"(found {seq} next)", file=self.storage.describe(self.folder))
            self._apply(seq, self.storage.read(self._record_path(seq)))
        # A record created between our list and now is picked up by the next refresh.

    def _apply(self, seq: int, raw: bytes) -> None:
        source = self.storage.describe(self._record_path(seq))
        try:
            record = json.loads(raw)
            kind = record["type"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptIndexError(f"unreadable remote metadata record: {exc}", file=source) from None
        meta = RemoteLogSegmentMetadata.from_json(record.get("segment", {}), source=source)
        if meta.topic_id_partition != self.topic_id_partition:
            raise CorruptIndexError(f"record of {meta.topic_id_partition} in the folder of "
                                    f"{self.topic_id_partition}", file=source)
        previous = self._segments.get(meta.segment_id.id)
        if kind == "add":
            if previous is not None or meta.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                raise CorruptIndexError(f"bad add of segment {meta.segment_id}", file=source)
        elif kind == "update":
            if previous is None or meta.state is previous.state \
                    or not is_valid_transition(previous.state, meta.state):
                raise CorruptIndexError(f"bad update of segment {meta.segment_id}", file=source)
        else:
            raise CorruptIndexError(f"unknown record type {kind!r}", file=source)
        self._segments[meta.segment_id.id] = meta
        self._next_seq = seq + 1

    def get(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata:
        found = self._segments.get(segment_id.id)
        if found is None:
            raise RemoteResourceNotFoundError(
                f"no remote segment {segment_id} in {self.topic_id_partition}")
        return found

    def list_segments(self, state: RemoteLogSegmentState | Iterable[RemoteLogSegmentState] | None = FINISHED,
                      *, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """Segments in the given state(s) (None: every state), by start offset then event time."""
        if state is None:
            wanted = set(RemoteLogSegmentState)
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
        for meta in self.list_segments(FINISHED):
            if meta.start_offset <= offset <= meta.end_offset:
                if leader_epoch is None or meta.epoch_for_offset(offset) == leader_epoch:
                    return meta
        return None

    def highest_offset(self, leader_epoch: int | None = None) -> int | None:
        """The highest end offset of a finished segment (holding `leader_epoch` when given)."""
        ends = [m.end_offset for m in self.list_segments(FINISHED, leader_epoch=leader_epoch)]
        return max(ends) if ends else None

    def remote_log_size(self) -> int:
        return sum(m.segment_size_in_bytes for m in self.list_segments(FINISHED))

    # -- writing -------------------------------------------------------------------------------

    def add_segment(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        """Record a copy attempt (state COPY_SEGMENT_STARTED) before any of its data is uploaded."""
        if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise RemoteStorageError(f"add_segment needs state COPY_SEGMENT_STARTED, got "
                                     f"{metadata.state.name} for {metadata.segment_id}")
        if metadata.topic_id_partition != self.topic_id_partition:
            raise RemoteStorageError(f"segment {metadata.segment_id} is of "
                                     f"{metadata.topic_id_partition}, not {self.topic_id_partition}")
        check_custom_metadata_size(metadata.custom_metadata, self.custom_metadata_max_bytes,
                                   metadata.segment_id)

        def check() -> RemoteLogSegmentMetadata | None:
            existing = self._segments.get(metadata.segment_id.id)
            if existing is not None:
                if existing.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                    return existing           # a retried add of the same attempt: idempotent
                raise RemoteStorageError(f"segment id {metadata.segment_id} was already used "
                                         f"(state {existing.state.name}): use a fresh id per attempt")
            self._refuse_overlap(metadata)
            return None

        return self._append("add", metadata, check)

    def update_state(self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState, *,
                     custom_metadata: bytes | None = None, event_timestamp_ms: int | None = None,
                     broker_id: int | None = None) -> RemoteLogSegmentMetadata:
        """Move a segment to `state` (Kafka's transitions; repeating the current state is a no-op)."""
        state = RemoteLogSegmentState(state)
        if state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise RemoteStorageError(f"update_state cannot set COPY_SEGMENT_STARTED ({segment_id}); "
                                     "use add_segment")
        check_custom_metadata_size(custom_metadata, self.custom_metadata_max_bytes, segment_id)
        updated: list[RemoteLogSegmentMetadata] = []

        def check() -> RemoteLogSegmentMetadata | None:
            current = self.get(segment_id)
            if current.state is state:
                return current
            new = current.with_update(state, event_timestamp_ms=event_timestamp_ms,
                                      custom_metadata=custom_metadata, broker_id=broker_id)
            if state is FINISHED:
                self._refuse_overlap(new)
            updated[:] = [new]
            return None

        return self._append("update", None, check, updated)

    def _refuse_overlap(self, meta: RemoteLogSegmentMetadata) -> None:
        for other in self._segments.values():
            if other.state is FINISHED and other.segment_id != meta.segment_id \
                    and other.start_offset <= meta.end_offset and meta.start_offset <= other.end_offset:
                raise CommitFailedError(
                    f"remote segment {meta.segment_id} (offsets {meta.start_offset}-{meta.end_offset}) "
                    f"overlaps finished segment {other.segment_id} ({other.start_offset}-"
                    f"{other.end_offset}) of {self.topic_id_partition}: the first copy wins; "
                    "delete this attempt's data")

    def _append(self, kind: str, metadata: RemoteLogSegmentMetadata | None, check,
                updated: list | None = None) -> RemoteLogSegmentMetadata:
        with self._lock:
            for _ in range(_MAX_RACE_RETRIES):
                self._refresh_locked()
                done = check()
                if done is not None:
                    return done
                meta = metadata if metadata is not None else updated[0]
                body = json.dumps({"type": kind, "segment": meta.to_json()},
                                  separators=(",", ":")).encode()
                seq = self._next_seq
                if self.storage.put_if_absent(self._record_path(seq), body) is not None:
                    self._apply(seq, body)
                    return meta
                # another writer took this sequence number: re-read and check again
            raise CommitFailedError(f"remote metadata of {self.topic_id_partition}: lost "
                                    f"{_MAX_RACE_RETRIES} races in a row")
