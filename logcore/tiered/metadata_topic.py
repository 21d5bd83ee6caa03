"""What this process knows of `__remote_log_metadata`: the records of the metadata partitions it
consumes, replayed in offset order into each user partition's remote segment states (Kafka's
TopicBasedRemoteLogMetadataManager's consumer task and RemoteLogMetadataCache).

Every broker replays the same records in the same order with the same rules
(`segment_states.RemoteSegmentStates`), so every broker, and a new leader after failover, sees
the same remote segments. A record the rules refuse (a deposed leader finishing a copy whose
offsets another already finished, a repeated state) changes nothing anywhere; the writer of such a
record learns it from `outcome(partition, offset)` once it has consumed past it.

The topic itself is reached through a `MetadataTopicClient` the broker supplies (tiering does not
know the broker or the Kafka protocol): `append` (acks=all, the record's offset) and `read` (the
records from an offset up to the high watermark).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Protocol

from logcore.errors import CommitFailedError, RemoteStorageError
from logcore.tiered.metadata import TopicIdPartition
from logcore.tiered.metadata_records import (PartitionDelete, SegmentUpdate, decode,
                                             metadata_partition)
from logcore.tiered.segment_states import InvalidEvent, RemoteSegmentStates

logger = logging.getLogger(__name__)
_OUTCOMES_KEPT = 4096          # refusals remembered per metadata partition (writers ask at once)


class MetadataTopicClient(Protocol):
    """`__remote_log_metadata` as the broker reaches it."""

    @property
    def partitions(self) -> int:
        """The topic's partition count (creating the topic first if it does not exist)."""

    def append(self, partition: int, value: bytes) -> int:
        """Append one record (null key) with acks=all; its offset. SegLogError on failure."""

    def read(self, partition: int, offset: int) -> tuple[list[tuple[int, bytes]], int]:
        """(offset, value) of the records from `offset` on (some, not necessarily all), and the
        partition's high watermark."""


class _Partition:
    """One metadata partition: how far it is replayed, and the user partitions' states."""

    def __init__(self) -> None:
        self.position = 0
        self.states: dict[TopicIdPartition, RemoteSegmentStates] = {}
        self.refused: OrderedDict[int, str] = OrderedDict()
        self.lock = threading.Lock()


class MetadataTopicCache:
    """The replayed metadata partitions of one process (see the module docstring)."""

    def __init__(self, client: MetadataTopicClient, *, catch_up_timeout_s: float = 30.0):
        self.client = client
        self.catch_up_timeout_s = catch_up_timeout_s
        self._partitions: dict[int, _Partition] = {}
        self._lock = threading.Lock()

    def partition_of(self, tip: TopicIdPartition) -> int:
        return metadata_partition(tip, self.client.partitions)

    def _part(self, partition: int) -> _Partition:
        with self._lock:
            return self._partitions.setdefault(partition, _Partition())

    def states(self, tip: TopicIdPartition) -> RemoteSegmentStates:
        """The user partition's states (as replayed so far: `catch_up` first for the latest)."""
        part = self._part(self.partition_of(tip))
        with part.lock:
            return part.states.setdefault(tip, RemoteSegmentStates(tip))

    def catch_up(self, partition: int, past: int | None = None) -> int:
        """Replay the metadata partition up to its high watermark (and at least past offset
        `past`); the position reached."""
        part = self._part(partition)
        deadline = time.monotonic() + self.catch_up_timeout_s
        with part.lock:
            while True:
                records, high_watermark = self.client.read(partition, part.position)
                for offset, value in records:
                    if offset >= part.position:
                        self._apply(part, partition, offset, value)
                        part.position = offset + 1
                target = high_watermark if past is None else max(high_watermark, past + 1)
                if part.position >= target:
                    return part.position
                if not records:
                    if time.monotonic() > deadline:
                        raise RemoteStorageError(
                            f"__remote_log_metadata-{partition}: replayed to offset {part.position}, "
                            f"not {target}, within {self.catch_up_timeout_s:.0f} s")
                    time.sleep(0.05)

    def _apply(self, part: _Partition, partition: int, offset: int, value: bytes) -> None:
        source = f"__remote_log_metadata-{partition} offset {offset}"
        event = decode(value, source=source)
        tip = (event.topic_id_partition if isinstance(event, PartitionDelete)
               else event.segment_id.topic_id_partition)
        states = part.states.setdefault(tip, RemoteSegmentStates(tip))
        try:
            if isinstance(event, PartitionDelete):
                states.apply_partition_delete(event.state)
            elif isinstance(event, SegmentUpdate):
                current = states.get(event.segment_id)
                meta = current.with_update(event.state, event_timestamp_ms=event.event_timestamp_ms,
                                           custom_metadata=event.custom_metadata, broker_id=event.broker_id)
                states.apply(meta, is_add=False)
            else:
                states.apply(event, is_add=True)
        except (InvalidEvent, CommitFailedError, RemoteStorageError) as exc:
            logger.info("%s: refused: %s", source, exc)
            part.refused[offset] = str(exc)
            while len(part.refused) > _OUTCOMES_KEPT:
                part.refused.popitem(last=False)

    def outcome(self, partition: int, offset: int) -> str | None:
        """Why the record at `offset` (already replayed) was refused; None when it applied."""
        return self._part(partition).refused.get(offset)

    def append(self, tip: TopicIdPartition, value: bytes) -> None:
        """Write a record of `tip`'s and replay up to it: CommitFailedError when every broker
        refuses it (another record came first)."""
        partition = self.partition_of(tip)
        offset = self.client.append(partition, value)
        self.catch_up(partition, past=offset)
        refused = self.outcome(partition, offset)
        if refused is not None:
            raise CommitFailedError(f"__remote_log_metadata-{partition} offset {offset}: {refused}")
