"""The partitions a broker leads: one writer Log each, group commit, and commit notification.

The common produce round (page-cache writes and the partition's HW file pwrite, no fsync) runs
on the event loop, inside `submit`: an idle partition appends and commits a batch at once
(Log.append_and_commit_nowait), without a task or a thread hop. A round that would block (a
fsync from the flush policy, a segment roll, a durable or root checkpoint write, a lock another
thread holds) continues in a worker task that runs it in a thread; batches submitted meanwhile
queue up, and the worker takes everything queued, appends it in order and commits once (group
commit: the batches of concurrent producers share one fsync). A batch's future resolves only
once the high watermark covers it. The server submits a request's batches before it reads the
connection's next request, so one connection's batches keep their order.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from logcore.errors import DamagedLogError
from logcore.log.log import Log
from logcore.log.log_root import LogRoot, TopicInfo
from logcore.log.partition_metadata import parse_topic_id

logger = logging.getLogger(__name__)


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    working: bool = False
    queue: list = field(default_factory=list)           # (batch bytes, future)
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
        # Partitions whose committed data is damaged (DamagedLogError): not opened, not served,
        # until `seglog repair`; the rest of the root is served.
        self.damaged: dict[tuple[str, int], DamagedLogError] = {}

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
                try:
                    log = self.root.log(info.name, p, writer=True)
                except DamagedLogError as exc:
                    logger.error("%s-%d is not served: %s", info.name, p, exc)
                    self.damaged[(info.name, p)] = exc
                    continue
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

    # ---------------------------------------------------------------- append + commit
    def submit(self, part: Partition, batch, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Future:
        """Queue one client batch; the future gives its AppendInfo once committed (or the error).

        When the partition is idle and nothing slow is due, the batch is appended and committed
        before this returns (the future is already done). `loop`: the running loop, when the
        caller has it (asyncio.get_running_loop costs a system call on Python 3.11)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if part.closed:
            fut.set_exception(ConnectionAbortedError(f"{part.topic}-{part.index} was closed"))
            return fut
        part.queue.append((batch, fut))
        if not part.working:
            part.working = True
            leftover = self._round_nowait(part)
            if leftover is None:
                part.working = False
            else:
                loop.create_task(self._work(part, leftover))
        return fut

    def _round_nowait(self, part: Partition) -> tuple[list, list] | None:
        """Append and commit everything queued, here on the event loop, if nothing slow is due
        (Log.append_and_commit_nowait). None when done, else (jobs, results so far) for the
        blocking path."""
        jobs, part.queue = part.queue, []
        try:
            results, committed = part.log.append_and_commit_nowait([batch for batch, _ in jobs])
        except Exception:  # noqa: BLE001 - a bug here must not leave the futures unresolved
            logger.exception("append of %s-%d on the event loop failed; retrying in a thread",
                             part.topic, part.index)
            results, committed = [], False
        if committed and len(results) == len(jobs):
            self._complete(part, jobs, results, None)
            return None
        return jobs, results

    async def _work(self, part: Partition, leftover: tuple[list, list] | None) -> None:
        """Finish rounds that must block (fsync, roll, root checkpoint, a busy lock) in a
        worker thread; then whatever was queued meanwhile, on the loop again if it can."""
        try:
            while leftover is not None and not part.closed:
                jobs, results = leftover
                more, commit_error = await asyncio.to_thread(
                    _append_and_commit, part.log, [batch for batch, _ in jobs[len(results):]])
                self._complete(part, jobs, results + more, commit_error)
                leftover = self._round_nowait(part) if part.queue and not part.closed else None
            closed = ConnectionAbortedError(f"{part.topic}-{part.index} was closed")
            for _, fut in (leftover[0] if leftover else []) + part.queue:
                if not fut.done():
                    fut.set_exception(closed)
            part.queue = []
        finally:
            part.working = False

    def _complete(self, part: Partition, jobs: list, results: list,
                  commit_error: BaseException | None) -> None:
        if commit_error is not None:
            logger.error("commit of %s-%d failed: %s", part.topic, part.index, commit_error)
        for (_, fut), result in zip(jobs, results):
            if fut.done():
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            elif commit_error is not None:
                fut.set_exception(commit_error)
            else:
                fut.set_result(result)
        self.notify(part)

    def notify(self, part: Partition) -> None:
        if part.committed is not None and not part.committed.done():
            part.committed.set_result(None)


def _append_and_commit(log: Log, batches: list[bytes]) -> tuple[list, BaseException | None]:
    """Append each batch (its own error if rejected), then one commit for all of them."""
    results: list = []
    for batch in batches:
        try:
            results.append(log.append_batch(batch))
        except Exception as exc:  # noqa: BLE001 - reported to that batch's producer
            results.append(exc)
    try:
        if log.high_watermark < log.log_end_offset:
            # Kafka's produce path: no fsync (flush.messages / flush.ms decide, and close). The
            # commit still replaces the HW checkpoint (write + rename, ~tens of microseconds)
            # before any ack, so acknowledged data survives a SIGKILL: it is in the page cache,
            # and the writer that takes the partition after the crash cuts only what lies above
            # the checkpointed HW (never acknowledged).
            log.commit(durable=False)
    except Exception as exc:  # noqa: BLE001 - reported to every batch of this round
        return results, exc
    return results, None
