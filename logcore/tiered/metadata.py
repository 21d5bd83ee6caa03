"""Remote log segment metadata (KIP-405): segment ids, states and their allowed transitions.

`RemoteLogSegmentMetadata` carries the fields of Kafka's class of the same name; it is immutable,
and a state change makes a new value (`with_update`). Its JSON form is what the metadata store
keeps (`metadata_store.py`) and what a segment's manifest repeats for inspection.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any

from logcore.errors import CorruptIndexError, RemoteStorageError
from logcore.log.partition_metadata import format_topic_id, parse_topic_id

# Kafka's remote.log.metadata.custom.metadata.max.bytes default.
DEFAULT_CUSTOM_METADATA_MAX_BYTES = 128


class RemoteLogSegmentState(IntEnum):
    """Kafka's ids: they are part of the stored JSON."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


S = RemoteLogSegmentState
# Kafka's RemoteLogSegmentState.isValidTransition: self-transitions are allowed (idempotent retries).
_ALLOWED: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    S.COPY_SEGMENT_STARTED: frozenset({S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED,
                                       S.DELETE_SEGMENT_STARTED}),
    S.COPY_SEGMENT_FINISHED: frozenset({S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED}),
    S.DELETE_SEGMENT_STARTED: frozenset({S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED}),
    S.DELETE_SEGMENT_FINISHED: frozenset({S.DELETE_SEGMENT_FINISHED}),
}


def is_valid_transition(src: RemoteLogSegmentState, dst: RemoteLogSegmentState) -> bool:
    return dst in _ALLOWED[src]


class RemotePartitionDeleteState(IntEnum):
    """Kafka's RemotePartitionDeleteState ids: a deleted partition's remote data going."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


def is_valid_partition_delete_transition(src: RemotePartitionDeleteState | None,
                                         dst: RemotePartitionDeleteState) -> bool:
    """Kafka's RemotePartitionDeleteState.isValidTransition: MARKED first, then STARTED, then
    FINISHED (self-transitions allowed)."""
    if src is None:
        return dst is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    return dst is src or dst == src + 1


@dataclass(frozen=True, order=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} (topic id {format_topic_id(self.topic_id)})"


@dataclass(frozen=True)
class RemoteLogSegmentId:
    """A partition plus a fresh random id per copy attempt: a retried copy never reuses one."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, topic_id_partition: TopicIdPartition) -> "RemoteLogSegmentId":
        return cls(topic_id_partition, uuid.uuid4())

    @property
    def text(self) -> str:
        """Kafka's text form of the id (22-char URL-safe base64)."""
        return format_topic_id(self.id)

    def __str__(self) -> str:
        return self.text


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    segment_id: RemoteLogSegmentId
    start_offset: int                       # inclusive
    end_offset: int                         # inclusive
    max_timestamp_ms: int
    segment_leader_epochs: dict[int, int]   # epoch -> first offset of that epoch in the segment
    segment_size_in_bytes: int              # of the original .log
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    broker_id: int = -1
    event_timestamp_ms: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        where = f"remote segment {self.segment_id}"
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise RemoteStorageError(
                f"{where}: bad offsets start {self.start_offset} end {self.end_offset} "
                "(need 0 <= start <= end)")
        if not self.segment_leader_epochs:
            raise RemoteStorageError(f"{where}: segment_leader_epochs must not be empty")
        firsts = [self.segment_leader_epochs[e] for e in sorted(self.segment_leader_epochs)]
        if firsts != sorted(firsts) or firsts[0] < self.start_offset or firsts[-1] > self.end_offset:
            raise RemoteStorageError(
                f"{where}: leader epochs {self.segment_leader_epochs} must start at increasing "
                f"offsets within [{self.start_offset}, {self.end_offset}]")
        if self.segment_size_in_bytes < 0:
            raise RemoteStorageError(f"{where}: negative size {self.segment_size_in_bytes}")
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition

    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch whose range in this segment holds `offset`."""
        found = None
        for epoch in sorted(self.segment_leader_epochs):
            if self.segment_leader_epochs[epoch] <= offset:
                found = epoch
        return found if self.start_offset <= offset <= self.end_offset else None

    def with_update(self, state: RemoteLogSegmentState, *, event_timestamp_ms: int | None = None,
                    custom_metadata: bytes | None = None, broker_id: int | None = None
                    ) -> "RemoteLogSegmentMetadata":
        """The metadata after a state update; refuses transitions Kafka does not allow."""
        state = RemoteLogSegmentState(state)
        if not is_valid_transition(self.state, state):
            raise RemoteStorageError(
                f"remote segment {self.segment_id}: state {self.state.name} cannot become {state.name}")
        return replace(self, state=state,
                       event_timestamp_ms=now_ms() if event_timestamp_ms is None else event_timestamp_ms,
                       custom_metadata=self.custom_metadata if custom_metadata is None else custom_metadata,
                       broker_id=self.broker_id if broker_id is None else broker_id)

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        tip = self.topic_id_partition
        return {
            "topicId": format_topic_id(tip.topic_id), "topic": tip.topic,
            "partition": tip.partition, "id": self.segment_id.text,
            "startOffset": self.start_offset, "endOffset": self.end_offset,
            "maxTimestampMs": self.max_timestamp_ms,
            "segmentLeaderEpochs": {str(e): o for e, o in sorted(self.segment_leader_epochs.items())},
            "segmentSizeInBytes": self.segment_size_in_bytes,
            "customMetadata": None if self.custom_metadata is None else self.custom_metadata.hex(),
            "state": int(self.state), "brokerId": self.broker_id,
            "eventTimestampMs": self.event_timestamp_ms,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any], *, source: str | None = None) -> "RemoteLogSegmentMetadata":
        try:
            tip = TopicIdPartition(parse_topic_id(obj["topicId"], source=source), str(obj["topic"]),
                                   int(obj["partition"]))
            custom = obj.get("customMetadata")
            return cls(
                segment_id=RemoteLogSegmentId(tip, parse_topic_id(obj["id"], source=source)),
                start_offset=int(obj["startOffset"]), end_offset=int(obj["endOffset"]),
                max_timestamp_ms=int(obj["maxTimestampMs"]),
                segment_leader_epochs={int(e): int(o) for e, o in obj["segmentLeaderEpochs"].items()},
                segment_size_in_bytes=int(obj["segmentSizeInBytes"]),
                state=RemoteLogSegmentState(int(obj["state"])),
                custom_metadata=None if custom is None else bytes.fromhex(custom),
                broker_id=int(obj.get("brokerId", -1)),
                event_timestamp_ms=int(obj["eventTimestampMs"]))
        except (KeyError, TypeError, ValueError, AttributeError, RemoteStorageError) as exc:
            raise CorruptIndexError(f"bad remote segment metadata: {type(exc).__name__}: {exc}",
                                    file=source) from None


def check_custom_metadata_size(custom_metadata: bytes | None, max_bytes: int,
                               segment_id: RemoteLogSegmentId) -> None:
    if custom_metadata is not None and len(custom_metadata) > max_bytes:
        raise RemoteStorageError(
            f"remote segment {segment_id}: custom metadata of {len(custom_metadata)} bytes exceeds "
            f"remote.log.metadata.custom.metadata.max.bytes={max_bytes}")
