"""Tiered storage (KIP-405): remote segment metadata, the remote storage manager and its caches."""
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager, RemoteSegmentReader
from logcore.tiered.metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata,
                                     RemoteLogSegmentState, TopicIdPartition)
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.rsm import IndexType, LogSegmentData, RemoteStorageManager

__all__ = ["FsspecRemoteStorageManager", "IndexType", "LogSegmentData", "RemoteLogMetadataStore",
           "RemoteLogSegmentId", "RemoteLogSegmentMetadata", "RemoteLogSegmentState",
           "RemoteSegmentReader", "RemoteStorageManager", "TopicIdPartition"]
