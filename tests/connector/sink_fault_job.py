"""A streaming job for the sink's fault tests, run as its own driver process (own SparkSession).

    python sink_fault_job.py <input dir> <log root> <checkpoint> <mode>

mode `task-failure`: master local[2,3] (each task may be retried); a UDF fails every task's first
attempt after the writer has taken (and staged) part of the task's rows; AvailableNow.
mode `long`: a long stream (one input file per micro-batch) that the test kills with SIGKILL;
mode `finish`: the same stream with AvailableNow, to run the remaining input to the end (ten files
a micro-batch).
Prints "STARTED <query id>" once the query runs, "BATCH <id> ..." after each micro-batch and "DONE"
when it ends.
"""
from __future__ import annotations

import os
import sys

from streaming_query import run_printing_progress


def main() -> None:
    src, root, ckpt, mode = sys.argv[1:5]
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    spark = (SparkSession.builder.master("local[2,3]" if mode == "task-failure" else "local[2]")
             .appName(f"seglog-sink-{mode}")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", "2")
             # small Arrow batches: a task hands the writer several batches before it fails
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "300")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema = spark.read.parquet(src).schema
    # one input file per micro-batch while the test may kill the driver; the run to the end
    # takes the rest ten files at a time (the batch planned before the last kill is re-run as
    # it was planned, then a few new ones: fewer commits to wait for, the same checks)
    per_trigger = 10 if mode == "finish" else 1
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", per_trigger).parquet(src)
    if mode == "task-failure":
        @F.udf(BinaryType())
        def fail_first_attempt(value, i):
            from pyspark import TaskContext
            ctx = TaskContext.get()
            if ctx.attemptNumber() == 0 and i % 1000 == 950:
                raise RuntimeError(f"injected failure of task {ctx.partitionId()} attempt 0 at row {i}")
            return value

        df = df.withColumn("value", fail_first_attempt(F.col("value"), F.col("id")))
    writer = (df.writeStream.format("seglog").option("topic", "events").option("topic.partitions", "3")
              .option("staging.part.bytes", "1").option("checkpointLocation", ckpt))
    if mode != "task-failure":
        # every staged part becomes a segment as it is (the no-copy commit path)
        writer = writer.option("staging.adopt.bytes", "1")
    if mode == "long":
        writer = writer.trigger(processingTime="0 seconds")
    else:
        writer = writer.trigger(availableNow=True)
    run_printing_progress(spark, lambda: writer.start(root))
    spark.stop()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
