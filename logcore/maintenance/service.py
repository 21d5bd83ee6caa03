"""The maintenance service: tiering, retention (and, where the topic compacts, the log cleaner)
over a root.

One pass visits every partition of every topic (or of the topics asked for): it takes the
partition as a writer only if no other writer holds it (a producer, a Spark sink commit, a
broker: those are skipped and retried at the next pass, never fenced). For a topic with tiered
storage it first copies sealed segments to the remote tier (logcore.tiered.remote_log_manager);
then it applies retention (local retention for a tiered topic: only copied segments go), expires
remote segments past total retention, removes deleted segment files whose file.delete.delay.ms has
passed, and gives the partition back.
Compaction runs after retention has visited every partition: the logs that need cleaning are
cleaned filthiest first (overdue ones, past max.compaction.lag.ms, before all; LogCleaner.rank
and pick), by log.cleaner.threads cleaner threads, each with its own cleaner and an equal share of
log.cleaner.dedupe.buffer.size, as Kafka's cleaner threads.
`run_forever` repeats the pass every log.retention.check.interval.ms until told to stop.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from logcore.cleaner.cleaner import CleanerAbortedError, CleanStats, LogCleaner
from logcore.errors import (DamagedLogError, FencedWriterError, PartitionInUseError, RemoteStorageError,
                            SegLogError)
from logcore.log.config import MaintenanceConfig
from logcore.log.log_root import LogRoot
from logcore.tiered.remote_log_manager import RemoteLogManager, TieringResult  # registers the remote tier too

logger = logging.getLogger(__name__)


@dataclass
class PartitionOutcome:
    """What one pass did to one partition."""
    topic: str
    partition: int
    segments_deleted: int = 0
    bytes_deleted: int = 0
    log_start_offset: int = -1
    files_removed: int = 0
    cleaned: CleanStats | None = None   # the compaction pass, when one ran
    tiering: TieringResult | None = None    # copies to and expiry in the remote tier, if tiered
    skipped: str | None = None          # why the partition was left alone this pass


@dataclass
class MaintenanceSummary:
    """One pass over a root."""
    started_ms: int
    outcomes: list[PartitionOutcome] = field(default_factory=list)

    @property
    def segments_deleted(self) -> int:
        return sum(o.segments_deleted for o in self.outcomes)

    @property
    def bytes_deleted(self) -> int:
        return sum(o.bytes_deleted for o in self.outcomes)

    @property
    def cleaned(self) -> list[CleanStats]:
        return [o.cleaned for o in self.outcomes if o.cleaned is not None]

    @property
    def skipped(self) -> list[PartitionOutcome]:
        return [o for o in self.outcomes if o.skipped is not None]

    def by_topic(self) -> dict[str, list[PartitionOutcome]]:
        topics: dict[str, list[PartitionOutcome]] = {}
        for outcome in self.outcomes:
            topics.setdefault(outcome.topic, []).append(outcome)
        return topics


# progress(done, total, outcome) after each partition: the CLI draws its progress bar with it.
ProgressCallback = Callable[[int, int, PartitionOutcome], None]


class MaintenanceService:
    """Retention and compaction for the topics of one log root."""

    def __init__(self, root: LogRoot, settings: MaintenanceConfig | None = None, *, broker_id: int = -1):
        """broker_id: recorded in the remote log metadata of the segments this service copies."""
        self.root = root
        self.settings = settings if settings is not None else MaintenanceConfig.from_props(root.defaults())
        s = self.settings
        threads = max(1, s.cleaner_threads)
        # Kafka's cleaner threads each get dedupe.buffer.size / threads and share the I/O rate.
        self.cleaners = [LogCleaner(dedupe_buffer_size=s.cleaner_dedupe_buffer_size // threads,
                                    io_buffer_size=s.cleaner_io_buffer_size,
                                    io_max_bytes_per_second=s.cleaner_io_max_bytes_per_second / threads,
                                    load_factor=s.cleaner_io_buffer_load_factor,
                                    backoff_ms=s.cleaner_backoff_ms)
                         for _ in range(threads)]
        self.cleaner = self.cleaners[0]
        self.remote_log_manager = RemoteLogManager(broker_id)

    def partitions(self, topics: Iterable[str] | None = None) -> list[tuple[str, int]]:
        names = list(topics) if topics else self.root.list_topics()
        found = []
        for name in names:
            info = self.root.describe_topic(name)      # TopicNotFoundError names a wrong topic
            # a cluster member's log dir: only the replicas it holds
            found.extend((name, p) for p in (range(info.partitions) if info.hosted is None else info.hosted))
        return found

    def run_once(self, topics: Iterable[str] | None = None, *, now_ms: int | None = None,
                 progress: ProgressCallback | None = None) -> MaintenanceSummary:
        """One pass over every partition of `topics` (default: all topics of the root)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        summary = MaintenanceSummary(now)
        work = self.partitions(topics)
        done = [0]
        lock = threading.Lock()

        def report(outcome: PartitionOutcome) -> None:
            with lock:
                done[0] += 1
                if progress is not None:
                    progress(done[0], len(work), outcome)

        to_clean: list[tuple[tuple, PartitionOutcome]] = []
        for topic, partition in work:
            outcome = self._maintain_partition(topic, partition, now, to_clean)
            summary.outcomes.append(outcome)
            if not to_clean or to_clean[-1][1] is not outcome:
                report(outcome)

        def acquire(outcome: PartitionOutcome):
            try:
                return self.root.log(outcome.topic, outcome.partition, writer=True,
                                     truncate_uncommitted=False, only_if_free=True)
            except PartitionInUseError as exc:
                outcome.skipped = str(exc)
                logger.info("skipping %s-%d: %s", outcome.topic, outcome.partition, exc)
                return None

        self._clean_in_rank_order(to_clean, now, acquire, self.root.release_log, report)
        return summary

    def _maintain_partition(self, topic: str, partition: int, now: int,
                            to_clean: list | None = None) -> PartitionOutcome:
        outcome = PartitionOutcome(topic, partition)
        try:
            log = self.root.log(topic, partition, writer=True, truncate_uncommitted=False,
                                only_if_free=True)
        except PartitionInUseError as exc:
            outcome.skipped = str(exc)
            logger.info("skipping %s-%d: %s", topic, partition, exc)
            return outcome
        except DamagedLogError as exc:
            # Damaged committed data: left as it is for `seglog repair`; the pass goes on.
            outcome.skipped = f"not maintained: {exc}"
            logger.error("%s-%d: %s", topic, partition, outcome.skipped)
            return outcome
        try:
            self.maintain_log(log, now, outcome, compact=to_clean is None)
            if to_clean is not None and outcome.skipped is None and self._compaction_on(log):
                rank = self.cleaner.rank(log, now)
                if rank is not None:
                    to_clean.append((rank, outcome))
            return outcome
        finally:
            self.root.release_log(log)

    def _compaction_on(self, log) -> bool:
        return bool(log.config.compact and self.settings.cleaner_enable and self.settings.cleaner_threads > 0)

    def clean_open_logs(self, logs: list, now: int, outcomes: dict | None = None,
                        report: Callable[[PartitionOutcome], None] | None = None) -> dict:
        """Clean logs this process holds open as writer (the broker's): each cleaner thread
        takes the filthiest remaining log (LogCleaner.pick) until none needs cleaning. Returns
        {log: PartitionOutcome} of the logs cleaned or tried."""
        outcomes = outcomes if outcomes is not None else {}
        remaining = [log for log in logs if self._compaction_on(log)]
        lock = threading.Lock()

        def worker(cleaner: LogCleaner) -> None:
            while True:
                with lock:
                    log = cleaner.pick(remaining, now)
                    if log is None:
                        return
                    remaining.remove(log)
                outcome = outcomes.setdefault(log, PartitionOutcome(log.topic, log.partition))
                self._clean_one(cleaner, log, now, outcome)
                if report is not None:
                    report(outcome)

        self._run_cleaners(worker, len(remaining))
        return outcomes

    def _clean_in_rank_order(self, to_clean: list, now: int, acquire, release, report) -> None:
        """Clean the ranked partitions, highest rank first, by the cleaner threads; each one is
        opened again (acquire) and cleaned if it still needs it (LogCleaner.pick)."""
        pending = [outcome for _, outcome in sorted(to_clean, key=lambda item: item[0], reverse=True)]
        lock = threading.Lock()

        def worker(cleaner: LogCleaner) -> None:
            while True:
                with lock:
                    if not pending:
                        return
                    outcome = pending.pop(0)
                log = acquire(outcome)
                if log is not None:
                    try:
                        if cleaner.pick([log], now) is log:
                            self._clean_one(cleaner, log, now, outcome)
                    finally:
                        release(log)
                report(outcome)

        self._run_cleaners(worker, len(pending))

    def _run_cleaners(self, worker, work: int) -> None:
        threads = min(len(self.cleaners), work)
        if threads <= 1:
            if work:
                worker(self.cleaners[0])
            return
        pool = [threading.Thread(target=worker, args=(cleaner,), name=f"seglog-cleaner-{i}", daemon=True)
                for i, cleaner in enumerate(self.cleaners[:threads])]
        for t in pool:
            t.start()
        for t in pool:
            t.join()

    def _clean_one(self, cleaner: LogCleaner, log, now: int, outcome: PartitionOutcome) -> None:
        try:
            outcome.cleaned = self._compact(log, now, cleaner)
        except FencedWriterError as exc:
            outcome.skipped = f"taken over by another writer during the pass ({exc})"
            logger.info("%s-%d: %s", log.topic, log.partition, outcome.skipped)
        except SegLogError as exc:
            outcome.skipped = f"failed: {exc}"
            logger.warning("%s-%d: compaction failed: %s", log.topic, log.partition, exc)

    def maintain_log(self, log, now: int, outcome: PartitionOutcome | None = None, *,
                     compact: bool = True) -> PartitionOutcome:
        """Retention, expired-file removal and (compacted topics, unless `compact` is False: the
        caller then cleans in rank order) one cleaner pass on a log already open as writer: the
        pass of one partition, for a process that holds its logs (the broker runs its own
        partitions through this instead of taking them)."""
        outcome = outcome if outcome is not None else PartitionOutcome(log.topic, log.partition)
        topic, partition = log.topic, log.partition
        try:
            config = log.config
            if log.remote is not None:
                outcome.tiering = TieringResult()
                if config.remote_storage_enable:
                    self._copy_to_remote(log, outcome.tiering)
                elif config.remote_log_delete_on_disable:
                    self._delete_remote(log, outcome.tiering)
            result = log.apply_retention(now)
            outcome.segments_deleted = result.segments_deleted
            outcome.bytes_deleted = result.bytes_deleted
            if outcome.tiering is not None:
                self._expire_remote(log, outcome.tiering, now)
            outcome.log_start_offset = log.log_start_offset
            outcome.files_removed = log.delete_expired_files(now)
            if compact and self._compaction_on(log):
                outcome.cleaned = self._compact(log, now)
        except FencedWriterError as exc:
            # A producer or sink took the partition during the pass: it wins; next pass retries.
            outcome.skipped = f"taken over by another writer during the pass ({exc})"
            logger.info("%s-%d: %s", topic, partition, outcome.skipped)
        except SegLogError as exc:
            # One partition's trouble (a storage error) does not stop the pass over the others.
            outcome.skipped = f"failed: {exc}"
            logger.warning("%s-%d: maintenance failed: %s", topic, partition, exc)
        return outcome

    def _copy_to_remote(self, log, tiering: TieringResult) -> None:
        """Finish what a killed pass left, then copy the sealed segments (unless copying is
        disabled for the topic). A remote-storage failure is reported and retried next pass;
        local retention still runs (it deletes only segments already copied)."""
        try:
            self.remote_log_manager.collect(log, tiering)
            if log.tiered:
                self.remote_log_manager.copy_segments(log, tiering)
        except RemoteStorageError as exc:
            tiering.error = str(exc)
        if tiering.error:
            logger.warning("%s-%d: tiering: %s", log.topic, log.partition, tiering.error)

    def _delete_remote(self, log, tiering: TieringResult) -> None:
        """Remote storage was turned off with remote.log.delete.on.disable=true: the log start
        offset moves to the local log start, then every remote segment goes (retried next pass
        on a remote-storage failure)."""
        try:
            self.remote_log_manager.delete_all(log, tiering)
        except RemoteStorageError as exc:
            tiering.error = str(exc)
        if tiering.error:
            logger.warning("%s-%d: deleting the remote data: %s", log.topic, log.partition, tiering.error)

    def _expire_remote(self, log, tiering: TieringResult, now: int) -> None:
        try:
            self.remote_log_manager.expire(log, tiering, now)
        except RemoteStorageError as exc:
            tiering.error = str(exc)
            logger.warning("%s-%d: remote retention: %s", log.topic, log.partition, exc)

    def _compact(self, log, now: int, cleaner: LogCleaner | None = None) -> CleanStats | None:
        """One cleaner pass when the log is dirty enough (min.cleanable.dirty.ratio) or overdue
        (max.compaction.lag.ms); a pass that met concurrent changes runs again next time."""
        cleaner = cleaner if cleaner is not None else self.cleaner
        if not cleaner.needs_cleaning(log, now):
            return None
        try:
            return cleaner.clean(log, now)
        except CleanerAbortedError as exc:
            logger.info("%s-%d: cleaning pass aborted, retried at the next pass: %s",
                        log.topic, log.partition, exc)
            return None

    def run_forever(self, stop_event: threading.Event, topics: Iterable[str] | None = None, *,
                    on_pass: Callable[[MaintenanceSummary], None] | None = None,
                    progress: ProgressCallback | None = None) -> int:
        """Run a pass every log.retention.check.interval.ms until `stop_event` is set; returns
        the number of passes. A pass that fails on one partition's storage error is logged and
        the next pass retries; the service itself keeps running."""
        interval = self.settings.retention_check_interval_ms / 1000
        passes = 0
        while not stop_event.is_set():
            started = time.monotonic()
            try:
                summary = self.run_once(topics, progress=progress)
                if on_pass is not None:
                    on_pass(summary)
            except SegLogError as exc:
                logger.error("maintenance pass failed: %s", exc)
            passes += 1
            stop_event.wait(max(0.0, interval - (time.monotonic() - started)))
        return passes
