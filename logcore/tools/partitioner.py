"""Kafka's default partitioner for keyed records: murmur2(key), made positive, mod partitions.

Same hash as the Java client's `Utils.murmur2` (seed 0x9747b28c), so a key lands in the partition a
Kafka producer would pick for it.
"""
from __future__ import annotations

_MASK = 0xFFFFFFFF
_M = 0x5BD1E995
_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2, as a signed int like Java's."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    full = length - length % 4
    for i in range(0, full, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[full + 2] << 16
    if tail >= 2:
        h ^= data[full + 1] << 8
    if tail >= 1:
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner assigns to a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
