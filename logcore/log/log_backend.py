"""Where one partition's log lives, chosen once by `LogRoot.log`: the storage (local disk or an
object store), the partition-state store and the segment store that match it, the writer fence
(writers only) and the remote tier's view (topics with remote storage). The `Log` takes them as
one value instead of asking the storage kind again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class LogBackend:
    storage: object                 # logcore.storage: local disk or an object store
    state_store: object             # partition_state: LocalPartitionState / ObjectPartitionState
    # segment_store: LocalSegmentStore / ObjectSegmentStore, built on the opened log (its host)
    segment_store: Callable[[object], object]
    fence: object = None            # writer_fence.WriterFence (None: a reader)
    remote: object = None           # remote_view.RemoteLogView (None: all local)
