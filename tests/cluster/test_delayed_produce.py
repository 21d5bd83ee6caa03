"""acks=all Produce requests waiting at the leader for the high watermark (delayed_produce.py),
over the wire on brokers in this process: answered when the follower's fetch moves the HW,
REQUEST_TIMED_OUT within the request's timeout when it does not move (the wait forgotten),
NOT_LEADER_OR_FOLLOWER when leadership moves meanwhile, and a wait whose connection closed
answers nobody and breaks nothing when the HW passes it later."""
from __future__ import annotations

import asyncio
import time

from logcore.records.batch import build_batch
from logcore.wire import error_codes as E
from logcore.wire.api_keys import PRODUCE
from logcore.wire.client import AsyncKafkaConnection
from test_replica_manager import KEY, TOPIC, InProcessCluster, run


def _produce(value: bytes, timeout_ms: int) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout": timeout_ms, "topic_data": [{
        "name": TOPIC, "partition_data": [{"index": 0, "records": build_batch([(b"k", value, [], None)])}]}]}


def _answer(resp) -> tuple[int, int]:
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def test_acks_all_answers_on_hw_timeout_leadership_move_and_closed_connection(tmp_path, zk_hosts):
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {"replica.lag.time.max.ms": "60000"}) as c:
            await c.create([1, 2], {"min.insync.replicas": "2"})
            await c.leading(1, (1, 2))
            await c.opened_log(2)
            conn = await AsyncKafkaConnection("127.0.0.1", c.servers[1].broker.port, timeout_s=20).connect()
            try:
                # the follower fetches: answered once its next fetch moves the HW
                assert _answer(await conn.request(PRODUCE, _produce(b"a", 10000), version=9)) == (E.NONE, 0)
                replica = c.rm(1).replicas[KEY]
                follower = c.rm(2).replicas[KEY]
                c.rm(2).fetchers.remove(follower)          # the follower stops fetching
                await asyncio.sleep(0.5)                  # its fetch in flight, if any, has come back

                started = time.monotonic()
                code, _ = _answer(await conn.request(PRODUCE, _produce(b"b", 300), version=9))
                assert code == E.REQUEST_TIMED_OUT and time.monotonic() - started >= 0.29
                assert replica.waiters == []               # the timed-out wait was forgotten

                # a produce whose connection closes while it waits: the later HW move answers nobody
                other = await AsyncKafkaConnection("127.0.0.1", c.servers[1].broker.port, timeout_s=20).connect()
                dropped = asyncio.ensure_future(other.request(PRODUCE, _produce(b"c", 30000), version=9))
                await c.until(lambda: len(replica.waiters) == 1, "the produce waiting for the HW")
                other.close()
                dropped.cancel()
                await asyncio.sleep(0.2)
                c.rm(2).fetchers.add(follower, 1)         # fetching again: the HW passes it
                await c.until(lambda: replica.waiters == [], "the closed connection's wait answered")
                assert _answer(await conn.request(PRODUCE, _produce(b"d", 10000), version=9)) == (E.NONE, 3)

                # leadership moves while a produce waits: NOT_LEADER_OR_FOLLOWER
                c.rm(2).fetchers.remove(follower)
                await asyncio.sleep(0.5)
                waiting = asyncio.ensure_future(conn.request(PRODUCE, _produce(b"e", 30000), version=9))
                await c.until(lambda: len(replica.waiters) == 1, "the produce waiting for the HW")
                await c.move(2, (1, 2))
                code, _ = _answer(await asyncio.wait_for(waiting, 20))
                assert code == E.NOT_LEADER_OR_FOLLOWER
            finally:
                conn.close()
    run(scenario())
