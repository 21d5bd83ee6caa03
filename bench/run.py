"""Run every seglog benchmark and write the tables into docs/benchmarks.md's latest-run block
(the hand-written sections around it are kept).

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
BEGIN = "<!-- latest bench/run.py run: begin -->"
END = "<!-- latest bench/run.py run: end -->"


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
    block = [
        BEGIN,
        "## Latest full run (`python bench/run.py`)",
        "",
        f"{datetime.date.today().isoformat()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
    ]
    for lines in sections:
        block.extend(lines + [""])
    block.append(END)
    with open(DOC) as f:
        doc = f.read()
    with open(DOC, "w") as f:
        f.write(with_run(doc, "\n".join(block)))
    print(f"wrote the latest run into {os.path.normpath(DOC)}")


def with_run(doc: str, block: str) -> str:
    """The document with its latest-run block replaced by `block`; the first run goes after the
    title paragraph. Everything outside the block (dated measurements, profiles, the reading of
    each figure) is written by hand and kept."""
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        return head + block + rest.split(END, 1)[1]
    at = doc.find("\n### ")
    at = len(doc) if at < 0 else at + 1
    return doc[:at] + block + "\n\n" + doc[at:]


if __name__ == "__main__":
    main()
