"""Where an offset or time index's entries are kept: a local file written in place, an
object-store object published whole, or nowhere (memory only).

The index (`offset_index.AbstractIndex`) keeps its entries in memory and tells its file what
changed; `open_index_file` picks the file's kind once, when the index is opened:
- local disk: the file is read once (a plain read, not a map: a live writer preallocates its
  active index and trims it at close, and a mapped page past the new end is a SIGBUS); while
  writable it is preallocated (sparse) to the maximum size and entries are written in place;
- object store: read once with a GET; `flush` publishes the whole content;
- no storage or path (a rebuilt index, bytes from tiered storage): nothing is read or written.
"""
from __future__ import annotations

import os

from logcore.errors import ResourceNotFoundError


class LocalIndexFile:
    """An index file on local disk: `fd` is open while the index is writable."""

    def __init__(self, storage, path: str):
        self.storage = storage
        self.path = path
        self.fd: int | None = None
        self.length = 0           # bytes of the file as found or as last sized here
        self.unsynced = False     # the open file may hold changes not yet fsynced

    @property
    def where(self) -> str | None:
        return self.storage.describe(self.path)

    def load(self) -> bytes | None:
        if not self.storage.exists(self.path):
            return None
        with open(self.storage.local_path(self.path), "rb") as f:
            return f.read()

    def open_for_write(self, length: int) -> None:
        os_path = self.storage.local_path(self.path)
        os.makedirs(os.path.dirname(os_path), exist_ok=True)
        try:
            self.fd = os.open(os_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            self.unsynced = False      # created here: no entry to sync yet
        except FileExistsError:
            self.fd = os.open(os_path, os.O_RDWR | os.O_CLOEXEC)
            self.unsynced = True       # whoever wrote it before did not necessarily sync it
        # Preallocate (sparse) to the maximum size while active, like Kafka's mmap'd index.
        self.resize(length)

    def resize(self, length: int) -> None:
        if self.fd is not None:
            # A new length alone needs no sync: a crash leaves the entries with or without
            # zero padding, which loading tolerates (valid_prefix_entries). Dropped entries do
            # (cut).
            os.ftruncate(self.fd, length)
            self.length = length

    def write(self, position: int, data: bytes) -> None:
        if self.fd is not None:
            if position + len(data) > self.length:
                self.resize(position + len(data))
            os.pwrite(self.fd, data, position)
            self.unsynced = True

    def cut(self, keep: int) -> None:
        """Drop the bytes from `keep` on: cut and regrow, so they read back as zero padding,
        not stale entries."""
        if self.fd is not None:
            length = self.length
            os.ftruncate(self.fd, keep)
            os.ftruncate(self.fd, max(length, keep))
            self.unsynced = True

    def flush(self, content, entries: int | None = None) -> None:
        """Make the entries durable: fsync, not again when nothing changed since the last one.
        (`content()` gives the whole file, for an object store; `entries` counts them.)"""
        if self.fd is not None and self.unsynced:
            os.fsync(self.fd)
            self.unsynced = False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def rename_to(self, new_path: str) -> None:
        if self.storage.exists(self.path):
            self.storage.rename(self.path, new_path)   # an open fd follows the inode
        self.path = new_path

    def delete(self) -> None:
        self.close()
        self.storage.delete(self.path, missing_ok=True)

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class EntriesInMemory:
    """An index whose entries live in memory only until a flush (if any): nothing is opened,
    preallocated, written in place or cut on a file."""

    fd = None

    def open_for_write(self, length: int) -> None:
        pass

    def resize(self, length: int) -> None:
        pass

    def write(self, position: int, data: bytes) -> None:
        pass

    def cut(self, keep: int) -> None:
        pass

    def close(self) -> None:
        pass


class ObjectIndexFile(EntriesInMemory):
    """An index object on an object store: entries live in memory, `flush` publishes them."""

    def __init__(self, storage, path: str):
        self.storage = storage
        self.path = path
        self.length = 0

    @property
    def where(self) -> str | None:
        return self.storage.describe(self.path)

    def load(self) -> bytes | None:
        # One GET: a missing object answers not found (a HEAD first was a second request, and
        # the loader has just checked that the offset index is there).
        try:
            return self.storage.read(self.path)
        except ResourceNotFoundError:
            return None

    def flush(self, content, entries: int | None = None) -> None:
        data = content()
        self.storage.write_atomic(self.path, data)
        self.length = len(data)

    def rename_to(self, new_path: str) -> None:
        if self.storage.exists(self.path):
            self.storage.write_atomic(new_path, self.storage.read(self.path))
            self.storage.delete(self.path)
        self.path = new_path

    def delete(self) -> None:
        self.storage.delete(self.path, missing_ok=True)


class MemoryIndexFile(EntriesInMemory):
    """No file: an index rebuilt in memory or decoded from bytes fetched elsewhere."""

    where = None

    def __init__(self, path: str | None):
        self.path = path
        self.length = 0

    def load(self) -> bytes | None:
        return None

    def flush(self, content, entries: int | None = None) -> None:
        pass

    def rename_to(self, new_path: str) -> None:
        self.path = new_path

    def delete(self) -> None:
        pass


def open_index_file(storage, path: str | None):
    """The file behind an index, its kind chosen once from the storage (none without one)."""
    if storage is None or path is None:
        return MemoryIndexFile(path)
    return LocalIndexFile(storage, path) if storage.is_local else ObjectIndexFile(storage, path)


class LocalTxnFile:
    """A transaction index file on local disk: appended to, opened (and so created) on first
    need, never preallocated."""

    def __init__(self, storage, path: str):
        self.storage = storage
        self.path = path
        self.file = None

    @property
    def where(self) -> str | None:
        return self.storage.describe(self.path)

    def load(self) -> bytes | None:
        return self.storage.read(self.path) if self.storage.exists(self.path) else None

    def _opened(self, size: int):
        if self.file is None:
            self.file = self.storage.open_append(self.path)
            if self.file.size() != size:
                # Drop a partial entry left by a crash so appends stay aligned.
                self.file.truncate(size)
        return self.file

    def append(self, data: bytes, size: int) -> None:
        """Append `data` after the `size` bytes of whole entries."""
        self._opened(size).append(data)

    def truncate(self, length: int) -> None:
        if self.storage.exists(self.path):
            self._opened(length).truncate(length)

    def flush(self, content, entries: int | None = None) -> None:
        if self.file is not None:
            self.file.flush(fsync=True)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def rename_to(self, new_path: str) -> None:
        if self.storage.exists(self.path):
            self.storage.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        self.storage.delete(self.path, missing_ok=True)


class ObjectTxnFile(ObjectIndexFile):
    """A transaction index object: published whole, and only once it has an entry (or an
    object is already there to replace)."""

    def append(self, data: bytes, size: int) -> None:
        pass

    def truncate(self, length: int) -> None:
        pass

    def flush(self, content, entries: int | None = None) -> None:
        if entries or self.storage.exists(self.path):
            self.storage.write_atomic(self.path, content())


class MemoryTxnFile(MemoryIndexFile):
    """No file: a transaction index in memory only."""

    def append(self, data: bytes, size: int) -> None:
        pass

    def truncate(self, length: int) -> None:
        pass

    def flush(self, content, entries: int | None = None) -> None:
        pass


def open_txn_index_file(storage, path: str | None):
    """The file behind a transaction index, its kind chosen once from the storage."""
    if storage is None or path is None:
        return MemoryTxnFile(path)
    return LocalTxnFile(storage, path) if storage.is_local else ObjectTxnFile(storage, path)
