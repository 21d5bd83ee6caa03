"""Kafka's default partitioner for a column of keys at once.

Keyed rows: murmur2 of the key bytes, made positive, mod the partition count, exactly as Kafka's
Java client (and kafka-python) compute it, so a key lands where a Kafka producer would put it. The
hash runs in C over the Arrow key column (`logcore.records.partitioner.murmur2_partitions`), the
same C hash the CLI uses for one key.

Rows with a null key are spread evenly: round-robin over the partitions, starting at the task's
partition id and continuing across the Arrow batches of the task. The choice depends only on the
rows' order in the task, so a re-run of the same input places them the same way (the sink's
commit protocol does not rely on it).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from logcore.records.partitioner import murmur2_partitions


class DefaultPartitioner:
    """Partitions for the rows of one task; keeps the null-key round-robin position per topic."""

    def __init__(self, start: int = 0):
        self._start = start
        self._next: dict[str, int] = {}

    def partitions(self, topic: str, keys: pa.Array, count: int) -> np.ndarray:
        """int32 partition of each row (keys: binary or string Arrow array, nulls allowed)."""
        parts = murmur2_partitions(keys, count)
        if keys.null_count:
            parts = parts.copy()
            nulls = np.flatnonzero(parts < 0)
            first = self._next.get(topic, self._start)
            parts[nulls] = (first + np.arange(len(nulls), dtype=np.int64)) % count
            self._next[topic] = (first + len(nulls)) % count
        return parts
