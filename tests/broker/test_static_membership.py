"""Static membership (KIP-345) with librdkafka consumers against `seglog broker`: a static member
restarted within its session timeout takes its place back without a rebalance (the other
member's assignment callback is not called again), and a second consumer with an instance id
in use fences the first (FENCED_INSTANCE_ID, fatal to it)."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError  # noqa: E402

from broker_helpers import create  # noqa: E402


def _consumer(b, instance: str, assigned: list, errors: list) -> Consumer:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "static", "group.instance.id": instance,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 200, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "error_cb": errors.append})
    c.subscribe(["st"], on_assign=lambda _c, parts: assigned.append(sorted(p.partition for p in parts)))
    return c


def _poll(consumers, until, timeout=20.0, errors=None) -> None:
    """Poll until `until()`; `errors`: consumer -> the list its poll errors go to."""
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and m.error() is not None and errors and c in errors:
                errors[c].append(m.error())
    assert until(), errors


def test_a_static_member_restarts_without_rebalance_and_a_duplicate_is_fenced(broker):
    create(broker, "st", 4)
    a1, a2, errors1, errors2 = [], [], [], []
    c1 = _consumer(broker, "i-1", a1, errors1)
    c2 = _consumer(broker, "i-2", a2, errors2)
    _poll([c1, c2], lambda: a1 and a2 and len(a1[-1]) + len(a2[-1]) == 4 and len(a1[-1]) == 2)
    rebalances_of_c2 = len(a2)
    c1.close()                              # a static member leaves no LeaveGroup behind
    a1b, errors1b = [], []
    c1b = _consumer(broker, "i-1", a1b, errors1b)
    _poll([c1b, c2], lambda: bool(a1b))
    assert a1b[-1] == a1[-1]                # its old assignment, no new one computed
    deadline = time.monotonic() + 1.5     # heartbeats go on; a rebalance would show now
    while time.monotonic() < deadline:
        for c in (c1b, c2):
            c.poll(0.05)
    assert len(a2) == rebalances_of_c2      # the other member saw no rebalance

    a3, errors3 = [], []
    c3 = _consumer(broker, "i-2", a3, errors3)
    try:
        _poll([c3, c2, c1b], lambda: any(_fenced(e) for e in errors2), errors={c2: errors2, c3: errors3})
        assert not any(_fenced(e) for e in errors3)     # the newcomer holds the instance id now
    finally:
        for c in (c3, c1b, c2):
            c.close()


def _fenced(error) -> bool:
    return error.code() == KafkaError._FATAL or "fenced" in error.str().lower()
