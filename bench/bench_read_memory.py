"""Memory held while reading a whole partition: bounded by the read window, not the log size.

Reads a 20 MB and a 400 MB partition end to end the way the Spark source does (1 MiB fetches
decoded into Arrow columns) and reports the peak of Python-tracked memory (tracemalloc) for each;
the anchor is the small log, so a ratio near 1 means the window, not the log, sets the memory.
"""
from __future__ import annotations

import os
import sys
import tempfile
import tracemalloc

sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.records.arrow import batches_to_arrow  # noqa: E402
from logcore.records.batch import build_batch  # noqa: E402

WINDOW = 1 << 20


def build(root_dir: str, megabytes: int) -> None:
    root = LogRoot.open(root_dir, create=True)
    root.create_topic("t", config={"segment.bytes": str(64 << 20)})
    log = root.log("t", 0, writer=True)
    batch = build_batch([(b"k%05d" % i, b"v" * 100, (), 1_000 + i) for i in range(140)])
    for _ in range(megabytes * 1_000_000 // len(batch)):
        log.append_batch(batch)
    log.commit()
    root.close()


def read_all(root_dir: str) -> tuple[int, int]:
    """Rows read and peak traced bytes while reading the partition from its start."""
    log = LogRoot.open(root_dir).log("t", 0)
    tracemalloc.start()
    rows, offset = 0, log.log_start_offset
    while offset < log.high_watermark:
        fetch = log.read(offset, WINDOW)
        table = batches_to_arrow(fetch.data, min_offset=offset)
        rows += table.num_rows
        offset = int(table.column(0)[-1].as_py()) + 1
        del table, fetch
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return rows, peak


def main() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="seglog-bench-") as d:
        small, big = os.path.join(d, "small"), os.path.join(d, "big")
        build(small, 20)
        build(big, 400)
        small_rows, small_peak = read_all(small)
        big_rows, big_peak = read_all(big)
    return print_table(
        f"Peak memory reading a whole partition ({big_rows:,} records) against a 20 MB one ({small_rows:,})",
        [("peak Python memory while reading", big_peak / 2**20, small_peak / 2**20, "MiB")])


if __name__ == "__main__":
    main()
