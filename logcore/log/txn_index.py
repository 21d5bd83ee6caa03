"""The transaction index (`.txnindex`): the aborted transactions whose markers are in a segment.

Kafka's layout: 34-byte big-endian entries, int16 version (0), int64 producerId, int64
firstOffset, int64 lastOffset (the ABORT marker's offset), int64 lastStableOffset (the LSO when the
marker was written). Append-only with strictly increasing lastOffset; the file is created on the
first append and never preallocated. A read_committed fetch collects the entries overlapping
[fetch_offset, upper_bound) and keeps going into later segments until an entry whose
lastStableOffset reaches upper_bound (`collect_aborted`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from logcore.errors import CorruptIndexError, InvalidRecordError, ReadOnlyLogError
from logcore.log.index_file import open_txn_index_file

if TYPE_CHECKING:
    from logcore.storage import Storage

ENTRY_SIZE = 34
CURRENT_VERSION = 0
_FILE_DTYPE = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
                        ("last_offset", ">i8"), ("last_stable_offset", ">i8")])
_NATIVE_DTYPE = np.dtype([("version", np.int16), ("producer_id", np.int64),
                          ("first_offset", np.int64), ("last_offset", np.int64),
                          ("last_stable_offset", np.int64)])
assert _FILE_DTYPE.itemsize == ENTRY_SIZE


@dataclass(frozen=True)
class AbortedTxn:
    """One aborted transaction: its producer, offset range and the LSO at the time of the abort."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def to_bytes(self) -> bytes:
        row = np.array([(self.version, self.producer_id, self.first_offset, self.last_offset,
                         self.last_stable_offset)], dtype=_FILE_DTYPE)
        return row.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> AbortedTxn:
        if len(data) != ENTRY_SIZE:
            raise ValueError(f"an aborted transaction entry is {ENTRY_SIZE} bytes, got {len(data)}")
        row = np.frombuffer(data, dtype=_FILE_DTYPE)[0]
        return cls(int(row["producer_id"]), int(row["first_offset"]), int(row["last_offset"]),
                   int(row["last_stable_offset"]), int(row["version"]))


@dataclass(frozen=True)
class TxnIndexSearchResult:
    aborted: list[AbortedTxn]
    is_complete: bool   # an entry's LSO reached the upper bound: later segments need no search


class TransactionIndex:
    """The `.txnindex` file of one segment (`start_offset` = the segment's base offset)."""

    KIND = "transaction index"

    def __init__(self, storage: Storage | None, path: str | None, start_offset: int,
                 writable: bool = False):
        if writable and storage is not None and storage.read_only:
            raise ReadOnlyLogError(f"cannot open {storage.describe(path or '')} for writing: "
                                   "storage is read-only")
        self.start_offset = start_offset
        self.writable = writable
        self._rows = np.empty(0, dtype=_NATIVE_DTYPE)
        self._n = 0
        self._file_length = 0
        self._file = open_txn_index_file(storage, path)
        self._closed = False
        data = self._file.load()
        if data is not None:
            self._set_from_file_bytes(data)

    @classmethod
    def from_bytes(cls, data: bytes, start_offset: int, *, source: str | None = None
                   ) -> TransactionIndex:
        """A read-only index over bytes already in memory (e.g. fetched from tiered storage)."""
        index = cls(None, source, start_offset)
        index._set_from_file_bytes(data)
        return index

    def _set_from_file_bytes(self, data: bytes) -> None:
        count = len(data) // ENTRY_SIZE
        self._rows = np.frombuffer(data, dtype=_FILE_DTYPE, count=count).astype(_NATIVE_DTYPE)
        self._n = count
        self._file_length = len(data)

    @property
    def path(self) -> str | None:
        return self._file.path

    @property
    def _where(self) -> str:
        return self._file.where or self.path or "<in-memory transaction index>"

    # -- reading ---------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._n

    def __len__(self) -> int:
        return self._n

    @property
    def last_offset(self) -> int | None:
        """lastOffset of the last entry, or None when empty."""
        return int(self._rows["last_offset"][self._n - 1]) if self._n else None

    def _check_versions(self, rows: np.ndarray) -> None:
        # Kafka reads the version from the first byte of the int16 (it is 0 either way).
        high_bytes = rows["version"].astype(np.int32) >> 8
        if (high_bytes > CURRENT_VERSION).any():
            slot = int(np.argmax(high_bytes > CURRENT_VERSION))
            raise CorruptIndexError(
                f"unexpected aborted transaction version {int(rows['version'][slot])} at position "
                f"{slot * ENTRY_SIZE} (current version is {CURRENT_VERSION})", file=self._where)

    @staticmethod
    def _to_txns(rows: np.ndarray) -> list[AbortedTxn]:
        return [AbortedTxn(int(r["producer_id"]), int(r["first_offset"]), int(r["last_offset"]),
                           int(r["last_stable_offset"]), int(r["version"])) for r in rows]

    def all_aborted(self) -> list[AbortedTxn]:
        rows = self._rows[:self._n]
        self._check_versions(rows)
        return self._to_txns(rows)

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Entries with lastOffset >= fetch_offset and firstOffset < upper_bound, in order, up to
        and including the first entry whose lastStableOffset >= upper_bound (then complete)."""
        rows = self._rows[:self._n]
        self._check_versions(rows)
        reaches = rows["last_stable_offset"] >= upper_bound_offset
        complete = bool(reaches.any())
        if complete:
            rows = rows[:int(np.argmax(reaches)) + 1]
        wanted = (rows["last_offset"] >= fetch_offset) & (rows["first_offset"] < upper_bound_offset)
        return TxnIndexSearchResult(self._to_txns(rows[wanted]), complete)

    def to_bytes(self) -> bytes:
        return self._rows[:self._n].astype(_FILE_DTYPE).tobytes()

    # -- writing ---------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyLogError(f"{self.KIND} {self._where} is open read-only")
        if self._closed:
            raise ReadOnlyLogError(f"{self.KIND} {self._where} is closed")

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its lastOffset must be above the last entry's."""
        self._check_writable()
        last = self.last_offset
        if last is not None and txn.last_offset <= last:
            raise InvalidRecordError(
                f"cannot append aborted transaction {txn} to {self.KIND} {self._where}: its last "
                f"offset {txn.last_offset} is not greater than the current last offset {last}")
        if txn.version != CURRENT_VERSION:
            raise InvalidRecordError(f"aborted transaction version {txn.version} is not "
                                     f"{CURRENT_VERSION} ({self.KIND} {self._where})")
        self._file.append(txn.to_bytes(), self._n * ENTRY_SIZE)   # before counting the new entry
        if self._n == len(self._rows):
            self._rows = np.resize(self._rows, max(16, 2 * self._n))
        self._rows[self._n] = (txn.version, txn.producer_id, txn.first_offset, txn.last_offset,
                               txn.last_stable_offset)
        self._n += 1
        self._file_length = self._n * ENTRY_SIZE

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with lastOffset >= offset."""
        self._check_writable()
        keep = int(np.searchsorted(self._rows["last_offset"][:self._n], offset, side="left"))
        self._truncate_to_entries(keep)

    def reset(self) -> None:
        """Remove every entry (recovery rebuilds the index from the log)."""
        self._check_writable()
        self._truncate_to_entries(0)

    def _truncate_to_entries(self, keep: int) -> None:
        self._n = keep
        self._file_length = keep * ENTRY_SIZE
        self._file.truncate(self._file_length)

    def flush(self) -> None:
        """fsync on local disk; on object stores publish the whole object (if there is one)."""
        self._check_writable()
        self._file.flush(self.to_bytes, self._n)

    def close(self) -> None:
        self._file.close()
        self._closed = True

    def rename_to(self, new_path: str) -> None:
        """Follow a rename of the index file; renames it if it exists."""
        self._file.rename_to(new_path)

    def delete(self) -> None:
        self._closed = True
        self._file.delete()

    def sanity_check(self) -> None:
        """Kafka's check (no entry ends below the segment's start offset), plus the length and
        version checks that Kafka makes while reading."""
        if self._file_length % ENTRY_SIZE:
            raise CorruptIndexError(
                f"corrupt {self.KIND}: {self._file_length} bytes is not a multiple of the "
                f"{ENTRY_SIZE}-byte entry size", file=self._where)
        rows = self._rows[:self._n]
        self._check_versions(rows)
        below = rows["last_offset"] < self.start_offset
        if below.any():
            slot = int(np.argmax(below))
            raise CorruptIndexError(
                f"corrupt {self.KIND}: last offset {int(rows['last_offset'][slot])} of the aborted "
                f"transaction at position {slot * ENTRY_SIZE} is below the start offset "
                f"{self.start_offset}", file=self._where)

    def __enter__(self) -> TransactionIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"TransactionIndex({self._where}, start_offset={self.start_offset}, "
                f"entries={self._n}, writable={self.writable})")
