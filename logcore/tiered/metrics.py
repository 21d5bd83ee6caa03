"""Remote storage metrics per topic, as Aiven's plugin records them: segment copies (count, bytes,
time), fetches (count, bytes, time), deletes (count, bytes) and the errors of each, plus the time
spent waiting for the copy and fetch quotas.

One `RemoteStorageMetrics` per remote tier (one per process and root), fed by the remote log
manager (copies, deletes) and the partitions' remote reads (fetches). `snapshot()` is the
interface: a plain dict per topic, for the broker's metrics endpoint and `seglog maintain`'s
report; values are totals since the process started (rates are the reader's business).
"""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass


@dataclass
class TopicRemoteStats:
    copy_segments: int = 0
    copy_bytes: int = 0
    copy_seconds: float = 0.0
    copy_seconds_max: float = 0.0
    copy_errors: int = 0
    copy_throttle_seconds: float = 0.0
    fetch_requests: int = 0
    fetch_bytes: int = 0
    fetch_seconds: float = 0.0
    fetch_errors: int = 0
    fetch_throttle_seconds: float = 0.0
    delete_segments: int = 0
    delete_bytes: int = 0
    delete_errors: int = 0


class RemoteStorageMetrics:
    def __init__(self):
        self._topics: dict[str, TopicRemoteStats] = {}
        self._lock = threading.Lock()

    def _stats(self, topic: str) -> TopicRemoteStats:
        stats = self._topics.get(topic)
        if stats is None:
            stats = self._topics.setdefault(topic, TopicRemoteStats())
        return stats

    def record_copy(self, topic: str, nbytes: int, seconds: float, throttle_seconds: float = 0.0) -> None:
        with self._lock:
            s = self._stats(topic)
            s.copy_segments += 1
            s.copy_bytes += nbytes
            s.copy_seconds += seconds
            s.copy_seconds_max = max(s.copy_seconds_max, seconds)
            s.copy_throttle_seconds += throttle_seconds

    def record_copy_error(self, topic: str) -> None:
        with self._lock:
            self._stats(topic).copy_errors += 1

    def record_fetch(self, topic: str, nbytes: int, seconds: float, throttle_seconds: float = 0.0) -> None:
        with self._lock:
            s = self._stats(topic)
            s.fetch_requests += 1
            s.fetch_bytes += nbytes
            s.fetch_seconds += seconds
            s.fetch_throttle_seconds += throttle_seconds

    def record_fetch_error(self, topic: str) -> None:
        with self._lock:
            self._stats(topic).fetch_errors += 1

    def record_delete(self, topic: str, nbytes: int) -> None:
        with self._lock:
            s = self._stats(topic)
            s.delete_segments += 1
            s.delete_bytes += nbytes

    def record_delete_error(self, topic: str) -> None:
        with self._lock:
            self._stats(topic).delete_errors += 1

    def topic(self, topic: str) -> TopicRemoteStats:
        """A copy of one topic's totals (zeros for a topic never seen)."""
        with self._lock:
            return TopicRemoteStats(**asdict(self._topics.get(topic, TopicRemoteStats())))

    def snapshot(self) -> dict[str, dict[str, float]]:
        """{topic: {metric: total}} of every topic seen."""
        with self._lock:
            return {t: asdict(s) for t, s in sorted(self._topics.items())}
