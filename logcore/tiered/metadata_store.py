"""The remote log metadata of one partition, kept beside the remote data.

An append-only, totally ordered sequence of small JSON records, one object each:

    <topic>-<topic id>/<partition>/metadata/<20-digit sequence number>.json

A record is a segment's "add" (a copy attempt) or "update" (a state change), or a
"partition_delete" step of a deleted partition's remote deletion (DELETE_PARTITION_MARKED,
_STARTED, _FINISHED; partition_delete.py). Record n+1 is created with put_if_absent only after
the writer has read records 0..n and checked its change against them, so two writers (a zombie
and a new leader) cannot both append the same number: the loser re-reads and re-checks. Everything is derived by replaying the records in order,
so the store needs no broker: a reader opens it from the remote URL alone (`open`).

Snapshots: every `snapshot_interval` records a writer also writes `metadata/snapshot.json`, the
state after records 0..n-1 (segments not yet DELETE_SEGMENT_FINISHED) and n. Opening reads that
one object and then records n, n+1, ... by name until one is absent, so a partition's open costs
one snapshot and the tail, not its history. Readers never list the folder: a record is created
only after all those before it exist. The snapshot replaces an older one by compare-and-swap
(never a newer one), and its writer then deletes the records below n (`SnapshotHistory`), so the
folder holds about one interval of records. A reader that finds its next record absent reads the
snapshot's first bytes: when the snapshot is past that record (deleted under it), it reloads
from the snapshot, else it is at the end.

Visibility rules:
- a segment is served (segment_for_offset, highest_offset, list_segments() by default) only in
  COPY_SEGMENT_FINISHED: a half-done copy attempt (COPY_SEGMENT_STARTED) is invisible;
- the first attempt to finish wins: finishing a copy whose offsets overlap a finished segment is
  refused (CommitFailedError), and the caller deletes that attempt's data;
- DELETE_SEGMENT_STARTED hides a segment at once, before its data is deleted.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from enum import Enum
from typing import Any

from logcore.errors import (CommitFailedError, CorruptIndexError, RemoteResourceNotFoundError,
                            RemoteStorageError, ResourceNotFoundError, SegLogError)
from logcore.log.partition_metadata import format_topic_id, parse_topic_id
from logcore.storage import Storage, open_storage
from logcore.tiered.metadata import (DEFAULT_CUSTOM_METADATA_MAX_BYTES, RemoteLogSegmentId,
                                     RemoteLogSegmentMetadata, RemoteLogSegmentState,
                                     RemotePartitionDeleteState, TopicIdPartition,
                                     check_custom_metadata_size, now_ms)
from logcore.tiered.metadata_view import MetadataView
from logcore.tiered.segment_states import InvalidEvent, RemoteSegmentStates

logger = logging.getLogger(__name__)
METADATA_FOLDER = "metadata"
SNAPSHOT_NAME = "snapshot.json"
SNAPSHOT_VERSION = 1
# Records between snapshots: a reader replays at most this many after the snapshot.
DEFAULT_SNAPSHOT_INTERVAL = 100
_RECORD_NAME = re.compile(r"^(\d{20})\.json$")
_SNAPSHOT_HEAD = 64           # bytes of snapshot.json that hold its nextSequence
_NEXT_SEQUENCE = re.compile(rb'"nextSequence":(\d+)')


class SnapshotHistory(Enum):
    """What becomes of the records below a snapshot once it is written."""
    DELETED = "deleted"       # they go: the folder holds one snapshot and its tail
    KEPT = "kept"             # they stay (a benchmark replaying the whole history)
_MAX_RACE_RETRIES = 100


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


class RemoteLogMetadataStore(MetadataView):
    """Durable, ordered metadata of one partition's remote segments (see the module docstring)."""

    def __init__(self, storage: Storage, topic: str, topic_id: uuid.UUID, partition: int, *,
                 custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES,
                 snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL, read_only_reason: str | None = None,
                 history: SnapshotHistory = SnapshotHistory.DELETED):
        """snapshot_interval: records between snapshots written by this store (0: none; a
        snapshot others wrote is read either way). read_only_reason: writes are refused with
        it (another store is the source of truth and writes this one). history: what becomes
        of the records below a snapshot this store writes."""
        if snapshot_interval < 0:
            raise RemoteStorageError(f"snapshot_interval must be >= 0, got {snapshot_interval}")
        self.storage = storage
        self.topic_id_partition = TopicIdPartition(topic_id, topic, partition)
        self.folder = storage.join(partition_prefix(self.topic_id_partition), METADATA_FOLDER)
        self.custom_metadata_max_bytes = custom_metadata_max_bytes
        self.snapshot_interval = snapshot_interval
        self.read_only_reason = read_only_reason
        self.history = history
        super().__init__(RemoteSegmentStates(self.topic_id_partition))
        self._next_seq = 0
        self._opened = False
        self.records_read = 0          # records replayed since the store opened (the bench reads it)
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

    @property
    def next_sequence(self) -> int:
        """The number the next record will take (records 0..n-1 are applied)."""
        return self._next_seq

    # -- reading -------------------------------------------------------------------------------

    def _record_path(self, seq: int) -> str:
        return self.storage.join(self.folder, f"{seq:020d}.json")

    @property
    def snapshot_path(self) -> str:
        return self.storage.join(self.folder, SNAPSHOT_NAME)

    def refresh(self) -> None:
        """Replay records written since the last refresh (by this or any other process)."""
        with self._lock:
            self._refresh_locked()

    def _refresh_locked(self) -> None:
        if not self._opened:
            self._load_snapshot()
            self._opened = True
        while True:
            try:
                raw = self.storage.read(self._record_path(self._next_seq))
            except ResourceNotFoundError:
                if self._snapshot_ahead():
                    continue  # the record went below a newer snapshot: replay from that one
                return        # a record created after this read is picked up by the next refresh
            self._apply(self._next_seq, raw)

    def _snapshot_ahead(self) -> bool:
        """Whether a snapshot past the next record exists (its head read first), and if so
        load it: a writer deletes the records below the snapshot it writes."""
        try:
            head = self.storage.read(self.snapshot_path, 0, _SNAPSHOT_HEAD)
        except ResourceNotFoundError:
            return False
        found = _NEXT_SEQUENCE.search(head)
        if found is None or int(found.group(1)) <= self._next_seq:
            return False
        before = self._next_seq
        self._load_snapshot()
        return self._next_seq > before       # else (the snapshot went meanwhile) at the end

    def _load_snapshot(self) -> None:
        found = self.storage.read_versioned(self.snapshot_path)
        if found is None:
            return
        source = self.storage.describe(self.snapshot_path)
        try:
            snapshot = json.loads(found[0])
            if snapshot.get("version") != SNAPSHOT_VERSION:
                raise ValueError(f"version {snapshot.get('version')!r}, this seglog reads {SNAPSHOT_VERSION}")
            next_seq = int(snapshot["nextSequence"])
            segments = [RemoteLogSegmentMetadata.from_json(m, source=source) for m in snapshot["segments"]]
            deleted = snapshot.get("partitionDelete")
            self.states.load(segments, None if deleted is None else RemotePartitionDeleteState[deleted])
        except (ValueError, KeyError, TypeError, InvalidEvent, CommitFailedError) as exc:
            raise CorruptIndexError(f"unreadable remote metadata snapshot: {exc}", file=source) from None
        self._next_seq = next_seq

    def _apply(self, seq: int, raw: bytes) -> None:
        source = self.storage.describe(self._record_path(seq))
        try:
            record = json.loads(raw)
            kind = record["type"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptIndexError(f"unreadable remote metadata record: {exc}", file=source) from None
        if kind not in ("add", "update", "partition_delete"):
            raise CorruptIndexError(f"unknown record type {kind!r}", file=source)
        try:
            if kind == "partition_delete":
                self.states.apply_partition_delete(_delete_state(record, source))
            else:
                meta = RemoteLogSegmentMetadata.from_json(record.get("segment", {}), source=source)
                self.states.apply(meta, is_add=kind == "add")
        except (InvalidEvent, CommitFailedError) as exc:
            # Writers check before they append, so a record the rules refuse is damage.
            raise CorruptIndexError(str(exc), file=source) from None
        self._next_seq = seq + 1
        self.records_read += 1

    def write_snapshot(self) -> None:
        """Write the state as of the records applied so far (atomically replacing an older
        snapshot; a newer one another writer left is kept)."""
        with self._lock:
            self._write_snapshot_locked()

    def _write_snapshot_locked(self) -> None:
        current = self.storage.read_versioned(self.snapshot_path)
        if current is not None:
            try:
                if int(json.loads(current[0])["nextSequence"]) >= self._next_seq:
                    return
            except (ValueError, KeyError, TypeError):
                pass                      # unreadable: replaced below
        # nextSequence right after version: a reader finds it in the object's first bytes.
        snapshot: dict[str, Any] = {"version": SNAPSHOT_VERSION, "nextSequence": self._next_seq,
                                    "segments": self.states.to_json()}
        if self.states.partition_delete is not None:
            snapshot["partitionDelete"] = self.states.partition_delete.name
        body = json.dumps(snapshot, separators=(",", ":")).encode()
        # Compare-and-swap: an older state never replaces a newer one another writer just wrote.
        written = (self.storage.put_if_absent(self.snapshot_path, body) if current is None
                   else self.storage.put_if_version(self.snapshot_path, body, current[1]))
        if written is not None and self.history is SnapshotHistory.DELETED:
            self._delete_history(self._next_seq)

    def _delete_history(self, below: int) -> None:
        """Delete the records below sequence `below` (a snapshot holds their state), oldest
        first: what a crash leaves is the newest of them, deleted by the next snapshot."""
        names = sorted(n for n in self.storage.list_dir(self.folder) if _RECORD_NAME.match(n))
        for name in names:
            if int(name[:20]) >= below:
                break
            self.storage.delete(self.storage.join(self.folder, name))

    # -- writing -------------------------------------------------------------------------------

    def add_segment(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        """Record a copy attempt (state COPY_SEGMENT_STARTED) before any of its data is uploaded."""
        check_custom_metadata_size(metadata.custom_metadata, self.custom_metadata_max_bytes,
                                   metadata.segment_id)

        def check():
            existing = self.states.check_add(metadata)
            return existing, {"type": "add", "segment": metadata.to_json()}, metadata

        return self._append(check)

    def update_state(self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState, *,
                     custom_metadata: bytes | None = None, event_timestamp_ms: int | None = None,
                     broker_id: int | None = None) -> RemoteLogSegmentMetadata:
        """Move a segment to `state` (Kafka's transitions; repeating the current state is a no-op)."""
        state = RemoteLogSegmentState(state)
        check_custom_metadata_size(custom_metadata, self.custom_metadata_max_bytes, segment_id)

        def check():
            new, changes = self.states.check_update(
                segment_id, state, event_timestamp_ms=event_timestamp_ms,
                custom_metadata=custom_metadata, broker_id=broker_id)
            return (None, {"type": "update", "segment": new.to_json()}, new) if changes else (new, None, None)

        return self._append(check)

    def put_partition_delete(self, state: RemotePartitionDeleteState, *, broker_id: int = -1,
                             event_timestamp_ms: int | None = None) -> RemotePartitionDeleteState:
        """Record a step of the partition's remote deletion (Kafka's putRemotePartitionDeleteMetadata;
        repeating the current step is a no-op)."""
        state = RemotePartitionDeleteState(state)

        def check():
            if not self.states.check_partition_delete(state):
                return state, None, None
            record = {"type": "partition_delete", "state": state.name, "brokerId": broker_id,
                      "eventTimestampMs": now_ms() if event_timestamp_ms is None else event_timestamp_ms}
            return None, record, state

        return self._append(check)

    def _append(self, check):
        """check() -> (the answer when nothing is to be written, else None; the record to write;
        the answer once it is written)."""
        if self.read_only_reason is not None:
            raise RemoteStorageError(self.read_only_reason)
        with self._lock:
            for _ in range(_MAX_RACE_RETRIES):
                self._refresh_locked()
                done, record, answer = check()
                if done is not None:
                    return done
                body = json.dumps(record, separators=(",", ":")).encode()
                seq = self._next_seq
                if self.storage.put_if_absent(self._record_path(seq), body) is not None:
                    self._apply(seq, body)
                    self._maybe_snapshot()
                    return answer
                # another writer took this sequence number: re-read and check again
            raise CommitFailedError(f"remote metadata of {self.topic_id_partition}: lost "
                                    f"{_MAX_RACE_RETRIES} races in a row")

    def _maybe_snapshot(self) -> None:
        if self.snapshot_interval and self._next_seq % self.snapshot_interval == 0:
            try:
                self._write_snapshot_locked()
            except SegLogError as exc:      # the records stand; the next snapshot tries again
                logger.warning("%s: writing the remote metadata snapshot failed: %s",
                               self.topic_id_partition, exc)


def _delete_state(record: dict[str, Any], source: str) -> RemotePartitionDeleteState:
    try:
        return RemotePartitionDeleteState[record["state"]]
    except (KeyError, TypeError):
        raise CorruptIndexError(f"bad partition delete state {record.get('state')!r}", file=source) from None
