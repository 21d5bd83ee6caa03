"""The offset index (`.index`): relative offset -> position in the segment's `.log`.

Kafka's layout: 8-byte big-endian entries, int32 (offset - base_offset) then int32 file position,
strictly increasing in offset. An entry says "the batch set whose *last* offset is O starts at
position P", so a lookup gives a position from which a forward scan finds the target.

`AbstractIndex` here is the machinery shared with the time index (`time_index.py`): entries are
kept in memory as two native-endian numpy columns (searchsorted on big-endian arrays byte-swaps
the whole array on every call, which makes a lookup linear) and written through to the index's
file (`index_file.py`, its kind chosen once when the index opens): on local disk preallocated to
the maximum size (sparse) while the segment is active, entries written in place, and `trim()` /
`close()` cut to the exact size, as Kafka does; on an object store published whole by `flush()`.
The file is read once and decoded into the columns. Like Kafka, a file holds
`floor(length / entry_size)` entries, so a zero-padded file left by a crash shows its padding as
entries: callers check `valid_prefix_entries()` / `sanity_check()` and rebuild.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from logcore.errors import CorruptIndexError, InvalidRecordError, ReadOnlyLogError
from logcore.log.index_file import open_index_file

if TYPE_CHECKING:
    from logcore.storage import Storage

INT32_MAX = 2**31 - 1
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes
_MIN_CAPACITY = 64


class IndexOffsetOverflowError(InvalidRecordError):
    """An offset whose distance from the segment's base offset does not fit in an int32."""


class InvalidIndexEntryError(InvalidRecordError):
    """An index append that breaks the index's order, or an append to a full index."""


class AbstractIndex:
    """Fixed-size entries (key, value) sorted by key, for one segment.

    Subclasses set the entry layout; the key column is what lookups search.
    """

    ENTRY_SIZE: ClassVar[int]
    FILE_DTYPE: ClassVar[np.dtype]   # big-endian structured dtype with fields "key", "value"
    KEY_DTYPE: ClassVar[np.dtype]    # native-endian
    VALUE_DTYPE: ClassVar[np.dtype]
    ENTRY_STRUCT: ClassVar[struct.Struct]
    KIND: ClassVar[str]

    def __init__(self, storage: Storage | None, path: str | None, base_offset: int,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE, writable: bool = False):
        if base_offset < 0:
            raise ValueError(f"{self.KIND} {path}: base_offset must be >= 0, got {base_offset}")
        if max_index_size < 0:
            raise ValueError(f"{self.KIND} {path}: max_index_size must be >= 0, got {max_index_size}")
        if writable and storage is not None and storage.read_only:
            raise ReadOnlyLogError(f"cannot open {storage.describe(path or '')} for writing: "
                                   "storage is read-only")
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self.max_entries = max_index_size // self.ENTRY_SIZE
        self._n = 0
        self._keys = np.empty(0, dtype=self.KEY_DTYPE)
        self._values = np.empty(0, dtype=self.VALUE_DTYPE)
        self._closed = False
        self._file = open_index_file(storage, path)
        data = self._file.load()
        if data is not None:
            self._set_from_file_bytes(data)
        if writable:
            self._file.open_for_write(max(self.max_entries, self._n) * self.ENTRY_SIZE)

    # -- construction helpers --------------------------------------------------------------------

    @classmethod
    def from_bytes(cls, data: bytes, base_offset: int, *, source: str | None = None,
                   max_index_size: int = DEFAULT_MAX_INDEX_SIZE):
        """A read-only index over bytes already in memory (e.g. fetched from tiered storage)."""
        index = cls(None, source, base_offset, max_index_size=max_index_size, writable=False)
        index._set_from_file_bytes(data)
        return index

    @property
    def path(self) -> str | None:
        return self._file.path

    @property
    def _fd(self) -> int | None:
        """The open descriptor of a writable local file, else None (a test simulates a crash
        by closing it and setting None)."""
        return self._file.fd

    @_fd.setter
    def _fd(self, fd: int | None) -> None:
        self._file.fd = fd

    @property
    def _where(self) -> str:
        return self._file.where or self.path or f"<in-memory {self.KIND}>"

    def _set_from_file_bytes(self, data: bytes) -> None:
        count = len(data) // self.ENTRY_SIZE
        entries = np.frombuffer(data, dtype=self.FILE_DTYPE, count=count)
        self._set_columns(entries["key"], entries["value"], count)
        self._file.length = len(data)

    def _set_columns(self, keys: np.ndarray, values: np.ndarray, count: int) -> None:
        capacity = count if not self.writable else max(count, min(_MIN_CAPACITY, self.max_entries))
        self._keys = np.empty(capacity, dtype=self.KEY_DTYPE)
        self._values = np.empty(capacity, dtype=self.VALUE_DTYPE)
        self._keys[:count] = keys
        self._values[:count] = values
        self._n = count

    # -- reading ---------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._n

    def __len__(self) -> int:
        return self._n

    def is_full(self) -> bool:
        return self._n >= self.max_entries

    @property
    def file_length(self) -> int:
        """Bytes of the index file as found on load or as last sized (preallocated / trimmed)."""
        return self._file.length

    def key_column(self) -> np.ndarray:
        """The keys of all entries (a read-only view, native-endian)."""
        view = self._keys[:self._n]
        view.flags.writeable = False
        return view

    def value_column(self) -> np.ndarray:
        view = self._values[:self._n]
        view.flags.writeable = False
        return view

    def _largest_lower_bound_slot(self, key) -> int:
        """Index of the last entry whose key <= key, or -1."""
        return int(np.searchsorted(self._keys[:self._n], key, side="right")) - 1

    def valid_prefix_entries(self) -> int:
        """How many leading entries are in order (keys strictly increasing, per subclass rules).

        A file left zero-padded by a crash (or preallocated by a live writer) reads as entries
        followed by all-zero ones; the all-zero ones break the order and are not counted.
        """
        n = self._n
        bad = self._bad_entries()
        if n > 1:
            bad[1:] |= self._order_violations()
        return int(np.argmax(bad)) if bad.any() else n

    def drop_invalid_tail(self) -> int:
        """Keep only `valid_prefix_entries()`; returns how many entries were dropped.

        On a read-only index only the in-memory view changes (a reader of a live, preallocated
        active index); a writable one is truncated on disk too."""
        valid = self.valid_prefix_entries()
        dropped = self._n - valid
        if dropped:
            if self.writable:
                self.truncate_to_entries(valid)
            else:
                self._n = valid
        return dropped

    def _bad_entries(self) -> np.ndarray:
        """bad[i] is True when entry i cannot be valid on its own (e.g. a negative offset)."""
        return np.zeros(self._n, dtype=bool)

    def _order_violations(self) -> np.ndarray:
        """bad[i] is True when entry i+1 does not follow entry i."""
        keys = self._keys[:self._n]
        return keys[1:] <= keys[:-1]

    # -- writing ---------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyLogError(f"{self.KIND} {self._where} is open read-only")
        if self._closed:
            raise ReadOnlyLogError(f"{self.KIND} {self._where} is closed")

    def _append_entry(self, key: int, value: int) -> None:
        n = self._n
        if n == len(self._keys):
            capacity = max(_MIN_CAPACITY, 2 * n)
            self._keys = np.resize(self._keys, capacity)
            self._values = np.resize(self._values, capacity)
        self._keys[n] = key
        self._values[n] = value
        self._file.write(n * self.ENTRY_SIZE, self.ENTRY_STRUCT.pack(key, value))
        self._n = n + 1

    def append_entries(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Append many entries at once (keys and values as stored: relative offsets, positions or
        timestamps); they must continue the index in order and fit in it."""
        self._check_writable()
        count = len(keys)
        if count == 0:
            return
        n = self._n
        if n + count > self.max_entries:
            raise InvalidIndexEntryError(
                f"cannot append {count} entries to the {self.KIND} {self._where} ({n} entries of max"
                f" {self.max_entries})")
        keys = np.asarray(keys, dtype=self.KEY_DTYPE)
        values = np.asarray(values, dtype=self.VALUE_DTYPE)
        combined_keys = np.concatenate((self._keys[n - 1:n], keys))
        if (combined_keys[1:] <= combined_keys[:-1]).any():
            raise InvalidIndexEntryError(f"entries appended to the {self.KIND} {self._where} are not"
                                         " in increasing order")
        if n + count > len(self._keys):
            capacity = max(_MIN_CAPACITY, 2 * (n + count))
            self._keys = np.resize(self._keys, capacity)
            self._values = np.resize(self._values, capacity)
        self._keys[n:n + count] = keys
        self._values[n:n + count] = values
        out = np.empty(count, dtype=self.FILE_DTYPE)
        out["key"] = keys
        out["value"] = values
        self._file.write(n * self.ENTRY_SIZE, out.tobytes())
        self._n = n + count

    def truncate_to_entries(self, count: int) -> None:
        """Keep the first `count` entries (on disk, the rest becomes zeros)."""
        self._check_writable()
        if not 0 <= count <= self._n:
            raise ValueError(f"{self.KIND} {self._where}: cannot truncate to {count} entries, "
                             f"it has {self._n}")
        self._n = count
        self._file.cut(count * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Remove every entry and regrow to the maximum size (recovery rebuilds the index)."""
        self.truncate_to_entries(0)
        self.resize(self.max_index_size)

    def grow(self) -> None:
        """Back to the configured maximum size (an inactive segment's index becomes active again,
        e.g. after truncation)."""
        self.resize(self.max_index_size)

    def resize(self, new_size: int) -> None:
        """Set the capacity to `new_size` bytes; on local disk the file is sized to it (Kafka's
        `resize`). `max_index_size`, the configured maximum, is unchanged. Entries beyond the
        new capacity are dropped."""
        self._check_writable()
        self.max_entries = new_size // self.ENTRY_SIZE
        if self._n > self.max_entries:
            self.truncate_to_entries(self.max_entries)
        self._file.resize(self.max_entries * self.ENTRY_SIZE)

    def trim(self) -> None:
        """Cut the file to exactly its entries (done when the segment becomes inactive)."""
        if self.writable and not self._closed:
            self.resize(self._n * self.ENTRY_SIZE)

    def to_bytes(self) -> bytes:
        """The exact file content: `entries * ENTRY_SIZE` big-endian bytes."""
        out = np.empty(self._n, dtype=self.FILE_DTYPE)
        out["key"] = self._keys[:self._n]
        out["value"] = self._values[:self._n]
        return out.tobytes()

    def flush(self) -> None:
        """Make the entries durable: fsync on local disk (not again when nothing changed since
        the last one), publish the whole object elsewhere."""
        self._check_writable()
        self._file.flush(self.to_bytes)

    def close(self) -> None:
        """Trim to the exact size and release the file. The index stays readable in memory."""
        if self._closed:
            return
        self.trim()
        self._file.close()
        self._closed = True

    def rename_to(self, new_path: str) -> None:
        """Follow a rename of the index file (`.deleted`, `.swap`, ...); renames it if it exists."""
        self._file.rename_to(new_path)

    def delete(self) -> None:
        """Close and delete the file."""
        self._closed = True
        self._file.delete()

    def _check_length(self) -> None:
        if self._file.length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{self.KIND} is corrupt: {self._file.length} bytes is not a multiple of the "
                f"{self.ENTRY_SIZE}-byte entry size", file=self._where)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self._where}, base_offset={self.base_offset}, "
                f"entries={self._n}, writable={self.writable})")


class OffsetIndex(AbstractIndex):
    """The `.index` file of one segment: (relative offset int32, position int32) entries."""

    ENTRY_SIZE = 8
    FILE_DTYPE = np.dtype([("key", ">i4"), ("value", ">i4")])
    KEY_DTYPE = np.dtype(np.int32)
    VALUE_DTYPE = np.dtype(np.int32)
    ENTRY_STRUCT = struct.Struct(">ii")
    KIND = "offset index"

    def relative_offset(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} is not in the int32 range of relative offsets from base offset "
                f"{self.base_offset} (relative {rel}) in {self.KIND} {self._where}")
        return rel

    def _bad_entries(self) -> np.ndarray:
        return self._keys[:self._n] < 0

    def _search_key(self, offset: int) -> np.int32:
        # Clamp into int32 so the search runs on the column's own dtype (no array cast).
        return np.int32(min(max(offset - self.base_offset, -1), INT32_MAX))

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty (Kafka's lastOffset)."""
        return self.base_offset + int(self._keys[self._n - 1]) if self._n else self.base_offset

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._n:
            return self.base_offset, 0
        return self.entry(self._n - 1)

    def entry(self, n: int) -> tuple[int, int]:
        """The n-th entry as (absolute offset, position)."""
        if not 0 <= n < self._n:
            raise IndexError(f"entry {n} out of range: {self.KIND} {self._where} has {self._n}")
        return self.base_offset + int(self._keys[n]), int(self._values[n])

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, or (base_offset, 0) when there is none."""
        slot = self._largest_lower_bound_slot(self._search_key(target_offset))
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + int(self._keys[slot]), int(self._values[slot])

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets strictly increase, the index must not be full."""
        # The checks inline (an append per produced batch); the helpers raise the errors.
        if not self.writable or self._closed:
            self._check_writable()
        n = self._n
        if n >= self.max_entries:
            raise InvalidIndexEntryError(
                f"cannot append offset {offset} to the full {self.KIND} {self._where} "
                f"({self._n} entries of max {self.max_entries})")
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            self.relative_offset(offset)
        if n and rel <= self._keys[n - 1]:
            raise InvalidIndexEntryError(
                f"cannot append offset {offset} to slot {self._n} of {self.KIND} {self._where}: "
                f"not larger than the last offset {self.last_offset}")
        if not 0 <= position <= INT32_MAX:
            raise InvalidIndexEntryError(
                f"position {position} for offset {offset} is outside the int32 range "
                f"({self.KIND} {self._where})")
        self._append_entry(rel, position)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        keep = int(np.searchsorted(self._keys[:self._n], self._search_key(offset), side="left"))
        if offset - self.base_offset > INT32_MAX:
            keep = self._n
        self.truncate_to_entries(keep)

    def sanity_check(self) -> None:
        """Kafka's checks: last offset not below the base; length a multiple of 8."""
        if self._n and self.last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt {self.KIND}: it has {self._n} entries but the last offset "
                f"{self.last_offset} is below the base offset {self.base_offset}", file=self._where)
        self._check_length()
