"""Tiered storage (KIP-405): remote segment metadata, the remote storage manager and its caches."""
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager, RemoteSegmentReader
from logcore.tiered.metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata,
                                     RemoteLogSegmentState, TopicIdPartition)
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.rsm import IndexType, LogSegmentData, RemoteStorageManager
from logcore.log.remote_view import register_remote_tier
from logcore.tiered.remote_log import RemoteTier

# The log layer does not import tiering: tiering registers itself as the roots' remote tier.
register_remote_tier(RemoteTier.from_props)

__all__ = ["FsspecRemoteStorageManager", "IndexType", "LogSegmentData", "RemoteLogMetadataStore",
           "RemoteLogSegmentId", "RemoteLogSegmentMetadata", "RemoteLogSegmentState", "RemoteTier",
           "RemoteSegmentReader", "RemoteStorageManager", "TopicIdPartition"]
