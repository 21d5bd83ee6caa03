"""Replication throttles (KIP-73): a broker's leader and follower byte rates for the replicas
a topic names as throttled, as Kafka's ReplicationQuotaManager keeps them.

Each direction is one rate over `replication.quota.window.num` windows of
`replication.quota.window.size.seconds` (logcore.quota.rate_sensor), bounded by the broker's
`leader.replication.throttled.rate` / `follower.replication.throttled.rate` (unbounded when
unset). Whom they apply to is the topics' `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas`: `*`, or `partition:brokerId` entries of which a
broker takes those naming itself. Kafka's rules, which the leader's Fetch path and the
follower's fetcher follow:
- the leader answers a throttled partition without records to a replica that is not in the
  ISR while its rate is over the bound, and counts the bytes it sends for throttled partitions;
- the follower leaves a throttled partition out of its fetch while it is not caught up and its
  rate is over the bound, and counts the bytes it receives for throttled partitions.
"""
from __future__ import annotations

import time

from logcore.quota.rate_sensor import RateSensor

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
UNBOUNDED = 2 ** 63 - 1          # Kafka's default: Long.MAX_VALUE, no throttle


def throttles(replicas: tuple[str, ...], partition: int, broker: int) -> bool:
    """Whether a topic's throttled-replicas list covers `partition` on `broker`."""
    if not replicas:
        return False
    return replicas == ("*",) or f"{partition}:{broker}" in replicas


def now_ms() -> float:
    return time.monotonic() * 1000.0


class ReplicationQuota:
    """One direction's rate and bound."""

    def __init__(self, samples: int, window_s: float):
        self.sensor = RateSensor(samples, window_s)
        self.bound = UNBOUNDED

    def set_bound(self, bytes_per_s: int) -> None:
        self.bound = bytes_per_s

    @property
    def bounded(self) -> bool:
        return self.bound < UNBOUNDED

    def exceeded(self, at_ms: float | None = None) -> bool:
        if not self.bounded:
            return False
        return self.sensor.rate(now_ms() if at_ms is None else at_ms) > self.bound

    def wait_ms(self, at_ms: float | None = None) -> int:
        """How long until the rate is back within the bound (0: it is)."""
        if not self.bounded:
            return 0
        return self.sensor.throttle_ms(max(self.bound, 1), now_ms() if at_ms is None else at_ms)

    def rate(self, at_ms: float | None = None) -> float:
        """The throttled replicas' bytes per second now (Kafka's `byte-rate` of this direction)."""
        return self.sensor.rate(now_ms() if at_ms is None else at_ms)

    def record(self, nbytes: int, at_ms: float | None = None) -> None:
        if nbytes > 0:
            self.sensor.record(nbytes, now_ms() if at_ms is None else at_ms)


class ReplicationQuotas:
    """This broker's two throttles; `apply` takes its dynamic broker configs."""

    def __init__(self, samples: int, window_s: float):
        self.leader = ReplicationQuota(samples, window_s)
        self.follower = ReplicationQuota(samples, window_s)

    def apply(self, configs: dict[str, str]) -> None:
        """The rates in effect (names absent: unbounded); values already validated."""
        self.leader.set_bound(int(configs.get(LEADER_RATE, UNBOUNDED)))
        self.follower.set_bound(int(configs.get(FOLLOWER_RATE, UNBOUNDED)))
