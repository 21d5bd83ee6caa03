"""Routing a sink task's rows to topic-partitions, ready for encoding.

`RowRouter` takes the Arrow batches a sink task receives, picks each row's topic (the `topic`
option or column) and partition (the `partition` column, else Kafka's default partitioner),
and hands each (topic, partition) slice of keys, values, timestamps and headers to `_encode`.
Subclasses say where the encoded batches go: staged files (`task_stager.TaskStager`) or Produce
requests to a broker (`broker_sink.TaskProducer`).
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logcore.errors import InvalidConfigError, InvalidRecordError
from logcore.records.compression import Compression
from logcore.records.encode import group_rows

from pyspark_seglog.partitioner import DefaultPartitioner
from pyspark_seglog.sink_options import SinkOptions


class RowRouter(ABC):
    """One task attempt's rows, split by target (topic, partition); subclasses say what a topic
    is and where a partition's encoded rows go (staged files, or Produce requests)."""

    def __init__(self, opts: SinkOptions, columns: dict[str, str], task: int):
        self.opts = opts
        self.cols = columns
        self.task = task
        self.partitioner = DefaultPartitioner(start=task)

    @abstractmethod
    def _topic(self, topic: str) -> tuple:
        """(partition count, codec, ...) of a topic, created if missing and allowed."""

    def _cleanup_policy(self, topic: str) -> str:
        """The topic's cleanup.policy as Kafka lists it ("compact", "compact,delete", ...);
        subclasses read it from the root or the broker. "" when unknown (no key check)."""
        return ""

    @abstractmethod
    def _encode(self, topic: str, partition: int, codec: Compression, keys: pa.Array, values: pa.Array,
                ts: np.ndarray, headers: pa.Array | None, rows: np.ndarray | None) -> None:
        """Encode one partition's rows and hand them on: the columns' `rows` (int64 row numbers,
        in order), or all of them when `rows` is None."""

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        cols = self.cols
        if self.opts.topic is not None:
            self._add_topic(self.opts.topic, batch)
            return
        topics = batch.column(cols["topic"])
        if topics.null_count:
            raise InvalidRecordError(
                "a row has a null `topic` and no `topic` option is set: every row needs a topic")
        unique = pc.unique(topics).to_pylist()
        if len(unique) == 1:
            self._add_topic(unique[0], batch)
            return
        for name in unique:
            self._add_topic(name, batch.filter(pc.equal(topics, name)))

    def _add_topic(self, topic: str, batch: pa.RecordBatch) -> None:
        cols = self.cols
        count, codec = self._topic(topic)[:2]
        n = batch.num_rows
        values = batch.column(cols["value"])
        keys = batch.column(cols["key"]) if "key" in cols else pa.nulls(n, pa.binary())
        if keys.null_count:
            policy = self._cleanup_policy(topic)
            if is_compacted(policy):
                raise keyless_rows_error(topic, policy, keys.null_count, n, "key" in cols)
        parts = None
        if "partition" in cols:
            given = batch.column(cols["partition"])
            if given.null_count < n:
                arr = given.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
                bad = (arr >= count) | (arr < -1)
                if bad.any():
                    row = int(np.flatnonzero(bad)[0])
                    raise InvalidRecordError(
                        f"row has partition {int(arr[row])} but topic {topic!r} has partitions 0..{count - 1}")
                if given.null_count:
                    auto = self.partitioner.partitions(topic, keys, count)
                    arr = np.where(arr < 0, auto, arr).astype(np.int32)
                parts = arr
        if parts is None:
            parts = self.partitioner.partitions(topic, keys, count)
        if "timestamp" in cols:
            tcol = batch.column(cols["timestamp"])
            us = tcol.cast(pa.int64()).fill_null(int(time.time() * 1_000_000)).to_numpy(zero_copy_only=False)
            ts = us // 1000
        else:
            ts = np.empty(n, dtype=np.int64)
            ts.fill(int(time.time() * 1000))
        headers = batch.column(cols["headers"]) if "headers" in cols else None
        if count == 1:
            self._encode(topic, int(parts[0]), codec, keys, values, ts, headers, None)
            return
        # Each partition's rows as row numbers, in input order: the encoder reads them where they
        # are, so the columns are never copied into partition order.
        order, starts = group_rows(parts, count)
        bounds = starts.tolist()
        present = [p for p in range(count) if bounds[p + 1] > bounds[p]]
        if len(present) == 1:           # all rows go to one partition: no row list needed
            self._encode(topic, present[0], codec, keys, values, ts, headers, None)
            return
        for p in present:
            self._encode(topic, p, codec, keys, values, ts, headers, order[bounds[p]:bounds[p + 1]])


def is_compacted(policy: str) -> bool:
    """Whether a cleanup.policy value ("compact", "compact,delete", "delete", ...) compacts."""
    return "compact" in (p.strip() for p in policy.split(","))


def keyless_rows_error(topic: str, policy: str, nulls: int, rows: int, has_key_column: bool
                       ) -> InvalidRecordError | InvalidConfigError:
    """The sink's refusal of rows without a key for a compacted topic (Kafka's broker refuses
    such records with INVALID_RECORD; the cleaner would drop them)."""
    head = f"topic {topic!r} has cleanup.policy={policy}: a compacted topic refuses records without a key"
    if not has_key_column:       # the schema's fault: an option error at query start
        return InvalidConfigError(
            f"{head}, and the DataFrame has no `key` column: add one, e.g."
            " df.selectExpr(\"CAST(id AS STRING) AS key\", \"value\")")
    return InvalidRecordError(
        f"{head}, and {nulls} of the {rows} rows for it in this task have a null `key`: give every"
        " row a key, or leave those rows out (df.where(\"key IS NOT NULL\"))")
