"""A log root in S3 (or any S3-compatible server): write a stream to it, read it back.

    export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
    python examples/s3_root.py s3://BUCKET/PREFIX --endpoint-url http://127.0.0.1:9000 [--region us-east-1]

Without --endpoint-url the root is on AWS S3 itself. Spark has no S3 support of its own here (no
hadoop-aws jars): the seglog source and sink reach the bucket through fsspec/s3fs, configured
with `storage.*` options, which go to s3fs as they are and are never printed or logged:

    .option("storage.endpoint_url", "http://127.0.0.1:9000")      # omit for AWS S3
    .option("storage.key", key).option("storage.secret", secret)   # omit to use AWS's usual chain
    .option("storage.client_kwargs.region_name", "us-east-1")

Credentials come from --key/--secret or, better (they stay out of the process list), from
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. The bucket must exist (--create-bucket makes it). On
an object store a commit publishes immutable segment objects with conditional writes
(If-None-Match / If-Match), so the sink stays exactly-once without a rename. The streaming
checkpoint goes to a local temporary folder (Spark's own checkpoint files need a Hadoop file
system).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from quickstart import generated_events, print_progress, spark_session

TOPIC = "clicks"
EVENTS = 20_000


def storage_options(args) -> dict[str, str]:
    """The `storage.*` options of the seglog source and sink (passed to s3fs)."""
    options = {}
    if args.endpoint_url:
        options["storage.endpoint_url"] = args.endpoint_url
    key = args.key or os.environ.get("AWS_ACCESS_KEY_ID")
    secret = args.secret or os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        options["storage.key"] = key
        options["storage.secret"] = secret
    if args.region:
        options["storage.client_kwargs.region_name"] = args.region
    return options


def create_bucket(root: str, options: dict[str, str]) -> None:
    import s3fs

    kwargs = {"client_kwargs": {}}
    for name, value in options.items():
        name = name[len("storage."):]
        if name.startswith("client_kwargs."):
            kwargs["client_kwargs"][name[len("client_kwargs."):]] = value
        else:
            kwargs[name] = value
    fs = s3fs.S3FileSystem(**kwargs)
    bucket = root[len("s3://"):].split("/", 1)[0]
    if not fs.exists(bucket):
        fs.mkdir(bucket)
        print(f"created bucket {bucket}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="s3://bucket/prefix of the log root")
    parser.add_argument("--endpoint-url", help="S3 endpoint, e.g. http://127.0.0.1:9000 (MinIO, SeaweedFS)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--key", help="access key id (default: $AWS_ACCESS_KEY_ID)")
    parser.add_argument("--secret", help="secret access key (default: $AWS_SECRET_ACCESS_KEY)")
    parser.add_argument("--create-bucket", action="store_true", help="create the bucket if it is missing")
    args = parser.parse_args()
    if not args.root.startswith("s3://"):
        parser.error(f"root {args.root!r}: give an s3://bucket/prefix URL")
    options = storage_options(args)
    if args.create_bucket:
        create_bucket(args.root, options)

    spark = spark_session("seglog-s3-root")
    checkpoints = tempfile.mkdtemp(prefix="seglog-s3-checkpoints-")
    try:
        # Write: one micro-batch of generated click events, exactly-once, into the S3 root.
        writer = (generated_events(spark, EVENTS).writeStream.format("seglog")
                  .option("topic", TOPIC).option("topic.partitions", 2)
                  .options(**options)
                  .option("checkpointLocation", os.path.join(checkpoints, "writer"))
                  .trigger(availableNow=True)
                  .start(args.root))
        try:
            writer.awaitTermination()
        finally:
            writer.stop()
        print(f"wrote to {args.root}:")
        print_progress("write", writer)

        # Read it back as a stream, then summarise it with a batch read.
        reader = (spark.readStream.format("seglog")
                  .option("subscribe", TOPIC).option("startingOffsets", "earliest")
                  .options(**options)
                  .load(args.root))
        query = (reader.groupBy("partition").count()
                 .writeStream.format("memory").queryName("s3_counts").outputMode("complete")
                 .option("checkpointLocation", os.path.join(checkpoints, "reader"))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination()
        finally:
            query.stop()
        print(f"read back from {args.root}:")
        print_progress("read", query)
        rows = spark.sql("SELECT * FROM s3_counts ORDER BY partition").collect()
        print("records per partition: " + ", ".join(f"{TOPIC}-{r['partition']}={r['count']:,}" for r in rows))
        total = (spark.read.format("seglog").option("subscribe", TOPIC).options(**options)
                 .load(args.root).count())
        print(f"batch read: {total:,} records in topic {TOPIC!r}")
    finally:
        spark.stop()
        shutil.rmtree(checkpoints, ignore_errors=True)


if __name__ == "__main__":
    main()
