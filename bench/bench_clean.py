"""Log cleaner throughput, offset-map memory per key and peak memory of a pass.

A compacted log of 1 KiB records in 16-record batches where 10% of the records hold distinct keys
(each key written ten times) is cleaned on local disk. Each round copies the log, then times a
plain read-and-rewrite of its segment bytes (read in io-buffer chunks, written to new files,
fsynced: the I/O any cleaner must do, with no per-record work) and one pass of the cleaner over
the same, equally cached bytes; the best round of each is reported. Peak memory is that of a
fresh process running one pass (imports, the offset map, buffers and the mapped segment pages).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

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
ROUNDS = int(os.environ.get("BENCH_CLEAN_ROUNDS", 3))
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    log.roll_to(log.log_end_offset)
    return root, log


def plain_rewrite(paths: list[str], out_dir: str) -> int:
    moved = 0
    for src in paths:
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


# A pass in a fresh process: its peak RSS is the pass's (imports, offset map, buffers, mapped
# segment pages), not the building of the test log.
_PASS_IN_CHILD = """
import json, resource, sys
from logcore.cleaner.cleaner import LogCleaner
from logcore.log.log_root import LogRoot
cleaner = LogCleaner()
root = LogRoot.open(sys.argv[1])
log = root.log("c", 0, writer=True)
before = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
cleaner.clean(log, 1_800_000_000_000)
root.close()
# VmHWM, not ru_maxrss: the latter can carry the forking parent's size across exec.
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"before": before, "peak": peak}))
"""


def pass_memory(root_dir: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    out = subprocess.run([sys.executable, "-c", _PASS_IN_CHILD, root_dir], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> list[str]:
    work = tempfile.mkdtemp(prefix="bench-clean-")
    try:
        source = os.path.join(work, "source")
        root, log = build_log(source)
        sealed = [os.path.basename(log.storage.local_path(s.log_path)) for s in log.segments[:-1]]
        input_bytes = sum(s.size() for s in log.segments[:-1])
        root.close()
        cleaner = LogCleaner()                      # Kafka's defaults: 128 MiB offset map
        plain_times, clean_times = [], []
        for r in range(ROUNDS):
            # Each round cleans a fresh copy; both sides read the same (cached) bytes of it.
            copy = os.path.join(work, f"round{r}")
            shutil.copytree(source, copy)
            os.sync()
            out_dir = os.path.join(work, f"plain{r}")
            os.makedirs(out_dir)
            t0 = time.perf_counter()
            plain_rewrite([os.path.join(copy, "c-0", name) for name in sealed], out_dir)
            plain_times.append(time.perf_counter() - t0)
            shutil.rmtree(out_dir)
            os.sync()
            root = LogRoot.open(copy)
            log = root.log("c", 0, writer=True)
            t0 = time.perf_counter()
            stats = cleaner.clean(log, 1_800_000_000_000)
            clean_times.append(time.perf_counter() - t0)
            root.close()
            shutil.rmtree(copy)
        copy = os.path.join(work, "memory")
        shutil.copytree(source, copy)
        memory = pass_memory(copy)

        omap = OffsetMap(1 << 20)
        plain_s, clean_s = min(plain_times), min(clean_times)
        rows = [
            ("cleaning throughput (input, best of rounds)", input_bytes / clean_s / 1e6,
             input_bytes / plain_s / 1e6, "MB/s"),
            ("offset map bytes per entry", omap.memory_bytes / omap.slots, float(ENTRY_BYTES), "B"),
            ("offset map bytes per key at load factor 0.9", omap.memory_bytes / omap.max_entries,
             float(ENTRY_BYTES), "B"),
            ("peak RSS of a process running one pass", memory["peak"] / 2**20,
             cleaner.offset_map.memory_bytes / 2**20, "MiB"),
            ("RSS growth during the pass", (memory["peak"] - memory["before"]) / 2**20,
             cleaner.offset_map.memory_bytes / 2**20, "MiB"),
        ]
        print(f"input {input_bytes / 1e6:.1f} MB in {stats.segments_before} segments, {stats.records_read:,} records,"
              f" {stats.map_keys:,} distinct keys; kept {stats.records_kept:,}; written"
              f" {stats.bytes_written / 1e6:.1f} MB; rounds (plain / clean, s): "
              + ", ".join(f"{p:.3f}/{c:.3f}" for p, c in zip(plain_times, clean_times)))
        return print_table("Log cleaner (anchor: plain read + rewrite + fsync of the same bytes, same run;"
                           " map memory: Kafka's 24-byte entry; pass memory: the offset map's budget,"
                           " log.cleaner.dedupe.buffer.size)", rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
