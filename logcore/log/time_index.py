"""The time index (`.timeindex`): max timestamp so far -> the batch offset that holds it.

Kafka's layout: 12-byte big-endian entries, int64 timestamp then int32 (offset - base_offset).
An entry (T, O) says "the largest timestamp seen so far is T and it is in the batch whose last
offset is O". Timestamps strictly increase, offsets never decrease. One slot is kept free so the
final entry can be written when the segment rolls (`maybe_append(..., skip_full_check=True)`).
The in-memory/on-disk machinery is shared with the offset index (`AbstractIndex`).
"""
from __future__ import annotations

import struct

import numpy as np

from logcore.errors import CorruptIndexError, SegLogError
from logcore.log.offset_index import (
    INT32_MAX,
    AbstractIndex,
    IndexOffsetOverflowError,
    InvalidIndexEntryError,
)

NO_TIMESTAMP = -1


class TimeIndex(AbstractIndex):
    """The `.timeindex` file of one segment: (timestamp int64, relative offset int32) entries."""

    ENTRY_SIZE = 12
    FILE_DTYPE = np.dtype([("key", ">i8"), ("value", ">i4")])
    KEY_DTYPE = np.dtype(np.int64)
    VALUE_DTYPE = np.dtype(np.int32)
    ENTRY_STRUCT = struct.Struct(">qi")
    KIND = "time index"

    @classmethod
    def last_timestamp_in_file(cls, storage, path: str) -> int | None:
        """The timestamp of the last entry of a sealed time index file, read alone (12 bytes,
        not the whole index); None when the file is missing, empty or its tail looks damaged
        or like zero padding (then the full index, and its checks, decide)."""
        try:
            size = storage.size(path)
        except SegLogError:
            return None
        if size < cls.ENTRY_SIZE or size % cls.ENTRY_SIZE:
            return None
        ts, rel = cls.ENTRY_STRUCT.unpack(storage.read(path, size - cls.ENTRY_SIZE, size))
        if rel < 0 or ts <= 0:
            return None
        return ts

    def is_full(self) -> bool:
        # One slot stays free for the final entry written on roll/close.
        return self._n >= self.max_entries - 1

    def _bad_entries(self) -> np.ndarray:
        return self._values[:self._n] < 0

    def _order_violations(self) -> np.ndarray:
        ts = self._keys[:self._n]
        rel = self._values[:self._n]
        return (ts[1:] <= ts[:-1]) | (rel[1:] < rel[:-1])

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        if not self._n:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(self._n - 1)

    @property
    def max_timestamp(self) -> int:
        return self.last_entry[0]

    def entry(self, n: int) -> tuple[int, int]:
        """The n-th entry as (timestamp, absolute offset)."""
        if not 0 <= n < self._n:
            raise IndexError(f"entry {n} out of range: {self.KIND} {self._where} has {self._n}")
        return int(self._keys[n]), self.base_offset + int(self._values[n])

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """Largest entry with timestamp <= target, or (-1, base_offset) when there is none."""
        slot = self._largest_lower_bound_slot(np.int64(target_timestamp))
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        return int(self._keys[slot]), self.base_offset + int(self._values[slot])

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if timestamp is above the last one; True if appended.

        An equal timestamp is ignored (the same entry is offered again on roll and close); a
        smaller timestamp or offset is an error.
        """
        # The checks inline (offered per produced batch); the helpers raise the errors.
        if not self.writable or self._closed:
            self._check_writable()
        n = self._n
        if not skip_full_check and n >= self.max_entries - 1:      # one slot kept (is_full)
            raise InvalidIndexEntryError(
                f"cannot append to the full {self.KIND} {self._where} ({self._n} entries of max "
                f"{self.max_entries}, one reserved)")
        if n:
            last_ts, last_offset = int(self._keys[n - 1]), self.base_offset + int(self._values[n - 1])
        else:
            last_ts, last_offset = NO_TIMESTAMP, self.base_offset
        if n and offset < last_offset:
            raise InvalidIndexEntryError(
                f"cannot append offset {offset} to slot {self._n} of {self.KIND} {self._where}: "
                f"smaller than the last offset {last_offset}")
        if self._n and timestamp < last_ts:
            raise InvalidIndexEntryError(
                f"cannot append timestamp {timestamp} to slot {self._n} of {self.KIND} "
                f"{self._where}: smaller than the last timestamp {last_ts}")
        if timestamp <= last_ts:
            return False
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} is not in the int32 range of relative offsets from base offset "
                f"{self.base_offset} (relative {rel}) in {self.KIND} {self._where}")
        self._append_entry(timestamp, rel)
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset` (searched by the offset column)."""
        rel = offset - self.base_offset
        if rel > INT32_MAX:
            keep = self._n
        else:
            key = np.int32(max(rel, -1))
            keep = int(np.searchsorted(self._values[:self._n], key, side="left"))
        self.truncate_to_entries(keep)

    def sanity_check(self) -> None:
        """Kafka's checks: last timestamp not below the first, last offset not below the base,
        length a multiple of 12."""
        if self._n:
            last_ts, last_offset = self.last_entry
            first_ts = int(self._keys[0])
            if last_ts < first_ts:
                raise CorruptIndexError(
                    f"corrupt {self.KIND}: the last timestamp {last_ts} is below the first "
                    f"timestamp {first_ts}", file=self._where)
            if last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"corrupt {self.KIND}: it has {self._n} entries but the last offset "
                    f"{last_offset} is below the base offset {self.base_offset}", file=self._where)
        self._check_length()
