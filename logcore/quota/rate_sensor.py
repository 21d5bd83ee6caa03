"""A rate measured over sampled windows, and the throttle time of a quota on it: Kafka's Rate
over a SampledStat, as its client and replication quota managers use them.

`samples` windows of `window_s` seconds each: a value recorded goes into the current window; a
window is started at the time of the first value that falls after the current one's end, and a
window older than samples x window_s is forgotten. The rate is the sum over the windows divided
by the time they cover, counted as at least samples - 1 whole windows (so a client's first
bytes are measured against nearly the whole span, as in Kafka: a short burst passes).

Over the bound, the throttle time is how long the client must stay silent for the rate to fall
back to it: (rate - bound) / bound x the time the rate is measured over (Kafka's
ClientQuotaManager.throttleTime).
"""
from __future__ import annotations

import threading


class RateSensor:
    __slots__ = ("samples", "window_ms", "_starts", "_values", "_current", "_lock")

    def __init__(self, samples: int, window_s: float):
        if samples < 2:
            raise ValueError(f"a rate needs at least 2 sample windows, not {samples}")
        self.samples = samples
        self.window_ms = window_s * 1000.0
        self._starts = [None] * samples      # window start (ms) of each sample, None: unused
        self._values = [0.0] * samples
        self._current = 0
        self._lock = threading.Lock()

    def record(self, value: float, now_ms: float) -> None:
        with self._lock:
            start = self._starts[self._current]
            if start is None:
                self._starts[self._current] = now_ms
            elif now_ms - start >= self.window_ms:
                self._current = (self._current + 1) % self.samples
                self._starts[self._current] = now_ms
                self._values[self._current] = 0.0
            self._values[self._current] += value

    def unrecord(self, value: float) -> None:
        """Take back a value just recorded (a fetch answered empty because it was throttled)."""
        with self._lock:
            self._values[self._current] -= value

    def rate(self, now_ms: float) -> float:
        """Per second, over the live windows."""
        with self._lock:
            return self._total(now_ms) / (self._span_ms(now_ms) / 1000.0)

    def throttle_ms(self, bound: float, now_ms: float, *, at_most_ms: float | None = None) -> int:
        """0 while the rate is within `bound`, else how long the client is held back (ms)."""
        with self._lock:
            span = self._span_ms(now_ms)
            rate = self._total(now_ms) / (span / 1000.0)
            if rate <= bound:
                return 0
            ms = (rate - bound) / bound * span
        if at_most_ms is not None:
            ms = min(ms, at_most_ms)
        return int(round(ms))

    # -- under the lock
    def _expire(self, now_ms: float) -> None:
        horizon = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if start is not None and now_ms - start >= horizon:
                self._starts[i] = None
                self._values[i] = 0.0

    def _total(self, now_ms: float) -> float:
        self._expire(now_ms)
        return sum(self._values)

    def _span_ms(self, now_ms: float) -> float:
        """The time the rate covers: since the oldest live window began, at least samples - 1
        whole windows (Kafka's Rate.windowSize)."""
        starts = [s for s in self._starts if s is not None]
        elapsed = now_ms - min(starts) if starts else 0.0
        whole = int(elapsed // self.window_ms)
        if whole < self.samples - 1:
            elapsed += (self.samples - 1 - whole) * self.window_ms
        return max(elapsed, 1.0)
