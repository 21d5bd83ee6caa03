"""The Spark sink's broker path (`kafka.bootstrap.servers`) against librdkafka, same broker, same run.

Workload: 1 KiB values, 4-partition topic, acks=all, idempotence on. The seglog figure is one
sink task's producer (`broker_sink.TaskProducer`, Arrow batches of 10,000 rows, as Spark hands
them to the writer) without Spark around it; the anchor is a confluent-kafka producer writing
the same records. Both include waiting for every acknowledgement.

    python bench/bench_broker_sink.py [--records 100000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "connector")]

from bench.bench_broker import start_broker  # noqa: E402
from bench.common import print_table  # noqa: E402

RECORD = 1024
PARTITIONS = 4
ROWS_PER_ARROW_BATCH = 10_000


def librdkafka(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.size": 256 << 10, "queue.buffering.max.kbytes": 1 << 20})
    payload = os.urandom(RECORD)
    p.produce(topic, value=payload, partition=0)
    p.flush(30)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"%d" % i, value=payload)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def task_producer(bootstrap: str, topic: str, n: int) -> float:
    import pyarrow as pa

    from pyspark_seglog.broker_sink import TaskProducer
    from pyspark_seglog.sink_options import parse_sink_options
    opts = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic})
    payload = os.urandom(RECORD)
    batches = []
    for first in range(0, n, ROWS_PER_ARROW_BATCH):
        ids = range(first, min(n, first + ROWS_PER_ARROW_BATCH))
        batches.append(pa.record_batch([pa.array([b"%d" % i for i in ids]), pa.array([payload] * len(ids))],
                                       names=["key", "value"]))
    t0 = time.perf_counter()
    producer = TaskProducer(opts, {"key": "key", "value": "value"}, task=0, attempt=0)
    try:
        for b in batches:
            producer.add(b)
        producer.flush()
    finally:
        producer.close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    args = ap.parse_args()
    from pyspark_seglog.broker_client import BrokerClient
    with tempfile.TemporaryDirectory() as work:
        proc, bootstrap = start_broker(work)
        try:
            with BrokerClient(bootstrap) as client:
                for t in ("anchor", "sink"):
                    client.create_topic(t, PARTITIONS, {})
            mb = args.records * RECORD / 1e6
            anchor = librdkafka(bootstrap, "anchor", args.records)
            ours = task_producer(bootstrap, "sink", args.records)
        finally:
            proc.terminate()
            proc.wait(30)
    print_table(f"Spark sink task through seglog broker ({args.records} x 1 KiB, acks=all, idempotent)",
                [("produce MB/s (anchor: librdkafka producer)", mb / ours, mb / anchor, "MB/s")])


if __name__ == "__main__":
    main()
