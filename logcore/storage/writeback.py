"""Starting the write-back of a file range early, so that a later fsync has little left to wait for.

Linux's sync_file_range(SYNC_FILE_RANGE_WRITE) queues the dirty pages of a range for writing and
returns without waiting. A writer that will fsync at the end (the Spark sink's staged parts,
fsynced when the commit adopts them) calls it after each chunk, so the disk works while the
writer goes on encoding. It promises no durability by itself. Elsewhere it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

_SYNC_FILE_RANGE_WRITE = 2


def _load():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load()


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Queue the dirty pages of [offset, offset + length) of `fd` for writing; do not wait."""
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)   # advisory: errors ignored
