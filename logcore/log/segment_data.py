"""Where a segment's `.log` bytes live: a local file, an object-store object, or memory.

The segment asks its data for sizes, reads, appends and truncations and never which storage it
is on: `open_segment_data` picks the backend once, when the segment is opened. A local file is
appended in place (writer) or read as it grows (readers in other processes); an object store has
no append, so an active segment there is held in memory and published as an immutable object
when the writer commits or rolls, then read with ranged GETs.
"""
from __future__ import annotations

import mmap
import os

from logcore.errors import ResourceNotFoundError, SegLogError
from logcore.log.segment_names import DELETED_SUFFIX


class FileData:
    """Bytes of a segment on local disk, appended in place (writer) or read as it grows.

    A reader sticks to the file it first read: when the cleaner or retention replaced it (the
    name now holds another inode), it goes on reading the old file under its `.deleted` name
    until that is removed after file.delete.delay.ms, as a Kafka reader keeps its open handle.
    """

    has_file = True     # a descriptor can serve a zero-copy send or a map

    def __init__(self, storage, path: str, writable: bool):
        self.storage = storage
        self.path = path
        self.file = storage.open_append(path) if writable else None
        self.inode: int | None = None

    def _open(self) -> int:
        os_path = self.storage.local_path(self.path)
        try:
            fd = os.open(os_path, os.O_RDONLY | os.O_CLOEXEC)
            inode = os.fstat(fd).st_ino
            if self.inode is None:
                self.inode = inode
            if inode == self.inode:
                return fd
            os.close(fd)
        except FileNotFoundError:
            if self.inode is None:
                raise ResourceNotFoundError(f"file not found: {self.storage.describe(self.path)}") from None
        try:
            fd = os.open(os_path + DELETED_SUFFIX, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ResourceNotFoundError(f"{self.storage.describe(self.path)} was replaced and its old file"
                                        " is deleted") from None
        if os.fstat(fd).st_ino != self.inode:
            os.close(fd)
            raise ResourceNotFoundError(f"{self.storage.describe(self.path)} was replaced")
        return fd

    def size(self) -> int:
        if self.file is not None:
            return self.file.size()
        try:
            fd = self._open()
        except ResourceNotFoundError:
            if self.inode is not None:
                raise       # the file this reader knew is gone: the reader must refresh
            return 0
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def read(self, start: int, end: int, buffer: bytearray | None = None) -> bytes | memoryview:
        if self.file is not None:
            end = min(end, self.file.size())
            return self.file.pread(start, end - start) if end > start else b""
        fd = self._open()
        try:
            length = end - start
            if buffer is not None and 0 < length <= len(buffer):
                # into the caller's reused buffer: no fresh memory per read
                view = memoryview(buffer)
                got = 0
                while got < length:
                    n = os.preadv(fd, [view[got:length]], start + got)
                    if n == 0:
                        break
                    got += n
                return view[:got]
            parts, pos = [], start
            while pos < end:
                data = os.pread(fd, end - pos, pos)
                if not data:
                    break
                parts.append(data)
                pos += len(data)
            return b"".join(parts) if len(parts) != 1 else parts[0]
        finally:
            os.close(fd)

    def open_fd(self) -> int:
        """A descriptor of this reader's (or the writer's) file that the caller must close."""
        if self.file is not None:
            return self.file.duplicate_fd()
        return self._open()

    def map_range(self, start: int, end: int) -> tuple[mmap.mmap, memoryview]:
        """The page cache's bytes [start, end), mapped, not copied (a copy of a large range
        costs more than checking it). The caller releases the view, then closes the map."""
        fd = self.open_fd()
        try:
            aligned = start - start % mmap.ALLOCATIONGRANULARITY
            mapped = mmap.mmap(fd, end - aligned, access=mmap.ACCESS_READ, offset=aligned)
        finally:
            os.close(fd)
        return mapped, memoryview(mapped)[start - aligned:end - aligned]

    def append(self, data) -> int:
        return self.file.append(data)

    def truncate(self, size: int) -> None:
        self.file.truncate(size)

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush(fsync=True)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class MemoryData:
    """Bytes of an object-store segment that is still being written: published at commit/roll."""

    has_file = False

    def __init__(self, initial: bytes = b""):
        self.buf = bytearray(initial)

    def size(self) -> int:
        return len(self.buf)

    def read(self, start: int, end: int, buffer: bytearray | None = None) -> bytes:
        return bytes(self.buf[start:min(end, len(self.buf))])

    def map_range(self, start: int, end: int) -> None:
        return None

    def append(self, data) -> int:
        pos = len(self.buf)
        self.buf += data
        return pos

    def truncate(self, size: int) -> None:
        del self.buf[size:]

    def publish(self, storage, path: str) -> ObjectData:
        """Write these bytes as the immutable object `path`, created with If-None-Match so that
        a fenced writer can never replace what another writer published (the same bytes
        there already count as published); the object's data, to read from now on."""
        data = bytes(self.buf)
        if storage.put_if_absent(path, data) is None and storage.read(path) != data:
            raise SegmentExists(path)
        return ObjectData(storage, path, len(data))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class ObjectData:
    """Bytes of a published (immutable) segment object, read with ranged GETs."""

    has_file = False

    def __init__(self, storage, path: str, size: int | None = None):
        self.storage = storage
        self.path = path
        self._size = size

    def size(self) -> int:
        if self._size is None:
            self._size = self.storage.size(self.path)
        return self._size

    def read(self, start: int, end: int, buffer: bytearray | None = None) -> bytes:
        end = min(end, self.size())
        return self.storage.read(self.path, start, end) if end > start else b""

    def map_range(self, start: int, end: int) -> None:
        return None

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def open_segment_data(storage, path: str, *, writable: bool, in_memory: bool):
    """The backend of a segment's `.log`, chosen once when the segment is opened: memory for an
    unpublished object-store segment, else the storage's own kind (file or object)."""
    if in_memory:
        return MemoryData()
    return FileData(storage, path, writable) if storage.is_local else ObjectData(storage, path)


class SegmentExists(SegLogError):
    """Another writer already published a different segment with this base offset."""

    def __init__(self, path: str):
        super().__init__(f"segment {path} was already published by another writer")
        self.path = path
