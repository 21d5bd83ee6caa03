"""The cleaner's offset map: key -> offset of the key's latest record, in a fixed memory budget.

As Kafka's SkimpyOffsetMap, an open-addressing table of 24-byte entries (a 128-bit hash of the
key plus the int64 offset) in one preallocated buffer of `memory_bytes`; no per-key Python
objects. Two keys whose 128-bit hashes collide count as one key (Kafka accepts the same for MD5).
The table is "full" at `load_factor` of its slots, which keeps probe sequences short; the cleaner
then stops mapping and cleans what the map covers. The per-record work (hashing, probing) runs in
the `_offsetmap` C extension over whole Arrow key columns.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from logcore.cleaner import _offsetmap
from logcore.errors import InvalidConfigError
from logcore.records.encode import binary_parts

ENTRY_BYTES = 24            # 16-byte key hash + 8-byte offset


def key_column_parts(keys: pa.Array) -> tuple[np.ndarray, object, np.ndarray | None]:
    """(int32 offsets from row 0, data buffer, uint8 per-row validity or None) of a binary column."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        keys = pa.array(keys, type=pa.binary())
    if not (pa.types.is_binary(keys.type) or pa.types.is_string(keys.type)):
        keys = keys.cast(pa.binary())
    return binary_parts(keys)


class OffsetMap:
    """key -> latest offset in `memory_bytes` (24 bytes a slot), full at `load_factor` of the slots."""

    def __init__(self, memory_bytes: int, load_factor: float = 0.9):
        if not isinstance(memory_bytes, int) or memory_bytes < ENTRY_BYTES:
            raise InvalidConfigError(
                f"offset map memory must be at least {ENTRY_BYTES} bytes (one entry), got {memory_bytes!r}"
                " (log.cleaner.dedupe.buffer.size)")
        if not 0 < load_factor <= 1:
            raise InvalidConfigError(
                f"offset map load factor must be in (0, 1], got {load_factor!r}"
                " (log.cleaner.io.buffer.load.factor)")
        self.slots = memory_bytes // ENTRY_BYTES
        self.load_factor = load_factor
        self.max_entries = max(1, int(self.slots * load_factor))
        # Zeroed up front, sequentially: a lazily zeroed table would take its page faults at
        # random during the first pass (measured: 10x slower map building on 128 MiB).
        self._table = np.empty(self.slots * ENTRY_BYTES, dtype=np.uint8)
        self._table.fill(0)
        self.size = 0
        self.latest_offset = -1

    @property
    def memory_bytes(self) -> int:
        return self._table.nbytes

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    @property
    def table(self) -> np.ndarray:
        """The raw slot buffer (for the record filter of the cleaner)."""
        return self._table

    def clear(self) -> None:
        if self.size:
            self._table.fill(0)
        self.size = 0
        self.latest_offset = -1

    def put_batch(self, keys: pa.Array, offsets) -> int:
        """Put keys[i] -> offsets[i] in row order (later rows win); null keys are skipped.

        Returns how many rows were consumed: fewer than len(keys) when the map filled up (the
        rows from there on were not put). `latest_offset` becomes the last consumed row's offset.
        """
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if len(offsets) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(offsets)} offsets")
        if len(offsets) == 0:
            return 0
        ko, kd, kv = key_column_parts(keys)
        consumed, self.size = _offsetmap.put_keys(self._table, self.slots, self.size, self.max_entries,
                                                  len(offsets), ko, kd, kv, offsets)
        if consumed:
            self.latest_offset = max(self.latest_offset, int(offsets[consumed - 1]))
        return consumed

    def put_batches(self, chunk, rows: np.ndarray, include: np.ndarray, min_offset: int, max_offset: int) -> int:
        """Put the keyed records with offsets in [min_offset, max_offset) of the uncompressed data
        batches of `chunk` whose `include` is set (`rows`: its `batch_fields`), in order.

        Returns -1 when every record was put, else the offset of the first record not put (the
        map filled up; everything before it is in the map). Corrupt records raise
        `_offsetmap.RecordError(row, record, message)`."""
        self.size, stop = _offsetmap.map_batches(chunk, rows, 0, len(rows), include, self._table, self.slots,
                                                 self.size, self.max_entries, min_offset, max_offset)
        return stop

    def get_batch(self, keys: pa.Array) -> np.ndarray:
        """The mapped offset of each key (int64), -1 for absent and null keys."""
        ko, kd, kv = key_column_parts(keys)
        out = np.empty(len(keys), dtype=np.int64)
        if len(out):
            _offsetmap.get_keys(self._table, self.slots, len(out), ko, kd, kv, out)
        return out

    def put(self, key: bytes, offset: int) -> bool:
        """One key (tests, tools). False when the map is full and the key is new."""
        return self.put_batch(pa.array([key], type=pa.binary()), [offset]) == 1

    def get(self, key: bytes) -> int:
        return int(self.get_batch(pa.array([key], type=pa.binary()))[0])

    def __repr__(self) -> str:
        return f"OffsetMap(slots={self.slots}, size={self.size}, latest_offset={self.latest_offset})"
