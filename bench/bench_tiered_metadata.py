"""Opening a partition's remote log metadata with and without a snapshot.

Builds the metadata of N remote segments (default 10,000: an add and a finish each, so 2N
records) in a local folder through RemoteLogMetadataStore (snapshots every 100 records, the
default), then times a fresh open: with the snapshot (one snapshot object and the records after
it) and with the snapshot removed (every record replayed). Both opens must give the same
segments. Usage: bench_tiered_metadata.py [segments] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

from logcore.storage import open_storage  # noqa: E402
from logcore.tiered.metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata,  # noqa: E402
                                     RemoteLogSegmentState, TopicIdPartition)
from logcore.tiered.metadata_store import RemoteLogMetadataStore, SnapshotHistory  # noqa: E402

TIP = TopicIdPartition(uuid.UUID(int=0x5E6106), "bench", 0)
REPEATS = 3


def build(storage, segments: int) -> RemoteLogMetadataStore:
    # The history below the snapshots is kept: the anchor replays it.
    store = RemoteLogMetadataStore(storage, TIP.topic, TIP.topic_id, TIP.partition,
                                   history=SnapshotHistory.KEPT)
    for i in range(segments):
        meta = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TIP), i * 1000, i * 1000 + 999,
                                        1_700_000_000_000 + i, {0: i * 1000}, 512_000)
        store.add_segment(meta)
        store.update_state(meta.segment_id, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                           custom_metadata=b"\x00" * 10)
    return store


def time_open(storage) -> tuple[float, RemoteLogMetadataStore]:
    best, store = float("inf"), None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        store = RemoteLogMetadataStore(storage, TIP.topic, TIP.topic_id, TIP.partition)
        best = min(best, time.perf_counter() - t0)
    return best, store


def run(workdir: str, segments: int) -> None:
    storage = open_storage(workdir)
    t0 = time.perf_counter()
    writer = build(storage, segments)
    built = time.perf_counter() - t0
    with_snapshot, a = time_open(storage)
    os.rename(os.path.join(workdir, writer.snapshot_path), os.path.join(workdir, "snapshot.aside"))
    without, b = time_open(storage)
    if a.list_segments() != b.list_segments() or len(a.list_segments()) != segments:
        raise SystemExit("the opens with and without the snapshot differ")
    print(f"{segments} remote segments, {writer.next_sequence} records (built in {built:.1f} s)")
    print_table("open of a partition's remote metadata: with a snapshot (seglog) vs the whole "
                "history (anchor)",
                [("open time", with_snapshot * 1000, without * 1000, "ms"),
                 ("records replayed", a.records_read, b.records_read, "")])
    print(f"open time without / with the snapshot: {without / with_snapshot:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("segments", type=int, nargs="?", default=10_000)
    parser.add_argument("--keep", help="build in this folder and keep it")
    args = parser.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        run(args.keep, args.segments)
        return
    workdir = tempfile.mkdtemp(prefix="seglog-bench-rlmm-")
    try:
        run(workdir, args.segments)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
