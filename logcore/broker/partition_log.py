"""The broker's handle on one partition's writer Log (PartitionManager, partitions.py, opens,
closes and pins it): its produce queue, the fetches parked on it, and the watches of follower
sessions' partitions set aside across fetches (fetch_sessions.StandingPartitions)."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from logcore.log.log import Log

if TYPE_CHECKING:
    from logcore.broker.partitions import PartitionManager


@dataclass(eq=False)
class PartitionLog:
    """The broker's handle on one partition's writer Log: opened on first use, closed when idle
    over the open-log budget, reopened at the same epoch (replication.partition.Partition is the
    replica's role and ISR; this is only its log). PartitionManager opens and closes it through
    attach / detach."""
    topic: str
    index: int
    manager: "PartitionManager"
    working: bool = False
    queue: list = field(default_factory=list)           # (batch bytes, future)
    parked: list = field(default_factory=list)           # (future, wakes at a HW move) of parked fetches
    # Follower sessions' partitions set aside across fetches (fetch_sessions.StandingPartitions),
    # by id: told of every change that wakes or would wake a parked fetch
    watchers: dict = field(default_factory=dict)
    closed: bool = False
    _log: Log | None = None
    _epoch: int = -1                                     # leader epoch of the last open
    _resume: tuple[int, str] | None = None               # (epoch, writer id) to take back
    pins: int = 0                                        # threads whose last partition this is
    evicting: bool = False
    gate: threading.Lock = field(default_factory=threading.Lock)   # open vs. close
    retakes: int = 0                                     # times another writer fenced this broker
    fenced_at: float = 0.0                               # monotonic time of the last takeover

    @property
    def log(self) -> Log:
        """The partition's writer log, opened now if it is not (blocking); pins it to the
        calling thread until that thread takes another partition's log."""
        return self.manager.acquire(self)

    @property
    def log_if_open(self) -> Log | None:
        """The writer log if it is open, else None (never opens it, never pins it)."""
        return self._log

    @property
    def is_open(self) -> bool:
        return self._log is not None

    @property
    def leader_epoch(self) -> int:
        """The leader epoch without opening the log (-1 if never opened by this broker)."""
        log = self._log
        return log.leader_epoch if log is not None else self._epoch

    @property
    def resume(self) -> tuple[int, str] | None:
        """(epoch, writer id) a reopen takes back, if nobody took the partition meanwhile."""
        return self._resume

    def attach(self, log: Log) -> None:
        """`log` is this partition's open writer log from now on."""
        self._log, self._epoch, self.evicting = log, log.leader_epoch, False

    def park(self) -> Log:
        """Let go of the open log (an idle close; returned for closing): a later open takes
        its epoch back as the same writer, if nobody took the partition meanwhile."""
        log, self._log = self._log, None
        self._epoch = log.leader_epoch
        fence = getattr(log, "fence", None)
        self._resume = (log.leader_epoch, fence.writer_id) if fence is not None else None
        return log

    def detach(self) -> Log | None:
        """Let go of the open log (returned, for closing for good)."""
        log, self._log = self._log, None
        return log

    def forget_resume(self) -> None:
        """Another writer took the partition: the next open starts a new epoch."""
        self._resume = None

    def park_fetch(self, wake: asyncio.Future, on_high_watermark: bool) -> None:
        """`wake` is set (here, by the notifier: the parked fetch's task resumes in the next
        event-loop pass, not two passes on through a shared future's callback and
        asyncio.wait's) when the log grows or its state changes, and with
        `on_high_watermark` (a consumer's fetch) when the HW moves too; a follower reading to
        the LEO has no use for a HW move alone (Kafka's delayed fetch: followers wake on the
        leader's appends). A fetch that stops waiting cancels `wake`; done ones are dropped here."""
        parked = self.parked
        if parked:
            parked = self.parked = [entry for entry in parked if not entry[0].done()]
        parked.append((wake, on_high_watermark))

    def watch(self, watcher) -> None:
        """`watcher.disturbed(wake)` is called at the partition's changes: a HW move or an ISR
        change (not `wake`: a follower's fetch learns of it at its next read; the watch stays),
        then an append or a state change (`wake`: as a parked follower fetch is woken; the watch
        is spent)."""
        self.watchers[id(watcher)] = watcher

    def unwatch(self, watcher) -> None:
        self.watchers.pop(id(watcher), None)

    def tell_watchers(self, wake: bool) -> None:
        """The partition changed: each watch told; a wake-up spends them (the fetch it wakes
        reads the partition), a HW move keeps them (an append after it must still wake)."""
        if wake:
            watchers, self.watchers = self.watchers, {}
            told = watchers.values()
        else:
            told = list(self.watchers.values())
        for watcher in told:
            watcher.disturbed(wake)
