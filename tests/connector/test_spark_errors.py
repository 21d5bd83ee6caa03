"""What a Spark user reads when seglog refuses something: seglog's message first.

Spark wraps a Python data source's error in its own condition (PYTHON_DATA_SOURCE_ERROR at query
start, PYTHON_EXCEPTION in tasks, STREAM_FAILED around a streaming query's); right after that
prefix comes seglog's `module.Type: message`, with no Python traceback in front of it. Also the
save modes of batch writes: Spark refuses its default (ErrorIfExists) for every Python data
source before seglog is called, so the messages say to write `.mode("append")`.
"""
from __future__ import annotations

import glob
import re

import pytest

from logcore.log.log_root import LogRoot

pytest.importorskip("pyspark")


def _message(exc_info) -> str:
    return str(exc_info.value)


def _written_root(spark, tmp_path, topic="t", rows=200) -> str:
    root = str(tmp_path / "root")
    df = spark.createDataFrame([(f"k{i}".encode(), b"v" * 100) for i in range(rows)],
                               "key binary, value binary")
    df.write.format("seglog").mode("append").option("topic", topic).save(root)
    return root


# ------------------------------------------------------------------- option errors at query start

def test_batch_read_option_error_shows_seglog_message_first(spark, tmp_path):
    root = _written_root(spark, tmp_path)
    with pytest.raises(Exception) as info:
        spark.read.format("seglog").option("subscrib", "t").load(root).collect()
    assert _message(info).startswith(
        "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source reader: "
        "logcore.errors.InvalidConfigError: unknown option 'subscrib' for the seglog source;"
        " did you mean subscribe?"), _message(info)[:600]
    assert "Traceback" not in _message(info)


def test_stream_read_option_error_shows_seglog_message_first(spark, tmp_path):
    """pyspark 4.3's streaming runner would report an UnboundLocalError about `reader` if
    creating the reader raised; seglog raises the option error at Spark's first call instead."""
    root = _written_root(spark, tmp_path)
    with pytest.raises(Exception) as info:
        query = (spark.readStream.format("seglog").option("subscribe", "t")
                 .option("startingOffsets", "soonest").load(root)
                 .writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "cp")).start())
        query.awaitTermination(120)
    message = _message(info)
    assert re.match(
        r"\[STREAM_FAILED\] Query \[id = [0-9a-f-]+, runId = [0-9a-f-]+\] terminated with exception: "
        r"\[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR\] Failed when Python streaming data source"
        r" perform \w+: logcore\.errors\.InvalidConfigError: option startingOffsets='soonest'",
        message), message[:800]
    assert "Traceback" not in message and "UnboundLocalError" not in message


def test_batch_write_option_error_shows_seglog_message_first(spark, tmp_path):
    df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    with pytest.raises(Exception) as info:
        df.write.format("seglog").mode("append").option("topic", "t").option("batch.siz", 10) \
            .save(str(tmp_path / "root"))
    assert _message(info).startswith(
        "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: "
        "logcore.errors.InvalidConfigError: unknown seglog sink option 'batch.siz'; did you mean"
        " 'batch.size'?"), _message(info)[:600]


# ------------------------------------------------------------------------- data errors in tasks

def test_corrupt_batch_in_a_read_task_shows_seglog_message_first(spark, tmp_path):
    root = _written_root(spark, tmp_path)
    segment = sorted(glob.glob(f"{root}/t-0/*.log"))[0]
    data = bytearray(open(segment, "rb").read())
    data[200] ^= 0xFF                       # inside the first batch's records: its CRC fails
    open(segment, "wb").write(bytes(data))
    with pytest.raises(Exception) as info:
        spark.read.format("seglog").option("subscribe", "t").load(root).collect()
    assert _message(info).startswith(
        "An exception was thrown from the Python worker:\nlogcore.errors.CorruptRecordError: "), \
        _message(info)[:600]
    assert "Traceback" not in _message(info)


def test_corrupt_batch_in_a_streaming_task_shows_seglog_message_first(spark, tmp_path):
    root = _written_root(spark, tmp_path)
    segment = sorted(glob.glob(f"{root}/t-0/*.log"))[0]
    data = bytearray(open(segment, "rb").read())
    data[200] ^= 0xFF
    open(segment, "wb").write(bytes(data))
    with pytest.raises(Exception) as info:
        query = (spark.readStream.format("seglog").option("subscribe", "t")
                 .option("startingOffsets", "earliest").load(root)
                 .writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "cp")).start())
        query.awaitTermination(120)
    assert re.match(
        r"\[STREAM_FAILED\] Query \[id = [0-9a-f-]+, runId = [0-9a-f-]+\] terminated with exception: "
        r"\[PYTHON_EXCEPTION\] An exception was thrown from the Python worker: "
        r"logcore\.errors\.CorruptRecordError: ", _message(info)), _message(info)[:800]


def test_bad_row_in_a_write_task_shows_seglog_message_first(spark, tmp_path):
    df = spark.createDataFrame([(b"k", b"v", None)], "key binary, value binary, topic string")
    with pytest.raises(Exception) as info:
        df.write.format("seglog").mode("append").save(str(tmp_path / "root"))
    message = _message(info)
    start = message.find("logcore.errors.")
    assert start >= 0 and "Traceback" not in message[:start], message[:800]
    assert message[start:].startswith(
        "logcore.errors.InvalidRecordError: a row has a null `topic` and no `topic` option is set")


# --------------------------------------------------------------------------------- save modes

def test_spark_refuses_its_default_save_mode_for_python_data_sources_so_append_is_spelled_out(spark, tmp_path):
    """Spark's DataFrameWriter refuses ErrorIfExists and Ignore for any Python data source (a
    TableProvider with BATCH_WRITE) before seglog is called; Spark's Kafka sink gets them only
    because it is a V1 source. `.mode("append")` works."""
    root = str(tmp_path / "root")
    df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    with pytest.raises(Exception) as info:
        df.write.format("seglog").option("topic", "t").save(root)
    assert _message(info).startswith("[UNSUPPORTED_DATA_SOURCE_SAVE_MODE]")
    with pytest.raises(Exception) as info:
        df.write.format("seglog").mode("overwrite").option("topic", "t").save(root)
    assert _message(info).startswith(
        "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: "
        "logcore.errors.InvalidConfigError: the seglog sink only appends: save mode Overwrite is not"
        " supported; write with df.write.format(\"seglog\").mode(\"append\")"), _message(info)[:600]
    df.write.format("seglog").mode("append").option("topic", "t").save(root)
    with LogRoot.open(root, read_only=True) as r:
        assert [rec.value for rec in r.log("t", 0).read_records(0)] == [b"v"]


def test_driver_environment_is_left_alone(spark, tmp_path):
    """The traceback is hidden only inside Spark's worker processes, never in the driver."""
    import os

    from logcore.errors import InvalidConfigError
    from pyspark_seglog.datasource import SeglogDataSource
    source = SeglogDataSource({"subscrib": "t", "path": str(tmp_path)})
    with pytest.raises(InvalidConfigError):
        source.reader(None)
    assert "SPARK_HIDE_TRACEBACK" not in os.environ
