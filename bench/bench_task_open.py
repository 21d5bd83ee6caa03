"""What a Spark source task pays to open its partition, on a partition of many segments.

A task runs `read_partition` (connector/pyspark_seglog/partition_reader.py) for one offset
range, planned by the batch reader (as Spark's driver plans it) and pickled. The figure is the whole task function on a range of 100 records in the last sealed
segments: with the range-bounded open (`read_range`, today's task) against the same function with the full
`Log` open (every segment's index checked, the producer state rebuilt), measured in the same run
by having `LogRoot.log` ignore `read_range`; on S3 also the task with the facts its planner
read (logcore.storage.read_facts) against the same task without them. Storage: local disk, and an S3 server (moto,
in this process) where every file read is a request.

    python bench/bench_task_open.py [segments]
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "connector"))
from common import best_of, print_table  # noqa: E402

from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.records.batch import build_batch  # noqa: E402

RANGE = 100


def build(url: str, options: dict | None, segments: int) -> tuple[int, int]:
    root = LogRoot.open(url, storage_options=options, create=True)
    root.create_topic("t", config={"segment.bytes": str(64 * 1024)})
    log = root.log("t", 0, writer=True)
    value, n = b"v" * 1000, 0
    while len(log.segments) < segments:
        log.append_batch(build_batch([(b"k", value, (), 1_700_000_000_000 + n + i) for i in range(20)]))
        n += 20
        if n % 400 == 0:
            log.commit()
    log.commit()
    start = log.high_watermark - 2 * RANGE
    log.close()
    root.close()
    return start, start + RANGE


def planned_partition(url: str, options: dict | None, start: int, end: int):
    """The task's partition as the driver plans it (with the facts it read) and Spark ships it."""
    import json
    import pickle
    from pyspark_seglog.source import SeglogBatchReader

    spark_options = {"path": url, "assign": json.dumps({"t": [0]}),
                     "startingOffsets": json.dumps({"t": {"0": start}}),
                     "endingOffsets": json.dumps({"t": {"0": end}})}
    spark_options.update({f"storage.{k}": v for k, v in (options or {}).items() if k != "client_kwargs"})
    spark_options.update({f"storage.client_kwargs.{k}": v
                          for k, v in (options or {}).get("client_kwargs", {}).items()})
    parts = SeglogBatchReader(spark_options, None).partitions()
    assert len(parts) == 1, parts
    return pickle.loads(pickle.dumps(parts[0]))


def task_seconds(url: str, options: dict | None, start: int, end: int, bounded: bool,
                 facts: bool = False) -> float:
    from pyspark_seglog.partition_reader import read_partition

    part = planned_partition(url, options, start, end)
    if not facts:
        part.read_facts = None      # the open asks the store (each thing once)
    original = LogRoot.log

    def full_open(self, topic, partition, **kwargs):
        kwargs.pop("read_range", None)
        return original(self, topic, partition, **kwargs)

    def run():
        rows = sum(batch.num_rows for batch in read_partition(part))
        assert rows == end - start, rows

    if not bounded:
        LogRoot.log = full_open
    try:
        return best_of(run, repeat=5, warmup=1)
    finally:
        LogRoot.log = original


def _moto() -> tuple[str, dict, object]:
    from moto.server import ThreadedMotoServer
    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    bucket = f"seglog-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                 region_name="us-east-1").create_bucket(Bucket=bucket)
    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing", "anon": False,
               "client_kwargs": {"region_name": "us-east-1"}}
    return f"s3://{bucket}/root", options, server


def main(segments: int = 200) -> list[str]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="seglog-bench-") as d:
        url = os.path.join(d, "root")
        start, end = build(url, None, segments)
        bounded = task_seconds(url, None, start, end, True)
        full = task_seconds(url, None, start, end, False)
        rows.append((f"local disk, {segments} segments: task ms, bounded open vs full open",
                     bounded * 1e3, full * 1e3, "ms"))
    try:
        url, options, server = _moto()
    except Exception as exc:  # noqa: BLE001 - no S3 server here: the local figure stands alone
        print(f"S3 part skipped: {exc}")
    else:
        try:
            s3_segments = min(segments, 50)
            start, end = build(url, options, s3_segments)
            bounded = task_seconds(url, options, start, end, True)
            full = task_seconds(url, options, start, end, False)
            planned = task_seconds(url, options, start, end, True, facts=True)
            rows.append((f"S3 (moto), {s3_segments} segments: task ms, bounded open vs full open",
                         bounded * 1e3, full * 1e3, "ms"))
            rows.append((f"S3 (moto), {s3_segments} segments: task ms, bounded open from the planner's"
                         " facts vs without them", planned * 1e3, bounded * 1e3, "ms"))
        finally:
            server.stop()
    return print_table(f"Spark source task open: read_partition of {RANGE} records near the end", rows)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
