"""`seglog broker` with tiered storage: a librdkafka consumer reading from the earliest offset
when the data is in the remote tier (S3: SeaweedFS when `weed` starts, else moto) against the
same consumer reading the same records from local segments, through the same broker in one run.

Two 1-partition topics get the same 1 KiB records: `local` (all local) and `cold`
(remote.storage.enable=true, local.retention.bytes=1: once the broker's tiering pass has copied
its sealed segments, only the active segment stays local). Each is read twice, alternated; the
best of each is kept. The data is larger than the default 64 MiB chunk cache, so every read of
`cold` fetches from S3. Broker CPU seconds are printed beside the figure.

    python bench/bench_broker_tiered.py [--mib 64]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, os.path.dirname(__file__))
from common import print_table  # noqa: E402

from bench_broker import RECORD, _cpu_of, start_broker  # noqa: E402
from bench_tiered import start_server  # noqa: E402
from tests.conftest import _make_bucket  # noqa: E402

SEGMENT = 8 << 20


def start_tiered_broker(workdir: str, endpoint, bucket: str):
    return start_broker(workdir, {
        "remote.log.storage.system.enable": "true", "rsm.config.storage.url": f"s3://{bucket}/tier",
        "rsm.config.storage.endpoint_url": endpoint.endpoint_url,
        "rsm.config.storage.key": endpoint.key, "rsm.config.storage.secret": endpoint.secret,
        "rsm.config.storage.client_kwargs.region_name": endpoint.region,
        "remote.log.manager.task.interval.ms": "500", "log.segment.delete.delay.ms": "0"})


def fill(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20})
    payload = os.urandom(RECORD)
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value=payload, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120) != 0:
        raise SystemExit(f"producing to {topic} did not finish")


def consume_from_earliest(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    start = time.perf_counter()
    t0 = None                       # from the first record: connecting is not part of the figure
    while got < n:
        msgs = c.consume(10000, timeout=1)
        if t0 is None and msgs:
            t0 = time.perf_counter()
        got += sum(1 for m in msgs if m.error() is None)
        if time.perf_counter() - start > 300:
            raise SystemExit(f"consumer read {got} of {n} records of {topic} in 300 s")
    elapsed = time.perf_counter() - t0
    c.close()
    return elapsed


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args(argv)
    from confluent_kafka.admin import AdminClient, NewTopic
    n = args.mib * (1 << 20) // RECORD
    mb = n * RECORD / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "weed"))
        endpoint, stop_server = start_server(tmp)
        proc = None
        try:
            bucket, _ = _make_bucket(endpoint)
            proc, bootstrap = start_tiered_broker(tmp, endpoint, bucket)
            admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})   # quiet when the broker stops
            common = {"segment.bytes": str(SEGMENT)}
            for name, config in (("local", common), ("cold", {**common, "remote.storage.enable": "true",
                                                                "local.retention.bytes": "1"})):
                admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(30)
                fill(bootstrap, name, n)
            cold = Path(tmp) / "logs" / "cold-0"
            deadline = time.monotonic() + 300
            while len(list(cold.glob("*.log"))) > 1:          # tiered down to the active segment
                if time.monotonic() > deadline:
                    raise SystemExit("the broker did not tier the cold topic within 300 s")
                time.sleep(0.5)
            best: dict[str, tuple[float, float]] = {}
            for _ in range(2):                  # alternated, best of two each
                for name in ("local", "cold"):
                    cpu0 = _cpu_of(proc.pid)
                    figure = (mb / consume_from_earliest(bootstrap, name, n), _cpu_of(proc.pid) - cpu0)
                    best[name] = max(best.get(name, figure), figure)
            (local_mbs, local_cpu), (cold_mbs, cold_cpu) = best["local"], best["cold"]
            rows = [(f"consume from earliest, data in S3 (broker CPU {cold_cpu:.1f} s vs {local_cpu:.1f} s)",
                     cold_mbs, local_mbs, "MB/s")]
            return print_table(f"broker fetch of tiered data: {args.mib} MiB, 1 KiB records, "
                               f"{endpoint.backend} (anchor: the same data from local segments)", rows)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)
            stop_server()


if __name__ == "__main__":
    main()
