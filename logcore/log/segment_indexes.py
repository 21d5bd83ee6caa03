"""A segment's offset, time and transaction indexes: opened lazily (as Kafka's LazyIndex: a log of
thousands of segments opens fast), checked against the `.log`, replaced when rebuilt, and flushed
and closed together. The segment (segment.py) owns one and says where the files are."""
from __future__ import annotations

from typing import Callable

from logcore.errors import CorruptIndexError
from logcore.log.offset_index import OffsetIndex
from logcore.log.time_index import TimeIndex
from logcore.log.txn_index import TransactionIndex


class SegmentIndexes:
    def __init__(self, storage, base_offset: int, *, index_path: str, time_index_path: str,
                 txn_index_path: str, max_index_size: int, writable: bool, unpublished: bool):
        self._storage = storage
        self.base_offset = base_offset
        self.index_path = index_path
        self.time_index_path = time_index_path
        self.txn_index_path = txn_index_path
        self.max_index_size = max_index_size
        self.writable = writable
        # An unpublished (in-memory) segment starts with empty indexes: objects already at its
        # paths belong to a segment another (fenced) writer left there, and its publish writes
        # the segment's own.
        self.unpublished = unpublished
        self._offset: OffsetIndex | None = None
        self._time: TimeIndex | None = None
        self._txn: TransactionIndex | None = None

    @property
    def offset(self) -> OffsetIndex:
        if self._offset is None:
            self._offset = self._open(OffsetIndex, self.index_path)
        return self._offset

    @property
    def time(self) -> TimeIndex:
        if self._time is None:
            self._time = self._open(TimeIndex, self.time_index_path)
        return self._time

    @property
    def txn(self) -> TransactionIndex:
        if self._txn is None:
            self._txn = TransactionIndex(self._files, self.txn_index_path, self.base_offset,
                                         writable=self.writable)
        return self._txn

    @property
    def offset_loaded(self) -> bool:
        return self._offset is not None

    @property
    def time_loaded(self) -> bool:
        return self._time is not None

    @property
    def _files(self):
        return None if self.unpublished else self._storage

    def _open(self, cls, path: str):
        index = cls(self._files, path, self.base_offset, max_index_size=self.max_index_size,
                    writable=self.writable)
        if not self.writable:
            # A live writer preallocates its active index (zeros past the last entry): only the
            # leading entries that are in order are real.
            index.drop_invalid_tail()
        return index

    def load(self) -> None:
        """Open the offset and time indexes now (a writer, before other threads can see the
        segment: a second writable index object over the same file, opened lazily by another
        thread, would load the first one's zero preallocation as entries)."""
        self._offset = self.offset
        self._time = self.time

    def check_against_log(self, log_size: Callable[[], int]) -> None:
        """Kafka's sanity checks plus: no index entry may point past the end of the `.log`
        (`log_size()`, asked only when the index has entries: on an object store it is a request)."""
        self.offset.sanity_check()
        self.time.sanity_check()
        if self.offset.entries:
            _, position = self.offset.last_entry
            size = log_size()
            if position >= max(size, 1):
                raise CorruptIndexError(
                    f"offset index entry points at position {position}, past the end of the"
                    f" log ({size} bytes)", file=self.index_path)

    def empty_offset_index(self) -> OffsetIndex:
        """A fresh offset index in memory, at this segment's path, that never touches the file."""
        return OffsetIndex(None, self.index_path, self.base_offset, max_index_size=self.max_index_size,
                           writable=True)

    def replace_offset(self, index: OffsetIndex) -> None:
        """`index` (a rebuilt one) serves from now on; the one it replaces is closed."""
        old, self._offset = self._offset, index
        if old is not None:
            old.close()

    def start_over(self, *, in_place: bool) -> None:
        """Empty offset and time indexes for a recovery scan to fill: the files reset
        (`in_place`), or new indexes in memory that never touch the files (a read-only copy)."""
        if in_place:
            self.offset.reset()
            self.time.reset()
        else:
            self._offset = self.empty_offset_index()
            self._time = TimeIndex(None, self.time_index_path, self.base_offset,
                                   max_index_size=self.max_index_size, writable=True)

    def flush_calls(self) -> list:
        """One flush call per open writable index."""
        return [index.flush for index in (self._offset, self._time, self._txn)
                if index is not None and index.writable]

    def close(self) -> None:
        for index in (self._offset, self._time, self._txn):
            if index is not None:
                index.close()
