"""A sink task's part objects written in the background (object stores).

On an object store a task stages each part as one object. Written in the task's own thread, the
task stopped receiving and encoding rows for every part's reservation and PUT (about two thirds
of a 500k-row task on SeaweedFS). Here the task hands each group of finished parts over and goes
on encoding the next rows; it waits only when the parts in flight hold more than `max_bytes`,
and at the end of its rows.

One thread prepares the groups (`prepare`: the offset reservation, offset_reservation.py) in the
order they were handed over, so that a partition's parts get their offsets in the order of its
rows; their PUTs then run on `parallel` threads, while the next group is prepared. The first
error is raised to the task at its next hand-over or at `finish`, and the task's discard then
removes every part it staged.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


class PartUploads:
    """Groups of (part, bytes): prepared in order on one thread, then each part `put`."""

    def __init__(self, prepare: Callable[[list], None] | None, put: Callable[[object, bytearray], None],
                 parallel: int, max_bytes: int):
        self._prepare, self._put = prepare, put
        self._max_bytes = max_bytes
        self._ordered = ThreadPoolExecutor(1, thread_name_prefix="seglog-stage-prepare")
        self._puts = ThreadPoolExecutor(parallel, thread_name_prefix="seglog-stage-put")
        # oldest first: (the future of the group's PUT futures, the group's bytes)
        self._running: deque[tuple[Future, int]] = deque()
        self._bytes = 0

    def submit(self, group: list) -> None:
        """Write `group`, its preparation after that of the groups already handed over. Waits
        first while the groups in flight hold more than max_bytes (each holds its bytes until
        written)."""
        size = sum(len(data) for _part, data in group)
        self._reap(wait_while=lambda: self._running and self._bytes + size > self._max_bytes)
        self._running.append((self._ordered.submit(self._start, group), size))
        self._bytes += size

    def finish(self) -> None:
        """Wait until every group is written; raise the first error."""
        self._reap(wait_while=lambda: bool(self._running))

    def close(self) -> None:
        """Stop: groups not started are dropped, PUTs running are waited for (so that nothing
        is written after the task's discard)."""
        self._ordered.shutdown(wait=True, cancel_futures=True)
        self._puts.shutdown(wait=True, cancel_futures=True)
        self._running.clear()
        self._bytes = 0

    def _start(self, group: list) -> list[Future]:
        if self._prepare is not None:
            self._prepare(group)
        return [self._puts.submit(self._put, part, data) for part, data in group]

    def _reap(self, wait_while: Callable[[], bool]) -> None:
        """Take written groups off the front (raising an error), waiting on the oldest while
        `wait_while()` holds."""
        while self._running and (_written(self._running[0][0]) or wait_while()):
            started, size = self._running.popleft()
            self._bytes -= size
            puts = started.result()
            errors = [f.exception() for f in puts]      # every PUT done before raising
            for error in errors:
                if error is not None:
                    raise error


def _written(started: Future) -> bool:
    """Whether a group's preparation and PUTs are all done (so taking it does not wait)."""
    return started.done() and (started.exception() is not None or all(f.done() for f in started.result()))
