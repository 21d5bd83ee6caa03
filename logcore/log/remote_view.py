"""What a partition log needs of its remote tier (KIP-405), whatever implements the tier.

A log with tiered storage holds its offsets [log start offset, HW) in two parts: the remote
segments, from the log start offset up to the highest offset copied, and the local segments, from
the local log start offset (the first local segment's base) to the LEO. The two overlap while a
copied segment still has its local copy. `Log.read` serves offsets below the local log start
from this view, and `Log.offset_for_timestamp` searches it before the local segments; `logcore.tiered.remote_log` implements it over a remote storage manager and the
partition's remote log metadata.

The log layer never imports the tier (it sits above): the tier registers itself here
(`register_remote_tier`, done when `logcore.tiered` is imported), and a root that enables tiered
storage gets its `RemoteTier` from the registered factory. The layers above that use tiering
(broker, tools, connector, maintenance) import `logcore.tiered`; a root that enables tiering in a
process where nothing registered fails with an error naming the setting.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any, Callable


class RemoteLogView(ABC):
    """The remote segments of one partition, as its Log reads them."""

    @abstractmethod
    def start_offset(self) -> int | None:
        """The first offset of the oldest finished remote segment; None when there is none."""

    @abstractmethod
    def end_offset(self) -> int | None:
        """The highest offset held by a finished remote segment (inclusive); None when none."""

    @abstractmethod
    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True) -> bytes:
        """Whole batches of one remote segment, from the batch holding `offset` (or the next
        offset that exists), each wholly below `max_offset`, at most `max_bytes` (the first batch
        whole when `min_one_batch`); b"" when no remote segment holds `offset` or anything after it."""

    @abstractmethod
    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int,
                                 below_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp` and offset >=
        `starting_offset`, in the remote segments that start below `below_offset` (the local
        log start: the local segments answer from there); None when none of them holds one."""

    @abstractmethod
    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> tuple[list, bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound) from the remote
        transaction indexes, and whether the search is complete (else the local ones follow)."""

    @abstractmethod
    def refresh(self) -> None:
        """Pick up remote segments copied or deleted by another process."""

    def close(self) -> None:
        """Release what this view holds (the tier's shared caches stay)."""


class RemoteTier(ABC):
    """The tiered storage of one log root, as the log layer uses it: a view per partition."""

    @abstractmethod
    def view(self, topic: str, topic_id, partition: int) -> RemoteLogView:
        """The partition's remote segments."""

    @abstractmethod
    def delete_partition(self, topic: str, topic_id, partition: int) -> None:
        """A deleted topic's partition: delete its remote segments (recording the deletion in
        its remote log metadata), in the background; `close` waits for it."""

    @abstractmethod
    def attach_broker(self, broker_id: int) -> None:
        """The broker that owns the tier: its id goes into the remote metadata the tier writes."""

    @abstractmethod
    def resume_deletions(self, live_topic_ids) -> int:
        """Submit again the partition deletions a killed process left unfinished (topics whose
        ids are in `live_topic_ids` still exist); how many."""

    def close(self) -> None:
        """Release the tier's remote storage manager and caches."""


# Builds the tier from the root settings (None when they do not enable tiering).
RemoteTierFactory = Callable[[dict[str, Any]], "RemoteTier | None"]

_factory: RemoteTierFactory | None = None
_factory_lock = threading.Lock()


def register_remote_tier(factory: RemoteTierFactory) -> None:
    """Install the factory of the roots' remote tier (the tiered package calls this on import;
    a later registration replaces an earlier one)."""
    global _factory
    with _factory_lock:
        _factory = factory


def registered_remote_tier() -> RemoteTierFactory | None:
    """The registered factory, or None when no tier registered itself."""
    with _factory_lock:
        return _factory
