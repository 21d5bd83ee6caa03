"""Read a copy of an Apache Kafka broker's log dir with Spark, read-only.

    python examples/kafka_logdir_copy.py COPY_DIR [--topic TOPIC ...]
    python examples/kafka_logdir_copy.py --make-sample COPY_DIR      # no Kafka at hand: a sample first

COPY_DIR is a copy of one of a broker's `log.dirs` folders (`<topic>-<partition>/` folders of
segments and indexes, plus the broker's checkpoint files), e.g. taken with `cp -a` or `rsync`
from a stopped broker or a volume snapshot. seglog opens it read-only: nothing in it is created,
changed or deleted, and reads stop at the high watermark of the broker's own
`replication-offset-checkpoint`, so records the broker had not yet replicated are not served.

The script lists the topics and partitions seglog finds, reads them with the seglog source as a
batch (per-partition counts, offsets and timestamps, a few records) and as a stream
(Trigger.AvailableNow, with progress), then checks that the copy is byte for byte unchanged.
Internal topics (names starting with "__", e.g. __consumer_offsets) are skipped unless named.
The streaming checkpoint goes to a temporary folder outside the copy.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile

from quickstart import print_progress, spark_session


def fingerprint(folder: str) -> dict[str, str]:
    """Relative path -> content digest of every file under `folder`."""
    out = {}
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def make_sample(folder: str) -> None:
    """A small log dir laid out as a Kafka broker leaves it, with no seglog files in it.

    Topic `orders`, 2 partitions of 2 segments (RecordBatch v2, leader epoch 0), empty sparse
    indexes, partition.metadata, leader-epoch-checkpoint and the broker's root checkpoints. The
    broker's replication checkpoint puts orders-1's high watermark 10 records below its log end:
    a reader of the copy must stop there.
    """
    from logcore.records import build_batch

    os.makedirs(folder)
    with open(os.path.join(folder, "meta.properties"), "w") as f:
        f.write("version=1\ncluster.id=sample-cluster\nnode.id=1\n")
    ends = {}
    for p in range(2):
        part = os.path.join(folder, f"orders-{p}")
        os.makedirs(part)
        with open(os.path.join(part, "partition.metadata"), "w") as f:
            f.write("version: 0\ntopic_id: 0J5SLIDPSwe1oTQoY_hKaQ\n")
        with open(os.path.join(part, "leader-epoch-checkpoint"), "w") as f:
            f.write("0\n1\n0 0\n")
        offset = 0
        for _segment in range(2):
            base, batches = offset, []
            for _batch in range(5):
                records = [(b"customer-%d" % ((offset + i) % 7),
                            b'{"order": %d, "partition": %d}' % (offset + i, p), (),
                            1_700_000_000_000 + 1000 * (offset + i)) for i in range(10)]
                batches.append(build_batch(records, base_offset=offset, partition_leader_epoch=0))
                offset += len(records)
            name = os.path.join(part, f"{base:020d}")
            with open(name + ".log", "wb") as f:
                f.write(b"".join(batches))
            for suffix in (".index", ".timeindex"):
                open(name + suffix, "wb").close()
        ends[p] = offset
    hw = {0: ends[0], 1: ends[1] - 10}
    checkpoints = {"replication-offset-checkpoint": hw, "recovery-point-offset-checkpoint": ends,
                   "log-start-offset-checkpoint": {}}
    for file, offsets in checkpoints.items():
        with open(os.path.join(folder, file), "w") as f:
            f.write(f"0\n{len(offsets)}\n" + "".join(f"orders {p} {o}\n" for p, o in offsets.items()))
    print(f"wrote a sample Kafka log dir to {folder} (orders-0: 100 records, orders-1: 100 records"
          f" of which the broker's checkpoint says {hw[1]} are replicated)")


def describe(copy: str, wanted: list[str] | None) -> list[str]:
    from logcore.log.log_root import LogRoot

    with LogRoot.open(copy, read_only=True) as root:
        topics = wanted or [t for t in root.list_topics() if not t.startswith("__")]
        print(f"{copy}: {'a copy of a Kafka log dir' if root.kafka_copy else 'a seglog root'}, read-only")
        for topic in topics:
            for p in range(root.describe_topic(topic).partitions):
                log = root.log(topic, p)
                print(f"  {topic}-{p}: log start {log.log_start_offset}, high watermark"
                      f" {log.high_watermark}, log end {log.log_end_offset}")
                log.close()
    return topics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("copy", help="the copied log dir (COPY_DIR)")
    parser.add_argument("--topic", action="append", help="topic to read (default: every non-internal topic)")
    parser.add_argument("--make-sample", action="store_true",
                        help="first write a small Kafka-layout log dir to COPY_DIR (which must not exist)")
    args = parser.parse_args()
    copy = os.path.abspath(args.copy)
    if args.make_sample:
        make_sample(copy)
    before = fingerprint(copy)
    topics = describe(copy, args.topic)
    if not topics:
        sys.exit(f"{copy}: no topics to read")

    from pyspark.sql import functions as F

    spark = spark_session("seglog-kafka-logdir-copy")
    checkpoint = tempfile.mkdtemp(prefix="seglog-kafka-copy-checkpoint-")
    try:
        records = (spark.read.format("seglog").option("subscribe", ",".join(topics))
                   .option("startingOffsets", "earliest").load(copy))
        print("batch read, per partition:")
        summary = (records.groupBy("topic", "partition")
                   .agg(F.count("*").alias("records"), F.min("offset").alias("first_offset"),
                        F.max("offset").alias("last_offset"), F.min("timestamp").alias("first_time"),
                        F.max("timestamp").alias("last_time"))
                   .orderBy("topic", "partition").collect())
        for row in summary:
            print(f"  {row['topic']}-{row['partition']}: {row['records']:,} records, offsets"
                  f" {row['first_offset']}..{row['last_offset']}, {row['first_time']} .. {row['last_time']}")
        print("first records:")
        for row in (records.selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key",
                                       "CAST(value AS STRING) AS value")
                    .orderBy("topic", "partition", "offset").limit(3).collect()):
            print(f"  {row['topic']}-{row['partition']}@{row['offset']} {row['key']}: {row['value']}")

        stream = (spark.readStream.format("seglog").option("subscribe", ",".join(topics))
                  .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 100)
                  .load(copy))
        query = (stream.groupBy("topic", "partition").count()
                 .writeStream.format("memory").queryName("copy_counts").outputMode("complete")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            query.awaitTermination()
        finally:
            query.stop()
        print("streaming read (Trigger.AvailableNow, at most 100 offsets per micro-batch):")
        streamed = print_progress("stream", query)
        counts = spark.sql("SELECT * FROM copy_counts ORDER BY topic, partition").collect()
        print("  records per partition: " + ", ".join(
            f"{r['topic']}-{r['partition']}={r['count']:,}" for r in counts))
        print(f"  {streamed:,} records streamed")
    finally:
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    after = fingerprint(copy)
    if after != before:
        changed = sorted(set(before.items()) ^ set(after.items()))
        sys.exit(f"the copy changed: {changed[:5]}")
    print(f"the copy is unchanged ({len(after)} files compared byte for byte)")


if __name__ == "__main__":
    main()
