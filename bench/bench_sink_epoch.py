"""Per-commit cost of the sink's partition take-over: resumed epoch against a bump per commit.

The streaming sink opens each target partition as its writer once per micro-batch. A bump per
open adds a leader-epoch entry per micro-batch, and `leader-epoch-checkpoint` is read at every
open and rewritten (and fsynced) at every bump, so the commit grows with the stream's age; a
resumed epoch (`LogRoot.log(..., resume=)`) keeps one entry. Both sides run the sink's
per-partition commit cycle (take the partition, append a small batch, commit with a marker,
close) on the same disk in the same run:
- `history` cycles from a fresh partition, then the mean of the last cycles (micro-batch ~N);
- one cycle after `AGED_ENTRIES` micro-batches (about 28 hours at one trigger a second), each
  side on the history it leaves: a checkpoint of that many entries for the bumping sink, of one
  entry for the resuming one (the log and the epoch number are the same).
Usage: python bench/bench_sink_epoch.py [history] (default 1000)
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

from logcore.log.checkpoint import LeaderEpochCheckpoint  # noqa: E402
from logcore.log.log import LEADER_EPOCH_CHECKPOINT  # noqa: E402
from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.log.writer_fence import WriterFence  # noqa: E402

AGED_ENTRIES = 100_000
TAIL = 100                       # cycles averaged at the end of the history
VALUE = b"x" * 100


def cycle(root: LogRoot, batch: int, token, resume: bool):
    """One commit's work on one partition, as the sink's `_commit` does it; returns the token."""
    log = root.log("t", 0, writer=True, resume=token if resume else None)
    log.append_records([(b"k%d" % i, VALUE, (), 1_700_000_000_000 + batch) for i in range(10)])
    log.commit({"query": "bench", "batch": batch})
    log.close()
    return log.leader_epoch, log.fence.writer_id


def history(workdir: str, n: int, resume: bool) -> tuple[float, float, float, int]:
    """(total CPU s, mean wall ms and CPU ms of the last TAIL cycles, checkpoint entries)."""
    path = os.path.join(workdir, f"history-{resume}")
    with LogRoot.open(path, create=True) as root:
        root.create_topic("t", 1)
        token = None
        cpu0 = time.process_time()
        tail_wall = tail_cpu = 0.0
        for b in range(n):
            t0, c0 = time.perf_counter(), time.process_time()
            token = cycle(root, b, token, resume)
            if b >= n - TAIL:
                tail_wall += time.perf_counter() - t0
                tail_cpu += time.process_time() - c0
        total_cpu = time.process_time() - cpu0
        entries = len(LeaderEpochCheckpoint(root.storage, f"t-0/{LEADER_EPOCH_CHECKPOINT}").read())
    shutil.rmtree(path)
    return total_cpu, tail_wall / TAIL * 1000, tail_cpu / TAIL * 1000, entries


def aged(workdir: str, resume: bool, repeat: int = 5) -> tuple[float, float]:
    """(best wall ms, best CPU ms) of one cycle on a partition after AGED_ENTRIES commits."""
    path = os.path.join(workdir, f"aged-{resume}")
    with LogRoot.open(path, create=True) as root:
        root.create_topic("t", 1)
        with root.log("t", 0, writer=True) as log:       # one offset per entry to start at
            for first in range(0, AGED_ENTRIES, 10_000):
                log.append_records([(None, b"", (), 1_700_000_000_000)] * 10_000)
            log.commit()
        fence = WriterFence(root.storage, "t-0")
        fence.acquire(min_epoch=AGED_ENTRIES - 1)
        fence.release()
        LeaderEpochCheckpoint(root.storage, f"t-0/{LEADER_EPOCH_CHECKPOINT}").write(
            [(AGED_ENTRIES - 1, 0)] if resume else [(e, e) for e in range(AGED_ENTRIES)])
        token = (AGED_ENTRIES - 1, fence.writer_id)
        walls, cpus = [], []
        for b in range(repeat + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            token = cycle(root, b, token, resume)
            if b:                                         # the first one is a warm-up
                walls.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
    shutil.rmtree(path)
    return min(walls) * 1000, min(cpus) * 1000


def main(argv: list[str] | None = None) -> list[str]:
    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if argv else 1000
    workdir = tempfile.mkdtemp(prefix="seglog-bench-epoch-")
    try:
        bump = history(workdir, n, resume=False)
        kept = history(workdir, n, resume=True)
        aged_bump = aged(workdir, resume=False)
        aged_kept = aged(workdir, resume=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return print_table(
        "Sink commit cycle per partition: resumed epoch (seglog) vs a bump per commit (anchor)", [
            (f"leader-epoch entries after {n} commits", kept[3], bump[3], "entries"),
            (f"CPU for {n} commits", kept[0], bump[0], "s"),
            (f"commit ~{n}: wall per commit", kept[1], bump[1], "ms"),
            (f"commit ~{n}: CPU per commit", kept[2], bump[2], "ms"),
            (f"{AGED_ENTRIES:,} entries of history: wall per commit", aged_kept[0], aged_bump[0], "ms"),
            (f"{AGED_ENTRIES:,} entries of history: CPU per commit", aged_kept[1], aged_bump[1], "ms"),
        ])


if __name__ == "__main__":
    main()
