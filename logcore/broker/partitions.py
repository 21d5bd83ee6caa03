"""The partitions a broker leads: one writer Log each, group commit, and commit notification.

Log calls block (file I/O, fsync, the log's lock), so they run in worker threads, never on the
event loop. Appends to a partition are serialised by the log's own lock; the order of one
connection's requests is kept by the server, which finishes a produce request's appends before
reading that connection's next request.

Group commit: after an append, `commit_through(end)` waits until the high watermark reaches
`end`. One commit runs per partition at a time; appends that arrive while it runs are covered
by the next one, so concurrent producers share an fsync.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from logcore.log.log import Log
from logcore.log.log_root import LogRoot, TopicInfo
from logcore.log.partition_metadata import parse_topic_id

logger = logging.getLogger(__name__)


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    committing: bool = False
    commit_error: BaseException | None = None
    waiters: list = field(default_factory=list)         # (end offset, future)
    committed: asyncio.Future | None = None              # resolved at the next commit
    closed: bool = False

    def next_commit(self) -> asyncio.Future:
        if self.committed is None or self.committed.done():
            self.committed = asyncio.get_running_loop().create_future()
        return self.committed


class PartitionManager:
    def __init__(self, root: LogRoot):
        self.root = root
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_ids: dict[bytes, str] = {}             # UUID bytes -> topic name

    # ---------------------------------------------------------------- opening and closing
    def open_all(self) -> None:
        """Open every partition of the root as writer (recovering logs a crash left)."""
        for name in self.root.list_topics():
            self.open_topic(self.root.describe_topic(name))

    def open_topic(self, info: TopicInfo) -> None:
        self.topics[info.name] = info
        if info.topic_id:
            self.topic_ids[parse_topic_id(info.topic_id).bytes] = info.name
        for p in range(info.partitions):
            if (info.name, p) not in self.partitions:
                log = self.root.log(info.name, p, writer=True)
                self.partitions[(info.name, p)] = Partition(info.name, p, log)

    def close_topic(self, name: str) -> None:
        info = self.topics.pop(name, None)
        if info is None:
            return
        self.topic_ids = {k: v for k, v in self.topic_ids.items() if v != name}
        for p in range(info.partitions):
            part = self.partitions.pop((name, p), None)
            if part is not None:
                part.closed = True
                part.log.close()

    def close(self) -> None:
        for part in self.partitions.values():
            part.closed = True
            try:
                part.log.close()
            except Exception:      # one bad log must not keep the others from closing cleanly
                logger.exception("closing %s-%d failed", part.topic, part.index)
        self.partitions.clear()
        self.root.close()

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # ---------------------------------------------------------------- commit
    async def commit_through(self, part: Partition, end: int) -> None:
        """Return once the HW is at least `end` (raising if the commit that should cover it failed)."""
        if part.log.high_watermark >= end:
            return
        fut = asyncio.get_running_loop().create_future()
        part.waiters.append((end, fut))
        if not part.committing:
            part.committing = True
            asyncio.get_running_loop().create_task(self._commit_loop(part))
        await fut

    async def _commit_loop(self, part: Partition) -> None:
        try:
            while part.waiters and not part.closed:
                try:
                    await asyncio.to_thread(part.log.commit)
                    error = None
                except Exception as exc:  # noqa: BLE001 - handed to every waiter
                    logger.error("commit of %s-%d failed: %s", part.topic, part.index, exc)
                    error = exc
                hw = part.log.high_watermark
                still = []
                for end, fut in part.waiters:
                    if fut.done():
                        continue
                    if error is not None:
                        fut.set_exception(error)
                    elif end <= hw:
                        fut.set_result(None)
                    else:
                        still.append((end, fut))
                part.waiters = still
                self.notify(part)
                if error is not None:
                    break
            for _, fut in part.waiters:
                if not fut.done():
                    fut.set_exception(ConnectionAbortedError(f"{part.topic}-{part.index} was closed"))
            part.waiters = []
        finally:
            part.committing = False

    def notify(self, part: Partition) -> None:
        if part.committed is not None and not part.committed.done():
            part.committed.set_result(None)
