"""What a leader holds waiting, over the wire on brokers in this process. acks=all Produce
requests (delayed_produce.py): answered when the follower's fetch moves the HW,
REQUEST_TIMED_OUT within the request's timeout when it does not move (the wait forgotten),
NOT_LEADER_OR_FOLLOWER when leadership moves meanwhile, and a wait whose connection closed
answers nobody and breaks nothing when the HW passes it later. A consumer's parked fetch: not
woken by an append that leaves the HW where it is, answered when the HW moves."""
from __future__ import annotations

import asyncio
import datetime
import time

from logcore.records.batch import build_batch
from logcore.wire import error_codes as E
from logcore.wire.api_keys import PRODUCE
from logcore.wire.client import AsyncKafkaConnection
from test_replica_manager import KEY, TOPIC, InProcessCluster, run


def _produce(value: bytes, timeout_ms: int) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout": timeout_ms, "topic_data": [{
        "name": TOPIC, "partition_data": [{"index": 0, "records": build_batch([(b"k", value, [], None)])}]}]}


def _consumer_fetch(offset: int, epoch: int) -> dict:
    return {"replica_id": -1, "max_wait": datetime.timedelta(milliseconds=20000), "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [{
                "partition": 0, "current_leader_epoch": epoch, "fetch_offset": offset, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _answer(resp) -> tuple[int, int]:
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def test_acks_all_answers_on_hw_timeout_leadership_move_and_closed_connection(tmp_path, zk_hosts):
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {"replica.lag.time.max.ms": "60000"}) as c:
            await c.create([1, 2], {"min.insync.replicas": "2"})
            epoch = await c.leading(1, (1, 2))
            await c.opened_log(2)
            conn = await AsyncKafkaConnection("127.0.0.1", c.servers[1].broker.port, timeout_s=20).connect()
            try:
                # the follower fetches: answered once its next fetch moves the HW
                assert _answer(await conn.request(PRODUCE, _produce(b"a", 10000), version=9)) == (E.NONE, 0)
                replica = c.rm(1).replicas[KEY]
                follower = c.rm(2).replicas[KEY]
                c.rm(2).fetchers.remove(follower)          # the follower stops fetching
                await asyncio.sleep(0.5)                  # its fetch in flight, if any, has come back

                # a consumer's fetch parks at the HW (1); the append of b leaves the HW there
                reader = await AsyncKafkaConnection("127.0.0.1", c.servers[1].broker.port, timeout_s=30).connect()
                consumer = asyncio.ensure_future(reader.request(1, _consumer_fetch(1, epoch), version=12))
                part = c.broker(1).partitions.get(*KEY)
                await c.until(lambda: any(on_hw and not w.done() for w, on_hw in part.parked), "the parked fetch")
                wake = next(w for w, on_hw in part.parked if on_hw and not w.done())

                started = time.monotonic()
                code, _ = _answer(await conn.request(PRODUCE, _produce(b"b", 300), version=9))
                assert code == E.REQUEST_TIMED_OUT and time.monotonic() - started >= 0.29
                assert replica.waiters == []               # the timed-out wait was forgotten
                assert not wake.done() and not consumer.done()   # growth alone did not wake it

                # a produce whose connection closes while it waits: the later HW move answers nobody
                other = await AsyncKafkaConnection("127.0.0.1", c.servers[1].broker.port, timeout_s=20).connect()
                dropped = asyncio.ensure_future(other.request(PRODUCE, _produce(b"c", 30000), version=9))
                await c.until(lambda: len(replica.waiters) == 1, "the produce waiting for the HW")
                other.close()
                dropped.cancel()
                await asyncio.sleep(0.2)
                c.rm(2).fetchers.add(follower, 1)         # fetching again: the HW passes it
                await c.until(lambda: replica.waiters == [], "the closed connection's wait answered")
                resp = await asyncio.wait_for(consumer, 10)      # the HW moved: well before max_wait
                reader.close()
                fetched = resp.responses[0].partitions[0]
                assert fetched.error_code == E.NONE and fetched.records and fetched.high_watermark == 3
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
