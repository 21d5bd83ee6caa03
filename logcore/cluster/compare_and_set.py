"""Compare-and-set on a znode: read it, compute the new value from what was read, write it on
condition that the znode is still at the version read, and read again after a lost race.

What one conditional write can end in, and what each caller does:
- applied: the write returns the value as written (with its new znode version);
- a lost race (ZkVersionConflictError: someone wrote in between): read again and recompute, up to
  `attempts` times; after the last one the ZkVersionConflictError propagates (the controller then
  leaves the partition to its next pass, which re-reads);
- unknown (CoordinatorUnavailableError: the connection broke before the answer, ZooKeeper may or
  may not have applied it): never retried here, it propagates. The controller's pass and the
  producer-id claim are redone from a fresh read by their callers, which is safe for them. A
  leader's ISR write must not be redone blindly: its caller reads the znode back until ZooKeeper
  answers and `classify_write` tells whether what it reads is that write (Kafka re-reads and
  compares its proposed state), a state nobody wrote since, or someone else's.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TypeVar

from logcore.errors import ZkVersionConflictError

T = TypeVar("T")
N = TypeVar("N")
W = TypeVar("W")

_UNREAD = object()


def compare_and_set(read: Callable[[], T | None], update: Callable[[T], N | None],
                    write: Callable[[T, N], W], *, attempts: int = 5, first=_UNREAD) -> W | None:
    """Read, `update(current)` into the new value, `write(current, new)` conditionally on the
    version of `current`; after a lost race (ZkVersionConflictError) read again, at most
    `attempts` writes in all. `first` is a value already read (no read before the first write).

    Returns what `write` returned, or None when there was nothing to write: the znode is absent
    (`read` gave None) or `update` gave None. Raises ZkVersionConflictError when every attempt
    lost its race; any other error (an unknown outcome included) propagates at once."""
    for attempt in range(attempts):
        current = first if attempt == 0 and first is not _UNREAD else read()
        if current is None:
            return None
        new = update(current)
        if new is None:
            return None
        try:
            return write(current, new)
        except ZkVersionConflictError:
            if attempt == attempts - 1:
                raise
    raise ZkVersionConflictError("compare_and_set: no attempt made (attempts < 1)")


class WriteOutcome(enum.Enum):
    """What a read-back says of a conditional write whose answer was lost."""
    APPLIED = "applied"              # the znode holds exactly the write, one version on
    NOT_APPLIED = "not applied"      # the znode is still at the version written against (or gone)
    SUPERSEDED = "superseded"        # someone else's write is there: apply that instead


def classify_write(fresh, based_on, proposed, *, same: Callable[[object, object], bool]) -> WriteOutcome:
    """`fresh`: the znode's value read back (None: absent), with `zk_version`; `based_on`: the
    value the write was conditional on; `proposed`: what was written. `same(fresh, proposed)`
    compares the contents (not the versions)."""
    if fresh is None or fresh.zk_version == based_on.zk_version:
        return WriteOutcome.NOT_APPLIED
    if fresh.zk_version == based_on.zk_version + 1 and same(fresh, proposed):
        return WriteOutcome.APPLIED
    return WriteOutcome.SUPERSEDED
