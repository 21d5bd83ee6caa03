"""Append throughput to a local disk with 16 KiB batches, against a plain sequential file write.

Both write the same bytes to the same disk in the same run, with the default flush policy
(page cache, no fsync per append); the seglog side validates each client batch (CRC, record
layout, offsets), assigns offsets, stamps the leader epoch, maintains the indexes and rolls
segments, as a broker's produce path does.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.records.batch import build_batch  # noqa: E402

TOTAL_BYTES = 256 * 1024 * 1024
RECORDS_PER_BATCH = 140           # ~16 KiB batches of ~100-byte values


def make_batches() -> list[bytes]:
    value = b"x" * 100
    batch = build_batch([(b"key-%06d" % i, value, (), 1_700_000_000_000 + i) for i in range(RECORDS_PER_BATCH)])
    count = TOTAL_BYTES // len(batch)
    return [batch] * count


def run(workdir: str) -> list[str]:
    batches = make_batches()
    size = sum(len(b) for b in batches)

    def plain_write() -> float:
        path = os.path.join(workdir, "plain.bin")
        with open(path, "wb", buffering=0) as f:
            t0 = time.perf_counter()
            for b in batches:
                f.write(b)
            elapsed = time.perf_counter() - t0
        os.remove(path)
        return elapsed

    def seglog_append() -> float:
        root_dir = os.path.join(workdir, "root")
        shutil.rmtree(root_dir, ignore_errors=True)
        root = LogRoot.open(root_dir, create=True)
        root.create_topic("bench", config={"segment.bytes": str(64 * 1024 * 1024)})
        log = root.log("bench", 0, writer=True)
        t0 = time.perf_counter()
        for b in batches:
            log.append_batch(b)
        elapsed = time.perf_counter() - t0
        log.commit()
        root.close()
        return elapsed

    # Only the write loops are timed (page cache, no fsync on either side); each side warms up once.
    plain_write()
    seglog_append()
    t_plain = min(plain_write() for _ in range(3))
    t_seglog = min(seglog_append() for _ in range(3))
    mb = size / 1e6
    return print_table(f"Append to local disk ({len(batches[0]):,}-byte batches, {mb:,.0f} MB)", [
        ("append throughput", mb / t_seglog, mb / t_plain, "MB/s"),
    ])


def main() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="seglog-bench-", dir=os.environ.get("SEGLOG_BENCH_DIR")) as d:
        return run(d)


if __name__ == "__main__":
    main()
