"""The broker's background services: retention and compaction of the logs it serves.

A thread runs a pass every log.retention.check.interval.ms over the partitions the broker has
open (including `__consumer_offsets`), through MaintenanceService.maintain_log on the broker's
own writer Log objects: the broker already holds every partition, so the service neither takes
nor fences them. A Log serialises the service's deletions and segment swaps with the
broker's appends under its own lock; a fetch reads under the same lock.
"""
from __future__ import annotations

import logging
import threading
import time

from logcore.broker.partitions import PartitionManager
from logcore.log.config import MaintenanceConfig
from logcore.maintenance.service import MaintenanceService, MaintenanceSummary

logger = logging.getLogger(__name__)


class BrokerMaintenance:
    def __init__(self, partitions: PartitionManager, settings: MaintenanceConfig):
        self.partitions = partitions
        self.service = MaintenanceService(partitions.root, settings)
        self.interval = settings.retention_check_interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="seglog-broker-maintenance", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30) -> None:
        """Ask the thread to stop and wait for the partition it is on (before logs close)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run_once(self, now_ms: int | None = None) -> MaintenanceSummary:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        summary = MaintenanceSummary(now)
        for part in list(self.partitions.partitions.values()):
            if self._stop.is_set():
                break
            if part.closed:
                continue
            try:
                outcome = self.service.maintain_log(part.log, now)
            except Exception as exc:  # noqa: BLE001 - e.g. the topic was deleted under the pass
                if not part.closed:
                    logger.warning("%s-%d: maintenance failed: %s", part.topic, part.index, exc)
                continue
            summary.outcomes.append(outcome)
            if outcome.segments_deleted or outcome.cleaned is not None:
                logger.info("%s-%d: retention deleted %d segments (%d bytes), log start %d%s",
                            part.topic, part.index, outcome.segments_deleted, outcome.bytes_deleted,
                            outcome.log_start_offset,
                            f"; compacted {outcome.cleaned.records_read} -> {outcome.cleaned.records_kept}"
                            " records" if outcome.cleaned is not None else "")
        return summary

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - the service keeps running; the next pass retries
                logger.exception("maintenance pass failed")
            self.passes += 1
