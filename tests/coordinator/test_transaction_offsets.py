"""Transactional offsets in `__consumer_offsets`: the replay of a partition (plain records at
once, a transaction's at its COMMIT marker, dropped at ABORT, pending without either), as the
group coordinator loads it, over a real log with real markers."""
from __future__ import annotations

import asyncio

from logcore.coordinator import offsets_topic as OT
from logcore.coordinator.group_coordinator import GroupCoordinator
from logcore.coordinator.transaction_appends import CoordinatorAppender
from logcore.broker.partitions import PartitionManager
from logcore.log.log_root import LogRoot
from logcore.records.batch import build_batch


def _offsets_partition(tmp_path):
    """A fresh root with a one-partition __consumer_offsets: its PartitionManager, the partition
    and an appender over it."""
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    root.create_topic(OT.TOPIC, 1, {"cleanup.policy": "compact"})
    pm = PartitionManager(root)
    pm.open_all()
    return pm, pm.get(OT.TOPIC, 0), CoordinatorAppender(pm)


def test_replay_applies_committed_drops_aborted_keeps_open(tmp_path):
    pm, part, appender = _offsets_partition(tmp_path)

    def offsets(group, offset):
        return [(OT.offset_key(group, "t", 0), OT.offset_value(OT.CommittedOffset(offset, -1, "", 1)))]

    async def write():
        await pm.submit(part, build_batch([(k, v, (), 1) for k, v in offsets("plain", 3)]))
        await appender.append_transactional(part, offsets("committed", 10), producer_id=5, producer_epoch=0)
        await appender.append_transactional(part, offsets("aborted", 20), producer_id=6, producer_epoch=2)
        await appender.append_transactional(part, offsets("open", 30), producer_id=7, producer_epoch=0)
        await appender.append_transactional(part, offsets("committed", 11), producer_id=5, producer_epoch=0)
        await appender.append_marker(part, committed=True, producer_id=5, producer_epoch=0, coordinator_epoch=0)
        await appender.append_marker(part, committed=False, producer_id=6, producer_epoch=2, coordinator_epoch=0)
        # a later transaction of the same producer continues its sequence on the partition
        await appender.append_transactional(part, offsets("committed", 12), producer_id=5, producer_epoch=0)
        await appender.append_marker(part, committed=True, producer_id=5, producer_epoch=0, coordinator_epoch=0)
    asyncio.run(write())
    pm.close()

    pm = PartitionManager(LogRoot.open(str(tmp_path / "root")))
    pm.open_all()
    groups = GroupCoordinator(pm, lambda: None, num_partitions=1, initial_delay_ms=0, min_session_ms=1,
                              max_session_ms=10_000)
    groups.load()

    def committed(group):
        ((_, [(_, c)]),) = groups.offsets.committed(group, [("t", [0])])
        return None if c is None else c.offset
    assert committed("plain") == 3
    assert committed("committed") == 12
    assert committed("aborted") is None
    assert committed("open") is None and groups.offsets.unstable("open", "t", 0)
    groups.offsets.on_marker(0, 7, True)          # its COMMIT marker arrives later
    assert committed("open") == 30 and not groups.offsets.unstable("open", "t", 0)
    pm.close()


def test_a_commit_marker_written_while_the_partition_loads_applies_its_offsets(tmp_path):
    """The load reads the log in a thread; a COMMIT marker written after that read has passed
    its place (while the partition still loads) must still apply the transaction's offsets, not
    leave them pending for ever."""
    import threading

    pm, part, appender = _offsets_partition(tmp_path)
    records = [(OT.offset_key("g", "t", 0), OT.offset_value(OT.CommittedOffset(40, -1, "", 1)))]
    groups = GroupCoordinator(pm, lambda: None, num_partitions=1, initial_delay_ms=0, min_session_ms=1,
                              max_session_ms=10_000)
    read_done, marker_written = threading.Event(), threading.Event()
    real_read = groups._read_partition

    def read_then_wait(p):
        entries = real_read(p)          # the log as it was: the offsets, no marker yet
        read_done.set()
        assert marker_written.wait(10)
        return entries
    groups._read_partition = read_then_wait

    async def scenario():
        await appender.append_transactional(part, records, producer_id=9, producer_epoch=0)
        groups.on_leadership(OT.TOPIC, 0, True)
        assert await asyncio.to_thread(read_done.wait, 10)
        await appender.append_marker(part, committed=True, producer_id=9, producer_epoch=0, coordinator_epoch=0)
        groups.offsets.on_marker(0, 9, True)     # as the marker writer calls it
        marker_written.set()
        while 0 in groups.loading:
            await asyncio.sleep(0.01)
    asyncio.run(scenario())
    ((_, [(_, c)]),) = groups.offsets.committed("g", [("t", [0])])
    assert c is not None and c.offset == 40 and not groups.offsets.unstable("g", "t", 0)
    pm.close()
