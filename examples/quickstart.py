"""seglog quickstart: write a stream of events into a Kafka-format log and read it back.

Runs on the embedded local default (a log root in ./seglog-quickstart, or the folder given as the
first argument). Until the Spark connector lands this drives the engine directly: create a topic,
append and commit events across partitions, read them back by offset and by timestamp, and
aggregate them.
"""
from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

from logcore.log.log_root import LogRoot
from logcore.records.compression import Compression

USERS = [f"user_{i:03d}" for i in range(50)]
EVENTS = ["login", "view", "click", "purchase", "logout"]


def main(root_dir: str) -> None:
    Path(root_dir).mkdir(parents=True, exist_ok=True)
    with LogRoot.open(root_dir, create=True) as root:
        if "clicks" not in root.list_topics():
            root.create_topic("clicks", partitions=3, config={"segment.bytes": str(4 * 1024 * 1024)})
        info = root.describe_topic("clicks")
        writers = [root.log("clicks", p, writer=True) for p in range(info.partitions)]
        start_ms = int(time.time() * 1000)
        t0 = time.perf_counter()
        total = 0
        for batch_no in range(200):
            per_partition = collections.defaultdict(list)
            for i in range(500):
                n = batch_no * 500 + i
                user = USERS[n % len(USERS)]
                event = {"user": user, "event": EVENTS[n % len(EVENTS)], "n": n}
                per_partition[hash(user) % info.partitions].append(
                    (user.encode(), json.dumps(event).encode(), (("source", b"quickstart"),), start_ms + n))
            for p, records in per_partition.items():
                writers[p].append_records(records, compression=Compression.ZSTD)
                total += len(records)
            if batch_no % 20 == 19:
                for w in writers:
                    w.commit()
        for w in writers:
            w.commit()
        wrote_s = time.perf_counter() - t0
        print(f"wrote {total:,} events to {info.partitions} partitions in {wrote_s:.2f}s")
        for w in writers:
            print(f"  clicks-{w.partition}: log start {w.log_start_offset}, high watermark"
                  f" {w.high_watermark}, {len(w.segments)} segment(s)")
            w.close()

    # Read everything back through fresh read-only handles, as another process would.
    with LogRoot.open(root_dir) as root:
        counts: collections.Counter = collections.Counter()
        t0 = time.perf_counter()
        read = 0
        for p in range(root.describe_topic("clicks").partitions):
            log = root.log("clicks", p)
            for record in log.read_records(log.log_start_offset):
                counts[json.loads(record.value)["event"]] += 1
                read += 1
        print(f"read {read:,} events back in {time.perf_counter() - t0:.2f}s")
        print("events by type:", dict(sorted(counts.items())))
        log = root.log("clicks", 0)
        target = start_ms + total // 2
        found = log.offset_for_timestamp(target)
        print(f"first event at or after t0+{total // 2} ms in clicks-0: offset/timestamp {found}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "seglog-quickstart")
