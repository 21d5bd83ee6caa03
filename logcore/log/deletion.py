"""Deleting a segment's files, for retention (`Log`) and the cleaner (`cleaner/delayed_delete.py`).

Deletion is delayed by file.delete.delay.ms, as in Kafka, so that a reader that already had a
segment keeps reading it: on local disk the files are first renamed `<name>.deleted` (the rename
sets the change time the delay counts from; `delete_expired_local` removes those that are due);
object stores have no rename, so the callers keep their own record of what is due (a
`.log.deleted` marker, the cleaner's list in the partition state) and delete the objects with
`delete_segment_files`.
"""
from __future__ import annotations

import os

from logcore.log.segment import (DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
                                 parse_segment_name)

# Deletion order, .log first: a segment is found by its .log, so a listed .log still has its indexes.
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def delete_segment_files(storage, directory: str, stem: str) -> list[str]:
    """Delete the files of the segment `stem` (e.g. its 20-digit base offset) in `directory`,
    `.log` first; missing files are skipped. Returns the paths. A crash part-way leaves only
    index files, which the caller's record (kept until this returns) has deleted again later,
    and which a writer opening the log removes as indexes without a `.log`."""
    paths = [storage.join(directory, stem + suffix) for suffix in SEGMENT_SUFFIXES]
    for path in paths:
        storage.delete(path, missing_ok=True)
    return paths


def delete_expired_local(storage, directory: str, delay_ms: int, now_ms: int) -> list[str]:
    """Local disk: remove the segment files renamed `.deleted` at least `delay_ms` before
    `now_ms` (wall clock, by the file's change time); returns the paths removed."""
    removed = []
    try:
        entries = list(os.scandir(storage.local_path(directory)))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.name.endswith(DELETED_SUFFIX) or parse_segment_name(entry.name) is None:
            continue
        try:
            renamed_ms = entry.stat(follow_symlinks=False).st_ctime_ns // 1_000_000
        except FileNotFoundError:
            continue
        if renamed_ms + delay_ms <= now_ms:
            path = storage.join(directory, entry.name)
            storage.delete(path, missing_ok=True)
            removed.append(path)
    return removed
