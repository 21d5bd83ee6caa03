"""One replica of a partition on this broker (Kafka's Partition): its role and leader epoch (the
state znode applied last), the ISR, the leader's view of its followers, the high watermark's
advance and the acks=all produces waiting for it (Kafka's delayed produce).

Discipline (as Kafka's leaderIsrUpdateLock): every method runs on the broker's event loop, and
a role check and the action that depends on it (an append, an ISR write, a waiter registered)
happen with no await between them; the log's own lock orders a leader's append against
`become_follower` (the log refuses a leader's append from then on). The replica manager
(replica_manager.py) changes the role; the ISR writer (isr_writer.py) writes the ISR.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from logcore.cluster.znode_json import NO_LEADER, LeaderAndIsr
from logcore.replication.follower_state import FollowerState, high_watermark_candidate, may_join
from logcore.wire import error_codes as E
from logcore.event_wait import wait_all

logger = logging.getLogger(__name__)

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"


def now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(eq=False)
class Partition:
    """This broker's replica of one partition. `manager` is the ReplicaManager: the cluster
    metadata (assignment, live brokers), the broker's open logs and the ISR writer."""
    topic: str
    index: int
    manager: object = None
    role: str = OFFLINE
    state: LeaderAndIsr | None = None          # the state applied last
    epoch_start_offset: int = 0                  # the LEO when this broker's tenure began
    followers: dict[int, FollowerState] = field(default_factory=dict)
    isr_change: asyncio.Task | None = None       # an ISR write in flight
    pending_isr: tuple[int, ...] | None = None   # what it writes (counts for the HW meanwhile)
    waiters: list = field(default_factory=list)  # (required offset, future) of acks=all produces
    io: asyncio.Lock = field(default_factory=asyncio.Lock)   # the fetcher's writes vs. deletion

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.index

    @property
    def epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    @property
    def leader(self) -> int:
        return self.state.leader if self.state is not None else NO_LEADER

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()

    @property
    def is_leader(self) -> bool:
        return self.role == LEADER

    def open_log(self):
        """The partition's log if it is open here (never opens it), else None."""
        return self.manager.open_log(self.topic, self.index)

    # ------------------------------------------------------------------ ISR and HW
    @property
    def assignment(self) -> tuple[int, ...]:
        return self.manager.assignment_of(self)

    def min_insync(self) -> int:
        """min(min.insync.replicas, replica count): Kafka's effective minimum."""
        log = self.open_log()
        if log is not None:
            configured = log.config.min_insync_replicas
        else:
            configured = self.manager.topic_min_insync(self.topic)
        return min(configured, max(1, len(self.assignment)))

    def effective_isr(self) -> tuple[int, ...]:
        """The maximal ISR (KIP-497): an expansion being written already counts."""
        isr = self.isr
        if self.pending_isr is not None and len(self.pending_isr) > len(isr):
            return self.pending_isr
        return isr

    def isr_too_small(self) -> str | None:
        """Before an acks=all append: why the ISR is below min.insync.replicas, or None."""
        need = self.min_insync()
        if len(self.isr) < need:
            return (f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the"
                    f" min.isr requirement of {need} for partition {self.topic}-{self.index}")
        return None

    def maybe_increment_hw(self) -> None:
        """Move the HW to the smallest LEO of the (maximal) ISR, then answer the waiters it
        passed (Kafka's maybeIncrementLeaderHW)."""
        log = self.open_log()
        if log is None or self.role != LEADER:
            return
        me = self.manager.me
        candidate = high_watermark_candidate(
            log.log_end_offset, self.effective_isr(), me, self.followers,
            log.config.min_insync_replicas, len(self.assignment))
        if candidate is not None and candidate > log.high_watermark:
            log.maybe_increment_high_watermark(candidate)
            self.manager.notify(self)
        self._complete_waiters(log.high_watermark)

    def low_watermark(self, leader_start: int) -> int | None:
        """The smallest log start offset of the leader (`leader_start`, its own) and its live
        in-sync followers (Kafka's lowWatermarkIfLeader, which DeleteRecords waits on); None
        when this broker does not lead. A follower not heard from in this tenure counts as -1."""
        if self.role != LEADER:
            return None
        low = leader_start
        for b in self.isr:
            if b != self.manager.me and b in self.manager.brokers:
                state = self.followers.get(b)
                low = min(low, state.log_start_offset if state is not None else -1)
        return low

    def on_quiet_follower_fetch(self, follower: int, fetch_offset: int, log_start: int, leader_epoch: int,
                                now: float) -> None:
        """on_follower_fetch for a partition a follower's session set aside
        (fetch_sessions.StandingPartitions), counted up to the session's fetch at `now`. It was
        set aside at `leader_epoch` with the follower in the ISR asking for the log end; if it
        is still led at that epoch and the follower's LEO is still `fetch_offset`, every fetch
        since found it caught up: counted as the full path would have (it neither joins the ISR
        nor moves the HW). Otherwise nothing: the follower's next fetch reads it by the full
        path."""
        leadership = self.state
        if self.role != LEADER or leadership is None or leadership.leader_epoch != leader_epoch:
            return
        state = self.followers.get(follower)
        if state is None or state.log_end_offset != fetch_offset:
            return
        state.on_fetch(fetch_offset, fetch_offset, now)
        state.log_start_offset = log_start

    def on_follower_fetch(self, follower: int, fetch_offset: int, log_start: int, leader_leo: int,
                          leader_epoch: int) -> None:
        """A follower's non-diverging fetch at `fetch_offset` reached the leader (its LEO then
        was `leader_leo`), checked at `leader_epoch`. A fetch parked in a long poll may come
        back after this broker was deposed: it then counts for nothing (an ISR write from it
        would name this broker leader at the new leader's epoch)."""
        if self.role != LEADER or self.epoch != leader_epoch:
            return
        state = self.followers.get(follower)
        if state is None:
            state = self.followers[follower] = FollowerState()
        moved = state.log_end_offset != fetch_offset
        state.on_fetch(fetch_offset, leader_leo, now_ms())
        state.log_start_offset = log_start
        log = self.open_log()
        if log is None:
            return
        manager = self.manager
        if (follower not in self.isr and self.isr_change is None
                and manager.may_be_in_isr(self, follower)
                and may_join(state, log.high_watermark, self.epoch_start_offset)):
            new_isr = tuple(b for b in self.assignment if b in self.isr or b == follower)
            logger.info("broker %d: %s-%d: follower %d caught up (LEO %d); expanding the ISR from %s"
                        " to %s", manager.me, self.topic, self.index, follower, fetch_offset,
                        list(self.isr), list(new_isr))
            manager.isr_writer.change_isr(self, new_isr)
        if moved:
            # As Kafka's updateFollowerFetchState: a follower's fetch can move the HW only if
            # its LEO moved (the leader's appends, ISR changes and a new leadership move it
            # where they happen); a parked fetch's read after its wake-up, or an idle
            # partition's, leaves it where it is.
            self.maybe_increment_hw()

    # ------------------------------------------------------------------ appends
    def appended(self) -> None:
        """The leader's log grew (a produce round committed): with an ISR of this broker
        alone the HW follows at once (Kafka's appendRecordsToLeader, then maybeIncrementLeaderHW)."""
        if self.role == LEADER:
            self.maybe_increment_hw()

    # ------------------------------------------------------------------ acks=all
    async def wait_for_high_watermark(self, required: int, timeout_s: float) -> int:
        """Park an acks=all write until the HW reaches `required` (its last offset + 1): the
        code of high_watermark_reached, or REQUEST_TIMED_OUT (the records may still commit)."""
        fut = self.high_watermark_reached(required)
        if not fut.done():
            await wait_all((fut,), timeout_s)
            if not fut.done():
                self.forget_waiter(fut)
                return E.REQUEST_TIMED_OUT
        return fut.result()

    def high_watermark_reached(self, required: int) -> asyncio.Future:
        """A future for an acks=all produce appended up to `required` (its last offset + 1),
        set once the HW passes it: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (the HW passed it with
        the ISR below min.insync.replicas) or NOT_LEADER_OR_FOLLOWER (leadership moved; the
        records may survive on the new leader). A caller that stops waiting (its timeout) hands
        it to forget_waiter. Futures, not a coroutine per partition: a produce waits for all of
        its partitions with one timer."""
        fut = self.manager.loop.create_future()
        log = self.open_log()
        if self.role != LEADER or log is None:
            fut.set_result(E.NOT_LEADER_OR_FOLLOWER)
        elif log.high_watermark >= required:
            fut.set_result(self._enough())
        else:
            self.waiters.append((required, fut))
        return fut

    def forget_waiter(self, fut: asyncio.Future) -> None:
        fut.cancel()
        self.waiters = [w for w in self.waiters if w[1] is not fut]

    def fail_waiters(self, code: int) -> None:
        for _, fut in self.waiters:
            if not fut.done():
                fut.set_result(code)
        self.waiters = []

    def _enough(self) -> int:
        return E.NONE if len(self.effective_isr()) >= self.min_insync() \
            else E.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    def _complete_waiters(self, hw: int) -> None:
        if not self.waiters:
            return
        keep = []
        for required, fut in self.waiters:
            if fut.done():
                continue
            if hw >= required:
                fut.set_result(self._enough())
            else:
                keep.append((required, fut))
        self.waiters = keep
