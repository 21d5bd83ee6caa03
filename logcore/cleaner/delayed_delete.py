"""Files of replaced segments stay for `file.delete.delay.ms` before they are removed.

Kafka renames a replaced segment's files `.deleted` and removes them after the delay, so a reader
that already had the segment open goes on reading it. Here:

- Local disk: the swap renames (or, for files replaced under the same name, hard-links) the old
  files to `<name>.deleted`. The rename sets the file's ctime, which is when its delay starts, so
  any process can tell which `.deleted` files are due without shared state. `delete_expired`
  removes those; the cleaner calls it at every pass, and a writer opening the log removes every
  leftover (`Log._clean_temporary_files`), as Kafka does at startup. A reader holding the old
  segment keeps reading it under the `.deleted` name (`segment._FileData`).
- Object stores (no rename): the replaced segments leave the partition state's cleaned list in
  the pass's conditional switch, and the same write lists them under `"replaced"` as
  `[stem, due_ms]`. Their objects are deleted once due, by the next pass or a writer opening the
  partition; until then readers that listed them keep reading them.
"""
from __future__ import annotations

import logging
import os
import time

from logcore.log.segment import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX

logger = logging.getLogger(__name__)

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def now_ms() -> int:
    return int(time.time() * 1000)


def delete_expired(log, now: int | None = None) -> list[str]:
    """Remove the replaced segment files of `log` whose file.delete.delay.ms has passed (wall
    clock); returns the paths removed. Needs the log opened as writer."""
    now = now_ms() if now is None else now
    delay = log.config.file_delete_delay_ms
    if log.storage.is_local:
        return _delete_local(log, now, delay)
    return _delete_objects(log, now)


def _delete_local(log, now: int, delay: int) -> list[str]:
    folder = log.storage.local_path(log.dir)
    removed = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.name.endswith(DELETED_SUFFIX):
            continue
        try:
            renamed_ms = entry.stat(follow_symlinks=False).st_ctime_ns // 1_000_000
        except FileNotFoundError:
            continue
        if renamed_ms + delay <= now:
            path = log.storage.join(log.dir, entry.name)
            log.storage.delete(path, missing_ok=True)
            removed.append(path)
    return removed


def pending_objects(cleaned: dict | None) -> list[list]:
    """The `[stem, due_ms]` entries of a partition state's cleaned document."""
    if not cleaned:
        return []
    return [[str(stem), int(due)] for stem, due in cleaned.get("replaced", [])]


def _delete_objects(log, now: int) -> list[str]:
    removed = []
    for stem, due in pending_objects(log.state_store.cleaned):
        if due <= now:
            removed.extend(delete_object_segment(log, stem))
    return removed


def delete_object_segment(log, stem: str) -> list[str]:
    """Delete the objects of one segment (its `.log` last: a listed `.log` always has its
    indexes)."""
    paths = [log.storage.join(log.dir, stem + suffix) for suffix in SEGMENT_SUFFIXES[1:] + (LOG_SUFFIX,)]
    for path in paths:
        log.storage.delete(path, missing_ok=True)
    return paths


def carry_over(cleaned: dict | None, now: int) -> list[list]:
    """The entries a new cleaned document keeps: those not yet due (due ones were deleted at the
    start of this pass or will be found by the next writer)."""
    return [[stem, due] for stem, due in pending_objects(cleaned) if due > now]
