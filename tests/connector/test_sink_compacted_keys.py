"""The sink refuses rows without a key for a compacted topic (`compact` or `compact,delete`), in
path mode and through a broker, with a message naming the topic and its policy, instead of
writing records the cleaner would drop: a DataFrame without a `key` column fails when the write
starts, null keys fail the task (and the write commits nothing in path mode)."""
from __future__ import annotations

import re

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from logcore.errors import InvalidConfigError
from logcore.log.log_root import LogRoot
from pyspark_seglog.sink import SeglogBatchWriter, SeglogStreamWriter

VALUE_ONLY = StructType([StructField("value", BinaryType())])


def keyed_rows(spark, n: int, null_every: int | None):
    """`n` rows: key k<i> (null every `null_every`-th row), value v<i>, in 2 partitions."""
    key = "CAST(NULL AS STRING)" if null_every == 1 else (
        f"CASE WHEN id % {null_every} = 3 THEN NULL ELSE concat('k', id) END" if null_every else "concat('k', id)")
    return spark.range(0, n, 1, 2).selectExpr(f"{key} AS key", "concat('v', id) AS value")


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_no_key_column_fails_at_start_for_a_compacted_topic(tmp_path, policy):
    root = str(tmp_path / "root")
    with LogRoot.open(root, create=True) as r:
        r.create_topic("table", 2, {"cleanup.policy": policy})
        r.create_topic("events", 2)
    for writer in (SeglogBatchWriter, SeglogStreamWriter):
        with pytest.raises(InvalidConfigError, match=re.escape(
                f"topic 'table' has cleanup.policy={policy}: a compacted topic refuses records without"
                " a key, and the DataFrame has no `key` column")):
            writer({"path": root, "topic": "table"}, VALUE_ONLY, False)
    SeglogBatchWriter({"path": root, "topic": "events"}, VALUE_ONLY, False)    # delete: keys optional


def test_spark_write_with_null_keys_to_a_compacted_topic_fails_and_commits_nothing(spark, tmp_path):
    root = str(tmp_path / "root")
    with LogRoot.open(root, create=True) as r:
        r.create_topic("table", 3, {"cleanup.policy": "compact,delete"})
    with pytest.raises(Exception, match=re.escape(
            "topic 'table' has cleanup.policy=compact,delete: a compacted topic refuses records without a key,"
            " and ")) as info:
        keyed_rows(spark, 2000, 500).write.format("seglog").option("topic", "table").mode("append").save(root)
    assert "rows for it in this task have a null `key`" in str(info.value)
    with LogRoot.open(root) as r:
        assert [r.log("table", p).log_end_offset for p in range(3)] == [0, 0, 0]
    # the same rows with their keys go in
    keyed_rows(spark, 2000, None).write.format("seglog").option("topic", "table").mode("append").save(root)
    with LogRoot.open(root) as r:
        got = [rec for p in range(3) for rec in r.log("table", p).read_records(0)]
    assert sorted(rec.value for rec in got) == sorted(b"v%d" % i for i in range(2000))
    assert all(rec.key == b"k" + rec.value[1:] for rec in got)


def test_spark_write_through_the_broker_with_null_keys_fails(spark, tmp_path):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic
    from test_broker_interop import BrokerProcess, _free_port, broker_hw

    b = BrokerProcess(tmp_path, tmp_path / "logs", _free_port())
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("table", num_partitions=2, replication_factor=1,
                                      config={"cleanup.policy": "compact"})])["table"].result(15)
        with pytest.raises(InvalidConfigError, match=re.escape(
                "topic 'table' has cleanup.policy=compact: a compacted topic refuses records without a key,"
                " and the DataFrame has no `key` column")):
            SeglogBatchWriter({"kafka.bootstrap.servers": b.bootstrap, "topic": "table"}, VALUE_ONLY, False)
        with pytest.raises(Exception, match=re.escape(
                "topic 'table' has cleanup.policy=compact: a compacted topic refuses records without a key,"
                " and ")):
            (keyed_rows(spark, 1000, 1).write.format("seglog").option("kafka.bootstrap.servers", b.bootstrap)
             .option("topic", "table").mode("append").save())
        assert broker_hw(b, "table", 2) == {0: 0, 1: 0}
    finally:
        b.stop()
