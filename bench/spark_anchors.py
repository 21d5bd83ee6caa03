"""Anchor data sources for bench_spark.py: what a Python Data Source costs when it does no work.

- `format("bench_arrow_ceiling")`: a stream (and batch) source that only yields prebuilt Arrow
  record batches of the Kafka source's schema, read zero-copy from Arrow IPC files (one file per
  input partition, memory-mapped). Its rows/s is the ceiling of any Python source on this
  machine: Spark's cost of taking Arrow batches from a Python worker.
- `format("bench_tiny_python")`: an endless stream source whose every micro-batch holds one
  prebuilt record per partition (option `partitions`): what any Python streaming source costs
  per micro-batch, beside `rate-micro-batch`, a JVM source.
- `format("bench_count_sink")`: a stream and batch Arrow writer that only counts its input rows
  (and reports the count on commit, so the benchmark can check every row arrived). Its rows/s
  is the ceiling of any Python sink.

Spark workers unpickle these classes by reference, so this module must be importable there:
bench_spark.py puts bench/ on the workers' PYTHONPATH before the session starts.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
             "timestamp timestamp, timestampType int")


def _ipc_files(folder: str) -> list[str]:
    files = sorted(f for f in os.listdir(folder) if f.endswith(".arrow"))
    if not files:
        raise ValueError(f"option path={folder!r}: no .arrow files in that folder")
    return [os.path.join(folder, f) for f in files]


def _yield_ipc(path: str):
    with pa.memory_map(path, "r") as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


class _FilePartition(InputPartition):
    def __init__(self, path: str):
        super().__init__(path)
        self.path = path


class _CeilingStreamReader(DataSourceStreamReader):
    """One micro-batch holding every file: offsets are {"files": 0} then {"files": n}."""

    def __init__(self, folder: str):
        self.folder = folder

    def initialOffset(self) -> dict:
        return {"files": 0}

    def latestOffset(self, start: dict, limit) -> dict:
        return {"files": len(_ipc_files(self.folder))}

    def partitions(self, start: dict, end: dict):
        files = _ipc_files(self.folder)
        return [_FilePartition(p) for p in files[start["files"]:end["files"]]]

    def read(self, partition):
        yield from _yield_ipc(partition.path)

    def commit(self, end: dict) -> None:
        pass


class _CeilingBatchReader(DataSourceReader):
    def __init__(self, folder: str):
        self.folder = folder

    def partitions(self):
        return [_FilePartition(p) for p in _ipc_files(self.folder)]

    def read(self, partition):
        yield from _yield_ipc(partition.path)


class ArrowCeilingDataSource(DataSource):
    """Yields the record batches stored in the Arrow IPC files of folder `path`, nothing else."""

    @classmethod
    def name(cls) -> str:
        return "bench_arrow_ceiling"

    def schema(self) -> str:
        return KAFKA_DDL

    def streamReader(self, schema):
        return _CeilingStreamReader(self.options["path"])

    def reader(self, schema):
        return _CeilingBatchReader(self.options["path"])


class _TinyPartition(InputPartition):
    def __init__(self, index: int, batch: int):
        super().__init__(index)
        self.index, self.batch = index, batch


def _tiny_record(partition: int, offset: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "key": pa.array([b"k"]), "value": pa.array([b"v"]), "topic": pa.array(["tiny"]),
        "partition": pa.array([partition], pa.int32()), "offset": pa.array([offset], pa.int64()),
        "timestamp": pa.array([0], pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array([0], pa.int32())})


class _TinyStreamReader(DataSourceStreamReader):
    """Micro-batch k holds one record per partition: offsets are {"batch": k}."""

    def __init__(self, partitions: int):
        self.count = partitions
        self.next = 0

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict, limit) -> dict:
        return {"batch": start["batch"] + 1}

    def partitions(self, start: dict, end: dict):
        return [_TinyPartition(i, start["batch"]) for i in range(self.count)]

    def read(self, partition):
        yield _tiny_record(partition.index, partition.batch)

    def commit(self, end: dict) -> None:
        pass


class TinyPythonSource(DataSource):
    """An endless stream of one record per partition per micro-batch, built in the reader."""

    @classmethod
    def name(cls) -> str:
        return "bench_tiny_python"

    def schema(self) -> str:
        return KAFKA_DDL

    def streamReader(self, schema):
        return _TinyStreamReader(int(self.options.get("partitions", "4")))


@dataclass
class CountMessage(WriterCommitMessage):
    rows: int


def _count(iterator) -> CountMessage:
    rows = 0
    for batch in iterator:
        rows += batch.num_rows
    return CountMessage(rows)


def _record(result_file: str | None, key: str, rows: int) -> None:
    """Append what a commit saw to `result_file` (JSON lines) so the driver can check the count."""
    if result_file:
        with open(result_file, "a") as f:
            f.write(json.dumps({"commit": key, "rows": rows}) + "\n")


class _CountingStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, result_file: str | None):
        self.result_file = result_file

    def write(self, iterator) -> CountMessage:
        return _count(iterator)

    def commit(self, messages, batchId: int) -> None:
        _record(self.result_file, f"batch {batchId}", sum(m.rows for m in messages if m is not None))

    def abort(self, messages, batchId: int) -> None:
        pass


class _CountingBatchWriter(DataSourceArrowWriter):
    def __init__(self, result_file: str | None):
        self.result_file = result_file

    def write(self, iterator) -> CountMessage:
        return _count(iterator)

    def commit(self, messages) -> None:
        _record(self.result_file, "job", sum(m.rows for m in messages if m is not None))

    def abort(self, messages) -> None:
        pass


class CountingSinkDataSource(DataSource):
    """Counts the rows it is given; option `result` names a file that records each commit's count."""

    @classmethod
    def name(cls) -> str:
        return "bench_count_sink"

    def schema(self) -> str:
        return KAFKA_DDL

    def streamWriter(self, schema, overwrite: bool):
        return _CountingStreamWriter(self.options.get("result"))

    def writer(self, schema, overwrite: bool):
        return _CountingBatchWriter(self.options.get("result"))


def read_counts(result_file: str) -> list[dict]:
    if not os.path.exists(result_file):
        return []
    with open(result_file) as f:
        return [json.loads(line) for line in f if line.strip()]
