"""A byte range of a local segment file, held open so that it can be sent without copying.

`Log.read(..., zero_copy=True)` answers with a FileSlice instead of bytes when the batches lie
in a local file: the caller hands the open file to `sendfile` (the kernel copies page cache to
socket) and closes the slice. The slice owns its own descriptor, opened while the log's lock was
held, so retention deleting the segment or the cleaner replacing it afterwards does not change
what it reads: an unlinked or renamed file stays readable through an open descriptor, and the
bytes below the high watermark are never rewritten in place.
"""
from __future__ import annotations

import io
import os

from logcore.errors import StorageError


class FileSlice:
    """`size` bytes at `position` of an open file (whole batches); `next_offset` follows them."""

    __slots__ = ("file", "position", "size", "next_offset", "source")

    def __init__(self, fd: int, position: int, size: int, next_offset: int, source: str):
        # FileIO owns the descriptor: closing the slice (or collecting it) closes it.
        self.file = io.FileIO(fd, "rb", closefd=True)
        self.position = position
        self.size = size
        self.next_offset = next_offset
        self.source = source

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        """The bytes, copied (for transports that cannot sendfile, or small slices)."""
        fd = self.file.fileno()
        parts, got = [], 0
        while got < self.size:
            data = os.pread(fd, self.size - got, self.position + got)
            if not data:
                raise StorageError(f"{self.source}: ended at {self.position + got} inside a slice of"
                                   f" {self.size} bytes from {self.position}")
            parts.append(data)
            got += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def prefetch(self, ahead: int = 0) -> None:
        """Ask the kernel to start reading the range, and `ahead` bytes after it, into the page
        cache now (asynchronously): a cold range then reaches the disk as one deep request
        instead of readahead windows behind the socket, and the next sequential fetch finds
        its bytes cached while this one is on the wire."""
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.file.fileno(), self.position, self.size + ahead, os.POSIX_FADV_WILLNEED)

    def close(self) -> None:
        self.file.close()

    @property
    def closed(self) -> bool:
        return self.file.closed

    def __enter__(self) -> FileSlice:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileSlice({self.source}, position={self.position}, size={self.size})"
