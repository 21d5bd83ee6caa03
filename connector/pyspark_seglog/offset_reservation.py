"""Offsets reserved at staging time (a batch job on an object store): the tasks stamp their
parts with their final offsets and epoch, so that the driver's commit publishes each part as a
segment by a server-side copy (Log.publish_staged_objects) instead of reading it back and
writing it again (docs/sink-protocol.md, "Offsets reserved at staging").

The job's staging folder holds `_offsets.json`: per partition of the topic, the next free
offset and the epoch its commit will take the partition at. The write's planning seeds it
from each partition's committed HW and writer epoch; a task reserves a range for each part it
stages by a conditional replace (If-Match) of that object. The guesses are checked at the
commit: a partition whose writer took another epoch, or whose LEO passed a part's offsets
(another writer appended meanwhile), has its parts appended the usual way (append_staged
re-stamps their offsets). A range reserved by an attempt that failed is never published: a gap
of offsets, as the log format allows.
"""
from __future__ import annotations

import json

from logcore.errors import CommitFailedError
from logcore.log.log_root import partition_dir
from logcore.log.partition_state import ObjectPartitionState
from logcore.log.writer_fence import WriterFence

from pyspark_seglog.publish_pool import shared_publish_pool
from pyspark_seglog.staging_area import staging_path

OFFSETS = "_offsets.json"
_RESERVE_ATTEMPTS = 50


def _next_and_epoch(storage, topic: str, partition: int) -> tuple[int, int]:
    folder = partition_dir(topic, partition)
    hw = ObjectPartitionState(storage, folder).load().high_watermark
    # a writer's take bumps the epoch by one (WriterFence.acquire); -1: never taken
    return hw or 0, WriterFence(storage, folder).current_epoch() + 1


def seed_offsets(storage, job_id: str, topic: str, partitions: int, *, created: bool = False) -> None:
    """Planning: each partition's next offset and its commit's epoch, as they are now.
    created: the planning has just created the topic, so each partition starts at offset 0
    and epoch 0 (nothing to read; a writer that came first makes the commit append instead)."""
    if created:
        seeds = {str(p): [0, 0] for p in range(partitions)}
    else:
        pool = shared_publish_pool()
        futures = [pool.submit(_next_and_epoch, storage, topic, p) for p in range(partitions)]
        seeds = {str(p): list(f.result()) for p, f in enumerate(futures)}
    doc = {"topic": topic, "partitions": seeds}
    storage.write_atomic(f"{staging_path(job_id)}/{OFFSETS}", json.dumps(doc).encode(), durable=False)


def reserve_offsets(storage, job_id: str, counts: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
    """A task: reserve `counts[tp]` offsets of each partition; (first offset, epoch) of each
    range. Partitions the reservation does not cover (another topic) are left out."""
    path = f"{staging_path(job_id)}/{OFFSETS}"
    for _ in range(_RESERVE_ATTEMPTS):
        found = storage.read_versioned(path)
        if found is None:
            return {}
        doc = json.loads(found[0])
        ranges = {}
        for (topic, p), n in counts.items():
            entry = doc["partitions"].get(str(p)) if topic == doc["topic"] else None
            if entry is not None:
                ranges[(topic, p)] = (entry[0], entry[1])
                entry[0] += n
        if not ranges:
            return {}
        if storage.put_if_version(path, json.dumps(doc).encode(), found[1]) is not None:
            return ranges
    raise CommitFailedError(f"could not reserve offsets in {storage.describe(path)}: lost"
                            f" {_RESERVE_ATTEMPTS} races with other tasks")
