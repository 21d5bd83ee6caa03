"""The remote storage manager interface (KIP-405's RemoteStorageManager).

Positions are byte positions in the original `.log`. As in Kafka, `fetch_log_segment`'s end
position is INCLUSIVE (the last byte wanted), not Python's exclusive end.
"""
from __future__ import annotations

import os
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Union

from logcore.errors import RemoteStorageError
from logcore.tiered.metadata import RemoteLogSegmentMetadata

# A file's content, given as a local path or as the bytes themselves.
FileSource = Union[str, os.PathLike, bytes, bytearray, memoryview]


class IndexType(Enum):
    """Kafka's IndexType; the value is the manifest's name for the index."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producerSnapshot"
    TRANSACTION = "transaction"
    LEADER_EPOCH = "leaderEpoch"


@dataclass(frozen=True)
class LogSegmentData:
    """What a copy uploads: the segment's files (paths or bytes) and the leader-epoch checkpoint
    text of every epoch up to the segment's end (Kafka passes it as bytes)."""

    log_segment: FileSource
    offset_index: FileSource
    time_index: FileSource
    producer_snapshot: FileSource
    leader_epoch_index: bytes
    transaction_index: FileSource | None = None

    def source(self, index_type: IndexType) -> FileSource | None:
        return {IndexType.OFFSET: self.offset_index, IndexType.TIMESTAMP: self.time_index,
                IndexType.PRODUCER_SNAPSHOT: self.producer_snapshot,
                IndexType.TRANSACTION: self.transaction_index,
                IndexType.LEADER_EPOCH: self.leader_epoch_index}[index_type]


def read_source(source: FileSource) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise RemoteStorageError(f"cannot read {source} for upload: {exc.strerror}") from None


def source_size(source: FileSource) -> int:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return len(source)
    try:
        return os.stat(source).st_size
    except OSError as exc:
        raise RemoteStorageError(f"cannot stat {source} for upload: {exc.strerror}") from None


# --- custom metadata: what a fetch can know without a remote call -----------------------------

_CUSTOM_VERSION = 1
_INDEX_BITS = {IndexType.OFFSET: 1, IndexType.TIMESTAMP: 2, IndexType.PRODUCER_SNAPSHOT: 4,
               IndexType.TRANSACTION: 8, IndexType.LEADER_EPOCH: 16}
_TRANSFORMED_BIT = 32
_CUSTOM = struct.Struct(">BBq")        # version, flags, stored size of the .log object


@dataclass(frozen=True)
class SegmentCustomMetadata:
    """The 10 bytes a copy returns as Kafka custom metadata: which indexes exist, whether the log
    object is transformed, and its stored size."""

    indexes: frozenset[IndexType]
    transformed: bool
    stored_log_size: int

    def to_bytes(self) -> bytes:
        flags = sum(_INDEX_BITS[i] for i in self.indexes) | (_TRANSFORMED_BIT if self.transformed else 0)
        return _CUSTOM.pack(_CUSTOM_VERSION, flags, self.stored_log_size)

    @classmethod
    def from_bytes(cls, data: bytes | None) -> "SegmentCustomMetadata | None":
        """None for absent or foreign custom metadata (then the manifest decides)."""
        if data is None or len(data) != _CUSTOM.size or data[0] != _CUSTOM_VERSION:
            return None
        _, flags, size = _CUSTOM.unpack(data)
        return cls(frozenset(i for i, bit in _INDEX_BITS.items() if flags & bit),
                   bool(flags & _TRANSFORMED_BIT), size)


class RemoteStorageManager(ABC):
    """KIP-405 operations. Errors: RemoteStorageError (retry), RemoteResourceNotFoundError."""

    @abstractmethod
    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              segment_data: LogSegmentData) -> bytes | None:
        """Upload the segment and its indexes under metadata's (fresh) segment id; returns custom
        metadata for the segment's COPY_SEGMENT_FINISHED update. Repeating a copy with the same
        id overwrites; a failed copy leaves nothing visible."""

    @abstractmethod
    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        """A stream of the original `.log` bytes from start_position to end_position INCLUSIVE
        (or the end of the segment)."""

    @abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The original bytes of one index; RemoteResourceNotFoundError when the segment has
        none of that type (a transaction index is optional)."""

    @abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete everything of the segment; deleting a missing or half-deleted segment is fine."""

    def close(self) -> None:
        """Release threads and caches."""
