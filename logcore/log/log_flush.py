"""A writer's rolled segments waiting for their background fsync (`PendingFlushes`, a part of
`LocalLog`): the recovery point passes a segment only once it and every older one are synced.
The flush policy is `LocalLog`'s (local_log.py), `commit` the log's own (log.py).
"""
from __future__ import annotations

from logcore.log.segment_flusher import PendingFlush


class PendingFlushes:
    """A writer's rolled segments not yet known to be fsynced, in roll order, and its truncation
    generation (one per `Log`). The recovery point passes a segment only once it and every
    older one are synced, and only if no truncation came after it was sealed."""

    def __init__(self):
        self._pending: list[PendingFlush] = []
        self._generation = 0        # bumped by truncation: older pending flushes move nothing

    def seal(self, fd: int, end_offset: int, source: str) -> PendingFlush:
        """A sealed segment (its descriptor, owned from here) waiting for its fsync."""
        pending = PendingFlush(fd, end_offset, self._generation, source)
        self._pending.append(pending)
        return pending

    def truncated(self) -> None:
        """The log was cut: what is pending now moves the recovery point no more."""
        self._generation += 1

    def synced_end(self) -> int | None:
        """Take the synced head off (roll order); the end offset the recovery point may move
        to, or None."""
        end = None
        while self._pending and self._pending[0].synced:
            pending = self._pending.pop(0)
            if pending.generation == self._generation:
                end = pending.end_offset if end is None else max(end, pending.end_offset)
            pending.close()
        return end

    def sync_all(self) -> int | None:
        """fsync every pending segment the flusher has not synced yet, here and now; then as
        `synced_end`."""
        for pending in self._pending:
            pending.sync()
        return self.synced_end()

    def close_all(self) -> None:
        """Let go of every descriptor (a close, a full truncation)."""
        for pending in self._pending:
            pending.close()
        self._pending = []
