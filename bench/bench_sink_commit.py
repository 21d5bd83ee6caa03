"""Wall time and fsyncs of the batch sink's driver-side commit on local disk.

A `df.write.format("seglog")` job stages one part file per (task, target partition), then the
driver's commit adopts every part as a segment, commits each partition and releases it. That
commit is on the job's critical path with every core idle, so its cost is fsync waits, not CPU.
This runs the sink's own code without Spark: TASKS "tasks" stage ROWS rows (100-byte values)
into PARTITIONS partitions with `SeglogBatchWriter.write`, then `commit(messages)` is timed
(wall and CPU) and its fsync/fdatasync calls counted.

Anchor, in the same run on the same parts: the least a durable publish of those files needs,
on one thread per partition as the commit uses: hard-link each part into a fresh folder,
fdatasync it, fsync the folder once per partition.
Usage: python bench/bench_sink_commit.py [rows] [rounds]   (default 1000000 3)
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

import pyarrow as pa  # noqa: E402

from logcore.log import segment_flusher  # noqa: E402

PARTITIONS = 4
TASKS = 2
VALUE_BYTES = 100


class SyncCounter:
    """Counts os.fsync / os.fdatasync calls (and the segment flusher's alias) while active."""

    def __init__(self):
        self.count = 0

    def __enter__(self):
        self._saved = (os.fsync, os.fdatasync, segment_flusher._fdatasync)

        def counted(fn):
            def call(fd):
                self.count += 1
                return fn(fd)
            return call
        os.fsync, os.fdatasync = counted(self._saved[0]), counted(self._saved[1])
        segment_flusher._fdatasync = counted(self._saved[2])
        return self

    def __exit__(self, *exc):
        os.fsync, os.fdatasync, segment_flusher._fdatasync = self._saved


def _schema():
    from pyspark.sql.types import BinaryType, StructField, StructType
    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def _batches(task: int, rows: int, per_batch: int = 100_000):
    value = pa.array([b"v" * VALUE_BYTES] * per_batch, pa.binary())
    for start in range(0, rows, per_batch):
        n = min(per_batch, rows - start)
        keys = pa.array([b"k%d-%d" % (task, i) for i in range(start, start + n)], pa.binary())
        yield pa.RecordBatch.from_arrays([keys, value.slice(0, n)], ["key", "value"])


def stage(root: str, rows: int):
    from pyspark_seglog.sink import SeglogBatchWriter
    writer = SeglogBatchWriter({"path": root, "topic": "t", "topic.partitions": str(PARTITIONS)},
                               _schema(), False)
    msgs = [writer.write(_batches(task, rows // TASKS)) for task in range(TASKS)]
    return writer, msgs


def commit_once(root: str, rows: int) -> tuple[float, float, int, int]:
    """(wall s, CPU s, fsyncs, parts) of one commit."""
    writer, msgs = stage(root, rows)
    os.sync()                                   # the staging's dirty pages are not the commit's
    with SyncCounter() as syncs:
        t0, c0 = time.perf_counter(), time.process_time()
        writer.commit(msgs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, syncs.count, sum(len(m.parts) for m in msgs)


def anchor_once(workdir: str, rows: int) -> tuple[float, int]:
    """(wall s, fsyncs) of linking, fdatasyncing and folder-fsyncing the same parts."""
    root = os.path.join(workdir, "anchor-root")
    writer, msgs = stage(root, rows)
    os.sync()
    by_partition: dict[int, list[str]] = {}
    for m in msgs:
        for p in m.parts:
            by_partition.setdefault(p.partition, []).append(os.path.join(root, p.path))
    out = os.path.join(workdir, "anchor-out")

    def publish(partition: int, paths: list[str]) -> None:
        folder = os.path.join(out, str(partition))
        os.makedirs(folder)
        for i, path in enumerate(paths):
            target = os.path.join(folder, f"{i:020d}.log")
            os.link(path, target)
            fd = os.open(target, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    with SyncCounter() as syncs, ThreadPoolExecutor(PARTITIONS) as pool:
        t0 = time.perf_counter()
        list(pool.map(lambda item: publish(*item), sorted(by_partition.items())))
        wall = time.perf_counter() - t0
    shutil.rmtree(root)
    shutil.rmtree(out)
    return wall, syncs.count


def main(argv: list[str] | None = None) -> list[str]:
    argv = sys.argv[1:] if argv is None else argv
    rows = int(argv[0]) if argv else 1_000_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    workdir = tempfile.mkdtemp(prefix="seglog-bench-commit-")
    walls, cpus, anchors = [], [], []
    syncs = anchor_syncs = parts = 0
    try:
        for r in range(rounds + 1):         # the first round is a warm-up
            root = os.path.join(workdir, f"root-{r}")
            wall, cpu, syncs, parts = commit_once(root, rows)
            shutil.rmtree(root)
            a_wall, anchor_syncs = anchor_once(workdir, rows)
            if r:
                walls.append(wall)
                cpus.append(cpu)
                anchors.append(a_wall)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    walls.sort()
    anchors.sort()
    return print_table(
        f"Batch sink commit, {rows:,} rows, {PARTITIONS} partitions, {parts} parts"
        f" (seglog commit vs link + fdatasync + folder fsync of the same parts)", [
            ("commit wall (median)", walls[len(walls) // 2] * 1000, anchors[len(anchors) // 2] * 1000, "ms"),
            ("commit wall (best)", walls[0] * 1000, anchors[0] * 1000, "ms"),
            ("commit CPU (best)", min(cpus) * 1000, anchors[0] * 1000, "ms"),
            ("fsync + fdatasync calls per commit", syncs, anchor_syncs, "calls"),
        ])


if __name__ == "__main__":
    main()
