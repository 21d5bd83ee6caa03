"""Kafka's default partitioner for keyed records: murmur2(key), made positive, mod partitions.

The one murmur2 of the project: the C function in _fastcodec.c (Kafka's `Utils.murmur2`, seed
0x9747b28c), for one key (`murmur2`, `murmur2_partition`: the CLI producer) or a whole Arrow key
column at once (`murmur2_partitions`: the Spark sink), so a key lands in the partition a Kafka
producer would pick for it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from logcore.records import _fastcodec
from logcore.records.encode import binary_parts


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2, as a signed int like Java's."""
    return _fastcodec.murmur2(data)


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner assigns to a non-null key."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    return (_fastcodec.murmur2(key) & 0x7FFFFFFF) % partitions


def murmur2_partitions(keys: pa.Array, partitions: int) -> np.ndarray:
    """Kafka's default partitioner for each key (int32 numpy array); -1 where the key is null."""
    offsets, data, valid = binary_parts(keys)
    out = _fastcodec.murmur2_partitions(len(keys), offsets, data, valid, int(partitions))
    return np.frombuffer(out, dtype=np.int32)


__all__ = ["murmur2", "murmur2_partition", "murmur2_partitions"]
