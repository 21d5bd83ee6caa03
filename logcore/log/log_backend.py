"""Where one partition's log lives, chosen once by `LogRoot.log`: the storage (local disk or an
object store), the partition-state store that matches it, the writer fence (writers only) and
the remote tier's view (topics with remote storage). The `Log` takes them as one value instead
of asking the storage kind again; what differs between local disk and an object store for
segments is behind `segment_store.SegmentStore`, picked from the same storage.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogBackend:
    storage: object                 # logcore.storage: local disk or an object store
    state_store: object             # partition_state: LocalPartitionState / ObjectPartitionState
    fence: object = None            # writer_fence.WriterFence (None: a reader)
    remote: object = None           # remote_view.RemoteLogView (None: all local)
