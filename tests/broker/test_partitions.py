"""PartitionManager.submit: the event-loop round and the thread round keep order and only
resolve a batch's future once the high watermark covers it."""
from __future__ import annotations

import asyncio

import pytest

from logcore.broker.partitions import PartitionManager
from logcore.log.log_root import LogRoot
from logcore.records.batch import build_batch

T0 = 1_700_000_000_000


def batch(i: int, size: int = 10) -> bytes:
    return build_batch([(b"k%d" % i, b"v" * size, (), T0 + i)], base_offset=0)


@pytest.fixture
def manager(tmp_path):
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    root.create_topic("small", config={"segment.bytes": "2000"})
    root.create_topic("plain")
    pm = PartitionManager(root)
    pm.open_all()
    yield pm
    pm.close()


def test_idle_partition_commits_inside_submit(manager):
    async def run():
        part = manager.get("plain", 0)
        await manager.submit(part, batch(0))            # the first commit also writes the root files
        fut = manager.submit(part, batch(1))
        assert fut.done() and fut.result().first_offset == 1
        assert part.log.high_watermark == 2 and not part.working
    asyncio.run(run())


def test_rounds_that_block_keep_order_and_commit_before_answering(manager):
    async def run():
        part = manager.get("small", 0)
        futs = [manager.submit(part, batch(i, size=300)) for i in range(12)]   # rolls: thread rounds
        infos = await asyncio.gather(*futs)
        assert [i.first_offset for i in infos] == list(range(12))
        assert part.log.high_watermark == 12 and len(part.log.segments) > 1
        assert not part.working and not part.queue
        records = list(part.log.read_records(0))
        assert [r.key for r in records] == [b"k%d" % i for i in range(12)]
    asyncio.run(run())


def test_bad_batch_fails_alone(manager):
    async def run():
        part = manager.get("plain", 0)
        await manager.submit(part, batch(0))
        corrupt = bytearray(batch(1))
        corrupt[-1] ^= 0xFF
        bad, good = manager.submit(part, bytes(corrupt)), manager.submit(part, batch(2))
        with pytest.raises(Exception, match="(?i)crc"):
            await bad
        assert (await good).first_offset == 1
    asyncio.run(run())


def test_closed_partition_fails_new_batches(manager):
    async def run():
        part = manager.get("plain", 0)
        manager.close_topic("plain")
        with pytest.raises(ConnectionAbortedError):
            await manager.submit(part, batch(0))
    asyncio.run(run())


def test_a_high_watermark_move_wakes_consumers_fetches_not_followers(manager):
    """A follower's parked fetch reads to the LEO: a HW move alone (a follower's fetch reported
    its LEO) leaves it parked; an append, or any other notify, wakes both. The parked fetches'
    own futures are set by the notifier (no hop through a shared future's callback)."""
    async def run():
        loop = asyncio.get_running_loop()
        part = manager.get("plain", 0)
        consumer, follower = loop.create_future(), loop.create_future()
        part.park_fetch(consumer, True)
        part.park_fetch(follower, False)
        manager.notify_high_watermark(part)
        assert consumer.done() and not follower.done()
        consumer = loop.create_future()
        part.park_fetch(consumer, True)
        assert len(part.parked) == 2                # the woken one dropped, the follower still parked
        await manager.submit(part, batch(0))        # an append
        assert consumer.done() and follower.done() and part.parked == []
        consumer, follower = loop.create_future(), loop.create_future()
        part.park_fetch(consumer, True)
        part.park_fetch(follower, False)
        manager.notify(part)                        # e.g. a new leadership, a moved log start
        assert consumer.done() and follower.done()
        gone = loop.create_future()
        part.park_fetch(gone, False)
        gone.cancel()                               # a fetch that stopped waiting (answered, timed out)
        part.park_fetch(loop.create_future(), True)
        assert [entry[0] is gone for entry in part.parked] == [False]
    asyncio.run(run())


class Watcher:
    def __init__(self):
        self.calls = []

    def disturbed(self, wake: bool) -> None:
        self.calls.append(wake)


def test_a_watch_is_told_of_the_partitions_changes_until_an_append(manager):
    """A follower session's set-aside partition (PartitionLog.watch) hears of its changes: a HW
    move or an ISR change as news for the next fetch (the watch stays), an append or a new
    state as a wake-up (a parked follower fetch is woken for it; the watch is spent). A watch
    can be withdrawn."""
    async def run():
        part = manager.get("plain", 0)
        hw, append, state, withdrawn = Watcher(), Watcher(), Watcher(), Watcher()
        part.watch(hw)
        manager.notify_high_watermark(part)
        manager.notify_high_watermark(part)
        assert hw.calls == [False, False]
        part.watch(append)
        await manager.submit(part, batch(0))
        assert append.calls == [True] and hw.calls == [False, False, True]
        part.watch(state)
        manager.notify_state(part)
        manager.notify(part)
        manager.notify(part)
        assert state.calls == [False, True]
        part.watch(withdrawn)
        part.unwatch(withdrawn)
        await manager.submit(part, batch(1))
        assert withdrawn.calls == [] and part.watchers == {}
    asyncio.run(run())
