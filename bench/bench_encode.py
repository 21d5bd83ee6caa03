"""Record-batch encoding, the Spark sink's largest CPU cost: encode_batch_run_into against a plain copy.

Two settings, each on the same rows (~100-byte JSON-ish values, 6-11 byte keys, Arrow batches of
10,000 rows, ~1 MB record batches):
- contiguous: each Arrow batch whole, into one buffer at an advancing position;
- sink-like: as the sink's task does, each Arrow batch's rows are routed to 4 partitions by
  murmur2 of the key, and each partition's rows (an int64 `rows` index array) are encoded into
  that partition's own 1 MiB region of a page-aligned buffer at its advancing position (back to
  the region's start when full, where the sink would stage the region).
The anchor copies the same number of bytes to the same positions (numpy slice assignment: one
memcpy per call). Figures are CPU ns per row, best of several runs after a warm-up.
`--reference PATH` also times another build of the _fastcodec extension (e.g. the previous
encoder) on the same calls, for before/after figures from one run.

Run: python bench/bench_encode.py [--records N] [--runs R] [--reference PATH.so]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import random
import sys
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(__file__))
from bench_decode import make_values  # noqa: E402
from common import print_table  # noqa: E402

from logcore.records import encode  # noqa: E402
from logcore.records.encode import encode_batch_run_into  # noqa: E402
from logcore.records.partitioner import murmur2_partitions  # noqa: E402
from logcore.storage.direct_writer import aligned_buffer  # noqa: E402

ARROW_BATCH = 10_000
PARTITIONS = 4
REGION = 1 << 20
BATCH_BYTES = 1_000_000


def make_batches(n: int, seed: int = 11) -> list[tuple[pa.Array, pa.Array, np.ndarray]]:
    rng = random.Random(seed)
    keys = pa.array([b"user-%d" % rng.randrange(10**6) for _ in range(n)], pa.binary())
    values = pa.array(make_values(n), pa.binary())
    ts = 1_700_000_000_000 + np.arange(n, dtype=np.int64)
    return [(keys.slice(s, ARROW_BATCH), values.slice(s, ARROW_BATCH), ts[s:s + ARROW_BATCH])
            for s in range(0, n, ARROW_BATCH)]


def routes(batches) -> list[list[np.ndarray]]:
    """Per Arrow batch, each partition's rows (as the sink's router picks them)."""
    out = []
    for keys, _, _ in batches:
        part = murmur2_partitions(keys, PARTITIONS)
        out.append([np.flatnonzero(part == p) for p in range(PARTITIONS)])
    return out


def sink_like(batches, routed, out: memoryview, copy_only: bool, sizes: list[int]) -> None:
    """One pass of the sink-like setting; with copy_only, copy `sizes` (recorded by an encoding
    pass) bytes instead of encoding."""
    regions = [np.frombuffer(out[p * REGION:(p + 1) * REGION], dtype=np.uint8) for p in range(PARTITIONS)]
    views = [out[p * REGION:(p + 1) * REGION] for p in range(PARTITIONS)]
    source = np.random.default_rng(0).integers(0, 256, REGION, dtype=np.uint8)
    fill = [0] * PARTITIONS
    call = 0
    for (keys, values, ts), parts in zip(batches, routed):
        for p in range(PARTITIONS):
            if copy_only:
                size = sizes[call]
                if fill[p] + size > REGION:
                    fill[p] = 0
                regions[p][fill[p]:fill[p] + size] = source[:size]
            else:
                size, count = encode_batch_run_into(views[p], fill[p], keys, values, ts, rows=parts[p],
                                                    batch_bytes=BATCH_BYTES)
                if count < 0:
                    fill[p] = 0
                    size, count = encode_batch_run_into(views[p], 0, keys, values, ts, rows=parts[p],
                                                        batch_bytes=BATCH_BYTES)
                if len(sizes) <= call:
                    sizes.append(size)
            fill[p] += size
            call += 1


def contiguous(batches, out: memoryview, copy_only: bool, sizes: list[int]) -> None:
    region = np.frombuffer(out, dtype=np.uint8)
    source = np.random.default_rng(0).integers(0, 256, 2 * REGION, dtype=np.uint8)
    fill = 0
    for call, (keys, values, ts) in enumerate(batches):
        if copy_only:
            size = sizes[call]
            if fill + size > len(region):
                fill = 0
            region[fill:fill + size] = source[:size]
        else:
            size, count = encode_batch_run_into(out, fill, keys, values, ts, batch_bytes=BATCH_BYTES)
            if count < 0:
                fill = 0
                size, count = encode_batch_run_into(out, 0, keys, values, ts, batch_bytes=BATCH_BYTES)
            if len(sizes) <= call:
                sizes.append(size)
        fill += size


def cpu_ns_per_row(fn, rows: int, runs: int) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        c0 = time.process_time()
        fn()
        best = min(best, time.process_time() - c0)
    return best * 1e9 / rows


@contextlib.contextmanager
def codec_module(path: str | None):
    """encode.py calling the _fastcodec build at `path` (None: the installed one)."""
    if path is None:
        yield
        return
    spec = importlib.util.spec_from_file_location("logcore.records._fastcodec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    saved, encode._fastcodec = encode._fastcodec, module
    try:
        yield
    finally:
        encode._fastcodec = saved


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--reference", help="another build of the _fastcodec extension to time too")
    args = parser.parse_args(argv)

    batches = make_batches(args.records)
    routed = routes(batches)
    sink_buf = aligned_buffer(PARTITIONS * REGION)
    flat_buf = aligned_buffer(2 * REGION)
    sink_out, flat_out = memoryview(sink_buf), memoryview(flat_buf)
    sink_sizes: list[int] = []
    flat_sizes: list[int] = []
    sink_like(batches, routed, sink_out, False, sink_sizes)
    contiguous(batches, flat_out, False, flat_sizes)
    n = args.records
    print(f"{n:,} rows, {sum(flat_sizes) / 1e6:.1f} MB of batches; sink-like: "
          f"{len(sink_sizes):,} calls of ~{n // len(sink_sizes):,} rows", flush=True)

    def measure() -> tuple[float, float]:
        return (cpu_ns_per_row(lambda: sink_like(batches, routed, sink_out, False, sink_sizes), n, args.runs),
                cpu_ns_per_row(lambda: contiguous(batches, flat_out, False, flat_sizes), n, args.runs))

    sink_ns, flat_ns = measure()
    sink_copy = cpu_ns_per_row(lambda: sink_like(batches, routed, sink_out, True, sink_sizes), n, args.runs)
    flat_copy = cpu_ns_per_row(lambda: contiguous(batches, flat_out, True, flat_sizes), n, args.runs)
    rows = [("sink-like: encode CPU ns/row vs plain copy of the same bytes", sink_ns, sink_copy, "ns"),
            ("contiguous: encode CPU ns/row vs plain copy of the same bytes", flat_ns, flat_copy, "ns")]
    if args.reference:
        with codec_module(args.reference):
            ref_sink, ref_flat = measure()
        sink_again, flat_again = measure()      # interleaved, so drift in machine load shows
        rows += [("sink-like: encode CPU ns/row vs reference build", min(sink_ns, sink_again), ref_sink, "ns"),
                 ("contiguous: encode CPU ns/row vs reference build", min(flat_ns, flat_again), ref_flat, "ns")]
    sink_out.release()
    flat_out.release()
    return print_table(f"Record-batch encoding ({n:,} rows of 100-byte values, one core)", rows)


if __name__ == "__main__":
    main()
