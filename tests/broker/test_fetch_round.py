"""The follower's fetch round's building blocks against a real broker: a request submitted
without waiting (AsyncKafkaConnection.submit) is answered through its future, and a round
that outlives its timeout fails its connection and with it the request (replica_fetcher), on
one timer that the rounds answered in time only move (RoundDeadline)."""
from __future__ import annotations

import asyncio
import datetime

import pytest

from broker_helpers import create
from logcore.replication.replica_fetcher import RoundDeadline, _time_out
from logcore.wire.api_keys import FETCH, METADATA
from logcore.wire.client import AsyncKafkaConnection, KafkaConnectionError


def _parked_fetch(topic: str, wait_ms: int) -> dict:
    return {"replica_id": -1, "max_wait": datetime.timedelta(milliseconds=wait_ms), "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def test_a_submitted_request_is_answered_through_its_future(broker):
    pytest.importorskip("confluent_kafka")

    async def run():
        async with AsyncKafkaConnection(broker.host, broker.port, timeout_s=10) as conn:
            fut = await conn.submit(METADATA, {"topics": None, "allow_auto_topic_creation": False}, version=9)
            answer = await asyncio.wait_for(fut, 10)
            return [b.node_id for b in answer.brokers]

    assert asyncio.run(run()) == [0]


def test_a_submitted_request_answers_into_the_callers_future_unless_it_was_set_first(broker):
    """The follower's round waits on its own future (`into`), which the connection sets with
    the answer; a round cut short sets it first, and the answer that comes later is dropped
    without disturbing the next request on the connection."""
    pytest.importorskip("confluent_kafka")
    create(broker, "cut", 1)

    async def run():
        loop = asyncio.get_running_loop()
        async with AsyncKafkaConnection(broker.host, broker.port, timeout_s=10) as conn:
            mine = loop.create_future()
            assert await conn.submit(METADATA, {"topics": None, "allow_auto_topic_creation": False},
                                     version=9, into=mine) is mine
            nodes = [b.node_id for b in (await asyncio.wait_for(mine, 10)).brokers]
            cut = loop.create_future()
            await conn.submit(FETCH, _parked_fetch("cut", 300), version=12, into=cut)   # parks
            cut.set_result("cut short")
            after = await conn.submit(METADATA, {"topics": None, "allow_auto_topic_creation": False}, version=9)
            answer = await asyncio.wait_for(after, 10)
            return nodes, cut.result(), [b.node_id for b in answer.brokers], conn.in_flight

    assert asyncio.run(run()) == ([0], "cut short", [0], 0)


def test_a_round_past_its_timeout_fails_its_connection(broker):
    pytest.importorskip("confluent_kafka")
    create(broker, "parked", 1)

    async def run():
        conn = AsyncKafkaConnection(broker.host, broker.port, timeout_s=10)
        await conn.connect()
        wait = asyncio.get_running_loop().create_future()
        fut = await conn.submit(FETCH, _parked_fetch("parked", 5000), version=12, into=wait)   # parks
        asyncio.get_running_loop().call_later(0.2, _time_out, conn, wait, 0.2)
        started = asyncio.get_running_loop().time()
        await asyncio.wait({wait}, timeout=5)
        return fut, conn.connected, asyncio.get_running_loop().time() - started

    fut, connected, took = asyncio.run(run())
    assert isinstance(fut.exception(), KafkaConnectionError)
    assert "did not answer Fetch within 0.2 s" in str(fut.exception())
    assert not connected and took < 2


def test_a_round_fails_at_its_own_deadline_on_a_timer_armed_for_an_earlier_round(broker):
    """Round 1 is answered at once and leaves the timer armed for its deadline; round 2, parked
    at the broker, starts later: the timer firing at round 1's deadline is set again for round
    2's, which then fails the connection, no earlier."""
    pytest.importorskip("confluent_kafka")
    create(broker, "late", 1)

    async def run():
        loop = asyncio.get_running_loop()
        deadline = RoundDeadline(0.4)
        conn = AsyncKafkaConnection(broker.host, broker.port, timeout_s=10)
        await conn.connect()
        first = loop.create_future()
        await conn.submit(METADATA, {"topics": None, "allow_auto_topic_creation": False}, version=9, into=first)
        deadline.start(loop, conn, first)
        await first
        deadline.done()
        await asyncio.sleep(0.25)
        second = loop.create_future()
        await conn.submit(FETCH, _parked_fetch("late", 5000), version=12, into=second)   # parks
        deadline.start(loop, conn, second)
        started = loop.time()
        await asyncio.wait({second}, timeout=5)
        took = loop.time() - started
        deadline.cancel()
        return second, conn.connected, took

    second, connected, took = asyncio.run(run())
    assert isinstance(second.exception(), KafkaConnectionError)
    assert "did not answer Fetch within 0.4 s" in str(second.exception())
    assert not connected and 0.38 <= took < 2
