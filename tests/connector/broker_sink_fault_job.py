"""A streaming job for the broker-path sink's fault test, run as its own driver process.

    python broker_sink_fault_job.py <input dir> <bootstrap servers> <checkpoint> <mode>

Parquet files (columns id, key, value) -> `format("seglog")` with kafka.bootstrap.servers, topic
`events`, exactly-once (the default). Master local[2,3]: a failed task is retried. Every task's
first attempt fails at row id % 5000 == 4321, after the writer produced part of its rows in
its transaction. mode `long`: one input file per micro-batch, processingTime 0 (the test kills
this driver with SIGKILL); mode `finish`: ten files a micro-batch, AvailableNow, to the end.
Prints "STARTED <query id>", "BATCH <id> ..." after each micro-batch and "DONE".
"""
from __future__ import annotations

import sys

from streaming_query import run_printing_progress


def main() -> None:
    src, bootstrap, ckpt, mode = sys.argv[1:5]
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    spark = (SparkSession.builder.master("local[2,3]").appName(f"seglog-broker-sink-{mode}")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema = spark.read.parquet(src).schema

    @F.udf(BinaryType())
    def fail_first_attempt(value, i):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and i % 5000 == 4321:
            raise RuntimeError(f"injected failure of task {ctx.partitionId()} attempt 0 at row {i}")
        return value

    df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 10 if mode == "finish" else 1)
          .parquet(src).repartition(2)
          .withColumn("value", fail_first_attempt(F.col("value"), F.col("id"))).select("key", "value"))
    writer = (df.writeStream.format("seglog").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", "events").option("topic.partitions", "3").option("batch.size", "16384")
              .option("kafka.delivery.timeout.ms", "60000").option("checkpointLocation", ckpt))
    writer = writer.trigger(availableNow=True) if mode == "finish" else writer.trigger(processingTime="0 seconds")
    run_printing_progress(spark, writer.start)
    spark.stop()


if __name__ == "__main__":
    main()
