"""Rolled segments made durable in the background, as Kafka flushes a rolled segment.

A roll used to fdatasync the sealed segment under the log's lock, so every append to the
partition waited for the disk (tens of ms on a busy disk). Now the roll hands a descriptor of
the sealed segment to one shared daemon thread and returns; the log moves its recovery point
past the segment only once that fdatasync has returned, and only in roll order. A caller that
needs the data durable at once (a flush from the flush policy, a durable commit, close) syncs
the pending segments itself with `PendingFlush.sync`: at most one fdatasync per segment runs,
whoever gets there first.

A failed background fdatasync is logged and leaves the recovery point where it was: the next
flush of the log retries it (and reports the error to its caller if it fails again).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

logger = logging.getLogger(__name__)

_fdatasync = os.fdatasync        # the one call a fault-injection test wraps


class PendingFlush:
    """One sealed segment waiting for its fdatasync: the descriptor (owned), the offset after
    its last batch, and the log's truncation generation when it was sealed."""

    def __init__(self, fd: int, end_offset: int, generation: int, source: str):
        self.fd = fd
        self.end_offset = end_offset
        self.generation = generation
        self.source = source
        self.synced = False
        self._closed = False
        self._lock = threading.Lock()

    def sync(self) -> None:
        """fdatasync the segment unless that was done (raises OSError when it fails)."""
        with self._lock:
            if self.synced or self._closed:
                return
            _fdatasync(self.fd)
            self.synced = True

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self.fd)


class SegmentFlusher:
    """A daemon thread that syncs pending segments in the order they were submitted and then
    calls each one's `on_synced` (which takes the log's lock to move its recovery point)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="segment-flusher", daemon=True)
        self._thread.start()

    def submit(self, pending: PendingFlush, on_synced: Callable[[PendingFlush], None]) -> None:
        self._queue.put((pending, on_synced))

    def _run(self) -> None:
        while True:
            pending, on_synced = self._queue.get()
            try:
                pending.sync()
            except OSError as exc:
                logger.error("background fdatasync of %s failed (%s); the recovery point stays"
                             " below it until a flush of its log succeeds", pending.source, exc)
                continue
            try:
                on_synced(pending)
            except Exception:   # noqa: BLE001 - one log's bug must not stop the others' flushes
                logger.exception("recording the background flush of %s failed", pending.source)


_shared: SegmentFlusher | None = None
_shared_pid = -1
_shared_lock = threading.Lock()


def segment_flusher() -> SegmentFlusher:
    """The process's flusher (a forked child, e.g. a Spark worker, starts its own)."""
    global _shared, _shared_pid
    with _shared_lock:
        if _shared is None or _shared_pid != os.getpid():
            _shared, _shared_pid = SegmentFlusher(), os.getpid()
        return _shared


# -- syncing several files at once ---------------------------------------------------------------

_SYNC_THREADS = 8
_sync_pool: tuple[int, ThreadPoolExecutor] | None = None     # (pid that made it, pool)


def sync_all(flushes: list[Callable[[], None]]) -> None:
    """Run the flush calls (fsync / fdatasync of distinct files) at the same time and wait for
    all; raise the first error. One caller's files then share the file system's journal commits
    instead of waiting for one each in turn (an adopted segment's .log and two indexes)."""
    global _sync_pool
    if len(flushes) <= 1:
        for flush in flushes:
            flush()
        return
    with _shared_lock:
        if _sync_pool is None or _sync_pool[0] != os.getpid():
            _sync_pool = (os.getpid(), ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="segment-sync"))
        pool = _sync_pool[1]
    futures = [pool.submit(flush) for flush in flushes[1:]]
    errors = []
    try:
        flushes[0]()                # on this thread meanwhile
    except BaseException as exc:    # noqa: BLE001 - raised below, after the others finished
        errors.append(exc)
    errors += [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        raise errors[0]
