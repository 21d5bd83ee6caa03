"""A deleted partition's remote data, deleted: what the remote tier does when a topic with
remote segments is deleted (KIP-405's partition deletion, in Kafka's record formats).

The steps, each recorded in the partition's remote log metadata (the object store's records, or
`__remote_log_metadata` with its object-store copy) before the next:

1. DELETE_PARTITION_MARKED: from here on no new copy attempt is taken (a leader elsewhere that
   still tiers the partition is refused);
2. DELETE_PARTITION_STARTED;
3. every segment not yet deleted goes DELETE_SEGMENT_STARTED, then its data is deleted through
   the RSM, then DELETE_SEGMENT_FINISHED (what Kafka 4.1's RemoteLogManager writes for a deleted
   partition; it writes no partition records itself, but its RLMM reads them);
4. DELETE_PARTITION_FINISHED once no segment is left.

`PartitionDeleter` runs these deletions in the background, so a topic deletion does not wait for
them. A deletion cut short (the process killed after MARKED) is found again by `pending_deletions`
when the next broker starts (the tier's `resume_deletions`), and finished from where it stopped. Every step repeats harmlessly (a repeated state is not written again; an RSM delete of data that
is gone is no error), so every replica of a deleted topic may run it, and one that finds the
partition FINISHED does nothing. A step another broker's record made invalid first is taken as
done by that broker (`CommitFailedError`: refresh and go on).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from typing import Callable

from logcore.errors import CommitFailedError, CorruptIndexError, RemoteStorageError, SegLogError
from logcore.log.partition_metadata import parse_topic_id
from logcore.tiered.metadata import RemoteLogSegmentState, RemotePartitionDeleteState
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.metrics import RemoteStorageMetrics

logger = logging.getLogger(__name__)
S = RemoteLogSegmentState
P = RemotePartitionDeleteState
_ROUNDS = 5            # listings of what is left (a copy another broker finished meanwhile)


def delete_remote_partition(store, rsm, *, broker_id: int = -1,
                            metrics: RemoteStorageMetrics | None = None) -> int:
    """Delete every remote segment of the partition `store` holds the metadata of, recording
    the steps above; the number of segments this call deleted. The remote store's error when it
    fails (the steps recorded so far stand; running it again finishes the job)."""
    tip = store.topic_id_partition
    store.refresh()
    if store.partition_delete is P.DELETE_PARTITION_FINISHED:
        return 0
    if store.partition_delete is None and not store.list_segments(None):
        return 0           # nothing was ever tiered: nothing to record
    for step in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
        _put(store, step, broker_id)
    deleted = 0
    for _ in range(_ROUNDS):
        left = _left(store)
        if not left:
            break
        for meta in left:
            started = time.monotonic()
            _update(store, meta, S.DELETE_SEGMENT_STARTED, broker_id)
            try:
                rsm.delete_log_segment_data(meta)
            except SegLogError:
                if metrics is not None:
                    metrics.record_delete_error(tip.topic)
                raise
            _update(store, meta, S.DELETE_SEGMENT_FINISHED, broker_id)
            deleted += 1
            if metrics is not None:
                metrics.record_delete(tip.topic, meta.segment_size_in_bytes)
            logger.debug("%s: deleted remote segment %s in %.3f s", tip, meta.segment_id,
                         time.monotonic() - started)
        store.refresh()
    if _left(store):
        raise RemoteStorageError(f"{tip}: remote segments are still being added after {_ROUNDS} "
                                 "rounds of deletion; the partition's deletion is left STARTED")
    _put(store, P.DELETE_PARTITION_FINISHED, broker_id)
    logger.info("%s: deleted the remote data of the deleted partition (%d segments)", tip, deleted)
    return deleted


def pending_deletions(storage, skip_topic_ids=frozenset()) -> list[tuple[str, uuid.UUID, int]]:
    """(topic, topic id, partition) of every partition under the remote root whose deletion was
    marked or started and not finished, read from the object-store metadata (which the
    `__remote_log_metadata` mode keeps as its copy). Topic ids in `skip_topic_ids` (topics that
    still exist) are not looked into."""
    found = []
    for name in sorted(storage.list_dir("")):
        # "<topic>-<topic id>": the id's text is 22 characters of URL-safe base64
        if len(name) < 24 or name[-23] != "-":
            continue
        try:
            topic_id = parse_topic_id(name[-22:])
        except CorruptIndexError:
            continue
        if topic_id in skip_topic_ids:
            continue
        topic = name[:-23]
        try:
            parts = storage.list_dir(name)
        except SegLogError:          # a file of that shape, not a topic's folder
            continue
        for part in parts:
            if not part.isdigit():
                continue
            store = RemoteLogMetadataStore(storage, topic, topic_id, int(part), snapshot_interval=0,
                                           read_only_reason="only read to find unfinished deletions")
            if store.partition_delete in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
                found.append((topic, topic_id, int(part)))
    return found


def _left(store) -> list:
    return [m for m in store.list_segments(None) if m.state is not S.DELETE_SEGMENT_FINISHED]


def _put(store, step: RemotePartitionDeleteState, broker_id: int) -> None:
    if store.partition_delete is not None and store.partition_delete >= step:
        return
    try:
        store.put_partition_delete(step, broker_id=broker_id)
    except CommitFailedError:
        store.refresh()             # another replica recorded it first


def _update(store, meta, state: RemoteLogSegmentState, broker_id: int) -> None:
    current = store.find(meta.segment_id)
    if current is not None and current.state >= state:
        return
    try:
        store.update_state(meta.segment_id, state, broker_id=broker_id)
    except CommitFailedError:
        store.refresh()


class PartitionDeleter:
    """Runs the remote deletions of deleted partitions one after another on a thread of its own,
    so a topic deletion returns at once (a tiered topic's remote data may take long to go, and
    on a cluster every replica's deletion goes through `__remote_log_metadata`). A failure is
    logged: the partition's metadata says how far its deletion went. `close` waits for what
    was submitted."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, what: str, delete: Callable[[], int]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="seglog-remote-partition-delete",
                                                daemon=True)
                self._thread.start()
        self._queue.put((what, delete))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            what, delete = item
            try:
                delete()
            except SegLogError as exc:
                logger.error("%s was deleted, but not all of its remote data: %s", what, exc)
            except Exception:  # noqa: BLE001 - one partition's failure must not stop the others
                logger.exception("%s: deleting its remote data failed", what)
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        """Until every submitted deletion has run."""
        self._queue.join()

    def close(self, timeout: float = 300) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)
