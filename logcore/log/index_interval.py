"""Kafka's rule for the sparse offset and time indexes, in one place: a batch gets an index entry
when more than `index.interval.bytes` were written since the last entry (so the first batch of a
segment never does). Segments (append, recovery, adoption of staged files) and the cleaner's
rewritten segments all count through `IndexInterval`.
"""
from __future__ import annotations


class IndexInterval:
    """The running byte count since the last index entry, for one segment being written."""

    __slots__ = ("interval", "since")

    def __init__(self, interval_bytes: int):
        self.interval = interval_bytes
        self.since = 0

    def reset(self) -> None:
        """A segment whose indexes start over (truncation, a rebuild)."""
        self.since = 0

    def due(self, size: int) -> bool:
        """Count one batch of `size` bytes; whether it gets an index entry."""
        due = self.since > self.interval
        if due:
            self.since = 0
        self.since += size
        return due

    def pick(self, sizes) -> list[int]:
        """`due` for each batch size in turn: the rows (0-based) that get an entry."""
        interval, since, picked = self.interval, self.since, []
        for i, size in enumerate(sizes):
            if since > interval:
                picked.append(i)
                since = 0
            since += size
        self.since = since
        return picked
