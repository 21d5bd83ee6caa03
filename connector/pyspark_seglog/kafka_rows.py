"""Decoded record batches as rows of the Kafka source's schema, shared by both read paths (the
log's files: partition_reader.py; the brokers: broker_reader.py): the constant topic and
partition columns, and the Arrow column buffers the decoder reuses."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from logcore.records.arrow import BufferRecycler

# Arrow column buffers, handed out again once Spark has sent (and dropped) the batch using them.
COLUMN_BUFFERS = BufferRecycler()


class ConstantColumns:
    """The constant topic and partition columns, built once and sliced per batch (no copy)."""

    def __init__(self, topic: str, partition: int):
        self.topic = topic.encode()
        self.partition = partition
        self.capacity = 0
        self.topic_array = None
        self.partition_array = None

    def columns(self, rows: int) -> tuple[pa.Array, pa.Array]:
        if rows > self.capacity:
            cap = max(rows, 1 << 16)
            width = len(self.topic)
            offsets = np.arange(0, (cap + 1) * width, width, dtype=np.int32) if width else \
                np.zeros(cap + 1, dtype=np.int32)
            self.topic_array = pa.Array.from_buffers(
                pa.string(), cap, [None, pa.py_buffer(offsets), pa.py_buffer(self.topic * cap)])
            # from_buffers, not pa.array(ndarray): that one imports pandas, whose objects the
            # Spark worker's gc.collect() after every task would then walk.
            self.partition_array = pa.Array.from_buffers(
                pa.int32(), cap, [None, pa.py_buffer(np.full(cap, self.partition, dtype=np.int32))])
            self.capacity = cap
        return self.topic_array.slice(0, rows), self.partition_array.slice(0, rows)

    def rows(self, batch: pa.RecordBatch, schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
        """The decoder's batch (offset, timestamp, timestampType, key, value[, headers]) in the
        Kafka source's column order."""
        topic_col, partition_col = self.columns(batch.num_rows)
        cols = batch.columns
        arrays = [cols[3], cols[4], topic_col, partition_col, cols[0], cols[1], cols[2]]
        if include_headers:
            arrays.append(cols[5])
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
