"""Log cleaner throughput, offset-map memory per key and peak memory of a pass.

A compacted log of 1 KiB records in 16-record batches where 10% of the records hold distinct keys
(each key written ten times) is cleaned once on local disk. The anchor, in the same run, is a
plain read-and-rewrite of the same segment bytes (read in io-buffer chunks, written to new files,
fsynced): the I/O any cleaner must do, with no per-record work.
"""
from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

from logcore.cleaner.cleaner import LogCleaner  # noqa: E402
from logcore.cleaner.offset_map import ENTRY_BYTES, OffsetMap  # noqa: E402
from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.records.encode import encode_batches  # noqa: E402

TOTAL_RECORDS = int(os.environ.get("BENCH_CLEAN_RECORDS", 160_000))    # ~170 MB of log
LIVE_FRACTION = 0.1
IO_BUFFER = 512 * 1024


def build_log(root_dir: str):
    root = LogRoot.open(root_dir, create=True)
    root.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": str(32 << 20)})
    log = root.log("c", 0, writer=True)
    keys_n = int(TOTAL_RECORDS * LIVE_FRACTION)
    rng = np.random.default_rng(7)
    step = 20_000
    for start in range(0, TOTAL_RECORDS, step):
        n = min(step, TOTAL_RECORDS - start)
        keys = pa.array([b"key-%08d" % k for k in rng.integers(0, keys_n, n)], type=pa.binary())
        values = pa.array([os.urandom(8) * 128 for _ in range(n)], type=pa.binary())
        ts = np.full(n, 1_700_000_000_000, dtype=np.int64)
        log.append_staged(b"".join(encode_batches(keys, values, ts, batch_bytes=16 * 1024 + 512,
                                                  max_records=16)))
    log.commit()
    log._roll_to(log.log_end_offset)
    return root, log


def plain_rewrite(log, out_dir: str) -> int:
    moved = 0
    for seg in log.segments[:-1]:
        src = log.storage.local_path(seg.log_path)
        with open(src, "rb") as f, open(os.path.join(out_dir, os.path.basename(src)), "wb") as g:
            while True:
                chunk = f.read(IO_BUFFER)
                if not chunk:
                    break
                g.write(chunk)
                moved += len(chunk)
            g.flush()
            os.fsync(g.fileno())
    return moved


def main() -> None:
    work = tempfile.mkdtemp(prefix="bench-clean-")
    try:
        root, log = build_log(os.path.join(work, "root"))
        input_bytes = sum(s.size() for s in log.segments[:-1])
        os.makedirs(os.path.join(work, "copy"))
        t0 = time.perf_counter()
        plain_rewrite(log, os.path.join(work, "copy"))
        plain_s = time.perf_counter() - t0

        cleaner = LogCleaner()                      # Kafka's defaults: 128 MiB offset map
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        stats = cleaner.clean(log, 1_800_000_000_000)
        clean_s = time.perf_counter() - t0
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        root.close()
        # Peak memory in a second pass over a fresh log (tracemalloc slows the pass down, so it
        # is not on while timing); the offset map is allocated before tracing starts.
        root2, log2 = build_log(os.path.join(work, "root2"))
        tracemalloc.start()
        cleaner.clean(log2, 1_800_000_000_000)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        root2.close()

        keys = stats.map_keys
        omap = OffsetMap(1 << 20)
        rows = [
            ("cleaning throughput (input)", input_bytes / clean_s / 1e6, input_bytes / plain_s / 1e6, "MB/s"),
            ("offset map bytes per entry", omap.memory_bytes / omap.slots, float(ENTRY_BYTES), "B"),
            ("offset map bytes per key at load factor 0.9", omap.memory_bytes / omap.max_entries,
             float(ENTRY_BYTES), "B"),
            ("peak memory allocated by a pass (besides the map)", traced_peak / 2**20,
             cleaner.offset_map.memory_bytes / 2**20, "MiB"),
        ]
        print(f"input {input_bytes / 1e6:.1f} MB in {stats.segments_before} segments, {stats.records_read:,} records,"
              f" {keys:,} distinct keys; kept {stats.records_kept:,}; written {stats.bytes_written / 1e6:.1f} MB;"
              f" max RSS {rss_before / 1024:.0f} -> {rss_after / 1024:.0f} MiB")
        print_table("Log cleaner (anchor: plain read + rewrite of the same bytes; map memory: Kafka's 24-byte"
                    " entry; pass memory: the offset map's budget)", rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
