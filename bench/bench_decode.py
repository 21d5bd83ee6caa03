"""Record decode throughput: seglog's batches_to_arrow against kafka-python's reader on the same bytes.

Builds N records with 100-byte values in ~16 KiB batches (uncompressed, zstd, lz4), then measures
records/s, best of several runs after a warm-up, and prints each figure next to its anchor.
Run: python bench/bench_decode.py [--records N]
"""
from __future__ import annotations

import argparse
import sys
import os
import random
import time

from kafka.record.memory_records import MemoryRecords

sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

from logcore.records import Compression, batches_to_arrow, build_batch, decode_records, iter_batches

VALUE_SIZE = 100
BATCH_BYTES = 16 * 1024


def make_values(n: int, seed: int = 7) -> list[bytes]:
    # JSON-ish click events: realistic, mildly compressible 100-byte values.
    rng = random.Random(seed)
    events = ["click", "view", "scroll", "purchase", "login"]
    values = []
    for i in range(n):
        v = b'{"user":%d,"event":"%s","item":%d,"ts":%d,"pad":"' % (
            rng.randrange(10**7), events[rng.randrange(5)].encode(), rng.randrange(10**5), 1_700_000_000_000 + i)
        values.append((v + b"x" * VALUE_SIZE)[:VALUE_SIZE - 2] + b'"}')
    return values


def build_log(values: list[bytes], codec: Compression) -> bytes:
    per_batch = BATCH_BYTES // (VALUE_SIZE + 12)
    out = []
    ts0 = 1_700_000_000_000
    for start in range(0, len(values), per_batch):
        chunk = values[start:start + per_batch]
        out.append(build_batch([(b"%d" % ((start + i) % 1000), v, (), ts0 + start + i) for i, v in enumerate(chunk)],
                               base_offset=start, compression=codec))
    return b"".join(out)


def best_rate(fn, records: int, runs: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return records / best


def sample(data: bytes, max_records: int) -> tuple[bytes, int]:
    """A prefix of whole batches holding about max_records records (for the slow pure-Python readers)."""
    count = 0
    end = 0
    for pos, h in iter_batches(data):
        if count >= max_records:
            break
        count += h.records_count
        end = pos + h.size
    return data[:end], count


def kafka_python_read(data: bytes) -> int:
    records = MemoryRecords(data)
    n = 0
    while records.has_next():
        for _ in records.next_batch():
            n += 1
    return n


def seglog_python_read(data: bytes) -> int:
    return sum(len(decode_records(data, pos, h)) for pos, h in iter_batches(data))


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sample", type=int, default=50_000, help="records for the pure-Python readers")
    args = parser.parse_args(argv)

    values = make_values(args.records)
    rows = []
    for codec in (Compression.NONE, Compression.ZSTD, Compression.LZ4):
        t0 = time.perf_counter()
        data = build_log(values, codec)
        built = time.perf_counter() - t0
        assert batches_to_arrow(data).num_rows == args.records
        small, small_n = sample(data, args.sample)
        assert kafka_python_read(small) == small_n == seglog_python_read(small)
        name = codec.name.lower()
        batches = sum(1 for _ in iter_batches(data))
        print(f"[{name}] {args.records:,} records, {len(data) / 1e6:.1f} MB in {batches:,} batches "
              f"(built in {built:.1f} s); pure-Python readers on the first {small_n:,} records", flush=True)
        arrow_rate = best_rate(lambda: batches_to_arrow(data), args.records, args.runs)
        arrow_hdr_rate = best_rate(lambda: batches_to_arrow(data, include_headers=True), args.records, args.runs)
        kp_rate = best_rate(lambda: kafka_python_read(small), small_n, max(1, args.runs // 2))
        py_rate = best_rate(lambda: seglog_python_read(small), small_n, max(1, args.runs // 2))
        rows.append((f"{name}: batches_to_arrow records/s vs kafka-python reader", arrow_rate, kp_rate))
        rows.append((f"{name}: batches_to_arrow +headers records/s vs kafka-python reader", arrow_hdr_rate, kp_rate))
        rows.append((f"{name}: decode_records (pure Python) records/s vs kafka-python reader", py_rate, kp_rate))
        rows.append((f"{name}: batches_to_arrow MB/s of log bytes vs kafka-python reader",
                     arrow_rate * len(data) / args.records / 1e6, kp_rate * len(data) / args.records / 1e6))

    return print_table(f"Decode into Arrow columns ({args.records:,} records of 100-byte values, one core)",
                       [(metric, ours, anchor, "") for metric, ours, anchor in rows])


if __name__ == "__main__":
    main()
