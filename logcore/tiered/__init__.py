"""Tiered storage (KIP-405): remote segment metadata, the remote storage manager and its caches."""
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager, RemoteSegmentReader
from logcore.tiered.metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata,
                                     RemoteLogSegmentState, TopicIdPartition)
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.rsm import IndexType, LogSegmentData, RemoteStorageManager
from logcore.log.remote_view import register_remote_tier
from logcore.tiered.remote_log import RemoteTier



def install_remote_tier() -> None:
    """Make tiering the remote tier of roots that enable it. Importing this package does it; a
    module that opens such roots calls it to say so (a bare import would read as unused)."""
    register_remote_tier(RemoteTier.from_props)


# The log layer does not import tiering: tiering registers itself as the roots' remote tier.
install_remote_tier()

__all__ = ["FsspecRemoteStorageManager", "IndexType", "LogSegmentData", "RemoteLogMetadataStore",
           "RemoteLogSegmentId", "RemoteLogSegmentMetadata", "RemoteLogSegmentState", "RemoteTier",
           "RemoteSegmentReader", "RemoteStorageManager", "TopicIdPartition", "install_remote_tier"]
