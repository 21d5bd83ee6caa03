"""An append-only local file with positional reads: the body of an active segment or index."""
from __future__ import annotations

import os

from logcore.errors import ReadOnlyLogError, ResourceNotFoundError, StorageError


def pread_full(fd: int, length: int, start: int) -> bytes:
    """Up to `length` bytes of `fd` from `start`: fewer only at the end of the file (a short
    read before it is read on)."""
    data = os.pread(fd, length, start)
    if len(data) == length or not data:
        return data
    parts, got = [data], len(data)
    while got < length:
        more = os.pread(fd, length - got, start + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class AppendFile:
    """A local file opened for appending (single writer) and positional reads.

    Writes go straight to the OS with pwrite at the tracked end (no user-space buffer), so
    `pread` sees them at once and `flush` only has to fsync.
    """

    def __init__(self, os_path: str, *, read_only: bool = False, display: str | None = None):
        self.path = os_path
        self.read_only = read_only
        self._display = display or os_path
        cloexec = getattr(os, "O_CLOEXEC", 0)
        created = False
        try:
            if read_only:
                self._fd: int | None = os.open(os_path, os.O_RDONLY | cloexec)
            else:
                try:
                    self._fd = os.open(os_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | cloexec, 0o644)
                    created = True
                except FileExistsError:
                    self._fd = os.open(os_path, os.O_RDWR | cloexec)
        except FileNotFoundError as exc:
            raise ResourceNotFoundError(f"file not found: {self._display}") from exc
        self._end = os.fstat(self._fd).st_size
        # Whether this file may hold bytes not yet fdatasync'ed, so that a flush with nothing
        # written since the last one is a no-op, not another fdatasync. An existing file opened
        # for writing may (whoever wrote it did not necessarily sync it); a file this open
        # created holds nothing (that its name survives a crash is its folder's fsync's business).
        self._unsynced = not read_only and not created

    def _fileno(self) -> int:
        if self._fd is None:
            raise StorageError(f"{self._display} is closed")
        return self._fd

    def duplicate_fd(self) -> int:
        """A new descriptor of the same open file (for zero-copy sends that outlive this one).

        The two share a file position; this class only uses positional I/O, so neither cares.
        """
        return os.dup(self._fileno())

    def _refuse_if_read_only(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyLogError(f"cannot {operation} {self._display}: opened read-only")

    def append(self, data: bytes) -> int:
        """Write `data` at the end; returns the position where it starts."""
        self._refuse_if_read_only("append to")
        fd = self._fileno()
        start = self._end
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):  # pwrite may write less than asked (signals, full disk)
                written += os.pwrite(fd, view[written:], start + written)
        except BaseException:
            # A full disk (ENOSPC) or another I/O error part way: the bytes already written
            # are past `_end` but in the file, where a reopen, a scan or the next append would
            # find a torn batch. Cut them off, so the file is exactly as before the call.
            if written:
                self._cut_back(start)
            raise
        self._end = start + written
        self._unsynced = True
        return start

    def _cut_back(self, size: int) -> None:
        try:
            os.ftruncate(self._fileno(), size)
        except OSError as exc:
            # Still torn: say so loudly; the segment's recovery finds and cuts the torn tail.
            raise StorageError(f"{self._display}: a failed append left a partial write past"
                               f" position {size} that could not be cut off: {exc}") from exc
        self._unsynced = True

    def size(self) -> int:
        if self.read_only:
            return os.fstat(self._fileno()).st_size  # the writer may be another process
        return self._end

    def pread(self, start: int, length: int) -> bytes:
        """Up to `length` bytes from `start` (fewer only at the end of the file)."""
        if start < 0 or length < 0:
            raise StorageError(f"bad read of {self._display}: start {start}, length {length}")
        return pread_full(self._fileno(), length, start)

    def truncate(self, size: int) -> None:
        self._refuse_if_read_only("truncate")
        if size < 0:
            raise StorageError(f"cannot truncate {self._display} to negative size {size}")
        os.ftruncate(self._fileno(), size)
        self._end = size
        self._unsynced = True

    def flush(self, fsync: bool = True) -> None:
        """Make appended bytes durable (nothing is buffered in this process). Nothing to do
        when nothing was written (appended, truncated) through this object since its last flush."""
        if fsync and self._unsynced:
            os.fdatasync(self._fileno())
            self._unsynced = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __enter__(self) -> AppendFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"AppendFile({self._display!r}, size={self._end})"
