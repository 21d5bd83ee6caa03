"""The leader epoch cache (KIP-101/279): leader epoch -> first offset written in that epoch.

Entries are sorted by epoch with strictly increasing start offsets, persisted in the partition's
`leader-epoch-checkpoint`. Every change is written through synchronously (Kafka writes
truncations asynchronously and fixes stale tail entries at load; we do both: a cache loaded with
the log end offset drops entries starting at or above it). On read-only storage changes stay in
memory.
"""
from __future__ import annotations

import bisect
import logging

from logcore.log.checkpoint import LeaderEpochCheckpoint

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


class LeaderEpochCache:
    """Sorted (epoch, start_offset) entries with Kafka's assign / truncate / end-offset rules."""

    def __init__(self, checkpoint: LeaderEpochCheckpoint | None, *,
                 log_end_offset: int | None = None):
        self.checkpoint = checkpoint
        self._epochs: list[int] = []
        self._starts: list[int] = []
        if checkpoint is not None:
            # Replay through assign's rules, as Kafka does, so a hand-edited file is made monotonic.
            stored = checkpoint.read()
            self._written: list[tuple[int, int]] | None = list(stored)   # what the file holds
            for epoch, start in stored:
                self._assign(epoch, start)
            if log_end_offset is not None:
                self.truncate_from_end(log_end_offset)

    @classmethod
    def from_entries(cls, entries: list[tuple[int, int]]) -> LeaderEpochCache:
        """An in-memory cache (no file), e.g. for the LEADER_EPOCH index of a remote segment."""
        cache = cls(None)
        for epoch, start in entries:
            cache._assign(epoch, start)
        return cache

    @property
    def _where(self) -> str:
        return repr(self.checkpoint) if self.checkpoint is not None else "<in-memory>"

    # -- reading ---------------------------------------------------------------------------------

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def latest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[-1], self._starts[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._starts[0]) if self._epochs else None

    def previous_epoch(self) -> int | None:
        """The epoch before the latest one, if any."""
        return self._epochs[-2] if len(self._epochs) > 1 else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the last entry starting at or below `offset`, or None."""
        slot = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[slot] if slot >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch: the start offset of the first epoch
        above `requested_epoch`, paired with the largest known epoch <= it.

        (-1, -1) for epoch -1 or when no epoch above it is known; (E, LEO) for the latest epoch.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[higher]
        return self._epochs[higher - 1], self._starts[higher]

    def entries_up_to(self, end_offset: int) -> list[tuple[int, int]]:
        """Entries starting below `end_offset` (a segment's share for tiered storage)."""
        slot = bisect.bisect_left(self._starts, end_offset)
        return list(zip(self._epochs[:slot], self._starts[:slot]))

    # -- changes ---------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True (and flushed) if the cache changed.

        Ignored when it repeats the latest epoch at or after its start. Otherwise every tail entry
        with epoch >= `epoch` or start >= `start_offset` is removed first.
        """
        before = (list(self._epochs), list(self._starts))
        changed = self._assign(epoch, start_offset)
        if changed:
            try:
                self.flush()
            except OSError:
                # Not written (a full disk): forget it, so the next append that needs it
                # assigns it again and the file never lags what the log holds.
                self._epochs[:], self._starts[:] = before
                raise
        return changed

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset}) for "
                             f"{self._where}: epoch and start offset must be >= 0")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        removed = []
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            removed.append((self._epochs.pop(), self._starts.pop()))
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            log.warning("new leader epoch entry (%d, %d) truncated conflicting entries %s in %s",
                        epoch, start_offset, removed[::-1], self._where)
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> None:
        """Remove entries whose start offset is >= `end_offset` (log truncated to it);
        flush=False leaves the write to the caller's next flush()."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return
        keep = bisect.bisect_left(self._starts, end_offset)
        del self._epochs[keep:], self._starts[keep:]
        if flush:
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries starting at or below `start_offset` (log start moved to it) and keep the
        last dropped epoch as starting at `start_offset`."""
        if start_offset < 0 or not self._starts or self._starts[0] >= start_offset:
            return
        removed = bisect.bisect_right(self._starts, start_offset)
        first_epoch = self._epochs[removed - 1]
        del self._epochs[:removed], self._starts[:removed]
        self._epochs.insert(0, first_epoch)
        self._starts.insert(0, start_offset)
        self.flush()

    def clear(self) -> None:
        """Remove every entry (the log was deleted or fully truncated)."""
        self._epochs.clear()
        self._starts.clear()
        self.flush()

    def flush(self) -> None:
        """Write the entries through to the checkpoint (skipped on read-only storage)."""
        if self.checkpoint is not None and not self.checkpoint.storage.read_only:
            entries = self.entries
            if entries == getattr(self, "_written", None):
                return          # the file holds them already (a reopen assigns what it had)
            self.checkpoint.write(entries)
            self._written = entries

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self._where}, entries={self.entries})"
