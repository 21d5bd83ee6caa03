"""Run every seglog benchmark and write the tables to docs/benchmarks.md.

Each benchmark prints its figures beside an anchor measured in the same run, as a ratio.
Usage: python bench/run.py [--no-write]
"""
from __future__ import annotations

import datetime
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(__file__))

import bench_append  # noqa: E402
import bench_broker  # noqa: E402
import bench_broker_tiered  # noqa: E402
import bench_clean  # noqa: E402
import bench_cluster  # noqa: E402
import bench_decode  # noqa: E402
import bench_encode  # noqa: E402
import bench_fetch_cold  # noqa: E402
import bench_kafka_tools  # noqa: E402
import bench_lookup  # noqa: E402
import bench_read_memory  # noqa: E402
import bench_sink_commit  # noqa: E402
import bench_sink_epoch  # noqa: E402
import bench_spark  # noqa: E402
import bench_spark_kafka  # noqa: E402
import bench_spark_s3  # noqa: E402
import bench_stream_latency  # noqa: E402
import bench_task_open  # noqa: E402
import bench_tiered  # noqa: E402
import bench_tls  # noqa: E402
import bench_txn_produce  # noqa: E402

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks.md")


def main() -> None:
    sections = [
        bench_decode.main([]),
        bench_encode.main([]),
        bench_append.main(),
        bench_lookup.main(),
        bench_task_open.main(),
        bench_read_memory.main(),
        bench_clean.main(),
        bench_spark.main(),
        bench_spark_kafka.main([]),
        bench_spark_s3.main([]),
        bench_sink_commit.main([]),
        bench_sink_epoch.main([]),
        bench_tiered.main([]),
        bench_broker.main([]),
        bench_broker_tiered.main([]),
        bench_fetch_cold.main([]),
        bench_cluster.main([]),
        bench_txn_produce.main([]),
        bench_txn_produce.main(["--cluster"]),
        bench_kafka_tools.main([]),
        bench_stream_latency.main(["--rounds", "2"]),
        bench_tls.main([]),
    ]
    if "--no-write" in sys.argv:
        return
    header = [
        "# seglog benchmarks",
        "",
        "Written by `python bench/run.py`. Every figure stands beside an anchor measured in the same",
        "run on the same machine; the ratio is seglog / anchor.",
        "",
        f"Last run: {datetime.date.today().isoformat()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
    ]
    body = []
    for lines in sections:
        body.extend(lines + [""])
    with open(DOC, "w") as f:
        f.write("\n".join(header + body))
    print(f"wrote {os.path.normpath(DOC)}")


if __name__ == "__main__":
    main()
