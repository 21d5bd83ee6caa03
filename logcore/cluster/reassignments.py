"""The controller's reassignment pass (KIP-455, Kafka's onPartitionReassignment): the requests
of /admin/reassign_partitions started (or cancelled), and every reassignment in progress (also
one a previous controller started) completed once its target replicas are all in the ISR.

Phase A writes RS = TRS + ORS with adding / removing replicas to the topic znode and bumps the
leader epoch so that the new replicas start following; phase B elects a leader from TRS where
needed, shrinks the ISR to TRS with another bump, then writes replicas := TRS. Every write is
fenced by the controller epoch (the controller hands its fence, its eligibility rule and the
compare-and-set read and write of a partition's state in).
"""
from __future__ import annotations

import logging
from typing import Callable

from logcore.cluster.compare_and_set import compare_and_set
from logcore.cluster.znode_json import NO_LEADER, ControllerEpoch, LeaderAndIsr
from logcore.cluster.zookeeper_store import ZooKeeperStore
from logcore.errors import TopicNotFoundError, ZkVersionConflictError

logger = logging.getLogger(__name__)


def reassignment_plan(replicas, adding, target) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Kafka's ReplicaAssignment.fromOriginAndTarget: with ORS = the replicas without those
    being added (a reassignment in progress keeps its origin), RS = TRS + (ORS - TRS), adding
    = TRS - ORS, removing = ORS - TRS. Returns (RS, adding, removing)."""
    adding = set(adding)
    origin = [r for r in replicas if r not in adding]
    full = tuple(dict.fromkeys([*target, *origin]))
    return (full, tuple(r for r in target if r not in origin),
            tuple(r for r in origin if r not in set(target)))


def elect_reassigned(target, isr, live) -> int:
    """The leader of a partition whose replicas become `target`: the first live member of
    `target` in the ISR (replication.md 4.5), else NO_LEADER."""
    isr = set(isr)
    return next((r for r in target if r in set(live) and r in isr), NO_LEADER)


class Reassignments:
    """The reassignments one controller runs. `fence()`: its controller epoch now;
    `eligible(state, live)`: the brokers that may take a seat of `state`; `read_state(topic, p)`
    and `write_state(topic, p)`: a compare-and-set's read and fenced write of a partition's
    state; `wake()`: asks the controller for another pass."""

    def __init__(self, store: ZooKeeperStore, broker_id: int, *, fence: Callable[[], ControllerEpoch | None],
                 eligible: Callable[[LeaderAndIsr, set[int]], set[int]], read_state, write_state,
                 wake: Callable[[], None]):
        self.store = store
        self.broker_id = broker_id
        self._fence = fence
        self._eligible = eligible
        self._read_state = read_state
        self._write_state = write_state
        self._wake = wake
        self._reassigning: set[tuple[str, int]] = set()   # partitions whose state znode is watched

    def run_requested(self, live: set[int]) -> None:
        """Start (or cancel) the reassignments of /admin/reassign_partitions, then consume it."""
        pending = self.store.pending_reassignments()
        if pending is None:
            return
        targets, version = pending
        for (topic, p), target in sorted(targets.items()):
            try:
                self._start(topic, p, target, live)
            except (TopicNotFoundError, KeyError):
                logger.warning("controller %d: reassignment of %s-%d: no such partition", self.broker_id,
                               topic, p)
        self.store.requests.finish_reassignments(version)

    def _start(self, topic: str, p: int, target, live: set[int]) -> None:
        """Phase A of Kafka's onPartitionReassignment: RS = TRS + ORS in the topic znode with
        adding / removing replicas, then a leader-epoch bump so that the new replicas start
        following (replicas dropped by a changed reassignment leave the ISR then). A target of
        None (cancel) or equal to ORS reverts to ORS at once."""
        seen: dict = {}                                  # what the last read made of it

        def update(ta):
            current = ta.partitions[p]
            if target is None:
                if not ta.reassigning(p):
                    seen["done"] = True
                    return None
                target_now = ta.origin_replicas(p)
            else:
                target_now = tuple(target)
            plan = reassignment_plan(current, ta.adding_replicas.get(p, ()), target_now)
            seen.update(full=plan[0], target=target_now)
            if not ta.reassigning(p) and current == target_now:
                seen["done"] = True
            elif not plan[1] and not plan[2]:
                seen["finish"] = True
            elif plan != (current, ta.adding_replicas.get(p, ()), ta.removing_replicas.get(p, ())):
                return plan
            return None

        def write(ta, plan):
            written = self.store.set_reassignment(ta, p, *plan, self._fence())
            logger.info("controller %d: reassigning %s-%d from %s to %s (replicas %s, adding %s,"
                        " removing %s)", self.broker_id, topic, p, list(ta.origin_replicas(p)),
                        list(seen["target"]), *(list(r) for r in plan))
            return written
        try:
            compare_and_set(lambda: self.store.topic(topic), update, write)
        except ZkVersionConflictError:
            pass                                         # lost every race: bump with the last plan
        if seen.get("done"):
            return
        if seen.get("finish"):
            # Nothing to add (a cancel, or a target that is the origin again): finish now.
            self._finish(topic, p, seen["target"], live, force=True)
            return
        full = seen["full"]
        self._bump(topic, p, full, live)
        self._watch(topic, p)
        self._maybe_complete(topic, p, live)

    def _bump(self, topic: str, p: int, full, live: set[int]) -> None:
        """A new leader epoch with the replica set changed: the ISR keeps only members of `full`
        and a leader outside it (a dropped adding replica) is replaced."""
        def update(state):
            isr = tuple(b for b in state.isr if b in full) or state.isr
            leader = state.leader
            if leader not in full:
                leader = elect_reassigned(full, isr, self._eligible(state, live))
            return LeaderAndIsr(leader, state.leader_epoch + 1, isr, self._fence().epoch)
        try:
            compare_and_set(self._read_state(topic, p), update, self._write_state(topic, p))
        except ZkVersionConflictError:
            pass

    def _watch(self, topic: str, p: int) -> None:
        """Watch the partition's state znode while it is being reassigned: an ISR that now holds
        every target replica completes it (the leader writes ISR changes itself)."""
        key = (topic, p)
        if key in self._reassigning:
            return
        self._reassigning.add(key)

        def on_state(state):
            if key not in self._reassigning or state is None:
                self._reassigning.discard(key)
                return False
            self._wake()
            return None
        self.store.watch_partition_state(topic, p, on_state)

    def reconcile(self, live: set[int]) -> None:
        """Every reassignment in progress (also those a previous controller started): complete
        those whose target replicas are all in the ISR."""
        for topic in self.store.list_topics():
            try:
                ta = self.store.topic(topic)
            except TopicNotFoundError:
                continue
            for p in sorted(ta.partitions):
                if ta.reassigning(p):
                    self._watch(topic, p)
                    self._maybe_complete(topic, p, live)

    def _maybe_complete(self, topic: str, p: int, live: set[int]) -> None:
        ta = self.store.topic(topic)
        if not ta.reassigning(p):
            return
        target = ta.target_replicas(p)
        state = self.store.partition_state(topic, p, sync=True)
        if state is not None and set(target) <= set(state.isr):
            self._finish(topic, p, target, live, force=False)

    def _finish(self, topic: str, p: int, target, live: set[int], *, force: bool) -> None:
        """Phase B: leader from TRS if the current one is not in it (first live TRS member in the
        ISR), ISR := ISR ∩ TRS with a leader-epoch bump, then the topic znode's replicas := TRS
        without adding / removing replicas; the removed brokers see that and delete their
        replica. `force` (cancel): without waiting for TRS to be in the ISR."""
        target = tuple(target)

        def update_state(state):
            if not force and not set(target) <= set(state.isr):
                return None
            isr = tuple(b for b in state.isr if b in set(target))
            eligible = self._eligible(state, live)
            leader = state.leader if state.leader in set(target) and state.leader in eligible else \
                elect_reassigned(target, isr, eligible)
            if leader == NO_LEADER and state.leader != NO_LEADER and state.leader in live:
                logger.warning("controller %d: %s-%d: no live replica of %s is in the ISR %s; the"
                               " reassignment waits", self.broker_id, topic, p, list(target), list(state.isr))
                return None
            return LeaderAndIsr(leader, state.leader_epoch + 1, isr or state.isr, self._fence().epoch)
        try:
            if compare_and_set(self._read_state(topic, p), update_state, self._write_state(topic, p)) is None:
                return
        except ZkVersionConflictError:
            self._wake()               # lost every race: the next pass retries
            return

        def update_topic(ta):
            if ta.partitions.get(p) == target and not ta.reassigning(p):
                return None
            return target

        def write_topic(ta, replicas):
            written = self.store.set_reassignment(ta, p, replicas, (), (), self._fence())
            logger.info("controller %d: reassignment of %s-%d %s: replicas %s", self.broker_id, topic, p,
                        "cancelled" if force else "complete", list(target))
            return written
        try:
            compare_and_set(lambda: self.store.topic(topic), update_topic, write_topic)
        except ZkVersionConflictError:
            pass
        self._reassigning.discard((topic, p))
