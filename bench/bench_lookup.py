"""Offset and timestamp lookups in a log of 10 and of 10,000 segments.

Lookups binary-search the segment list and then the segment's offset or time index, so the
cost should grow with the logarithm of the segment count, not linearly. The anchor for each
figure is the same lookup in the 10-segment log, measured in the same run.
"""
from __future__ import annotations

import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.records.batch import build_batch  # noqa: E402

RECORDS_PER_SEGMENT = 200
BATCH = 20


def build(root_dir: str, segments: int):
    root = LogRoot.open(root_dir, create=True)
    root.create_topic("t", config={"index.interval.bytes": "512"})
    log = root.log("t", 0, writer=True)
    value = b"v" * 100
    offset = 0
    for s in range(segments):
        for _ in range(RECORDS_PER_SEGMENT // BATCH):
            log.append_batch(build_batch([(b"k", value, (), 1_000_000 + offset + i) for i in range(BATCH)]))
            offset += BATCH
        log.commit()
        log.roll_to(log.log_end_offset)      # one segment per iteration, whatever the sizes
    log.commit()
    log.close()
    return LogRoot.open(root_dir).log("t", 0)


def time_lookups(log, n=2000):
    rng = random.Random(1)
    end = log.log_end_offset
    offsets = [rng.randrange(end) for _ in range(n)]
    t0 = time.perf_counter()
    for o in offsets:
        log.read(o, 1)
    t_offset = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for o in offsets:
        log.offset_for_timestamp(1_000_000 + o)
    t_time = (time.perf_counter() - t0) / n
    return t_offset * 1e6, t_time * 1e6


def main() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="seglog-bench-") as d:
        small = build(os.path.join(d, "small"), 10)
        big = build(os.path.join(d, "big"), 10_000)
        s_off, s_ts = time_lookups(small)
        b_off, b_ts = time_lookups(big)
    return print_table("Lookups: 10,000 segments (seglog) against 10 segments (anchor)", [
        ("offset lookup + 1-batch read", b_off, s_off, "us"),
        ("timestamp lookup", b_ts, s_ts, "us"),
    ])


if __name__ == "__main__":
    main()
