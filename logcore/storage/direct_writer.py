"""Writing a new file straight to the disk (O_DIRECT), for data written once in bulk.

The Spark sink stages each task's encoded batches in a part file that is written once, then
adopted as a segment and fsynced by the commit. Written through the page cache, every 4 KiB
costs a copy and a page the kernel must find (on a virtual machine, often a page the host has
to fault in: measured at 0.4-2 GB/s, the largest part of a task's staging CPU), and the
commit's fsync then waits for the write-back. With O_DIRECT the disk reads the writer's own
reused buffer instead, so a part costs little CPU and is on the disk when the write returns.

O_DIRECT wants the buffer's address, the file position and the length aligned to the device's
block size. The writer therefore writes the aligned prefix of what it is given and moves the
unaligned tail to the start of the buffer, where the caller's next bytes follow it; `close`
writes the last tail padded to a block and truncates the file to its true size. Buffers come
from `aligned_buffer` (anonymous mmap: page-aligned).

Where O_DIRECT is refused (tmpfs and some network or FUSE file systems answer EINVAL), the
writer goes through the page cache and queues each written range for write-back as it goes
(`start_writeback`), so that a later fsync has little left to wait for. Neither way promises
durability by itself: fsync the file for that.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os

from logcore.storage.writeback import start_writeback

ALIGN = 4096        # the largest logical block size in use; 512-byte devices accept it too


def aligned_buffer(size: int) -> mmap.mmap:
    """A zeroed, page-aligned buffer of at least `size` bytes (a whole number of ALIGN blocks)."""
    return mmap.mmap(-1, max(ALIGN, -(-size // ALIGN) * ALIGN))


class DirectFileWriter:
    """Appends to a new file (created or truncated), bypassing the page cache where it can."""

    def __init__(self, path: str):
        self.path = path
        self._written = 0       # bytes in the file: a multiple of ALIGN while direct
        self._kept = 0          # bytes at the start of the caller's buffer, not yet written
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        self.direct = hasattr(os, "O_DIRECT")
        if self.direct:
            try:
                self._fd = os.open(path, flags | os.O_DIRECT, 0o644)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.direct = False
        if not self.direct:
            self._fd = os.open(path, flags, 0o644)

    @property
    def size(self) -> int:
        """The file's size once closed: everything handed to `write` so far."""
        return self._written + self._kept

    def write(self, buf, length: int) -> int:
        """Append `buf[:length]`, which starts with the bytes kept by the previous call.

        Returns how many bytes are kept (now at the start of `buf`) for the next call or for
        `close`: the caller puts its next bytes after them. `buf` must come from
        `aligned_buffer` while the writer is direct.
        """
        if length < self._kept:
            raise ValueError(f"{self.path}: write of {length} bytes loses the {self._kept} kept ones")
        view = memoryview(buf)
        try:
            if self.direct:
                aligned = length - length % ALIGN
                try:
                    self._pwrite_all(view[:aligned])
                except OSError as exc:
                    # Some file systems take O_DIRECT at open but refuse its writes.
                    if exc.errno != errno.EINVAL or self._written:
                        raise
                    self._go_buffered()
                    return self.write(buf, length)
                tail = length - aligned
                if tail:
                    view[:tail] = view[aligned:length]
                self._kept = tail
            else:
                start = self._written
                self._pwrite_all(view[:length])
                self._kept = 0
                # Whole pages only: appending into a page under write-back can wait for it.
                first = start - start % ALIGN
                end = self._written - self._written % ALIGN
                start_writeback(self._fd, first, end - first)
        finally:
            view.release()
        return self._kept

    def close(self, buf=None) -> None:
        """Write the kept tail (from the start of `buf`, padded to a block, then cut off by a
        truncate) and close the file."""
        if self._fd < 0:
            return
        try:
            if self._kept:
                if buf is None:
                    raise ValueError(f"{self.path}: close needs the buffer holding the last {self._kept} bytes")
                padded = -(-self._kept // ALIGN) * ALIGN
                view = memoryview(buf)
                try:
                    view[self._kept:padded] = bytes(padded - self._kept)
                    size = self._written + self._kept
                    self._pwrite_all(view[:padded])
                finally:
                    view.release()
                os.ftruncate(self._fd, size)
                self._written, self._kept = size, 0
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Close the file as it is (the failure path: the caller deletes it)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _pwrite_all(self, data: memoryview) -> None:
        done = 0
        while done < len(data):
            done += os.pwrite(self._fd, data[done:], self._written + done)
        self._written += done

    def _go_buffered(self) -> None:
        flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        self.direct = False
