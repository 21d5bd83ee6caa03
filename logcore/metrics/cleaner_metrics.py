"""What the log cleaner did, summed over its passes (Kafka's LogCleaner gauges keep the last
pass: max-clean-time-secs and cleaner-recopy-percent are exported from it as well). The broker's
maintenance thread reports each cleaned log (cleaned()); Prometheus reads the sums."""
from __future__ import annotations

import threading


class CleanerTotals:
    def __init__(self):
        self._lock = threading.Lock()        # cleaner threads report, the scrape thread reads
        self.logs_cleaned = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.seconds = 0.0
        self.last_pass_max_seconds = 0.0
        self.last_recopy_percent = 0.0

    def cleaned(self, stats) -> None:
        """One log cleaned: `stats` is a logcore.cleaner.cleaner.CleanStats."""
        with self._lock:
            self.logs_cleaned += 1
            self.bytes_read += stats.bytes_read
            self.bytes_written += stats.bytes_written
            self.seconds += stats.duration_s
            self.last_pass_max_seconds = stats.duration_s
            self.last_recopy_percent = 100.0 * stats.bytes_written / stats.bytes_read if stats.bytes_read else 0.0

    def snapshot(self) -> tuple[int, int, int, float, float, float]:
        with self._lock:
            return (self.logs_cleaned, self.bytes_read, self.bytes_written, self.seconds,
                    self.last_pass_max_seconds, self.last_recopy_percent)
