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

Open logs are bounded (`log.max.open.partitions`, logcore.broker.resources): a partition's writer
Log is opened on first use and the least recently used idle ones are closed (cleanly, releasing
their file descriptors) when more would be open; a closed one reopens on demand at the same
leader epoch when nobody took it meanwhile (WriterFence resume). A log in use is never closed:
one with queued or running produce work, or the one a thread last took with `PartitionLog.log`
(each thread pins the partition it is reading until it takes another one or calls
`PartitionManager.unpin_thread`).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import uuid
from collections import OrderedDict

from logcore.broker.log_dir_failure import LogDirFailureChannel, LogDirOfflineError
from logcore.broker.partition_log import PartitionLog
from logcore.broker.resources import open_partition_budget
from logcore.broker.tail_reads import TailReads
from logcore.errors import DamagedLogError, FencedWriterError
from logcore.log.log import Log
from logcore.log.log_root import LogRoot, TopicInfo
from logcore.log.partition_metadata import parse_topic_id
from logcore.replication.single_node import SingleNode
from logcore.wire.protocol import ZERO_UUID

logger = logging.getLogger(__name__)

# Every Fetch below v13 names its topics, and the answer carries each one's id: parsed once.
_topic_uuid_of = functools.lru_cache(maxsize=4096)(parse_topic_id)


class PartitionManager:
    def __init__(self, root: LogRoot, max_open: int | None = None):
        self.root = root
        self.partitions: dict[tuple[str, int], PartitionLog] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_ids: dict[bytes, str] = {}             # UUID bytes -> topic name
        self.max_open = max_open if max_open is not None else open_partition_budget(-1)
        self._lock = threading.Lock()                     # pins, the LRU, victims
        self._open: OrderedDict[PartitionLog, None] = OrderedDict()   # open logs, least recent first
        self._pinned = threading.local()
        self.opened = 0                                   # logs opened (first or again)
        self.evicted = 0                                  # logs closed to stay under max_open
        self._warned_over = False
        # Opening, closing and refreshing topics happen in worker threads: one at a time, and a
        # create or delete of the broker's own holds it across its root change and its opening
        # or closing (so that a refresh in between never sees half of it).
        self.lock = threading.RLock()
        self._topics_version: str | None = None           # of seglog-topics.json at the last refresh
        self._refreshing = False
        self._refresh_error: str | None = None            # the last refresh failure, logged once
        # Partitions whose committed data is damaged (DamagedLogError): not opened, not served,
        # until `seglog repair`; the rest of the root is served.
        self.damaged: dict[tuple[str, int], DamagedLogError] = {}
        # The replication policy: one broker alone (its logs are path writers whose commit moves
        # the HW), or a cluster member's ReplicaManager (Broker.join_cluster: logs open as
        # replicas, stay open since their role lives with the open log, topics come from
        # ZooKeeper rather than the root's topics file, and each append lets the HW follow).
        self.replication = SingleNode(self)
        # Where a failed write of the log dir is reported (the Broker sets its own): the dir goes
        # offline and, being the broker's only one, the broker stops (log_dir_failure.py).
        self.log_dir_failure = LogDirFailureChannel(root.url)
        # The last small read, or produce round's appended batches, of each partition's tail:
        # the fetches of the same range (the followers', then a consumer's) served from it.
        self.tail_reads = TailReads()

    def storage_failed(self, exc: BaseException | None, what: str) -> bool:
        """True when `exc` is a failure of the log dir's device or filesystem: reported to the
        channel (whose policy stops the broker: in the broker process this does not return)."""
        return exc is not None and self.log_dir_failure.maybe_fail(exc, what)

    # ---------------------------------------------------------------- opening and closing
    def open_all(self) -> None:
        """Know every partition of the root; open (recovering logs a crash left) as many as
        `max_open` allows, the rest on first use."""
        with self.lock:
            for name in self.root.list_topics():
                # A cluster member opens the replicas it holds as ZooKeeper names them.
                self.open_topic(self.root.describe_topic(name), eager=not self.replication.replica_logs)
        self.unpin_thread()
        lazy = len(self.partitions) - len(self._open)
        if lazy > 0:
            logger.info("%d of %d partitions open (log.max.open.partitions=%d); the other %d open"
                        " on first use", len(self._open), len(self.partitions), self.max_open, lazy)

    def open_topic(self, info: TopicInfo, eager: bool = True) -> None:
        with self.lock:
            self.topics[info.name] = info
            if info.topic_id:
                self.topic_ids[parse_topic_id(info.topic_id).bytes] = info.name
            for p in range(info.partitions):
                if (info.name, p) not in self.partitions:
                    part = PartitionLog(info.name, p, self)
                    self.partitions[(info.name, p)] = part
                    if eager and len(self._open) < self.max_open:
                        try:
                            self.acquire(part)
                        except DamagedLogError:
                            continue                # logged and set aside by acquire

    def acquire(self, part: PartitionLog) -> Log:
        """`part`'s log, opened if needed, pinned to this thread (its previous pin let go)."""
        with self._lock:
            self._pin_locked(part)
            log = part.log_if_open
            if log is not None and not part.evicting:
                self._open.move_to_end(part)
                return log
        with part.gate:
            if not part.is_open:
                if part.closed:
                    raise ConnectionAbortedError(f"{part.topic}-{part.index} was closed")
                try:
                    log = self.root.log(part.topic, part.index, writer=True, resume=part.resume,
                                        replica=self.replication.replica_logs)
                except DamagedLogError as exc:
                    # Damaged committed data: not served until `seglog repair`; the rest is.
                    logger.error("%s-%d is not served: %s", part.topic, part.index, exc)
                    with self._lock:
                        if getattr(self._pinned, "part", None) is part:
                            part.pins -= 1
                            self._pinned.part = None
                    self.damaged[(part.topic, part.index)] = exc
                    self.partitions.pop((part.topic, part.index), None)
                    raise
                with self._lock:
                    part.attach(log)
                    self._open[part] = None
                    self.opened += 1
            log = part.log_if_open
        self._evict_over_budget()
        return log

    def _pin_locked(self, part: PartitionLog) -> None:
        previous = getattr(self._pinned, "part", None)
        if previous is part:
            return
        if previous is not None:
            previous.pins -= 1
        part.pins += 1
        self._pinned.part = part

    def unpin_thread(self) -> None:
        """Let go of the partition this thread last took with `PartitionLog.log`."""
        with self._lock:
            previous = getattr(self._pinned, "part", None)
            if previous is not None:
                previous.pins -= 1
                self._pinned.part = None

    def _evict_over_budget(self) -> None:
        if self.replication.replica_logs:
            return
        with self._lock:
            over = len(self._open) - self.max_open
            if over <= 0:
                return
            victims = []
            for part in self._open:
                if len(victims) >= over:
                    break
                if not (part.pins or part.working or part.queue or part.evicting):
                    part.evicting = True
                    victims.append(part)
            if len(victims) < over and not self._warned_over:
                self._warned_over = True
                logger.warning("%d partition logs are in use at once, more than"
                               " log.max.open.partitions=%d", len(self._open), self.max_open)
        for part in victims:
            self._close_idle(part)

    def _close_idle(self, part: PartitionLog) -> None:
        with part.gate:
            with self._lock:
                part.evicting = False
                if not part.is_open or part.pins or part.working or part.queue:
                    return                      # taken again meanwhile: keep it
                log = part.park()
                self._open.pop(part, None)
                self.evicted += 1
            try:
                self.root.release_log(log)
            except Exception:  # noqa: BLE001 - a log that fails to close must not stop the others
                logger.exception("closing idle %s-%d failed", part.topic, part.index)

    def _close_part(self, part: PartitionLog) -> None:
        with part.gate:
            with self._lock:
                part.closed = True
                log = part.detach()
                self._open.pop(part, None)
            if log is not None:
                self.root.release_log(log)

    def close_topic(self, name: str) -> None:
        with self.lock:
            info = self.topics.pop(name, None)
            if info is None:
                return
            self.topic_ids = {k: v for k, v in self.topic_ids.items() if v != name}
            for p in range(info.partitions):
                part = self.partitions.pop((name, p), None)
                if part is not None:
                    self._close_part(part)

    def drop_replica(self, topic: str, index: int) -> None:
        """A cluster member's replica that was reassigned away: close its log and delete its
        files (the partition is known again, empty, should it come back)."""
        with self.lock:
            part = self.partitions.pop((topic, index), None)
            if part is not None:
                self._close_part(part)
            self.damaged.pop((topic, index), None)
            info = self.topics.get(topic)
            self.root.reset_partition(topic, index)
            if info is not None:
                self.partitions[(topic, index)] = PartitionLog(topic, index, self)

    def reconfigure_topic(self, info: TopicInfo) -> None:
        """The topic's config changed (AlterConfigs, a dynamic broker default): its open logs
        take it at once (LogRoot.reconfigure_log: tiering turned on included); closed ones open
        with it from the root."""
        from logcore.log.config import LogConfig
        with self.lock:
            self.topics[info.name] = info
            config = LogConfig.from_props(info.config, self.root.defaults())
            for (topic, _), part in list(self.partitions.items()):
                log = part.log_if_open if topic == info.name else None
                if log is not None:
                    self.root.reconfigure_log(log, config, info.topic_id)

    def refresh_topics(self) -> None:
        """Pick up what another process changed in the root's topics file (blocking): topics it
        created, partitions it added (known here, opened on first use), topics that are gone
        (closed), config overrides (DescribeConfigs shows them; open logs keep theirs until the
        broker restarts). Cheap when nothing changed: one read of the topics file. A cluster
        member's topics come from ZooKeeper instead (replica_manager): nothing to do."""
        if self.replication.replica_logs:
            return
        with self.lock:
            try:
                infos, version = self.root.topic_infos()
            except Exception as exc:   # noqa: BLE001 - keep serving what is open; say so once
                message = f"{type(exc).__name__}: {exc}"
                if message != self._refresh_error:
                    self._refresh_error = message
                    logger.error("cannot read the topics of %s (%s); serving the topics already"
                                 " open until it can be read", self.root.url, message)
                return
            self._refresh_error = None
            if version is not None and version == self._topics_version:
                return
            for name, info in infos.items():
                current = self.topics.get(name)
                if current is None:
                    logger.info("topic %s (%d partitions) was created in the root by another process;"
                                " serving it", name, info.partitions)
                elif current.topic_id != info.topic_id:
                    logger.warning("topic %s was deleted and created again in the root by another"
                                   " process; serving the new one", name)
                    self.close_topic(name)
                elif current.partitions < info.partitions:
                    logger.info("topic %s grew from %d to %d partitions in the root; serving them",
                                name, current.partitions, info.partitions)
                elif current == info:
                    continue
                try:
                    self.open_topic(info, eager=False)
                except Exception as exc:   # noqa: BLE001 - the other topics are still served
                    logger.error("cannot open topic %s picked up from the root: %s", name, exc)
                    return                 # version not recorded: tried again at the next refresh
            for name in [n for n in self.topics if n not in infos]:
                logger.warning("topic %s is gone from the root's topics file (removed by another"
                               " process); no longer serving it", name)
                self.close_topic(name)
            self._topics_version = version

    def refresh_soon(self) -> None:
        """refresh_topics in a worker thread, from the event loop (at most one at a time)."""
        if self._refreshing or self.replication.replica_logs:
            return
        self._refreshing = True

        async def run() -> None:
            try:
                await asyncio.to_thread(self.refresh_topics)
            except Exception as exc:   # noqa: BLE001
                logger.error("refreshing the topics of %s failed: %s", self.root.url, exc)
            finally:
                self._refreshing = False
        asyncio.get_running_loop().create_task(run())

    def retake(self, part: PartitionLog) -> None:
        """Another process took `part` (a writer that bypassed the broker's claim on the root):
        reopen its log as writer, which recovers what that writer committed, cuts what it left
        uncommitted above the HW and fences it in turn (blocking). Logged once per takeover."""
        with part.gate:
            old = part.log_if_open
            current = -1
            try:
                current = old.fence.current_epoch() if old is not None else -1
            except Exception:   # noqa: BLE001 - only for the message
                pass
            logger.warning("%s-%d: another writer took the partition (its epoch is now %d, this"
                           " broker held %d); a root a broker serves must be written only through"
                           " it. Taking the partition back: the batches it refused are appended"
                           " again once taken back", part.topic, part.index,
                           current, part.leader_epoch)
            if old is not None:
                try:
                    self.root.release_log(old)
                except Exception:   # noqa: BLE001 - a fenced log closes what it can
                    logger.debug("closing the fenced log of %s-%d", part.topic, part.index, exc_info=True)
            part.forget_resume()                 # the epoch moved on: take it with a new one
            log = self.root.log(part.topic, part.index, writer=True)
            with self._lock:
                part.attach(log)
                self._open[part] = None
                self._open.move_to_end(part)
                self.opened += 1
            part.retakes += 1
            part.fenced_at = time.monotonic()

    def close(self) -> None:
        for part in list(self.partitions.values()):
            try:
                self._close_part(part)
            except Exception:      # one bad log must not keep the others from closing cleanly
                logger.exception("closing %s-%d failed", part.topic, part.index)
        self.partitions.clear()
        self.root.close()

    def get(self, topic: str, index: int) -> PartitionLog | None:
        return self.partitions.get((topic, index))

    def topic_uuid(self, name: str) -> uuid.UUID:
        """The topic's id (ZERO_UUID for a topic not open here, or one without an id)."""
        info = self.topics.get(name)
        return _topic_uuid_of(info.topic_id) if info and info.topic_id else ZERO_UUID

    # ---------------------------------------------------------------- append + commit
    def submit(self, part: PartitionLog, batch, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Future:
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
        failure = self.log_dir_failure
        if failure.offline and failure.all_failed:      # stopping: nothing more is written
            try:
                self.log_dir_failure.check_online(f"{part.topic}-{part.index}")
            except LogDirOfflineError as exc:
                fut.set_exception(exc)
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

    def _round_nowait(self, part: PartitionLog) -> tuple[list, list] | None:
        """Append and commit everything queued, here on the event loop, if nothing slow is due
        (Log.append_and_commit_nowait). None when done, else (jobs, results so far) for the
        blocking path."""
        jobs, part.queue = part.queue, []
        log = part.log_if_open
        if log is None or part.evicting:
            return jobs, []                     # opening the log blocks: in a worker thread
        # No pin needed (a working partition is never closed): only its place in the LRU order.
        with self._lock:
            if part in self._open:              # closed meanwhile (a topic deleted): the append says so
                self._open.move_to_end(part)
        truncations = log.truncations
        written: list | None = [] if self.replication.replicates else None
        try:
            results, committed = log.append_and_commit_nowait([batch for batch, _ in jobs], written)
        except Exception as exc:  # noqa: BLE001 - a bug here must not leave the futures unresolved
            if self.storage_failed(exc, f"append to {part.topic}-{part.index}"):
                self._complete(part, jobs, [exc] * len(jobs), None)
                return None
            logger.exception("append of %s-%d on the event loop failed; retrying in a thread",
                             part.topic, part.index)
            results, committed = [], False
        rejected = False                        # any batch's own error (the common round has none)
        for r in results:
            if isinstance(r, BaseException):
                rejected = True
                break
        if rejected:
            failed = next((r for r in results if isinstance(r, BaseException)
                           and self.storage_failed(r, f"append to {part.topic}-{part.index}")), None)
            if failed is not None:     # in-process (the broker process has exited): nothing more written
                self._complete(part, jobs, results + [failed] * (len(jobs) - len(results)), None)
                return None
        if committed and len(results) == len(jobs):
            if rejected:
                self._complete(part, jobs, results, None)
            else:
                # Kept for the followers' fetches (a broker alone has none: its consumers'
                # second read of a range is served by the kept read already). No duplicate: one run.
                if written and len(written) == len(results):
                    self.tail_reads.appended(part, log, results[0].first_offset, results[-1].last_offset + 1,
                                             written, truncations)
                self._committed(part, jobs, results)
            return None
        return jobs, results

    async def _work(self, part: PartitionLog, leftover: tuple[list, list] | None) -> None:
        """Finish rounds that must block (fsync, roll, root checkpoint, a busy lock) in a
        worker thread; then whatever was queued meanwhile, on the loop again if it can."""
        try:
            while leftover is not None and not part.closed:
                jobs, results = leftover
                more, commit_error = await asyncio.to_thread(
                    self._append_and_commit, part, [batch for batch, _ in jobs[len(results):]])
                results = results + more
                if _fenced(results, commit_error) and await self._retake(part):
                    # Nothing of a fenced batch is in the log (refused, or appended uncommitted
                    # and cut by the takeover): append it again, ahead of anything queued since.
                    # Answering it NOT_LEADER_OR_FOLLOWER while a later request of the same
                    # producer is appended would reorder it, and an idempotent producer whose
                    # later sequence is acknowledged counts the earlier one as written.
                    results, commit_error = await asyncio.to_thread(
                        self._append_again, part, jobs, results, commit_error)
                self._complete(part, jobs, results, commit_error)
                if _fenced(results, commit_error):   # fenced again, or not taken back
                    await self._retake(part)
                leftover = self._round_nowait(part) if part.queue and not part.closed else None
            closed = ConnectionAbortedError(f"{part.topic}-{part.index} was closed")
            for _, fut in (leftover[0] if leftover else []) + part.queue:
                if not fut.done():
                    fut.set_exception(closed)
            part.queue = []
        finally:
            part.working = False

    async def _retake(self, part: PartitionLog) -> bool:
        """retake() in a thread; whether the partition was taken back."""
        # At most one takeover a second per partition: a writer that keeps taking the partition
        # back must not turn this into a busy loop (its batches meanwhile fail and are retried).
        wait = part.fenced_at + 1.0 - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            await asyncio.to_thread(self.retake, part)
        except Exception as exc:   # noqa: BLE001 - the next produce tries again
            logger.error("%s-%d: cannot take the partition back: %s", part.topic, part.index, exc)
            part.fenced_at = time.monotonic()
            return False
        return True

    def _append_again(self, part: PartitionLog, jobs: list, results: list,
                      commit_error: BaseException | None) -> tuple[list, BaseException | None]:
        """In a worker thread, after a takeover: append and commit again the batches of `jobs`
        that the fence failed (a batch's own error stands); the round's results and commit error."""
        fenced_commit = isinstance(commit_error, FencedWriterError)
        again = [i for i, r in enumerate(results)
                 if isinstance(r, FencedWriterError) or (fenced_commit and not isinstance(r, BaseException))]
        more, commit_error = self._append_and_commit(part, [jobs[i][0] for i in again])
        results = list(results)
        for i, r in zip(again, more):
            results[i] = r
        return results, commit_error

    def _complete(self, part: PartitionLog, jobs: list, results: list,
                  commit_error: BaseException | None) -> None:
        # A failed log dir first: in the broker process the policy exits before any of these
        # batches is answered (the producer sees a disconnect and retries at the next leader).
        what = f"append to {part.topic}-{part.index}"
        if not self.storage_failed(commit_error, f"commit of {part.topic}-{part.index}"):
            next((r for r in results if isinstance(r, BaseException) and self.storage_failed(r, what)), None)
        if isinstance(commit_error, FencedWriterError):
            pass                                          # retake() logs it once
        elif commit_error is not None:
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
        self.replication.appended(part)
        self.notify(part)

    def _committed(self, part: PartitionLog, jobs: list, results: list) -> None:
        """_complete for a round on the loop in which every batch was appended and committed
        (no error to report or look at)."""
        for (_, fut), result in zip(jobs, results):
            if not fut.done():
                fut.set_result(result)
        self.replication.appended(part)
        if self.replication.replicates:
            # Growth alone gives a consumer nothing: it reads below the HW (or the LSO, which
            # moves only with it), and the HW's own move wakes it (replica_manager.notify).
            self._wake_parked(part, False)
        else:
            self.notify(part)

    def notify(self, part: PartitionLog) -> None:
        """Wake every fetch parked on the partition: its log grew or its state changed."""
        if part.watchers:
            part.tell_watchers(True)
        parked, part.parked = part.parked, []
        for wake, _ in parked:
            if not wake.done():
                wake.set_result(None)

    def notify_high_watermark(self, part: PartitionLog) -> None:
        """Wake the consumers' fetches parked on the partition: its HW moved."""
        self._wake_parked(part, True)

    def notify_state(self, part: PartitionLog) -> None:
        """The partition's ISR changed at the same leader epoch, or it went offline: nothing to
        read, but no fetch may take it as unchanged."""
        if part.watchers:
            part.tell_watchers(False)

    def _wake_parked(self, part: PartitionLog, consumers: bool) -> None:
        """Wake the consumers' (`consumers`) or the followers' fetches parked on the partition."""
        if part.watchers:
            part.tell_watchers(not consumers)
        if not part.parked:
            return
        keep = []
        for entry in part.parked:
            wake, on_high_watermark = entry
            if wake.done():
                continue
            if on_high_watermark == consumers:
                wake.set_result(None)
            else:
                keep.append(entry)
        part.parked = keep

    def _append_and_commit(self, part: PartitionLog, batches: list[bytes]) -> tuple[list, BaseException | None]:
        """_append_and_commit on the partition's log (opened here if it is not), in a worker thread."""
        try:
            log = part.log
        except Exception as exc:  # noqa: BLE001 - e.g. the log cannot be opened: every batch fails
            logger.error("opening %s-%d failed: %s", part.topic, part.index, exc)
            return [exc] * len(batches), None
        try:
            return _append_and_commit(log, batches)
        finally:
            self.unpin_thread()


def _fenced(results: list, commit_error: BaseException | None) -> bool:
    """Whether another writer's fence failed a produce round (its commit or a batch's append)."""
    return isinstance(commit_error, FencedWriterError) or any(isinstance(r, FencedWriterError) for r in results)


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
