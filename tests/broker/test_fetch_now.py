"""A Fetch run from the connection's protocol callback up to its first wait
(client_connections._fetch_now): answered at once when it can be, in request order behind a
parked one, and the rest of a parked one resumed in a task (`_resumed`) with the task's values,
exceptions and cancellation handed through."""
from __future__ import annotations

import asyncio
import datetime
import time

from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic

from broker_helpers import connect, create, parse_response, produce, recv_frame, request_frame
from logcore.broker.client_connections import _resumed


def _frame(topic: str, offset: int, wait_ms: int, correlation_id: int) -> bytes:
    req = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1,
                       max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                           partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
                       forgotten_topics_data=(), rack_id="")
    return request_frame(1, 11, req, correlation_id)


def test_an_answer_at_hand_waits_behind_a_parked_fetch_of_the_same_connection(broker):
    create(broker, "now", 1)
    assert all(a[0] is None for a in produce(broker, "now", [b"a", b"b"], acks="all"))
    with connect(broker, timeout=10) as sock:
        sock.sendall(_frame("now", 0, 0, 1))                   # data at hand: answered at once
        cid, body = parse_response(1, 11, recv_frame(sock))
        assert cid == 1 and body.responses[0].partitions[0].records
        started = time.monotonic()
        # a fetch at the end parks (800 ms); the one behind it could be answered at once
        sock.sendall(_frame("now", 2, 800, 2) + _frame("now", 0, 0, 3))
        answers = [parse_response(1, 11, recv_frame(sock)) for _ in range(2)]
        assert [cid for cid, _ in answers] == [2, 3]
        assert time.monotonic() - started >= 0.75
        assert not answers[0][1].responses[0].partitions[0].records
        assert answers[1][1].responses[0].partitions[0].records


def test_a_coroutine_resumed_in_a_task_gets_values_exceptions_and_cancellation():
    async def scenario():
        loop = asyncio.get_running_loop()
        seen = []

        async def waits_twice(first, second):
            seen.append(await first)
            try:
                seen.append(await second)
            except ValueError as exc:
                seen.append(f"raised {exc}")
            try:
                await loop.create_future()             # never set: the task is cancelled here
            finally:
                seen.append("finally")

        first, second = loop.create_future(), loop.create_future()
        coro = waits_twice(first, second)
        task = asyncio.ensure_future(_resumed(coro, coro.send(None)))
        first.set_result(1)
        await asyncio.sleep(0)
        second.set_exception(ValueError("two"))
        for _ in range(3):
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert task.cancelled()
        assert seen == [1, "raised two", "finally"]

        async def answers(fut):
            return await fut + 1
        fut = loop.create_future()
        coro = answers(fut)
        task = asyncio.ensure_future(_resumed(coro, coro.send(None)))
        fut.set_result(41)
        assert await task == 42
    asyncio.run(scenario())


def test_parked_fetches_answered_by_their_own_task_and_through_the_sender(broker):
    """A parked fetch that an append wakes is answered: a small answer written by the fetch's
    own task (the sender skips it), a file range (64 KiB and more) through the sender's
    sendfile; in request order with an answer at hand queued behind each."""
    from logcore.records.batch import decode_records, iter_batches
    create(broker, "woken", 1)
    assert all(a[0] is None for a in produce(broker, "woken", [b"first"], acks="all"))
    big = bytes(range(256)) * 400                              # 100 KiB: above the sendfile bound
    with connect(broker, timeout=10) as sock:
        for cid, value in ((10, b"small"), (20, big)):
            end = 1 if cid == 10 else 2
            sock.sendall(_frame("woken", end, 5000, cid) + _frame("woken", 0, 0, cid + 1))  # parks
            time.sleep(0.2)
            started = time.monotonic()
            assert all(a[0] is None for a in produce(broker, "woken", [value], acks="all"))
            answers = [parse_response(1, 11, recv_frame(sock)) for _ in range(2)]
            assert [c for c, _ in answers] == [cid, cid + 1]
            assert time.monotonic() - started < 4                 # woken, not timed out
            records = answers[0][1].responses[0].partitions[0].records
            values = [r.value for pos, h in iter_batches(records, source="answer")
                      for r in decode_records(records, pos, h, source="answer")]
            assert values == [value]
            assert answers[1][1].responses[0].partitions[0].records       # from 0: at hand
