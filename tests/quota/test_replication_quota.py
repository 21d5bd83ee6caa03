"""The replication throttles' pieces: whom a throttled-replicas list covers, and a direction's
rate against its bound over its sample windows."""
from __future__ import annotations

from logcore.quota.replication_quota import (LEADER_RATE, UNBOUNDED, ReplicationQuota,
                                             ReplicationQuotas, throttles)


def test_throttled_replicas_name_this_broker_or_everyone():
    assert throttles(("*",), 5, 3)
    assert throttles(("0:1", "1:3"), 1, 3)
    assert not throttles(("0:1", "1:3"), 0, 3)      # partition 0 throttled on broker 1 only
    assert not throttles((), 0, 1)


def test_rate_against_bound_over_windows():
    q = ReplicationQuota(2, 1.0)
    q.record(10_000_000, at_ms=0)
    assert not q.exceeded(at_ms=0)                   # unbounded: never
    q.set_bound(100_000)
    assert q.exceeded(at_ms=500)                     # 10 MB over at least one window
    assert q.wait_ms(at_ms=500) > 0
    assert not q.exceeded(at_ms=2500)                # both windows expired
    q.record(50_000, at_ms=2500)
    assert not q.exceeded(at_ms=2600)
    q.record(100_000, at_ms=2700)
    assert q.exceeded(at_ms=2800)                    # 150 KB over one window's span


def test_rates_from_dynamic_configs():
    qs = ReplicationQuotas(11, 1.0)
    qs.apply({LEADER_RATE: "1000"})
    assert (qs.leader.bound, qs.follower.bound) == (1000, UNBOUNDED)
    qs.apply({})
    assert not qs.leader.bounded
