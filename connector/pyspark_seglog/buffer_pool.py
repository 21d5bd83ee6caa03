"""Page-aligned buffers kept for the next task of the same (reused) Spark Python worker.

A fresh buffer costs the kernel a zero-filled page for each 4 KiB first written: a 2M-row sink
task encodes into a few MiB per target partition, and those fresh pages cost it about 13 ms of
CPU (`clear_page` in a profile of the worker). A task takes its buffers from the pool and gives
them back when it ends, so the worker's next task writes into pages that are already mapped.
"""
from __future__ import annotations

import threading

from logcore.storage.direct_writer import aligned_buffer


class AlignedBufferPool:
    """Free `aligned_buffer`s, at most `keep_bytes` of them in all (the smallest go first)."""

    def __init__(self, keep_bytes: int):
        self.keep_bytes = keep_bytes
        self._free: list[memoryview] = []       # by size, smallest first
        self._lock = threading.Lock()

    def take(self, size: int) -> memoryview:
        """The smallest kept buffer of at least `size` bytes, else a new one. Its bytes are
        whatever its last user left: write before reading."""
        with self._lock:
            for i, buffer in enumerate(self._free):
                if len(buffer) >= size:
                    return self._free.pop(i)
        return aligned_buffer(size)

    def give_back(self, buffer: memoryview) -> None:
        """Keep `buffer` for a later `take` (its caller must not use it any more)."""
        with self._lock:
            self._free.append(buffer)
            self._free.sort(key=len)
            while sum(len(b) for b in self._free) > self.keep_bytes:
                dropped = self._free.pop(0)
                try:
                    dropped.release()       # its memory goes now, not at the next collection
                except BufferError:
                    pass                    # still exported somewhere: freed with the last user

    def kept_bytes(self) -> int:
        with self._lock:
            return sum(len(b) for b in self._free)
