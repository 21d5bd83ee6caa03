"""seglog quickstart: stream events into a Kafka-format log with Spark, read them back, aggregate.

    pip install . && python examples/quickstart.py [LOG_ROOT]

1. A streaming query turns Spark's `rate-micro-batch` source into JSON click events keyed by user
   and writes them with the seglog sink (exactly-once) to topic `clicks` of a local log root
   (./seglog-quickstart unless a folder is given). It runs in rounds (Trigger.AvailableNow, one
   micro-batch per round), each resuming from the query's checkpoint.
2. A second streaming query reads the topic back with the seglog source, from the earliest
   offset, a bounded number of offsets per micro-batch, and keeps a running count per event type.
3. A batch read of the same topic ranks users by events and purchases.

Streaming progress (rows, rates, offsets) is printed for every micro-batch. No register call:
Spark finds format("seglog") by itself once the package is installed. Run it again on the same
root: the writer resumes where it stopped and the running counts carry on from their state.
Checkpoints live in <root>/.checkpoints.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

TOPIC = "clicks"
ROUNDS = 3                      # writer micro-batches
EVENTS_PER_ROUND = 50_000
READ_OFFSETS_PER_TRIGGER = 40_000
USERS = 50

CONF_FILE = Path(__file__).resolve().parent.parent / "conf" / "spark-defaults.conf"


def load_spark_defaults(path: Path = CONF_FILE) -> dict[str, str]:
    """`key value` lines of a spark-defaults.conf file (comments and blank lines skipped)."""
    settings: dict[str, str] = {}
    if not path.exists():
        return settings
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"([^\s=:]+)\s*[=:]?\s*(.*)", line)  # Java properties: key, then space, = or :
        settings[match.group(1)] = match.group(2).strip()
    return settings


def spark_session(app_name: str, **overrides: str):
    """A local SparkSession with conf/spark-defaults.conf applied; Python workers run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable          # workers need pyarrow and seglog
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    settings = {"spark.master": "local[2]", "spark.ui.enabled": "false", **load_spark_defaults(),
                **overrides}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def print_progress(label: str, query) -> int:
    """One line per micro-batch of `query`: rows, rates and the source's offsets. Returns the row count."""
    total = 0
    for p in query.recentProgress:
        source = p["sources"][0] if p["sources"] else {}
        total += p["numInputRows"]
        print(f"  [{label}] batch {p['batchId']}: numInputRows={p['numInputRows']:,}"
              f" inputRowsPerSecond={p.get('inputRowsPerSecond') or 0:,.0f}"
              f" processedRowsPerSecond={p.get('processedRowsPerSecond') or 0:,.0f}"
              f" triggerExecution={p['durationMs'].get('triggerExecution', 0)} ms")
        print(f"      startOffset={source.get('startOffset')} endOffset={source.get('endOffset')}"
              f" latestOffset={source.get('latestOffset')}")
    return total


def generated_events(spark, per_batch: int = EVENTS_PER_ROUND):
    """Click events from Spark's rate-micro-batch source: key = user, value = JSON, timestamp kept."""
    from pyspark.sql import functions as F

    rate = (spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", per_batch)
            .option("numPartitions", 2)
            .option("startTimestamp", int(time.time() * 1000))
            .option("advanceMillisPerBatch", 1000)
            .load())
    kinds = F.array(*[F.lit(k) for k in ("view", "view", "view", "view", "click", "click",
                                         "add_to_cart", "purchase")])
    events = rate.select(
        F.col("timestamp"),
        F.format_string("user_%03d", F.pmod(F.hash("value"), F.lit(USERS))).alias("user"),
        F.element_at(kinds, F.pmod(F.hash(F.col("value"), F.lit(7)), F.lit(8)) + 1).alias("event"),
        (F.pmod(F.col("value"), F.lit(100)) + F.lit(0.99)).alias("amount"),
        F.col("value").alias("seq"))
    return events.select(
        F.col("user").cast("binary").alias("key"),
        F.to_json(F.struct("user", "event", "amount", "seq")).alias("value"),
        F.col("timestamp"))


def write_events(spark, root: str, checkpoints: str) -> int:
    events = generated_events(spark)
    written = 0
    for round_no in range(1, ROUNDS + 1):
        t0 = time.perf_counter()
        query = (events.writeStream.format("seglog")
                 .option("topic", TOPIC)
                 .option("topic.partitions", 3)       # when the sink creates the topic
                 .option("checkpointLocation", os.path.join(checkpoints, "writer"))
                 .trigger(availableNow=True)
                 .start(root))
        try:
            query.awaitTermination()
        finally:
            query.stop()
        print(f"writer round {round_no}/{ROUNDS} ({time.perf_counter() - t0:.1f} s):")
        written += print_progress("write", query)
    return written


def count_by_type(spark, root: str, checkpoints: str) -> list[tuple[str, int]]:
    from pyspark.sql import functions as F

    clicks = (spark.readStream.format("seglog")
              .option("subscribe", TOPIC)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", READ_OFFSETS_PER_TRIGGER)
              .load(root))
    by_type = (clicks.select(F.get_json_object(F.col("value").cast("string"), "$.event").alias("event"))
               .groupBy("event").count())
    t0 = time.perf_counter()
    query = (by_type.writeStream.format("memory").queryName("events_by_type")
             .outputMode("complete")
             .option("checkpointLocation", os.path.join(checkpoints, "events-by-type"))
             .trigger(availableNow=True)
             .start())
    try:
        query.awaitTermination()
    finally:
        query.stop()
    print(f"reader ({time.perf_counter() - t0:.1f} s, at most {READ_OFFSETS_PER_TRIGGER:,} offsets"
          " per micro-batch):")
    print_progress("read", query)
    return [(r["event"], r["count"]) for r in
            spark.sql("SELECT event, `count` FROM events_by_type ORDER BY `count` DESC, event").collect()]


def top_users(spark, root: str):
    from pyspark.sql import functions as F

    clicks = spark.read.format("seglog").option("subscribe", TOPIC).load(root)
    fields = F.from_json(F.col("value").cast("string"), "user string, event string, amount double")
    events = clicks.select(fields.alias("e")).select("e.*")
    return (events.groupBy("user")
            .agg(F.count("*").alias("events"),
                 F.sum(F.when(F.col("event") == "purchase", 1).otherwise(0)).alias("purchases"),
                 F.round(F.sum(F.when(F.col("event") == "purchase", F.col("amount"))), 2).alias("spent"))
            .orderBy(F.desc("events"), "user")
            .limit(5).collect())


def main(root: str) -> None:
    started = time.perf_counter()
    root = os.path.abspath(root)
    checkpoints = os.path.join(root, ".checkpoints")
    spark = spark_session("seglog-quickstart")
    try:
        print(f"log root: {root}")
        written = write_events(spark, root, checkpoints)
        print(f"wrote {written:,} events to topic {TOPIC!r} in {ROUNDS} micro-batches")

        by_type = count_by_type(spark, root, checkpoints)
        total = sum(n for _, n in by_type)
        print(f"events per type (all {total:,} events in the log):")
        for event, n in by_type:
            print(f"  {event:<12} {n:>9,}")

        print("top users (batch read of the same topic):")
        for row in top_users(spark, root):
            print(f"  {row['user']}  events={row['events']:,}  purchases={row['purchases']:,}"
                  f"  spent={row['spent'] or 0:,.2f}")
        print(json.dumps({"root": root, "written_this_run": written, "events_in_log": total,
                          "seconds": round(time.perf_counter() - started, 1)}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "seglog-quickstart")
