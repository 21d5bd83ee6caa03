"""The broker's background services: retention, compaction and tiering of the logs it serves.

A thread runs passes over the partitions the broker has open (including `__consumer_offsets`),
through MaintenanceService.maintain_log on the broker's own writer Log objects: the broker
already holds every partition, so the service neither takes nor fences them. On a cluster member
the leader's replicas get the whole pass; followers get retention and compaction (each replica is
cleaned below its own high watermark, as Kafka's cleaner does on every broker), never tiering. Every
log.retention.check.interval.ms a pass visits every partition; in between, every
remote.log.manager.task.interval.ms, a pass visits the partitions that have a remote tier
(topics with remote.storage.enable=true): it copies their sealed segments below the LSO to the
remote tier, deletes local copies past local retention and expires remote segments past total
retention (logcore.tiered.remote_log_manager), as Kafka's remote log manager task does.

A Log serialises the service's deletions, log start offset moves and segment swaps with the
broker's appends under its own lock, and a fetch reads under the same lock, so a reader is
never sent to a segment being deleted. Copies read only sealed segments, which appends never
touch.
"""
from __future__ import annotations

import logging
import threading
import time

from logcore.broker.partition_log import PartitionLog
from logcore.broker.partitions import PartitionManager
from logcore.log.config import MaintenanceConfig
from logcore.maintenance.service import MaintenanceService, MaintenanceSummary, PartitionOutcome

logger = logging.getLogger(__name__)


class BrokerMaintenance:
    def __init__(self, partitions: PartitionManager, settings: MaintenanceConfig, *,
                 tiering_interval_ms: int = 30000, broker_id: int = -1):
        self.partitions = partitions
        self.service = MaintenanceService(partitions.root, settings, broker_id=broker_id)
        self.interval = settings.retention_check_interval_ms / 1000
        self.tiering_interval = tiering_interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        # A cluster member's role per partition ("leader", "follower", "offline", None: no
        # replica here). Retention and compaction run on leaders and followers alike (Kafka's log
        # cleaner compacts every replica, each below its own high watermark: a follower's copy of
        # a compacted topic, __consumer_offsets included, would otherwise only grow); tiering runs
        # on leaders only. An offline replica (no leader, or stopped) only applies retention.
        self.role = None
        self.clean_listeners: list = []       # f(CleanStats) for each log cleaned (the metrics)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="seglog-broker-maintenance", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30) -> None:
        """Ask the thread to stop and wait for the partition it is on (before logs close)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run_once(self, now_ms: int | None = None, *, tiered_only: bool = False) -> MaintenanceSummary:
        """One pass over every open partition, or (`tiered_only`) over those with a remote tier."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        summary = MaintenanceSummary(now)
        compacted: dict = {}
        if self.partitions.log_dir_failure.all_failed:
            return summary          # the log dir is offline: nothing more is written
        for part in list(self.partitions.partitions.values()):
            if self._stop.is_set():
                break
            if part.closed or (tiered_only and (not part.is_open or part.log.remote is None)):
                continue
            role = self.role(part.topic, part.index) if self.role is not None else "leader"
            if role is None:
                continue
            if role != "leader":
                if not tiered_only and part.is_open:
                    outcome = self._follow_up(part, role, now)
                    if outcome is not None:
                        summary.outcomes.append(outcome)
                        if outcome.skipped is None and role == "follower" and part.log.remote is None:
                            compacted[part.log] = (part, outcome)
                        else:
                            _log_outcome(part, outcome)
                continue
            try:
                # compaction (full passes only; tiered topics never compact) after retention
                # of every partition: filthiest first (below)
                outcome = self.service.maintain_log(part.log, now, compact=False)
            except Exception as exc:  # noqa: BLE001 - e.g. the topic was deleted under the pass
                if self.partitions.storage_failed(exc, f"maintenance of {part.topic}-{part.index}"):
                    return summary
                if not part.closed:
                    logger.warning("%s-%d: maintenance failed: %s", part.topic, part.index, exc)
                continue
            summary.outcomes.append(outcome)
            if not tiered_only and outcome.skipped is None:
                compacted[part.log] = (part, outcome)
            else:
                _log_outcome(part, outcome)
        logged: set[int] = set()

        def cleaned(outcome: PartitionOutcome) -> None:       # logged in the order cleaned
            for part, candidate in compacted.values():
                if candidate is outcome:
                    _log_outcome(part, outcome)
                    logged.add(id(outcome))

        if compacted and not self._stop.is_set():
            try:
                self.service.clean_open_logs(
                    [log for log, (part, _) in compacted.items() if not part.closed], now,
                    {log: outcome for log, (_, outcome) in compacted.items()}, cleaned)
            except Exception as exc:  # noqa: BLE001 - the next pass retries
                if self.partitions.storage_failed(exc, "compaction"):
                    return summary
                logger.warning("compaction pass failed: %s", exc)
        for part, outcome in compacted.values():
            if id(outcome) not in logged:
                _log_outcome(part, outcome)
            if outcome.cleaned is not None:
                for listener in self.clean_listeners:
                    listener(outcome.cleaned)
        return summary

    def _follow_up(self, part: PartitionLog, role: str, now: int) -> PartitionOutcome | None:
        """A replica this broker does not lead: retention (below its own high watermark, which
        follows the leader's) and removal of expired files; never tiering."""
        outcome = PartitionOutcome(part.topic, part.index)
        try:
            log = part.log
            result = log.apply_retention(now)
            outcome.segments_deleted, outcome.bytes_deleted = result.segments_deleted, result.bytes_deleted
            outcome.log_start_offset = log.log_start_offset
            outcome.files_removed = log.delete_expired_files(now)
        except Exception as exc:  # noqa: BLE001 - as for leaders: the next pass retries
            if part.closed or self.partitions.storage_failed(exc, f"retention of {part.topic}-{part.index}"):
                return None
            outcome.skipped = f"failed: {exc}"
            logger.warning("%s-%d: retention failed (%s replica): %s", part.topic, part.index, role, exc)
        return outcome

    def _run(self) -> None:
        # Tiering passes only when the root has tiered storage; the full pass as before.
        tiering = self.partitions.root.remote_tier() is not None and self.tiering_interval < self.interval
        next_full = time.monotonic() + self.interval
        while True:
            wait = next_full - time.monotonic()
            if tiering:
                wait = min(wait, self.tiering_interval)
            if self._stop.wait(max(0.0, wait)):
                return
            full = time.monotonic() >= next_full
            try:
                self.run_once(tiered_only=not full)
            except Exception:  # noqa: BLE001 - the service keeps running; the next pass retries
                logger.exception("maintenance pass failed")
            if full:
                next_full = time.monotonic() + self.interval
            self.passes += 1


def _log_outcome(part: PartitionLog, outcome: PartitionOutcome) -> None:
    if outcome.segments_deleted or outcome.cleaned is not None:
        logger.info("%s-%d: retention deleted %d segments (%d bytes), log start %d%s",
                    part.topic, part.index, outcome.segments_deleted, outcome.bytes_deleted,
                    outcome.log_start_offset,
                    f"; compacted {outcome.cleaned.records_read} -> {outcome.cleaned.records_kept}"
                    " records" if outcome.cleaned is not None else "")
    tiering = outcome.tiering
    if tiering is not None and (tiering.segments_copied or tiering.remote_segments_deleted):
        logger.info("%s-%d: tiering copied %d segments (%d bytes), expired %d remote segments"
                    " (%d bytes); local log start %d", part.topic, part.index,
                    tiering.segments_copied, tiering.bytes_copied, tiering.remote_segments_deleted,
                    tiering.remote_bytes_deleted, part.log.local_log_start_offset)
