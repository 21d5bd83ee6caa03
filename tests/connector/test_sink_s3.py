"""The sink on an S3 root (the session's S3 server): staging, publishing and reading back."""
from __future__ import annotations

import pytest

from logcore.log.log_root import LogRoot
from logcore.storage import open_storage

pytestmark = pytest.mark.s3


def _spark_options(so: dict) -> dict:
    """The sink's storage.* options for a target's storage options."""
    return {"storage.endpoint_url": so["endpoint_url"], "storage.key": so["key"],
            "storage.secret": so["secret"], "storage.anon": "false",
            "storage.client_kwargs.region_name": so["client_kwargs"]["region_name"]}


def test_stream_and_batch_writes_to_an_s3_root(spark, storage_targets, tmp_path):
    target = storage_targets.make("s3")
    so = target.storage_options
    options = _spark_options(so)
    rows = [(f"user-{i % 7}", f"event-{i}") for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string")
    (df.write.format("seglog").options(**options).option("topic", "events")
       .option("topic.partitions", "3").mode("append").save(target.url))

    # A streaming query onto the same root: parquet files in, seglog out, exactly once.
    src = tmp_path / "in"
    spark.createDataFrame([(f"k{i}", f"stream-{i}") for i in range(120)],
                          "key string, value string").repartition(2).write.parquet(str(src / "a"))
    query = (spark.readStream.schema("key string, value string").parquet(str(src / "a"))
             .writeStream.format("seglog").options(**options).option("topic", "events")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start(target.url))
    try:
        query.awaitTermination(120)
        assert query.exception() is None
    finally:
        query.stop()

    root = LogRoot.open(target.url, storage_options=so)
    values = []
    for p in range(root.describe_topic("events").partitions):
        values += [r.value.decode() for r in root.log("events", p).read_records(0)]
    assert sorted(values) == sorted([v for _, v in rows] + [f"stream-{i}" for i in range(120)])
    # Nothing staged is left behind once the batches are published: each query keeps only its
    # record of committed batches.
    storage = root.storage
    if storage.exists(".seglog-staging"):
        for query in storage.list_dir(".seglog-staging"):
            assert storage.list_dir(f".seglog-staging/{query}") in ([], ["_committed.json"])
    # And the seglog source reads the same rows back from S3.
    back = (spark.read.format("seglog").options(**options).option("subscribe", "events")
            .load(target.url).selectExpr("CAST(value AS STRING) AS v").collect())
    assert sorted(r.v for r in back) == sorted(values)


def test_a_task_with_many_parts_on_s3_keeps_each_partitions_row_order(spark, storage_targets):
    """One task, parts of about 1 KB: the parts each Arrow batch fills are uploaded while the
    task encodes on; each partition gets its rows in input order, one segment per part."""
    target = storage_targets.make("s3")
    so = target.storage_options
    options = _spark_options(so)
    df = spark.createDataFrame([(f"user-{i}", f"row-{i}") for i in range(2000)], "key string, value string")
    batch_rows = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")      # several Arrow batches
    try:
        (df.coalesce(1).write.format("seglog").options(**options).option("topic", "t")
           .option("topic.partitions", "3").option("staging.part.bytes", "1000").mode("append").save(target.url))
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", batch_rows)
    root = LogRoot.open(target.url, storage_options=so)
    seen = []
    for p in range(3):
        log = root.log("t", p)
        records = list(log.read_records(0))
        ids = [int(r.value.decode()[4:]) for r in records]
        assert ids == sorted(ids) and [r.offset for r in records] == list(range(len(records)))
        names = open_storage(target.url, so).list_dir(f"t-{p}")
        assert sum(1 for n in names if n.endswith(".log")) > 3, names
        seen += ids
    root.close()
    assert sorted(seen) == list(range(2000))


def test_a_batch_write_with_staging_publish_multipart_reads_back_exact(spark, storage_targets):
    """staging.publish=multipart through Spark: the tasks upload their parts as segments, the
    commit completes the uploads; the rows read back exactly, no upload is left."""
    target = storage_targets.make("s3")
    so = target.storage_options
    options = _spark_options(so)
    rows = [(f"user-{i % 11}", f"mpu-{i}") for i in range(3000)]
    (spark.createDataFrame(rows, "key string, value string").repartition(3).write.format("seglog")
       .options(**options).option("topic", "m").option("topic.partitions", "2")
       .option("staging.part.bytes", "20000").option("staging.publish", "multipart")
       .mode("append").save(target.url))
    storage = open_storage(target.url, so)
    assert storage.list_uploads("") == []
    back = (spark.read.format("seglog").options(**options).option("subscribe", "m")
            .load(target.url).selectExpr("CAST(value AS STRING) AS v", "partition", "offset").collect())
    assert sorted(r.v for r in back) == sorted(v for _k, v in rows)
    for p in (0, 1):
        offsets = sorted(r.offset for r in back if r.partition == p)
        assert len(set(offsets)) == len(offsets)
    # several parts per partition, each its own segment object
    assert all(len([n for n in storage.list_dir(f"m-{p}") if n.endswith(".log")]) > 1 for p in (0, 1))
