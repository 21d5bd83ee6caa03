"""A staged part: a run of a task's encoded batches for one target partition, written to the
staging area, listed in the task's commit message and appended to its partition by the commit."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from pyspark_seglog import segment_uploads

# On an object store the commit reads each copied part back (a GET) before appending it: up to
# this many parts of a partition are read ahead while the earlier ones are appended, so the
# GETs' round trips overlap instead of adding up. Bounds the parts held in memory meanwhile.
READ_AHEAD_PARTS = 3
_READ_THREADS = 8
_read_pool: tuple[int, ThreadPoolExecutor] | None = None     # (pid that made it, pool)
_read_pool_lock = threading.Lock()


def _reader_pool() -> ThreadPoolExecutor:
    """Threads that read parts ahead, apart from the publish pool whose threads wait on them
    (sharing it could leave every publish thread waiting for reads queued behind them)."""
    global _read_pool
    with _read_pool_lock:
        if _read_pool is None or _read_pool[0] != os.getpid():
            _read_pool = (os.getpid(), ThreadPoolExecutor(_READ_THREADS, thread_name_prefix="seglog-part-read"))
        return _read_pool[1]


@dataclass
class StagedPart:
    topic: str
    partition: int
    path: str            # relative to the root
    records: int
    task: int
    seq: int             # order of this part within its task and partition
    size: int = 0        # bytes (0 in manifests written before the field existed)
    # the part's batch_fields rows (int64, 9 per batch) as the task encoded them, so the commit
    # need not scan the part (local disk) or read it (an object store's part with reserved
    # offsets); never in a manifest (a replay scans and checks CRCs)
    batches: bytes | None = None
    # object store, batch job: the first offset of the range reserved for the part and the
    # epoch its batches are stamped with (offset_reservation.py); -1: not stamped
    base: int = -1
    epoch: int = -1
    # staging.publish=multipart: the part is an upload of this segment object (`path` is then
    # never written), completed by the commit (segment_uploads.py); its upload id and ETag
    upload_key: str | None = None
    upload_id: str | None = None
    etag: str | None = None

    def fields(self) -> np.ndarray | None:
        """`batches` as batch_fields rows."""
        return None if self.batches is None else np.frombuffer(self.batches, dtype=np.int64).reshape(-1, 9)

    def manifest_entry(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "batches"}


class PartReads:
    """An object store's staged parts read ahead, per target partition: the first
    READ_AHEAD_PARTS + 1 of each are asked for when the commit starts, so that their GETs run
    while the partitions are being taken (the writer opens), not after them."""

    def __init__(self, storage, by_partition: dict[tuple[str, int], list[StagedPart]]):
        self._storage = storage
        self._pending: dict[tuple[str, int], list] = {}
        if not storage.is_local:
            pool = _reader_pool()
            self._pending = {tp: [pool.submit(storage.read, part.path) for part in parts[:READ_AHEAD_PARTS + 1]]
                             for tp, parts in by_partition.items()}

    def take(self, tp: tuple[str, int]) -> list:
        """The reads started for partition `tp` (then this object no longer holds them)."""
        return self._pending.pop(tp, [])

    def cancel(self) -> None:
        """Drop the reads nobody took (a partition skipped or a commit that failed)."""
        for futures in self._pending.values():
            for future in futures:
                future.cancel()
        self._pending.clear()


def append_parts(storage, log, parts: list[StagedPart], adopt_bytes: int, verify_crc: bool,
                 started: list | None = None) -> None:
    """Append one partition's staged parts in order (not committed: its HW stays). Runs of
    parts big enough to adopt are adopted together (one folder fsync, one roll per run).
    started: on an object store, the reads of the first parts already asked for (PartReads)."""
    if not storage.is_local:
        uploads = segment_uploads.uploaded(parts)
        if uploads:
            # completed as segments at their reserved offsets; parts staged as objects (the
            # reservation did not cover them) follow, appended
            segment_uploads.publish(storage, log, uploads)
            parts = [p for p in parts if p.upload_id is None]
            if parts:
                _copy_parts(storage, log, parts, started or [])
            return
        if stamped(parts) and all(p.epoch == log.leader_epoch for p in parts):
            ordered = sorted(parts, key=lambda p: p.base)
            # copied on the server as segments, unless the log moved past the reserved offsets
            if log.publish_staged_objects([(p.path, p.fields().copy()) for p in ordered]) is not None:
                return
        _copy_parts(storage, log, parts, started or [])
        return
    i = 0
    while i < len(parts):
        run = []
        while i + len(run) < len(parts):
            part = parts[i + len(run)]
            if (part.size or storage.size(part.path)) < adopt_bytes:
                break
            run.append((part.path, part.fields()))
        # A task leaves the blocks of its parts' batch headers in the page cache (see
        # task_stager.TaskStager._header_blocks): no need to start reading them first.
        i += len(log.adopt_staged_many(run, verify_crc=verify_crc, headers_cached=True)) if run else 0
        if i < len(parts):           # too small, or not adoptable: copied into the log
            log.append_staged(storage.read(parts[i].path))
            i += 1


def stamped(parts: list[StagedPart]) -> bool:
    """Whether every part carries its reserved offsets (and its batches' fields): the commit may
    publish them without reading them (offset_reservation.py)."""
    return bool(parts) and all(p.base >= 0 and p.batches is not None for p in parts)


def _copy_parts(storage, log, parts: list[StagedPart], started: list) -> None:
    """An object store (no adoption: the offsets are assigned here, so each part is copied into
    the log): the parts read READ_AHEAD_PARTS ahead, appended in order."""
    pool = _reader_pool()
    pending = list(started) + [pool.submit(storage.read, part.path)
                               for part in parts[len(started):READ_AHEAD_PARTS + 1]]
    try:
        for i in range(len(parts)):
            data = pending[i].result()
            pending[i] = None           # appended below: not held longer than needed
            if i + READ_AHEAD_PARTS + 1 < len(parts):
                pending.append(pool.submit(storage.read, parts[i + READ_AHEAD_PARTS + 1].path))
            log.append_staged(data)
            del data
    finally:
        for future in pending:
            if future is not None:
                future.cancel()
