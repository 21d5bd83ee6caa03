"""Files of replaced segments stay for `file.delete.delay.ms` before they are removed.

Kafka renames a replaced segment's files `.deleted` and removes them after the delay, so a reader
that already had the segment open goes on reading it. Here:

- Local disk: the swap renames (or, for files replaced under the same name, hard-links) the old
  files to `<name>.deleted`. The rename sets the file's ctime, which is when its delay starts, so
  any process can tell which `.deleted` files are due without shared state. `delete_expired`
  removes those (`log/deletion.py`, shared with retention); the cleaner calls it at every pass, and a writer opening the log removes every
  leftover (`LocalSegmentStore.clean_leftovers` (segment_store.py)), as Kafka does at startup. A reader holding the old
  segment keeps reading it under the `.deleted` name (`segment_data.FileData`).
- Object stores (no rename): the replaced segments leave the partition state's cleaned list in
  the pass's conditional switch, and the same write lists them under `"replaced"` as
  `[stem, due_ms]`. Their objects are deleted once due, by the next pass or a writer opening the
  partition; until then readers that listed them keep reading them.
"""
from __future__ import annotations

import logging
import time

from logcore.log.deletion import delete_expired_local, delete_segment_files

logger = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


def delete_expired(log, now: int | None = None) -> list[str]:
    """Remove the replaced segment files of `log` whose file.delete.delay.ms has passed (wall
    clock); returns the paths removed. Needs the log opened as writer."""
    now = now_ms() if now is None else now
    delay = log.config.file_delete_delay_ms
    if log.storage.is_local:
        return delete_expired_local(log.storage, log.dir, delay, now)
    return _delete_objects(log, now)


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
    """Delete the objects of one replaced segment (in log/deletion.py's order)."""
    return delete_segment_files(log.storage, log.dir, stem)


def carry_over(cleaned: dict | None, now: int) -> list[list]:
    """The entries a new cleaned document keeps: those not yet due (due ones were deleted at the
    start of this pass or will be found by the next writer)."""
    return [[stem, due] for stem, due in pending_objects(cleaned) if due > now]
