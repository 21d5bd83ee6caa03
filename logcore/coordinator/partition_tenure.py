"""A coordinator's tenure over the partitions of its internal topic (__consumer_offsets for the
groups, __transaction_state for the transactions) in a cluster: it coordinates what a partition
holds while this broker leads it. The partitions it leads and has loaded (`owned`), those it is
loading, and a counter per partition bumped at each change of leadership: a write or a load that
began under another tenure is stale. A new leadership loads the partition's records in a thread,
retried while the tenure lasts, and hands them to the coordinator; a lost one drops its state."""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from logcore.errors import SegLogError


class PartitionTenure:
    def __init__(self, partitions, topic: str, what: str, logger: logging.Logger, *,
                 read: Callable, loaded: Callable, lost: Callable[[int], None],
                 gained: Callable[[int], None] | None = None):
        """`read(part)`: the partition's records (blocking, run in a thread); `loaded(p, records,
        tenure)`: the coordinator takes them, dropping whatever an earlier tenure left, and
        returns how many `what` (e.g. "groups") it now coordinates; `lost(p)`: it drops the
        partition's state; `gained(p)`: told as a load begins. Messages go to `logger` (the
        coordinator's)."""
        self.partitions = partitions
        self.topic = topic
        self.what = what
        self._logger = logger
        self._read = read
        self._loaded = loaded
        self._lost = lost
        self._gained = gained
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self._tenure: dict[int, int] = {}
        self._loads: dict[int, asyncio.Task] = {}

    def current(self, p: int) -> int | None:
        """The tenure of partition p now (None before any), to compare with `lasts` later."""
        return self._tenure.get(p)

    def lasts(self, p: int, tenure: int | None) -> bool:
        """No change of leadership of partition p since `tenure` was current."""
        return self._tenure.get(p) == tenure

    def on_leadership(self, topic: str, p: int, leader: bool) -> None:
        """The replica manager's listener (on the loop): this broker started or stopped leading
        `topic`-`p`."""
        if topic != self.topic:
            return
        if leader:
            if p in self.owned or p in self.loading:
                return                          # a new epoch of the same tenure
            tenure = self._tenure[p] = self._tenure.get(p, 0) + 1
            if self._gained is not None:
                self._gained(p)
            self.loading.add(p)
            self._loads[p] = asyncio.get_running_loop().create_task(
                self._load(p, tenure), name=f"load-{self.topic}-{p}")
            return
        if p not in self.owned and p not in self.loading:
            return
        self._tenure[p] = self._tenure.get(p, 0) + 1
        self.owned.discard(p)
        self.loading.discard(p)
        task = self._loads.pop(p, None)
        if task is not None:
            task.cancel()
        self._lost(p)

    async def _load(self, p: int, tenure: int) -> None:
        """Read partition p back (up to its end, as Kafka), then hand it to the coordinator. A
        failed read is retried while this tenure lasts; its requests wait (LOAD_IN_PROGRESS)."""
        where = f"{self.topic}-{p}"
        started = asyncio.get_running_loop().time()
        delay = 0.2
        while self._tenure.get(p) == tenure:
            part = self.partitions.get(self.topic, p)
            try:
                if part is None:
                    raise SegLogError(f"{where} is not open on this broker")
                records = await asyncio.to_thread(self._read, part)
                break
            except Exception as exc:   # noqa: BLE001 - retried while this tenure lasts
                self._logger.error("loading the %s of %s failed (retrying in %.1f s): %s", self.what, where,
                                   delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        else:
            return
        if self._tenure.get(p) != tenure:
            return
        count = self._loaded(p, records, tenure)
        self.loading.discard(p)
        self.owned.add(p)
        self._loads.pop(p, None)
        self._logger.info("coordinating %d %s of %s (%d records loaded in %.2f s)", count, self.what, where,
                          len(records), asyncio.get_running_loop().time() - started)

    def load_tasks(self) -> list[asyncio.Task]:
        """The loads under way (to cancel at stop)."""
        return list(self._loads.values())
