"""A compacted change-log topic: user id -> email address, as in Kafka's documentation.

    python examples/compacted_changelog.py [LOG_ROOT]        (default ./seglog-changelog)

Kafka's log-compaction example: a topic holds users' email addresses, keyed by user id; every
time a user changes address a new record is sent with the same key, and deleting a user sends a
tombstone (a record with a null value). With `cleanup.policy=compact` Kafka keeps at least the
latest value of every key, so the topic is a full, replayable table of the current addresses.

1. Write three change sets with Spark's batch writer (`df.write.format("seglog")`): initial
   addresses, address changes, deletions. The first write creates the topic with
   `cleanup.policy=compact` (sink options `topic.partitions` and `topic.config.<name>`; the CLI
   equivalent is `seglog topics --root R --create user-emails --partitions 2
   --config cleanup.policy=compact`). Each write is atomic.
2. Read the topic back with the seglog source and reduce it to the latest value per key,
   dropping keys whose latest record is a tombstone: the table as of the last change. The answer
   is the same before and after the log cleaner compacts the topic, which only removes records
   that a newer record with the same key supersedes.
3. Stream the same topic (Trigger.AvailableNow) into the same reduction, as a consumer that
   rebuilds the table from the change log would.

The root must be new or hold this example's topic from an earlier run (the changes are then
appended again and the latest values stay the same).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

from quickstart import print_progress, spark_session

TOPIC = "user-emails"

INITIAL = [(f"user-{i}", f"user{i}@example.com") for i in range(1, 9)]
CHANGES = [("user-2", "second@example.org"), ("user-5", "five@example.net"),
           ("user-2", "user.two@example.com"), ("user-7", "seven@example.org")]
DELETES = ["user-3", "user-8"]


def write_changes(spark, root: str, rows: list[tuple[str, str | None]], what: str) -> None:
    df = spark.createDataFrame(rows, "key string, value string")
    (df.selectExpr("CAST(key AS BINARY) AS key", "CAST(value AS BINARY) AS value")
       .coalesce(1)                     # one task: the changes of a set keep their order per key
       .write.format("seglog").mode("append")
       .option("topic", TOPIC)
       .option("topic.partitions", 2)
       .option("topic.config.cleanup.policy", "compact")
       .save(root))
    print(f"wrote {len(rows)} {what}")


def latest_per_key(records):
    """The table a compacted topic stands for: each key's record with the highest offset, tombstones out.

    A key always lands in the same partition (Kafka's default partitioner), so its latest record
    is the one with the highest offset in that partition.
    """
    from pyspark.sql import functions as F

    latest = (records.groupBy("key")
              .agg(F.max_by("value", "offset").alias("value"), F.max("offset").alias("offset"),
                   F.first("partition").alias("partition"), F.count("*").alias("versions")))
    return latest.where(F.col("value").isNotNull()).select(
        F.col("key").cast("string").alias("user"), F.col("value").cast("string").alias("email"),
        "partition", "offset", "versions")


def print_table(rows) -> None:
    for r in sorted(rows, key=lambda r: int(r["user"].split("-")[1])):
        print(f"  {r['user']:<8} {r['email']:<24} (partition {r['partition']}, offset {r['offset']},"
              f" {r['versions']} record(s) for this key)")


def main(root: str) -> None:
    root = os.path.abspath(root)
    spark = spark_session("seglog-compacted-changelog")
    checkpoint = tempfile.mkdtemp(prefix="seglog-changelog-checkpoint-")
    try:
        write_changes(spark, root, INITIAL, "initial addresses")
        write_changes(spark, root, CHANGES, "address changes")
        write_changes(spark, root, [(user, None) for user in DELETES], "deletions (tombstones)")

        from logcore.log.log_root import LogRoot
        with LogRoot.open(root, read_only=True) as log_root:
            info = log_root.describe_topic(TOPIC)
        print(f"topic {TOPIC}: {info.partitions} partitions, config {info.config}")

        records = spark.read.format("seglog").option("subscribe", TOPIC).load(root)
        print(f"{records.count()} records in the log; latest email per user (batch read):")
        table = latest_per_key(records).collect()
        print_table(table)

        stream = (spark.readStream.format("seglog").option("subscribe", TOPIC)
                  .option("startingOffsets", "earliest").load(root))
        query = (latest_per_key(stream).writeStream.format("memory").queryName("user_emails")
                 .outputMode("complete").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination()
        finally:
            query.stop()
        print("the same table rebuilt by a streaming read of the change log:")
        print_progress("stream", query)
        streamed = spark.sql("SELECT * FROM user_emails").collect()
        same = sorted((r["user"], r["email"]) for r in streamed) == sorted((r["user"], r["email"]) for r in table)
        print(f"  {len(streamed)} users, {'identical to' if same else 'DIFFERENT FROM'} the batch result")
        if not same:
            sys.exit(1)
    finally:
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "seglog-changelog")
