"""The group coordinator's administrative side: DeleteGroups, OffsetDelete, and the expiry of
committed offsets (`offsets.retention.minutes`, KIP-211), as Kafka's classic coordinator does
them. Each writes tombstones to the group's partition of `__consumer_offsets` (through the
coordinator's append, acknowledged as any commit) before it forgets what it removed, so a
restart or a new coordinator reads the same.

Expiry (KIP-211), checked every `offsets.retention.check.interval.ms` (KIP-848 groups: below):
- a group with a protocol type and no members (Empty): every offset once the group has been
  empty for the retention period (since its state timestamp, written with its metadata);
- a Stable consumer group: the offsets of topics no member subscribes to, by commit time;
- a group that never had members (standalone commits): each offset by its commit time;
- anything else keeps its offsets. An offset a transaction may still commit is kept.
An Empty group left without offsets is removed (its metadata tombstone), as Kafka's goes Dead.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from logcore.coordinator.group import CONSUMER_PROTOCOL, EMPTY, STABLE
from logcore.wire import error_codes as E

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class GroupAdmin:
    """Over a GroupCoordinator (its `groups`, `offsets`, `coordinator_error`, `forget`).
    `clock_ms`: the wall clock retention is measured with (commit and state timestamps are)."""

    def __init__(self, coordinator, *, retention_ms: int, check_interval_ms: int,
                 clock_ms: Callable[[], int] = wall_clock_ms):
        self.coordinator = coordinator
        self.retention_ms = retention_ms
        self.check_interval_s = check_interval_ms / 1000
        self.clock_ms = clock_ms
        self._task: asyncio.Task | None = None

    # ------------------------------------------------------------------ DeleteGroups
    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        """(group id, error) for each: NOT_COORDINATOR & co. from the placement, GROUP_ID_NOT_FOUND
        for a group this coordinator does not know, NON_EMPTY_GROUP while it has members, else
        its offsets and metadata get tombstones and it is gone."""
        out = []
        for group_id in group_ids:
            code = self.coordinator.coordinator_error(group_id)
            if code == E.NONE:
                code = await self._delete_group(group_id)
            out.append((group_id, code))
        return out

    async def _delete_group(self, group_id: str) -> int:
        consumer_groups = self.coordinator.consumer_groups
        if consumer_groups is not None and consumer_groups.owns(group_id):
            return await self._delete_consumer_group(consumer_groups, group_id)
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND
        if group.state != EMPTY or group.members:
            return E.NON_EMPTY_GROUP
        offsets = self.coordinator.offsets
        tps = [(t, p) for t, parts in offsets.committed(group_id, None) for p, _ in parts]
        code = await offsets.delete(group_id, tps, group_too=True)
        if code != E.NONE:
            return code
        if self.coordinator.groups.get(group_id) is group and group.state == EMPTY and not group.members:
            self.coordinator.forget(group_id)
            logger.info("group %s deleted (%d committed offsets)", group_id, len(tps))
        return E.NONE

    async def _delete_consumer_group(self, consumer_groups, group_id: str) -> int:
        """A KIP-848 group: refused while it has members; else its records' tombstones, then its
        offsets'."""
        if not await consumer_groups.drop_if_empty(group_id):
            return E.NON_EMPTY_GROUP
        offsets = self.coordinator.offsets
        tps = [(t, p) for t, parts in offsets.committed(group_id, None) for p, _ in parts]
        code = await offsets.delete(group_id, tps, group_too=True)
        if code == E.NONE:
            self.coordinator.forget(group_id)       # and the offsets' entry of the group id
            logger.info("consumer group %s deleted (%d committed offsets)", group_id, len(tps))
        return code

    # ------------------------------------------------------------------ OffsetDelete
    async def delete_offsets(self, group_id: str, tps: list[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: (the group's error, each partition's). A consumer group with members
        keeps the offsets of topics they subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); a group of
        another protocol with members refuses as a whole (NON_EMPTY_GROUP)."""
        code = self.coordinator.coordinator_error(group_id)
        if code != E.NONE:
            return code, {}
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] = set()
        if group.members:
            if group.protocol_type != CONSUMER_PROTOCOL:
                return E.NON_EMPTY_GROUP, {}
            subscribed = group.subscribed_topics() or set()
        results = {tp: (E.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed else E.NONE) for tp in tps}
        doomed = [tp for tp, c in results.items() if c == E.NONE]
        stored = await self.coordinator.offsets.delete(group_id, doomed)
        if stored != E.NONE:
            return stored, {}
        return E.NONE, results

    # ------------------------------------------------------------------ expiry
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="offsets-expiry")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                await self.expire_offsets()
            except Exception:   # noqa: BLE001 - the next pass tries again; the broker goes on
                logger.exception("expiring committed offsets failed")

    async def expire_offsets(self) -> int:
        """One pass over the groups this broker coordinates; the number of offsets removed."""
        now = self.clock_ms()
        removed = 0
        offsets = self.coordinator.offsets
        consumer_groups = self.coordinator.consumer_groups
        for group_id, group in list(self.coordinator.groups.items()):
            if self.coordinator.coordinator_error(group_id) != E.NONE:
                continue
            if consumer_groups is not None and consumer_groups.owns(group_id):
                continue            # a KIP-848 group's offsets (its classic entry only holds them)
            expired = self._expired(group_id, group, now)
            if expired:
                if not await self._delete_expired(group_id, expired):
                    continue
                removed += len(expired)
            if (self.coordinator.groups.get(group_id) is group and group.state == EMPTY and not group.members
                    and not group.pending and group.rebalance is None and not offsets.has_offsets(group_id)):
                code = await offsets.delete(group_id, [], group_too=True)
                if code == E.NONE and self.coordinator.groups.get(group_id) is group \
                        and group.state == EMPTY and not group.members:
                    self.coordinator.forget(group_id)
                    logger.info("group %s: empty with no offsets left; removed", group_id)
        removed += await self._expire_consumer_groups(now)
        return removed

    async def _expire_consumer_groups(self, now: int) -> int:
        """KIP-848 groups (Kafka's new coordinator): an offset expires once its topic is
        subscribed by no member and its commit is older than the retention; an empty group's
        offsets all do."""
        consumer_groups = self.coordinator.consumer_groups
        if consumer_groups is None:
            return 0
        removed = 0
        offsets = self.coordinator.offsets
        for group_id, group in list(consumer_groups.groups.items()):
            if self.coordinator.coordinator_error(group_id) != E.NONE:
                continue
            expired = offsets.expired(group_id, now, self.retention_ms, lambda c: c.commit_timestamp,
                                      group.subscribed_names())
            if expired and await self._delete_expired(group_id, expired):
                removed += len(expired)
        return removed

    async def _delete_expired(self, group_id: str, expired: list) -> bool:
        """Delete a group's expired offsets (tombstones); False when that failed (logged)."""
        code = await self.coordinator.offsets.delete(group_id, expired)
        if code != E.NONE:
            logger.warning("group %s: expiring %d offsets failed: error %d", group_id, len(expired), code)
            return False
        logger.info("group %s: %d committed offsets expired", group_id, len(expired))
        return True

    def _expired(self, group_id: str, group, now: int) -> list[TopicPartition]:
        offsets = self.coordinator.offsets
        if group.protocol_type is not None and group.state == EMPTY and not group.members:
            since = group.state_timestamp_ms
            return offsets.expired(group_id, now, self.retention_ms,
                                   lambda c: since if since >= 0 else c.commit_timestamp)
        if group.protocol_type == CONSUMER_PROTOCOL and group.state == STABLE:
            subscribed = group.subscribed_topics()
            if subscribed is None:
                return []
            return offsets.expired(group_id, now, self.retention_ms, lambda c: c.commit_timestamp, subscribed)
        if group.protocol_type is None:
            return offsets.expired(group_id, now, self.retention_ms, lambda c: c.commit_timestamp)
        return []
