"""The leader's ISR changes, written to the partition's state znode by compare-and-set (Kafka
2.6's way, before AlterPartition): followers lagging more than replica.lag.time.max.ms leave
(the shrink loop), followers that caught up join (Partition.on_follower_fetch). A lost race means
re-read and apply; a write whose outcome is unknown (the connection broke before the answer) is
read back until ZooKeeper answers, and recognised when it was applied.
"""
from __future__ import annotations

import asyncio
import logging

from logcore.cluster.znode_json import LeaderAndIsr
from logcore.errors import CoordinatorUnavailableError, ZkVersionConflictError
from logcore.replication.follower_state import out_of_sync
from logcore.replication.partition import LEADER, Partition, now_ms

logger = logging.getLogger(__name__)


class IsrWriter:
    def __init__(self, manager):
        self.manager = manager                  # the ReplicaManager: store, metadata, events
        self.shrinks = 0                        # ISR changes written (Kafka's IsrShrinksPerSec /
        self.expands = 0                        # IsrExpandsPerSec; the broker's metrics read them)

    def change_isr(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        """Write a new ISR (the caller checked on the loop, with no await since, that this broker
        leads). The state it is based on is taken now: one read later could be a new leader's."""
        state = partition.state
        if partition.role != LEADER or state is None or state.leader != self.manager.me:
            return
        new_isr = self._without_restarted(partition, state, new_isr)
        partition.pending_isr = new_isr
        partition.isr_change = self.manager.loop.create_task(self._write_isr(partition, state, new_isr))

    def _without_restarted(self, partition: Partition, state: LeaderAndIsr,
                           isr: tuple[int, ...]) -> tuple[int, ...]:
        """`isr` less the members registered after `state` was written: they restarted (or their
        session expired) since, and may have lost what they had; writing them back would make
        an old membership look current (the controller drops them, KIP-380)."""
        manager = self.manager
        keep = []
        for b in isr:
            reg = manager.brokers.get(b)
            if b != manager.me and reg is not None and state.written_before(reg.epoch):
                logger.info("broker %d: %s-%d: broker %d registered again since the state was written;"
                            " left out of the ISR until it catches up", manager.me, partition.topic,
                            partition.index, b)
                continue
            keep.append(b)
        return tuple(keep)

    async def _write_isr(self, partition: Partition, state: LeaderAndIsr, new_isr: tuple[int, ...]) -> None:
        manager = self.manager
        try:
            new = LeaderAndIsr(manager.me, state.leader_epoch, new_isr, state.controller_epoch)
            try:
                written = await asyncio.to_thread(manager.store.update_partition_state, partition.topic,
                                                  partition.index, new, state.zk_version)
            except CoordinatorUnavailableError as exc:
                # The outcome is unknown: ZooKeeper may have applied it. Until a read says, the
                # pending ISR keeps counting (the maximal ISR) and nothing else is written.
                written = await self._resolve_unknown_isr_write(partition, state, new, exc)
                if written is None:
                    return
            if len(written.isr) < len(state.isr):
                self.shrinks += 1
            elif len(written.isr) > len(state.isr):
                self.expands += 1
            if partition.role == LEADER and partition.epoch == state.leader_epoch:
                partition.state = written
                manager.state_written(partition.key, written)
                manager.state_changed(partition)
        except ZkVersionConflictError:
            # Deposed, or the controller changed the ISR: re-read and apply what is there.
            fresh = await asyncio.to_thread(manager.store.partition_state, partition.topic,
                                            partition.index, sync=True)
            logger.info("broker %d: %s-%d: the ISR write lost a race (state now %s); re-read",
                        manager.me, partition.topic, partition.index, fresh)
            if fresh is not None:
                manager.post(("state", partition.topic, partition.index, fresh))
        except Exception as exc:   # noqa: BLE001 - ZooKeeper away: the next check retries
            logger.warning("broker %d: %s-%d: writing the ISR %s failed: %s", manager.me, partition.topic,
                           partition.index, list(new_isr), exc)
        finally:
            partition.pending_isr = None
            partition.isr_change = None
        if partition.role == LEADER:
            partition.maybe_increment_hw()

    async def _resolve_unknown_isr_write(self, partition: Partition, state: LeaderAndIsr,
                                         new: LeaderAndIsr, exc: Exception) -> LeaderAndIsr | None:
        """After an ISR write whose outcome is unknown (the connection broke before the answer):
        read the state znode until ZooKeeper answers, and recognise this broker's own write
        (Kafka re-reads and compares its proposed state). The state it wrote, or None: not
        applied, written by someone else (that state is applied), or this broker was deposed
        meanwhile."""
        manager = self.manager
        logger.warning("broker %d: %s-%d: the outcome of writing the ISR %s is unknown (%s); reading"
                       " it back", manager.me, partition.topic, partition.index, list(new.isr), exc)
        delay = 0.05
        while not manager.stopped and partition.role == LEADER and partition.epoch == state.leader_epoch:
            try:
                fresh = await asyncio.to_thread(manager.store.partition_state, partition.topic,
                                                partition.index, sync=True)
            except CoordinatorUnavailableError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if fresh is None or fresh.zk_version == state.zk_version:
                return None                      # not applied: the next check writes again
            if (fresh.zk_version == state.zk_version + 1 and fresh.leader == manager.me
                    and fresh.leader_epoch == state.leader_epoch and fresh.isr == tuple(new.isr)
                    and fresh.controller_epoch == state.controller_epoch):
                logger.info("broker %d: %s-%d: the ISR write was applied (version %d)", manager.me,
                            partition.topic, partition.index, fresh.zk_version)
                return fresh
            manager.post(("state", partition.topic, partition.index, fresh))
            return None
        return None

    async def shrink_loop(self) -> None:
        """Every replica.lag.time.max.ms / 2: drop the ISR members that fell behind."""
        manager = self.manager
        interval = max(0.05, manager.lag_max_ms / 2000.0)
        while True:
            await asyncio.sleep(interval)
            now = now_ms()
            for partition in list(manager.replicas.values()):
                if partition.role != LEADER or partition.isr_change is not None:
                    continue
                log = partition.open_log()
                if log is None:
                    continue
                lagging = out_of_sync(partition.isr, manager.me, partition.followers, log.log_end_offset,
                                      now, manager.lag_max_ms)
                if lagging:
                    new_isr = tuple(b for b in partition.isr if b not in lagging)
                    logger.warning("broker %d: %s-%d: followers %s are more than %d ms behind;"
                                   " shrinking the ISR from %s to %s", manager.me, partition.topic,
                                   partition.index, lagging, int(manager.lag_max_ms), list(partition.isr),
                                   list(new_isr))
                    self.change_isr(partition, new_isr)
