"""The controller: elected through ZooKeeper's /controller, it owns every partition's leader and
leader epoch, and fences each write with its controller epoch.

The election rules are pure functions (Kafka's controller/Election.scala):

    offline leader     first replica in assignment order that is live and in the ISR; the new ISR
                       is the live part of the old one. None: the partition stays offline (leader
                       -1, ISR kept) unless unclean.leader.election.enable, which takes the first
                       live replica with ISR = [it] and may lose acknowledged writes (logged).
    preferred leader   assignment[0] if live and in the ISR, else no change.
    controlled shutdown first replica live, in the ISR and not shutting down; the shutting-down
                       brokers leave the ISR.

Every election bumps leader_epoch and is written with a compare-and-set on the state znode plus
the /controller_epoch check. `Controller` runs them: it watches /controller (and takes office
when it is free), /brokers/ids, /brokers/topics, /admin/delete_topics and
/admin/preferred_replica_election; each watch callback only queues a "reconcile" for one worker
thread, which re-reads ZooKeeper and acts (callbacks coalesce and may skip versions). Its
reassignment pass (KIP-455) is logcore.cluster.reassignments.

With `listener_probe` (broker.failure.probe.enable) the active controller also watches every
registered broker's listener (logcore.cluster.liveness): a registration whose listener refused
connections repeatedly counts as not live, exactly as if its session had expired, until the
listener accepts again or the registration changes. The other brokers watch the active
controller's listener the same way and delete its /controller when it refuses, so that a killed
controller is replaced at once (its registration is left to its session).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

from logcore.cluster.compare_and_set import compare_and_set
from logcore.cluster.reassignments import Reassignments
from logcore.cluster.znode_json import NO_LEADER, ControllerEpoch, LeaderAndIsr
from logcore.cluster.zookeeper_session import is_transient
from logcore.cluster.zookeeper_store import ZooKeeperStore
from logcore.errors import (ControllerMovedError, CoordinatorUnavailableError, TopicNotFoundError,
                            ZkVersionConflictError)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Election:
    leader: int                 # NO_LEADER (-1) when the partition is offline
    isr: tuple[int, ...]
    unclean: bool = False


RETRY_MIN_S, RETRY_MAX_S = 0.2, 5.0      # a failed controller pass is run again, backing off


def elect_leader(assignment, isr, live, unclean: bool = False) -> Election:
    """The offline-partition election (the leader died or the partition is new)."""
    live, isr_set = set(live), set(isr)
    for r in assignment:
        if r in live and r in isr_set:
            return Election(r, tuple(b for b in isr if b in live))
    if unclean:
        for r in assignment:
            if r in live:
                return Election(r, (r,), unclean=True)
    return Election(NO_LEADER, tuple(isr))


def elect_preferred(assignment, isr, live) -> int | None:
    """assignment[0] when it is live and in the ISR, else None (no change)."""
    if assignment and assignment[0] in set(live) and assignment[0] in set(isr):
        return assignment[0]
    return None


def elect_controlled_shutdown(assignment, isr, live, shutting_down) -> Election:
    down = set(shutting_down)
    live = set(live) - down
    new_isr = tuple(b for b in isr if b not in down)
    for r in assignment:
        if r in live and r in new_isr:
            return Election(r, new_isr)
    return Election(NO_LEADER, new_isr or tuple(isr))


def initial_state(assignment, live, controller_epoch: int) -> LeaderAndIsr:
    """A new partition: leader = first live replica, ISR = the live replicas, epoch 0."""
    replicas = [r for r in assignment if r in set(live)]
    return LeaderAndIsr(replicas[0] if replicas else NO_LEADER, 0, tuple(replicas) or tuple(assignment),
                          controller_epoch)


def _truthy(v) -> bool:
    return str(v).strip().lower() == "true"


class Controller:
    """One broker's controller duties. `start()` joins the election; at most one Controller
    in the cluster is active (holds /controller) at a time."""

    def __init__(self, store: ZooKeeperStore, broker_id: int, *, unclean_leader_election: bool = False,
                 auto_rebalance: bool = False, rebalance_interval_s: float = 300.0,
                 imbalance_percentage: int = 10, listener_probe: bool = False,
                 address_overrides: dict[int, tuple[str, int]] | None = None):
        self.store = store
        self.address_overrides = dict(address_overrides or {})
        self._probe = None
        if listener_probe:
            from logcore.cluster.liveness import ListenerProbe
            self._probe = ListenerProbe(lambda: self._events.put("reconcile"),
                                        name=f"listener-probe-{broker_id}")
        self.auto_rebalance = auto_rebalance
        self.rebalance_interval_s = rebalance_interval_s
        self.imbalance_percentage = imbalance_percentage
        self.broker_id = int(broker_id)
        self.unclean_default = unclean_leader_election
        self.fence: ControllerEpoch | None = None
        self._events: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._broker_epochs: dict[int, int] = {}
        self._registrations: dict[int, int] = {}          # broker -> epoch (czxid), as read last
        self._worker = threading.Thread(target=self._run, name=f"controller-{broker_id}", daemon=True)
        self.unclean_elections: list[tuple[str, int, int]] = []   # (topic, partition, leader)
        self._watched_topics: set[str] = set()
        self.reassignments = Reassignments(store, self.broker_id, fence=lambda: self.fence,
                                           eligible=self._eligible, read_state=self._read_state,
                                           write_state=self._write_state,
                                           wake=lambda: self._events.put("reconcile"))
        self.leader_elections, self.election_seconds = 0, 0.0   # Kafka's LeaderElectionRateAndTimeMs

    def _topic_watch(self, _assignment) -> None:
        self._events.put("reconcile")          # (the store ends the watch once the topic is gone)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "Controller":
        self._worker.start()
        if self._probe is not None:
            self._probe.start()
        self.store.on_new_session(lambda: self._events.put("session"))
        self.store.watch_controller(lambda _cid: self._events.put("controller"))
        self.store.watch_brokers(lambda _b: self._events.put("reconcile"))
        self.store.watch_topics(lambda _t: self._events.put("reconcile"))
        self.store.watch_deletions(lambda _t: self._events.put("reconcile"))
        self.store.requests.watch_admin_requests(lambda: self._events.put("reconcile"))
        self.store.requests.watch_controlled_shutdowns(lambda _ids: self._events.put("reconcile"))
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the passes and resign; with `timeout_s`, every wait is bounded by it (a broker
        stopping while ZooKeeper is unreachable must still stop)."""
        self._stop.set()
        self._events.put("stop")
        if self._worker.is_alive():
            self._worker.join(10 if timeout_s is None else timeout_s)
        if self._probe is not None:
            self._probe.stop()
        if self.fence is not None and self.store.connected:
            try:
                self.store.resign_controller(self.broker_id, timeout_s=timeout_s)
            except CoordinatorUnavailableError as exc:
                logger.warning("broker %d: resigning as controller failed: %s (its session ends it)",
                               self.broker_id, exc)
        # A pass still running past the join keeps its fence: its writes stay checked against
        # /controller_epoch (a successor's election fails them), where None would make them
        # unfenced writes. It ends at its next look at the stop flag.
        if not self._worker.is_alive():
            self.fence = None

    @property
    def active(self) -> bool:
        return self.fence is not None and not self._stop.is_set()

    def _run(self) -> None:
        next_rebalance = time.monotonic() + self.rebalance_interval_s
        retry_at: float | None = None        # a failed pass is run again then
        retry_s = RETRY_MIN_S
        while not self._stop.is_set():
            due = [t for t in (next_rebalance if self.auto_rebalance else None, retry_at) if t is not None]
            try:
                event = self._events.get(timeout=max(0.0, min(due) - time.monotonic()) if due else None)
            except queue.Empty:
                event = "retry" if retry_at is not None and time.monotonic() >= retry_at else "rebalance"
            if event == "rebalance" or time.monotonic() >= next_rebalance:
                next_rebalance = time.monotonic() + self.rebalance_interval_s
                if self.auto_rebalance and self.fence is not None:
                    try:
                        self.rebalance_leaders()
                    except ControllerMovedError as e:
                        logger.warning("broker %d: no longer controller: %s", self.broker_id, e)
                        self.fence = None
                    except Exception:                           # noqa: BLE001
                        logger.exception("broker %d: preferred-leader rebalance failed", self.broker_id)
                if event == "rebalance":
                    continue
            # coalesce: everything queued so far is handled by one pass
            while True:
                try:
                    event = self._events.get_nowait()
                except queue.Empty:
                    break
            if self._stop.is_set() or event == "stop":
                return
            try:
                self._step()
                retry_at, retry_s = None, RETRY_MIN_S
            except ControllerMovedError as e:
                logger.warning("broker %d: no longer controller: %s", self.broker_id, e)
                self.fence = None
                self._watch_listeners({})
                retry_at, retry_s = None, RETRY_MIN_S
            except Exception as exc:                            # noqa: BLE001 - keep the loop alive
                # A pass cut short (ZooKeeper away for a moment) may have left partitions with a
                # dead leader; no watch fires again for what it did not read, so run it again.
                if is_transient(exc):
                    logger.warning("broker %d: controller pass failed: %s; again in %.1f s",
                                   self.broker_id, exc, retry_s)
                else:
                    logger.exception("broker %d: controller pass failed; again in %.1f s",
                                     self.broker_id, retry_s)
                retry_at = time.monotonic() + retry_s
                retry_s = min(retry_s * 2, RETRY_MAX_S)

    def _step(self) -> None:
        current = self.store.controller()
        if self.fence is not None and current != self.broker_id:
            logger.warning("broker %d: /controller is %s now; resigning", self.broker_id, current)
            self.fence = None
        if current is None:
            fence = self.store.try_become_controller(self.broker_id)
            if fence is not None:
                logger.info("broker %d is the controller (epoch %d)", self.broker_id, fence.epoch)
                self.fence = fence
                self._broker_epochs = {}
        if self.fence is not None:
            self.reconcile()
        elif self._probe is not None:
            self._watch_controller(current)

    def _watch_controller(self, current: int | None) -> None:
        """Not the controller: watch the active controller's listener; once it refused
        connections repeatedly (its process is gone), delete its /controller so that the
        election runs now rather than when its session expires."""
        brokers = self.store.brokers() if current is not None else {}
        reg = brokers.get(current)
        if reg is None or current == self.broker_id:
            self._watch_listeners({})
            return
        self._watch_listeners({current: reg})
        if self._probe.dead().get(current) == reg.epoch:
            if self.store.depose_dead_controller(current, reg.epoch):
                logger.warning("broker %d: controller %d's listener refuses connections; deleted its"
                               " /controller (its registration stays until its session expires)",
                               self.broker_id, current)

    # ------------------------------------------------------------------ liveness
    def _watch_listeners(self, brokers) -> None:
        if self._probe is None:
            return
        targets = {}
        for b, reg in brokers.items():
            if b == self.broker_id:
                continue
            host, port = self.address_overrides.get(b, (reg.host, reg.port))
            targets[b] = (host, port, reg.epoch)
        self._probe.set_targets(targets)

    def _eligible(self, state: LeaderAndIsr, live) -> set[int]:
        """`live` less the brokers registered after `state` was written (restarted since): no
        election path hands them a seat of the state they belong to their previous process in.
        An offline state's ISR is exactly who may come back: nothing is taken from it."""
        if state.leader == NO_LEADER:
            return set(live)
        regs = self._registrations
        return set(live) - {b for b in (state.leader, *state.isr)
                            if b in regs and state.written_before(regs[b])}

    def _live(self, brokers) -> set[int]:
        """The registered brokers less those whose listener refuses connections (same
        registration: a newer one is a startup)."""
        self._registrations = {b: reg.epoch for b, reg in brokers.items()}
        if self._probe is None:
            return set(brokers)
        dead = self._probe.dead()
        return {b for b, reg in brokers.items() if dead.get(b) != reg.epoch}

    # ------------------------------------------------------------------ the work
    def reconcile(self) -> None:
        """One full pass: failed and bounced brokers, new partitions, deletions, preferred
        elections. Idempotent; every write fenced."""
        brokers = self.store.brokers()
        self._watch_listeners(brokers)
        epochs = {b: r.epoch for b, r in brokers.items()}
        registered = self._live(brokers)  # less the brokers whose listener refuses connections
        bounced = {b for b, e in epochs.items() if b in self._broker_epochs and e > self._broker_epochs[b]}
        live = registered - bounced       # a bounced broker counts as failed for this pass
        deleting = set(self.store.topics_marked_for_deletion())
        for topic in self.store.list_topics():
            if topic in deleting:
                continue
            try:
                self._reconcile_topic(topic, live, brokers)
            except TopicNotFoundError:
                continue
        if bounced:
            # the bounced brokers are back: a second pass lets new partitions use them
            self._broker_epochs = {b: e for b, e in epochs.items() if b not in bounced}
            for topic in self.store.list_topics():
                if topic not in deleting:
                    self._reconcile_topic(topic, registered, brokers)
        self._broker_epochs = epochs
        for topic in deleting:
            self.store.remove_topic(topic, self.fence)
            logger.info("controller %d: deleted topic %r", self.broker_id, topic)
        self._run_requested_preferred_elections(registered)
        self._run_requested_unclean_elections(registered)
        self.reassignments.run_requested(registered)
        self.reassignments.reconcile(registered)
        shutting = self.store.shutting_down() & registered
        if shutting:
            self._move_off(shutting, registered)

    def _unclean_for(self, topic: str) -> bool:
        try:
            config, _ = self.store.topic_config(topic)
        except TopicNotFoundError:
            config = {}
        if "unclean.leader.election.enable" in config:
            return _truthy(config["unclean.leader.election.enable"])
        return self.unclean_default

    def _reconcile_topic(self, topic: str, live: set[int], brokers: dict) -> None:
        if topic not in self._watched_topics:
            # Partitions added to a topic change its znode's data, not /brokers/topics' children.
            # Marked only once the watch is set: a call that failed is made again next pass.
            self.store.watch_assignment(topic, self._topic_watch)
            self._watched_topics.add(topic)
        ta = self.store.topic(topic)
        states = self.store.partition_states(topic)
        missing = {p: initial_state(r, live, self.fence.epoch) for p, r in ta.partitions.items()
                   if p not in states}
        if missing:
            self.store.create_partition_states(topic, missing, self.fence)
        for p, state in states.items():
            self._reconcile_partition(topic, p, list(ta.partitions[p]), state, live, brokers)

    def _reconcile_partition(self, topic, p, assignment, state, all_live, brokers) -> None:
        started, elected = time.perf_counter(), []

        def update(state):
            elected.clear()
            if state.controller_epoch > self.fence.epoch:
                raise ControllerMovedError(
                    f"partition {topic}-{p} was written by controller epoch {state.controller_epoch}"
                    f" > mine ({self.fence.epoch})")
            # A leader or ISR member registered after this state was written restarted (or its
            # session expired) since: its place in the state belongs to its previous process,
            # which may have lost an unflushed tail. It counts as failed for this state (KIP-380's
            # broker epoch, by zxid: no memory of earlier passes or controllers needed).
            restarted = {b for b in (state.leader, *state.isr)
                         if b in brokers and state.written_before(brokers[b].epoch)}
            if restarted:
                logger.info("controller %d: %s-%d: brokers %s registered after its state (leader %d,"
                            " epoch %d, ISR %s) was written; they count as failed for it",
                            self.broker_id, topic, p, sorted(restarted), state.leader,
                            state.leader_epoch, list(state.isr))
            live = set(all_live) - restarted
            if state.leader not in live:
                e = elect_leader(assignment, state.isr, live)
                if e.leader == NO_LEADER:
                    # Only restarted ISR members left (or none): one of them leads again, at a
                    # new epoch (a clean election, as Kafka's); else unclean if the topic allows.
                    e = elect_leader(assignment, state.isr, all_live, self._unclean_for(topic))
                if e.leader != NO_LEADER:
                    if e.unclean:
                        logger.warning(
                            "controller %d: UNCLEAN leader election for %s-%d: broker %d (not in ISR %s)"
                            " becomes leader; acknowledged writes may be lost", self.broker_id, topic, p,
                            e.leader, list(state.isr))
                        self.unclean_elections.append((topic, p, e.leader))
                    elected.append(e.leader)
                    return LeaderAndIsr(e.leader, state.leader_epoch + 1, e.isr, self.fence.epoch)
                if state.leader != NO_LEADER:
                    logger.error("controller %d: %s-%d is offline: no live ISR member (ISR %s)",
                                 self.broker_id, topic, p, list(state.isr))
                    return LeaderAndIsr(NO_LEADER, state.leader_epoch + 1, state.isr, self.fence.epoch)
            elif any(b not in live for b in state.isr):
                # replicas on dead brokers leave the ISR (the ZooKeeper-era controller bumps the epoch)
                return LeaderAndIsr(state.leader, state.leader_epoch + 1,
                                      tuple(b for b in state.isr if b in live), self.fence.epoch)
            return None
        try:                                             # a leader may update the ISR meanwhile
            written = compare_and_set(self._read_state(topic, p), update, self._write_state(topic, p), first=state)
        except ZkVersionConflictError:
            return                                       # lost every race: a later pass re-reads
        if written is not None and elected:
            self._elected(started)

    def _elected(self, started: float) -> None:
        self.leader_elections += 1
        self.election_seconds += time.perf_counter() - started

    def _read_state(self, topic: str, p: int):
        """The read of a compare-and-set on the state znode: fresh from the ensemble's leader."""
        return lambda: self.store.partition_state(topic, p, sync=True)

    def _write_state(self, topic: str, p: int):
        """The write of a compare-and-set on the state znode, fenced by the controller epoch."""
        return lambda state, new: self.store.update_partition_state(topic, p, new, state.zk_version,
                                                                    fence=self.fence)

    def elect_preferred_leaders(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Move each partition's leadership to its preferred replica where it is live and in the
        ISR; returns {(topic, partition): leader} for those that moved."""
        if self.fence is None:
            raise ControllerMovedError(f"broker {self.broker_id} is not the controller")
        live = self._live(self.store.brokers())
        moved = {}
        for topic, p in partitions:
            try:
                assignment = list(self.store.topic(topic).partitions[p])
            except (TopicNotFoundError, KeyError):
                continue

            def update(state):
                leader = elect_preferred(assignment, state.isr, self._eligible(state, live))
                if leader is None or leader == state.leader:
                    return None
                return LeaderAndIsr(leader, state.leader_epoch + 1, state.isr, self.fence.epoch)
            started = time.perf_counter()
            try:
                written = compare_and_set(self._read_state(topic, p), update, self._write_state(topic, p))
            except ZkVersionConflictError:
                continue
            if written is not None:
                moved[(topic, p)] = written.leader
                self._elected(started)
        return moved

    def _run_requested_preferred_elections(self, live) -> None:
        pending = self.store.requests.pending_preferred_elections()
        if pending is None:
            return
        parts, version = pending
        self.elect_preferred_leaders(parts)
        self.store.requests.finish_preferred_elections(version)     # a newer request stays for the next pass

    def _run_requested_unclean_elections(self, live) -> None:
        """ElectLeaders UNCLEAN: each listed partition without a live leader gets the first live
        replica, in or out of the ISR (logged: acknowledged writes may be lost)."""
        pending = self.store.requests.pending_unclean_elections()
        if pending is None:
            return
        parts, version = pending
        for topic, p in parts:
            try:
                assignment = list(self.store.topic(topic).partitions[p])
            except (TopicNotFoundError, KeyError):
                continue

            def update(state):
                if state.leader in live:
                    return None
                e = elect_leader(assignment, state.isr, self._eligible(state, live), unclean=True)
                if e.leader == NO_LEADER:
                    return None
                if e.unclean:
                    logger.warning("controller %d: UNCLEAN leader election for %s-%d (requested): broker"
                                   " %d (not in ISR %s) becomes leader; acknowledged writes may be lost",
                                   self.broker_id, topic, p, e.leader, list(state.isr))
                    self.unclean_elections.append((topic, p, e.leader))
                return LeaderAndIsr(e.leader, state.leader_epoch + 1, e.isr, self.fence.epoch)
            try:
                compare_and_set(self._read_state(topic, p), update, self._write_state(topic, p))
            except ZkVersionConflictError:
                pass
        self.store.requests.finish_unclean_elections(version)

    def _move_off(self, shutting: set[int], live: set[int]) -> None:
        """Controlled shutdown (Kafka's KafkaController.doControlledShutdown): partitions led by a
        stopping broker move to another live ISR member; the stopping brokers leave the ISRs of
        the others (unless they are the last member). Every change bumps the leader epoch."""
        for topic in self.store.list_topics():
            try:
                ta = self.store.topic(topic)
            except TopicNotFoundError:
                continue
            for p, state in self.store.partition_states(topic).items():
                assignment = list(ta.partitions.get(p, ()))
                if len(assignment) < 2:
                    continue
                new = None
                if state.leader in shutting:
                    e = elect_controlled_shutdown(assignment, state.isr, self._eligible(state, live),
                                                  shutting)
                    if e.leader != NO_LEADER:
                        new = LeaderAndIsr(e.leader, state.leader_epoch + 1, e.isr, self.fence.epoch)
                elif any(b in shutting for b in state.isr):
                    isr = tuple(b for b in state.isr if b not in shutting)
                    if isr:
                        new = LeaderAndIsr(state.leader, state.leader_epoch + 1, isr, self.fence.epoch)
                if new is None:
                    continue
                started = time.perf_counter()
                try:
                    self.store.update_partition_state(topic, p, new, state.zk_version, fence=self.fence)
                    if new.leader != state.leader:
                        self._elected(started)
                    logger.info("controller %d: controlled shutdown of %s: %s-%d now led by %d, ISR %s",
                                self.broker_id, sorted(shutting), topic, p, new.leader, list(new.isr))
                except ZkVersionConflictError:
                    self._events.put("reconcile")       # changed meanwhile: another pass

    def rebalance_leaders(self) -> dict[tuple[str, int], int]:
        """auto.leader.rebalance.enable: for each broker whose share of preferred partitions led
        elsewhere is above leader.imbalance.per.broker.percentage, move those back (where the
        preferred replica is live and in the ISR)."""
        live = self._live(self.store.brokers())
        by_preferred: dict[int, list[tuple[str, int, bool]]] = {}
        for topic in self.store.list_topics():
            try:
                ta = self.store.topic(topic)
            except TopicNotFoundError:
                continue
            states = self.store.partition_states(topic)
            for p, replicas in ta.partitions.items():
                state = states.get(p)
                if not replicas or state is None:
                    continue
                by_preferred.setdefault(replicas[0], []).append((topic, p, state.leader != replicas[0]))
        wanted = []
        for broker, parts in by_preferred.items():
            if broker not in live:
                continue
            off = [(t, p) for t, p, elsewhere in parts if elsewhere]
            if off and 100 * len(off) / len(parts) > self.imbalance_percentage:
                wanted += off
        return self.elect_preferred_leaders(wanted) if wanted else {}
