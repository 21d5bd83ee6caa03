"""The classic groups' clocks: each group's rebalance, which parks the members' JoinGroup until
all known members have rejoined (or their rebalance timeout passes: those that did not are
dropped; the first rebalance of an empty group also waits group.initial.rebalance.delay.ms after
the last newcomer), and each member's session, which ends when it stops heartbeating for its
session timeout (and so does an id handed out with MEMBER_ID_REQUIRED that never joins).

The GroupCoordinator owns the groups and completes each rebalance (`complete_join`: the new
generation, written before it is answered); these timers only decide when. On the event loop.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Iterable

from logcore.event_wait import wait_event
from logcore.coordinator.group import COMPLETING, EMPTY, PREPARING, STABLE, Group
from logcore.coordinator.group_answers import sync_error
from logcore.wire import error_codes as E

logger = logging.getLogger(__name__)

EXPIRY_CHECK_S = 0.1     # the longest the expiry loop sleeps; it wakes earlier at the next deadline


def changed(group: Group) -> asyncio.Event:
    """The event a group's rebalance waits on: set when a member joins, leaves or expires."""
    if group.changed is None:
        group.changed = asyncio.Event()
    return group.changed


class GroupTimers:
    def __init__(self, groups: Callable[[], Iterable[Group]], initial_delay_ms: int,
                 complete_join: Callable[[Group], Awaitable[None]]):
        self._groups = groups                     # the coordinator's groups, as they are now
        self.initial_delay = initial_delay_ms / 1000
        self._complete_join = complete_join
        self._expiry: asyncio.Task | None = None

    def start(self) -> None:
        self._expiry = asyncio.get_running_loop().create_task(self._expire_members())

    def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        for group in self._groups():
            self.cancel_rebalance(group)

    @staticmethod
    def cancel_rebalance(group: Group) -> None:
        """The group is dropped (unloaded, deleted, upgraded): its rebalance ends unanswered."""
        if group.rebalance is not None:
            group.rebalance.cancel()
            group.rebalance = None

    def prepare_rebalance(self, group: Group, reason: str) -> None:
        """Start a rebalance of the group (none when one is under way); a SyncGroup parked on
        the old generation is answered REBALANCE_IN_PROGRESS."""
        for m in group.members.values():
            if m.sync is not None and not m.sync.done():
                m.sync.set_result(sync_error(E.REBALANCE_IN_PROGRESS))
            m.sync = None
        if group.state == PREPARING:
            return
        logger.info("group %s: rebalancing (generation %d): %s", group.group_id, group.generation, reason)
        initial = group.state == EMPTY
        group.state = PREPARING
        group.rebalance = asyncio.get_running_loop().create_task(self._rebalance(group, initial))

    def member_gone(self, group: Group, reason: str) -> None:
        """A member left or expired: a settled group rebalances, a rebalance re-counts."""
        if group.state in (STABLE, COMPLETING):
            self.prepare_rebalance(group, reason)
        changed(group).set()

    async def _rebalance(self, group: Group, initial: bool) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        event = changed(group)
        while True:
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
            deadline = started + timeout
            now = loop.time()
            ready_at = min(group.last_newcomer + self.initial_delay, deadline) if initial else now
            if group.all_joined() and now >= ready_at:
                break
            if now >= deadline:
                for mid in [mid for mid, m in group.members.items() if m.join is None]:
                    logger.info("group %s: member %s did not rejoin in time; removed", group.group_id, mid)
                    del group.members[mid]
                group.pending.clear()
                break
            event.clear()
            wake = min(deadline, ready_at) if group.all_joined() else deadline
            await wait_event(event, max(0.0, wake - now))
        group.rebalance = None
        await self._complete_join(group)

    async def _expire_members(self) -> None:
        # Sessions end at their deadline, as Kafka's timers end them, not up to a polling period
        # later: a client that waits out a session timeout (librdkafka's 0081 deletes a static
        # member's group just after) finds the member gone.
        loop = asyncio.get_running_loop()
        wake = EXPIRY_CHECK_S
        while True:
            await asyncio.sleep(wake)
            now = loop.time()
            next_deadline = now + EXPIRY_CHECK_S
            for group in list(self._groups()):
                for mid, expires in list(group.pending.items()):
                    if now >= expires:
                        del group.pending[mid]
                        changed(group).set()
                    else:
                        next_deadline = min(next_deadline, expires)
                gone = [mid for mid, m in group.members.items()
                        if m.join is None and now >= m.last_seen + m.session_timeout_ms / 1000]
                for m in group.members.values():
                    if m.join is None and m.member_id not in gone:
                        next_deadline = min(next_deadline, m.last_seen + m.session_timeout_ms / 1000)
                for mid in gone:
                    member = group.members.pop(mid)
                    if member.sync is not None and not member.sync.done():
                        member.sync.set_result(sync_error(E.UNKNOWN_MEMBER_ID))
                if gone:
                    logger.info("group %s: session of %s expired", group.group_id, ", ".join(gone))
                    self.member_gone(group, f"session of {', '.join(gone)} expired")
            wake = max(0.001, next_deadline - loop.time())
