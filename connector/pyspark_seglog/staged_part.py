"""A staged part: a run of a task's encoded batches for one target partition, written to the
staging area, listed in the task's commit message and appended to its partition by the commit."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class StagedPart:
    topic: str
    partition: int
    path: str            # relative to the root
    records: int
    task: int
    seq: int             # order of this part within its task and partition
    size: int = 0        # bytes (0 in manifests written before the field existed)
    # local disk: the part's batch_fields rows (int64, 9 per batch) as the task encoded them, so
    # the commit need not scan the part; never in a manifest (a replay scans and checks CRCs)
    batches: bytes | None = None

    def manifest_entry(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "batches"}


def append_parts(storage, log, parts: list[StagedPart], adopt_bytes: int, verify_crc: bool) -> None:
    """Append one partition's staged parts in order (not committed: its HW stays). Runs of
    parts big enough to adopt are adopted together (one folder fsync, one roll per run)."""
    i = 0
    while i < len(parts):
        run = []
        while i + len(run) < len(parts):
            part = parts[i + len(run)]
            if (part.size or storage.size(part.path)) < adopt_bytes:
                break
            fields = None if part.batches is None else np.frombuffer(part.batches, dtype=np.int64).reshape(-1, 9)
            run.append((part.path, fields))
        # A task leaves the blocks of its parts' batch headers in the page cache (see
        # task_stager.TaskStager._header_blocks): no need to start reading them first.
        i += len(log.adopt_staged_many(run, verify_crc=verify_crc, headers_cached=True)) if run else 0
        if i < len(parts):           # too small, or not adoptable: copied into the log
            log.append_staged(storage.read(parts[i].path))
            i += 1
