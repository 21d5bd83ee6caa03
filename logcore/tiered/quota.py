"""A byte-rate quota: the remote log manager's copy and fetch limits
(`remote.log.manager.copy.max.bytes.per.second`, `...fetch.max.bytes.per.second`, and Aiven's
`rsm.config.upload.rate.limit.bytes.per.second`).

A token bucket shared by every partition of a process. As Kafka's quota managers do, a transfer
is admitted while the bucket is not in debt and its bytes are taken after (a segment is copied
whole, its size known only then for a fetch): `acquire(n)` waits until earlier transfers are paid
for, then takes `n`, possibly going into debt. Over any interval the bytes admitted are at most
one second's worth (the bucket's depth) plus the rate times the interval, plus one transfer.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class ByteRateQuota:
    def __init__(self, bytes_per_second: float | None, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        """bytes_per_second: None or <= 0 for no limit."""
        self.rate = bytes_per_second if bytes_per_second and bytes_per_second > 0 else None
        self._clock = clock
        self._sleep = sleep
        self._tokens = 0.0             # starts empty: the first transfer goes, the next waits for it
        self._last = clock()
        self._lock = threading.Lock()
        self.throttled_seconds = 0.0   # total time callers waited

    @property
    def limited(self) -> bool:
        return self.rate is not None

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.rate, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def acquire(self, nbytes: int) -> float:
        """Wait while the bucket is in debt, then take `nbytes`; returns the seconds waited."""
        if self.rate is None:
            return 0.0
        waited = 0.0
        with self._lock:      # callers queue in order: a big transfer is not starved by small ones
            self._refill()
            if self._tokens < 0:
                delay = -self._tokens / self.rate
                self._sleep(delay)
                waited = delay
                self._refill()
            self._tokens -= nbytes
            self.throttled_seconds += waited
        return waited

    def charge(self, nbytes: int) -> None:
        """Take `nbytes` transferred already (a fetch's size is known after it)."""
        if self.rate is None:
            return
        with self._lock:
            self._refill()
            self._tokens -= nbytes


def combined(*rates: int | None) -> float | None:
    """The lowest of the given limits (None or <= 0: no limit), None when none limits."""
    limits = [r for r in rates if r is not None and r > 0]
    return min(limits) if limits else None
