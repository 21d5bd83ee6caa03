"""`cleaner-offset-checkpoint`: where each compacted partition's clean section ends.

Kafka's text offset checkpoint (`topic partition offset` lines) at the log root. On local disk it
is rewritten under the root lock; on object stores it is an object at the root replaced with a
conditional write (retried when another partition's cleaner changed it meanwhile).
"""
from __future__ import annotations

from logcore.log.checkpoint import OffsetCheckpoint
from logcore.log.partition_state import ROOT_LOCK

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


def _root_of(directory: str) -> str:
    return directory.rsplit("/", 1)[0] if "/" in directory else ""


class CleanerCheckpoint:
    """One partition's entry in its root's `cleaner-offset-checkpoint`."""

    def __init__(self, log):
        self.log = log
        self.storage = log.storage
        root = _root_of(log.dir)
        self.path = self.storage.join(root, CLEANER_CHECKPOINT) if root else CLEANER_CHECKPOINT
        self.key = (log.topic, log.partition)

    def read(self) -> int | None:
        return OffsetCheckpoint(self.storage, self.path).read().get(self.key)

    def first_dirty_offset(self) -> int:
        """The checkpoint, reset to the log start when it is below it or past the LEO (Kafka)."""
        return self.within_log(self.read())

    def within_log(self, found: int | None, log_start: int | None = None, leo: int | None = None) -> int:
        """A checkpointed first dirty offset (`read()`), reset as `first_dirty_offset` does
        (against the log's current offsets, or the snapshot's `log_start` and `leo`)."""
        log_start = self.log.log_start_offset if log_start is None else log_start
        leo = self.log.log_end_offset if leo is None else leo
        if found is None or found < log_start or found > leo:
            return log_start
        return found

    def write(self, offset: int) -> None:
        self._update(lambda entries: offset)

    def truncate(self, offset: int) -> bool:
        """Lower the entry to `offset` if it is above (Kafka's maybeTruncateCheckpoint): the log
        was cut there, and what is appended from there on is dirty. True if it was lowered."""
        lowered = []

        def lower(entries):
            found = entries.get(self.key)
            if found is None or found <= offset:
                return None
            lowered.append(found)
            return offset
        self._update(lower)
        return bool(lowered)

    def _update(self, change) -> None:
        """Replace this partition's entry by change(entries) (None: leave the file alone)."""
        if self.storage.is_local:
            with self.storage.lock(ROOT_LOCK):
                checkpoint = OffsetCheckpoint(self.storage, self.path)
                entries = checkpoint.read()
                value = change(entries)
                if value is not None:
                    entries[self.key] = value
                    checkpoint.write(entries)
            return
        while True:
            found = self.storage.read_versioned(self.path)
            entries = OffsetCheckpoint.decode(found[0], source=self.path) if found else {}
            value = change(entries)
            if value is None:
                return
            entries[self.key] = value
            data = OffsetCheckpoint.encode(entries)
            if found is None:
                if self.storage.put_if_absent(self.path, data) is not None:
                    return
            elif self.storage.put_if_version(self.path, data, found[1]) is not None:
                return
