"""The replica manager's role changes under the schedules a review suspected: brokers run in this
process (BrokerServer, one event loop, a real ZooKeeper), so a test can stretch one step of a
transition (a slow become_follower, a follower append in flight, a parked follower fetch, an ISR
write whose outcome is unknown) and act inside the gap, as a client or a follower would, or
watch what a follower's rounds apply.

Leadership moves are made as the controller makes them: a fenced write of the partition's state
znode with a new leader epoch."""
from __future__ import annotations

import asyncio
import errno
import datetime
import glob
import os
import threading
import time

import pytest

from harness import cluster_support
from logcore.wire import error_codes as E
from logcore.broker import client_connections
from logcore.broker.config import BrokerConfig
from logcore.broker.log_dir_failure import LogDirOfflineError
from logcore.broker.server import BrokerServer
from logcore.cluster.znode_json import LeaderAndIsr
from logcore.errors import CoordinatorUnavailableError, NotLeaderOrFollowerError
from logcore.records.batch import build_batch, iter_batches
from logcore.wire.client import AsyncKafkaConnection
from seglog_cluster import FAST

TOPIC = "moves"
KEY = (TOPIC, 0)


@pytest.fixture(autouse=True)
def _need_zookeeper():
    reason = cluster_support()
    if reason:
        pytest.skip(reason)


class InProcessCluster:
    def __init__(self, base, zk_hosts, size: int, props: dict[str, str]):
        self.base, self.zk_hosts, self.size, self.props = base, zk_hosts, size, props
        self.servers: dict[int, BrokerServer] = {}

    async def __aenter__(self) -> "InProcessCluster":
        for i in range(1, self.size + 1):
            props = {"broker.id": str(i), "listeners": "PLAINTEXT://127.0.0.1:0",
                     "log.dirs": str(self.base / f"broker-{i}"), "zookeeper.connect": self.zk_hosts,
                     **FAST, "broker.failure.probe.enable": "false", **self.props}
            server = BrokerServer(BrokerConfig.from_props(props, source=f"broker-{i}"))
            await server.start()
            self.servers[i] = server
        return self

    async def __aexit__(self, *exc) -> None:
        for server in self.servers.values():
            await server.stop()

    def broker(self, i: int):
        return self.servers[i].broker

    def rm(self, i: int):
        return self.broker(i).cluster

    def log(self, i: int):
        return self.broker(i).partitions.get(*KEY)._log

    async def opened_log(self, i: int):
        """Broker i's log of the partition, once it has opened it (a follower opens its replica
        when it learns of the topic, which may come after the leader leads with it in the ISR)."""
        def opened():
            partition = self.broker(i).partitions.get(*KEY)
            return partition is not None and partition._log is not None
        await self.until(opened, f"broker {i}'s replica open")
        return self.log(i)

    def store(self):
        return self.rm(1).store

    async def create(self, replicas: list[int], config: dict[str, str]) -> None:
        await asyncio.to_thread(self.broker(1).catalog.create_topic, TOPIC, config=config,
                                assignment={0: replicas})

    async def until(self, predicate, what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.02)

    async def stop_fetching(self, i: int):
        """Broker i's replica, its fetching stopped once it follows: a follower learns its role
        from ZooKeeper on its own, possibly after the leader leads with it in the ISR, and
        becoming follower would start the fetcher a removal made before it had stopped."""
        def following():
            replica = self.rm(i).replicas.get(KEY)
            return (replica is not None and replica.role == "follower"
                    and any(KEY in f.partitions for f in self.rm(i).fetchers.by_leader.values()))
        await self.until(following, f"broker {i} following")
        replica = self.rm(i).replicas[KEY]
        self.rm(i).fetchers.remove(replica)
        return replica

    async def leading(self, leader: int, isr: tuple[int, ...]) -> int:
        """Wait until `leader` leads with `isr` in its own view; its epoch."""
        def ok():
            r = self.rm(leader).replicas.get(KEY)
            return r is not None and r.role == "leader" and tuple(sorted(r.isr)) == isr
        await self.until(ok, f"broker {leader} leading with ISR {isr}")
        return self.rm(leader).replicas[KEY].epoch

    async def move(self, leader: int, isr: tuple[int, ...]) -> LeaderAndIsr:
        """The controller's move: a fenced state write at the next leader epoch."""
        def write():
            fence = next(s.member.controller.fence for s in self.servers.values()
                         if s.member.controller is not None and s.member.controller.fence is not None)
            st = self.store().partition_state(TOPIC, 0, sync=True)
            return self.store().update_partition_state(
                TOPIC, 0, LeaderAndIsr(leader, st.leader_epoch + 1, isr, fence.epoch), st.zk_version,
                fence=fence)
        return await asyncio.to_thread(write)

    def zk_state(self) -> LeaderAndIsr:
        return self.store().partition_state(TOPIC, 0, sync=True)

    async def produce(self, i: int, value: bytes, acks_all: bool = False):
        """What the Produce handler does for one batch: the role check, the append, and for
        acks=all the wait for the high watermark. (code, AppendInfo or exception)."""
        rm = self.rm(i)
        code, _ = rm.produce_check(TOPIC, 0, acks_all)
        if code != E.NONE:
            return code, None
        part = self.broker(i).partitions.get(*KEY)
        try:
            info = await self.broker(i).partitions.submit(part, bytearray(build_batch([(b"k", value, [], None)])))
        except NotLeaderOrFollowerError as exc:
            return E.NOT_LEADER_OR_FOLLOWER, exc
        if acks_all:
            code = await rm.wait_for_high_watermark(rm.replicas[KEY], info.last_offset + 1, 5.0)
        return code, info


def batch_epochs(base, broker: int) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of every batch in a broker's segments of KEY."""
    out = []
    paths = sorted(glob.glob(os.path.join(base, f"broker-{broker}", f"{TOPIC}-0", "*.log")))
    assert paths, f"no segment of {TOPIC}-0 in broker {broker}'s log dir"
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        out += [(h.base_offset, h.partition_leader_epoch)
                for _, h in iter_batches(data, source=path, allow_partial_tail=True)]
    return out


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_a_deposed_leader_appends_nothing_stamped_with_the_new_epoch(tmp_path, zk_hosts):
    """Item 1: become_follower(E+1) is slow; a produce inside the gap is refused, an acks=all
    waiter is answered, and the deposed leader's log holds no batch of epoch E+1 it wrote."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            await c.create([1, 2], {"min.insync.replicas": "1"})
            epoch = await c.leading(1, (1, 2))
            assert (await c.produce(1, b"before", acks_all=True))[0] == E.NONE
            log = c.log(1)
            original = log.become_follower
            in_gap = threading.Event()

            def slow_become_follower(e):
                original(e)                 # the log follows at E+1 ...
                in_gap.set()
                time.sleep(1.0)             # ... and the replica manager has not heard yet

            log.become_follower = slow_become_follower
            await c.move(2, (1, 2))
            assert await asyncio.to_thread(in_gap.wait, 10)
            code, info = await c.produce(1, b"in the gap", acks_all=True)
            assert code == E.NOT_LEADER_OR_FOLLOWER, (code, info)
            await c.leading(2, (1, 2))
            own = [(o, e) for o, e in batch_epochs(tmp_path, 1) if e > epoch]
            assert own == [], f"broker 1 appended batches stamped with the new epoch: {own}"
            assert log.epoch_cache.latest_epoch == epoch, log.epoch_cache.entries
    run(scenario())


def test_a_follower_append_in_flight_does_not_land_after_become_leader(tmp_path, zk_hosts):
    """Item 6: the follower's append runs in a worker thread and is slow; the follower becomes
    leader meanwhile. The epoch-E batch must not land after the (E+1, LEO) entry."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            await c.create([1, 2], {"min.insync.replicas": "1"})
            epoch = await c.leading(1, (1, 2))
            log2 = await c.opened_log(2)
            original = log2.append_as_follower
            started = threading.Event()

            def slow_append(records, **kw):
                started.set()
                time.sleep(1.0)
                return original(records, **kw)

            log2.append_as_follower_nowait = lambda records, **kw: None   # always the thread path
            log2.append_as_follower = slow_append
            assert (await c.produce(1, b"x"))[0] == E.NONE
            assert await asyncio.to_thread(started.wait, 10)
            await c.move(2, (1, 2))
            await c.leading(2, (1, 2))
            await asyncio.sleep(1.5)                  # the in-flight append has finished by now
            start = dict(log2.epoch_cache.entries)[epoch + 1]
            late = [(o, e) for o, e in batch_epochs(tmp_path, 2) if o >= start and e != epoch + 1]
            assert late == [], f"epoch {epoch} batches after ({epoch + 1}, {start}): {late}"
    run(scenario())


def test_a_parked_follower_fetch_does_not_write_the_state_after_deposal(tmp_path, zk_hosts):
    """Item 2: a follower's fetch parks at the leader (long poll); the leader is deposed; when
    the fetch is answered it must not expand the ISR, which would name the deposed broker
    leader at the new leader's epoch in ZooKeeper."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 3, {"replica.lag.time.max.ms": "1000"}) as c:
            await c.create([1, 2, 3], {"min.insync.replicas": "1"})
            await c.leading(1, (1, 2, 3))
            await c.stop_fetching(3)                            # broker 3 stops fetching ...
            assert (await c.produce(1, b"x"))[0] == E.NONE
            epoch = await c.leading(1, (1, 2))                  # ... and leaves the ISR
            conn = AsyncKafkaConnection("127.0.0.1", c.servers[1].broker.port, timeout_s=10)
            await conn.connect()
            body = {"replica_id": 3, "max_wait": datetime.timedelta(milliseconds=3000), "min_bytes": 1,
                    "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": TOPIC, "partitions": [{
                        "partition": 0, "current_leader_epoch": epoch,
                        # As broker 3 would ask once caught up (its log is not read here).
                        "fetch_offset": c.log(1).log_end_offset, "last_fetched_epoch": epoch,
                        "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}],
                    "forgotten_topics_data": [], "rack_id": ""}
            parked = asyncio.ensure_future(conn.request(1, body, version=12))
            await asyncio.sleep(0.5)                            # parked at broker 1
            moved = await c.move(2, (1, 2))
            await parked
            conn.close()
            await asyncio.sleep(0.5)
            state = await asyncio.to_thread(c.zk_state)
            assert state.leader == 2 and state.leader_epoch == moved.leader_epoch, state
    run(scenario())


def test_a_parked_consumer_fetch_is_fenced_when_the_leader_epoch_moves(tmp_path, zk_hosts):
    """A consumer's fetch parks at the leader with its current_leader_epoch; the same broker
    goes on leading at the next epoch and appends. The fetch must be answered
    FENCED_LEADER_EPOCH with no records, as Kafka re-checks a parked fetch before it reads:
    records of the new epoch answered to the old one let librdkafka's position pass the end of
    the epoch it is validating, and it then seeks back (seen: a consumer read offsets twice)."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            await c.create([1, 2], {"min.insync.replicas": "1"})
            epoch = await c.leading(1, (1, 2))
            assert (await c.produce(1, b"before", acks_all=True))[0] == E.NONE
            conn = AsyncKafkaConnection("127.0.0.1", c.servers[1].broker.port, timeout_s=10)
            await conn.connect()
            body = {"replica_id": -1, "max_wait": datetime.timedelta(milliseconds=4000), "min_bytes": 1,
                    "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": TOPIC, "partitions": [{
                        "partition": 0, "current_leader_epoch": epoch,
                        "fetch_offset": c.log(1).log_end_offset, "last_fetched_epoch": -1,
                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                    "forgotten_topics_data": [], "rack_id": ""}
            parked = asyncio.ensure_future(conn.request(1, body, version=12))
            await asyncio.sleep(0.5)                            # parked at broker 1
            await c.move(1, (1, 2))
            await c.until(lambda: c.rm(1).replicas[KEY].epoch == epoch + 1, "the next epoch")
            assert (await c.produce(1, b"after", acks_all=True))[0] == E.NONE
            resp = await parked
            conn.close()
            part = resp.responses[0].partitions[0]
            assert part.error_code == E.FENCED_LEADER_EPOCH, part
            assert not part.records, part
    run(scenario())


def test_an_isr_write_with_an_unknown_outcome_keeps_counting_the_new_member(tmp_path, zk_hosts):
    """Item 4: the leader's ISR expansion is applied by ZooKeeper but the answer is lost, and
    ZooKeeper stays unreachable for the leader a while. Until a read says otherwise the new
    member counts for the high watermark (the controller may elect it); then the leader
    recognises its own write."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {"replica.lag.time.max.ms": "1000"}) as c:
            await c.create([1, 2], {"min.insync.replicas": "1"})
            await c.leading(1, (1, 2))
            rm2, replica2 = c.rm(2), await c.stop_fetching(2)
            assert (await c.produce(1, b"x"))[0] == E.NONE
            await c.leading(1, (1,))                              # broker 2 left the ISR
            store = c.rm(1).store
            apply_then_fail, reads = store.update_partition_state, store.partition_state
            unreachable = threading.Event()

            def update(*args, **kw):
                apply_then_fail(*args, **kw)
                unreachable.set()
                raise CoordinatorUnavailableError("connection lost before the answer (test)")

            def read(*args, **kw):
                if unreachable.is_set():
                    raise CoordinatorUnavailableError("ZooKeeper unreachable (test)")
                return reads(*args, **kw)

            store.update_partition_state, store.partition_state = update, read
            rm2.fetchers.add(replica2, 1)                         # broker 2 catches up: expansion
            assert await asyncio.to_thread(unreachable.wait, 15)
            rm2.fetchers.remove(replica2)
            assert tuple(reads(TOPIC, 0, sync=True).isr) == (1, 2)   # ZooKeeper has it
            follower_leo = c.log(2).log_end_offset
            assert (await c.produce(1, b"while unknown"))[0] == E.NONE
            await asyncio.sleep(1.0)
            hw = c.log(1).high_watermark
            assert hw <= follower_leo, (
                f"the HW moved to {hw}, past the LEO {follower_leo} of broker 2, which ZooKeeper"
                " holds in the ISR")
            store.update_partition_state = apply_then_fail
            unreachable.clear()
            await c.until(lambda: tuple(c.rm(1).replicas[KEY].isr) == (1, 2),
                          "broker 1 recognising its own ISR write")
            store.partition_state = reads
    run(scenario())


def test_a_watch_call_that_failed_is_made_again(tmp_path, zk_hosts):
    """Item 5, the broker's side: a topic's watches were marked as set before the call, so a
    call that failed on ZooKeeper was never made again and the replica never took its role."""
    from kazoo.exceptions import ConnectionLoss

    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            client = c.rm(2).store.client
            real, failures = client.DataWatch, [1]

            def flaky(path, func):
                if path.startswith("/brokers/topics/") and failures[0] > 0:
                    failures[0] -= 1
                    raise ConnectionLoss()
                return real(path, func)
            client.DataWatch = flaky
            await c.create([1, 2], {"min.insync.replicas": "1"})
            await c.leading(1, (1, 2))
            await c.until(lambda: KEY in c.rm(2).replicas and c.rm(2).replicas[KEY].role == "follower",
                          "broker 2 following")
            assert failures == [0]
    run(scenario())


def _enospc(*_args, **_kw):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_on_the_leader_stops_it_unanswered_and_leadership_moves(tmp_path, zk_hosts):
    """KIP-112: an append that fails with ENOSPC takes the broker's only log dir offline; the
    broker stops (here the in-process policy records it), the batch is not acknowledged, and the
    controller elects the other replica, which holds every acknowledged record."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            await c.create([1, 2], {"min.insync.replicas": "1"})
            await c.leading(1, (1, 2))
            assert (await c.produce(1, b"acked", acks_all=True))[0] == E.NONE
            server = c.servers[1]
            log = c.log(1)
            log.append_and_commit_nowait = lambda batches: ([], False)      # the thread path
            log.append_batch = _enospc
            with pytest.raises(OSError):
                await c.produce(1, b"refused", acks_all=True)
            [(log_dir, error, what, _at)] = server.log_dir_failure.policy.stops
            assert log_dir == str(tmp_path / "broker-1") and error.errno == errno.ENOSPC and what == f"append to {TOPIC}-0"
            assert server.halted and server.log_dir_failure.all_failed
            # Nothing more is written: a later batch is refused before it reaches the log.
            with pytest.raises(LogDirOfflineError):
                await c.produce(1, b"later")
            await server.stop()                     # the abort: no controlled shutdown, no close
            del c.servers[1]
            await c.until(lambda: c.rm(2).replicas.get(KEY) is not None
                          and c.rm(2).replicas[KEY].role == "leader", "broker 2 leading")
            code, _ = await c.produce(2, b"after", acks_all=True)
            assert code == E.NONE
            values = [v for _o, v in _values(tmp_path, 2)]
            assert values == [b"acked", b"after"], values
    run(scenario())


def test_a_full_disk_on_a_follower_stops_it_and_the_leader_goes_on(tmp_path, zk_hosts):
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {"replica.lag.time.max.ms": "1000"}) as c:
            await c.create([1, 2], {"min.insync.replicas": "1"})
            await c.leading(1, (1, 2))
            follower = c.servers[2]
            log2 = await c.opened_log(2)
            log2.append_as_follower_nowait = lambda records, **kw: None   # always the thread path
            log2.append_as_follower = _enospc
            assert (await c.produce(1, b"x"))[0] == E.NONE
            await c.until(lambda: follower.halted, "the follower halted")
            [(_dir, error, what, _at)] = follower.log_dir_failure.policy.stops
            assert error.errno == errno.ENOSPC and what == f"follower append to {TOPIC}-0"
            await follower.stop()
            del c.servers[2]
            await c.leading(1, (1,))                # out of the ISR once its session ended
            assert (await c.produce(1, b"y", acks_all=True))[0] == E.NONE
    run(scenario())


def _values(base, broker: int):
    """(offset of its batch, value) of every record in a broker's segments of KEY."""
    from logcore.records.batch import decode_records
    out = []
    for path in sorted(glob.glob(os.path.join(base, f"broker-{broker}", f"{TOPIC}-0", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        for pos, h in iter_batches(data, source=path, allow_partial_tail=True):
            out += [(h.base_offset, r.value) for r in decode_records(data, pos, h, source=path)]
    return out


def test_an_idle_partitions_answers_are_not_applied_each_round(tmp_path, zk_hosts):
    """A follower fetches an idle partition in every round with a busy one of the same leader:
    answers that change nothing (no records, the HW it has) are not applied, so no lock or HW
    update per idle partition per round; once the idle partition has records again, the
    follower takes them and the leader's HW as before."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            await c.create([1, 2], {"min.insync.replicas": "1"})
            await asyncio.to_thread(c.broker(1).catalog.create_topic, "idle", config={"min.insync.replicas": "1"},
                                    assignment={0: [1, 2]})
            await c.leading(1, (1, 2))
            await c.until(lambda: (c.rm(1).replicas.get(("idle", 0)) is not None
                                   and c.rm(1).replicas[("idle", 0)].role == "leader"
                                   and c.broker(2).partitions.get("idle", 0) is not None
                                   and c.broker(2).partitions.get("idle", 0)._log is not None),
                          "the idle partition led by broker 1 and open on broker 2")
            for i in range(5):                  # both followed; the idle one's state settles
                assert (await c.produce(1, b"warm %d" % i, acks_all=True))[0] == E.NONE
            idle = c.broker(2).partitions.get("idle", 0)._log
            applied = []
            real = idle.update_high_watermark

            def counted(hw, **kw):
                applied.append(hw)
                return real(hw, **kw)
            idle.update_high_watermark = counted
            for i in range(30):                 # each acks=all produce waits for a follower round
                assert (await c.produce(1, b"busy %d" % i, acks_all=True))[0] == E.NONE
            assert applied == [], f"idle answers applied {len(applied)} times in 30 rounds"
            leader_part = c.broker(1).partitions.get("idle", 0)
            await c.broker(1).partitions.submit(leader_part, bytearray(build_batch([(b"k", b"v", [], None)])))
            await c.until(lambda: idle.log_end_offset == 1 and idle.high_watermark == 1,
                          "the follower's idle partition at LEO 1 and HW 1")
            assert applied and applied[-1] == 1
    run(scenario())


def _counted_rounds(fetcher) -> list:
    """The fetcher task's rounds from now on (each entry: one call of its _round)."""
    rounds = []
    real = fetcher._round

    async def counted(conn, ready):
        rounds.append(len(ready))
        return await real(conn, ready)
    fetcher._round = counted
    return rounds


def test_a_followers_answers_are_applied_in_the_protocol_callback(tmp_path, zk_hosts):
    """The common answer (records, no error, the replica's lock free, the append on the event
    loop) is applied where the connection reads it, and the next round's request written from
    there: the fetcher's task is not resumed per round. At the leader, each answer is written
    by its parked fetch's task as the append wakes it, not by the connection's sender. Each acks=all produce below waits for a
    follower round that appends its record, and the follower's log ends up as the leader's."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            await c.create([1, 2], {"min.insync.replicas": "2"})
            await c.leading(1, (1, 2))
            for i in range(3):
                assert (await c.produce(1, b"warm %d" % i, acks_all=True))[0] == E.NONE
            rounds = _counted_rounds(c.rm(2).fetchers.by_leader[1])
            written = []
            real = client_connections._written_now

            def counted(*args):                 # the leader's answers written by their own task
                written.append(real(*args))
                return written[-1]
            client_connections._written_now = counted
            try:
                for i in range(30):
                    assert (await c.produce(1, b"r %d" % i, acks_all=True))[0] == E.NONE
            finally:
                client_connections._written_now = real
            assert len(rounds) <= 2, f"the task ran {len(rounds)} of 30 rounds"
            assert written.count(True) >= 30, f"{written.count(True)} of 30 answers written by their task"
            follower = c.log(2)
            await c.until(lambda: follower.high_watermark == 33, "the follower's HW at 33")
        return _values(tmp_path, 1), _values(tmp_path, 2)
    leader, follower = run(scenario())
    assert len(leader) == 33 and follower == leader


def test_an_answer_the_callback_cannot_apply_goes_to_the_fetchers_task(tmp_path, zk_hosts):
    """While the follower's replica is locked (a write in flight, a deletion) the answer is not
    applied in the callback: the task takes it, waits for the lock and applies it; later
    answers go through the callback again."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            await c.create([1, 2], {"min.insync.replicas": "2"})
            await c.leading(1, (1, 2))
            assert (await c.produce(1, b"warm", acks_all=True))[0] == E.NONE
            fetcher = c.rm(2).fetchers.by_leader[1]
            rounds = _counted_rounds(fetcher)
            follower = c.log(2)
            replica = c.rm(2).replicas[KEY]
            async with replica.io:
                produced = asyncio.ensure_future(c.produce(1, b"held", acks_all=True))
                await c.until(lambda: c.log(1).log_end_offset == 2, "the leader's append")
                await asyncio.sleep(0.3)
                assert follower.log_end_offset == 1 and not produced.done()
            assert (await produced)[0] == E.NONE
            assert follower.log_end_offset == 2 and rounds, "the task applied the held answer"
            taken = len(rounds)
            for i in range(20):
                assert (await c.produce(1, b"r %d" % i, acks_all=True))[0] == E.NONE
            assert len(rounds) - taken <= 2, f"the task ran {len(rounds) - taken} of 20 rounds"
        return _values(tmp_path, 1), _values(tmp_path, 2)
    leader, follower = run(scenario())
    assert len(leader) == 22 and follower == leader


def test_the_leader_moves_the_hw_on_a_followers_fetch_only_when_its_leo_moved(tmp_path, zk_hosts):
    """Per acks=all record the leader computes the HW where it can move: after its own append
    and at the follower's fetch that reports the new LEO, not again at the parked fetch's read
    after its wake-up (the same LEO as before; Kafka's updateFollowerFetchState); every
    produce is still answered by the HW's move, and the HW ends at the LEO."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {}) as c:
            await c.create([1, 2], {"min.insync.replicas": "2"})
            await c.leading(1, (1, 2))
            assert (await c.produce(1, b"warm", acks_all=True))[0] == E.NONE
            leader = c.rm(1).replicas[KEY]
            computed = []
            real = leader.maybe_increment_hw

            def counted():
                computed.append(c.log(1).high_watermark)
                return real()
            leader.maybe_increment_hw = counted
            for i in range(20):
                assert (await c.produce(1, b"r %d" % i, acks_all=True))[0] == E.NONE
            assert c.log(1).high_watermark == c.log(1).log_end_offset == 21
            assert 40 <= len(computed) <= 44, f"the HW computed {len(computed)} times for 20 records"
    run(scenario())


IDLE_KEY = ("idle", 0)


async def _with_idle_partition(c: InProcessCluster) -> None:
    """KEY and a second partition, IDLE_KEY, both led by broker 1 and followed by broker 2."""
    await c.create([1, 2], {"min.insync.replicas": "2"})
    await asyncio.to_thread(c.broker(1).catalog.create_topic, IDLE_KEY[0], config={"min.insync.replicas": "2"},
                            assignment={0: [1, 2]})
    await c.leading(1, (1, 2))
    await c.until(lambda: (c.rm(1).replicas.get(IDLE_KEY) is not None
                           and c.rm(1).replicas[IDLE_KEY].role == "leader"
                           and tuple(sorted(c.rm(1).replicas[IDLE_KEY].isr)) == (1, 2)
                           and any(IDLE_KEY in f.partitions for f in c.rm(2).fetchers.by_leader.values())),
                  "the idle partition led by broker 1 and followed by broker 2")
    # Broker 2 may fetch it before broker 1 has applied the state, and then leaves it out of its
    # rounds for replica.fetch.backoff.ms: it is steady once broker 1 has counted a fetch of it
    # and broker 2's session holds it again.
    from logcore.replication.partition import now_ms
    fetcher, since = c.rm(2).fetchers.by_leader[1], now_ms()

    def steady():
        followed = fetcher.partitions.get(IDLE_KEY)
        return (followed is not None and not followed.fenced and followed.delayed_until <= time.monotonic()
                and IDLE_KEY in fetcher.session._held
                and c.rm(1).replicas[IDLE_KEY].followers[2].last_caught_up_ms > since)
    await c.until(steady, "broker 2 fetching the idle partition in its session")


def test_a_followers_rounds_name_only_what_changed(tmp_path, zk_hosts):
    """Fetch sessions between brokers (KIP-227): after a session's first round (full), a
    follower's request names only the partitions whose fields moved (the busy one's LEO); the
    leader answers only the busy one, and sets the idle one aside (no check, no read) while it
    has nothing new, yet counts the follower's fetch of it, so the follower stays in its ISR.
    A record on the idle partition reaches the follower at once, through a parked fetch. When
    the leader loses the session (evicted, restarted), the follower's next round is full again
    and replication goes on without a backoff."""
    from logcore.broker.fetch_sessions import IncrementalFetch
    idle_key = IDLE_KEY

    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {"replica.lag.time.max.ms": "3000"}) as c:
            await _with_idle_partition(c)
            session = c.rm(2).fetchers.by_leader[1].session
            for i in range(3):
                assert (await c.produce(1, b"warm %d" % i, acks_all=True))[0] == E.NONE
            plans, seen = [], []                # seen: (keys read, keys set aside, keys answered)
            changes = []                        # per plan: {key: (fields held, fields now)} of what it names
            real_plan, sessions = session.next_round, c.broker(1).fetching.sessions
            real_context = sessions.context

            def planned(fields):
                plans.append(real_plan(fields))
                changes.append({k: (session._held.get(k), fields[k]) for k in plans[-1].changed if k != KEY})
                return plans[-1]

            def context(body, version, follower):
                ctx = real_context(body, version, follower)
                if isinstance(ctx, IncrementalFetch):
                    real_answered = ctx.answered

                    def answered(pairs, settle=None):
                        out = real_answered(pairs, settle)
                        aside = ctx.standing.members.values() if ctx.standing is not None else ()
                        seen.append(({(t, p.partition) for t, p in ctx.entries},
                                     {(q.topic, q.request.partition) for q in aside}, [w.key for w, _ in out[1]]))
                        return out
                    ctx.answered = answered
                return ctx
            session.next_round, sessions.context = planned, context
            for i in range(20):
                assert (await c.produce(1, b"busy %d" % i, acks_all=True))[0] == E.NONE
            await asyncio.sleep(3.5)            # over replica.lag.time.max.ms with the idle one set aside
            assert tuple(sorted(c.rm(1).replicas[idle_key].isr)) == (1, 2), "the set-aside partition's ISR shrank"
            # Its follower's fetches are counted up to the session's last one (at each recheck,
            # and when it leaves the set): not 3.5 s ago.
            from logcore.replication.partition import now_ms
            assert now_ms() - c.rm(1).replicas[idle_key].followers[2].last_caught_up_ms < 2000
            for i in range(5):
                assert (await c.produce(1, b"busy again %d" % i, acks_all=True))[0] == E.NONE
            assert plans and not any(p.full for p in plans), "a full round in a steady session"
            assert all(set(p.changed) <= {KEY} and not p.forgotten for p in plans), \
                [(i, p.changed, p.forgotten, changes[i]) for i, p in enumerate(plans)
                 if set(p.changed) - {KEY} or p.forgotten]
            assert sum(KEY in p.changed for p in plans) >= 25         # each record's LEO move was sent
            assert seen and all(keys in ([], [KEY]) for _, _, keys in seen)   # only the busy one answered
            assert sum(idle_key in aside for _, aside, _ in seen) >= len(seen) - 1    # the idle one set aside
            # A record on the set-aside partition: read and answered at once (acks=all waits for it).
            idle_part = c.broker(1).partitions.get(*idle_key)
            last_fetch = next(s for s in sessions.cache.sessions.values() if s.privileged).last_used_ms
            info = await c.broker(1).partitions.submit(idle_part, bytearray(build_batch([(b"k", b"v", [], None)])))
            # The append that ends its quiet counted the follower's fetches up to the last one,
            # before any ISR check could see the follower behind.
            assert c.rm(1).replicas[idle_key].followers[2].last_caught_up_ms >= last_fetch
            rm = c.rm(1)
            assert await rm.wait_for_high_watermark(rm.replicas[idle_key], info.last_offset + 1, 5.0) == E.NONE
            assert any(idle_key in keys for _, _, keys in seen)
            sessions.cache.sessions.clear()                           # the leader forgets every session
            for i in range(5):
                assert (await c.produce(1, b"after %d" % i, acks_all=True))[0] == E.NONE
            assert any(p.full for p in plans[-12:]), "no full round after the session was lost"
            follower = c.log(2)
            await c.until(lambda: follower.high_watermark == 33, "the follower's HW at 33")
        return _values(tmp_path, 1), _values(tmp_path, 2)
    leader, follower = run(scenario())
    assert len(leader) == 33 and follower == leader


def test_a_set_aside_partitions_record_in_the_same_pass_as_a_busy_ones_is_not_held(tmp_path, zk_hosts):
    """A follower's parked fetch woken by an append to a partition it names, while a record is
    appended in the same event-loop pass to a partition its session set aside (whose own
    wake-up finds the fetch woken already): that record too reaches the follower at once, not
    after replica.fetch.wait.max.ms."""
    idle_key = IDLE_KEY

    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 2, {"replica.fetch.wait.max.ms": "5000",
                                                              "replica.lag.time.max.ms": "30000"}) as c:
            await _with_idle_partition(c)
            for i in range(10):
                assert (await c.produce(1, b"warm %d" % i))[0] == E.NONE
            parts = c.broker(1).partitions
            busy_part, idle_part = parts.get(*KEY), parts.get(*idle_key)
            follower_idle = c.broker(2).partitions.get(*idle_key)
            await c.until(lambda: c.log(2) is not None and c.log(2).log_end_offset == c.log(1).log_end_offset
                          and follower_idle.log_if_open is not None, "the follower caught up", timeout=30)
            for round_ in range(5):
                # A record on the busy partition alone: the follower's fetch after it names the
                # busy one only (the idle one's fields did not change), and sets the idle one aside.
                assert (await c.produce(1, b"busy alone %d" % round_))[0] == E.NONE
                await c.until(lambda: c.log(2).log_end_offset == c.log(1).log_end_offset, "the follower caught up")
                await asyncio.sleep(0.3)            # the follower's fetch parked, the idle one set aside
                start = follower_idle.log_if_open.log_end_offset
                t0 = time.monotonic()
                # Both in one pass: the busy partition's append wakes the parked fetch first.
                busy = parts.submit(busy_part, bytearray(build_batch([(b"k", b"busy", [], None)])))
                idle = parts.submit(idle_part, bytearray(build_batch([(b"k", b"idle", [], None)])))
                await busy
                await idle
                await c.until(lambda: follower_idle.log_if_open.log_end_offset == start + 1,
                              "the idle partition's record on the follower", timeout=30)
                assert time.monotonic() - t0 < 2.5, f"round {round_}: held for the fetch's max wait"

    run(scenario())


def test_an_append_after_a_hw_move_reaches_a_follower_whose_session_set_the_partition_aside(tmp_path, zk_hosts):
    """Follower 2's session sets the idle partition aside (at its log end, with the HW it was
    told) while its fetch parks on the busy one; the lagging follower 3 then catches up the idle
    partition and moves its HW (news for follower 2's next fetch, no wake-up). A record appended
    to the idle partition right after must still wake follower 2's parked fetch, not reach it
    after replica.fetch.wait.max.ms."""
    async def scenario():
        async with InProcessCluster(tmp_path, zk_hosts, 3, {"replica.fetch.wait.max.ms": "5000",
                                                              "replica.lag.time.max.ms": "60000"}) as c:
            await c.create([1, 2, 3], {"min.insync.replicas": "2"})
            await asyncio.to_thread(c.broker(1).catalog.create_topic, IDLE_KEY[0],
                                    config={"min.insync.replicas": "2"}, assignment={0: [1, 2, 3]})
            await c.leading(1, (1, 2, 3))

            def following(i: int) -> bool:
                replica = c.rm(i).replicas.get(IDLE_KEY)
                return (replica is not None and replica.role == "follower"
                        and any(IDLE_KEY in f.partitions for f in c.rm(i).fetchers.by_leader.values()))
            await c.until(lambda: following(2) and following(3), "the idle partition followed by 2 and 3")
            parts = c.broker(1).partitions
            idle_leader = parts.get(*IDLE_KEY)
            idle2 = c.broker(2).partitions.get(*IDLE_KEY)

            async def append_idle(value: bytes) -> int:
                info = await parts.submit(idle_leader, bytearray(build_batch([(b"k", value, [], None)])))
                return info.last_offset + 1
            for round_ in range(4):
                idle3 = c.rm(3).replicas[IDLE_KEY]
                c.rm(3).fetchers.remove(idle3)                    # follower 3 lags on the idle partition
                end = await append_idle(b"lagging %d" % round_)
                await c.until(lambda: idle2.log_if_open is not None and idle2.log_if_open.log_end_offset == end,
                              "follower 2 has the idle partition's record")
                assert idle_leader.log.high_watermark < end       # follower 3, in the ISR, holds it
                # A record on the busy partition: follower 2's fetch after it names that one
                # only, and sets the idle one aside; it then parks.
                assert (await c.produce(1, b"busy %d" % round_))[0] == E.NONE
                await asyncio.sleep(0.5)
                c.rm(3).fetchers.add(idle3, 1)                    # follower 3 catches up: the HW moves
                await c.until(lambda: idle_leader.log.high_watermark == end, "the idle partition's HW")
                t0 = time.monotonic()
                end = await append_idle(b"after %d" % round_)
                await c.until(lambda: idle2.log_if_open.log_end_offset == end, "the record on follower 2", timeout=30)
                assert time.monotonic() - t0 < 2.5, f"round {round_}: held for the fetch's max wait"
    run(scenario())
