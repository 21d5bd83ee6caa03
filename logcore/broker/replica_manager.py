# Over 600 lines: one state machine (ZooKeeper views, role transitions, ISR, HW, acks=all) whose parts share its per-partition state.
"""A cluster member's replicas: which partitions this broker leads or follows, as ZooKeeper says.

Design (replication.md 4.9, the watch-based one): every broker watches ZooKeeper itself; there
are no LeaderAndIsr / UpdateMetadata requests. The controller (logcore.cluster.controller)
writes each partition's state znode (leader, leader_epoch, isr, controller_epoch); every broker
watches /brokers/ids, /brokers/topics, each topic's assignment and config, and every partition's
state znode, and
- keeps the metadata it answers clients with (live brokers, assignments, leaders, ISRs, epochs);
- for the partitions it holds a replica of, applies each new leader epoch: become leader (the
  epoch cache gets (epoch, LEO) at once; followers get a grace period) or become follower (the
  replica fetcher pulls from the leader, logcore.broker.replica_fetcher). A state with an older
  epoch is ignored; one with the same epoch only updates the ISR and the znode version.

As leader it tracks each follower's fetches (logcore.broker.isr), moves the high watermark to
the smallest LEO of the ISR (not while the ISR is below min.insync.replicas), shrinks the ISR of
followers lagging more than replica.lag.time.max.ms and adds followers that caught up, writing
the ISR itself with a compare-and-set on the state znode (Kafka 2.6's way); a lost race means
re-read. acks=all produces wait here until the HW passes them.

ZooKeeper callbacks arrive on kazoo's threads: each only posts an event to the broker's event
loop, where one task applies them in order; blocking work (ZooKeeper calls, opening logs) runs
in threads.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field

from logcore.wire import error_codes as E
from logcore.broker.isr import (FollowerState, high_watermark_candidate, may_join, out_of_sync,
                                reset_followers)
from logcore.cluster.zookeeper_store import NO_LEADER, PartitionState, TopicAssignment, is_transient
from logcore.errors import (CoordinatorUnavailableError, SegLogError, TopicExistsError, TopicNotFoundError,
                            ZkVersionConflictError)

logger = logging.getLogger(__name__)

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"
SHUTDOWN_PATH = "/admin/controlled_shutdown"
EVENT_RETRY_S = 0.5            # an event that failed on a ZooKeeper call is applied again then


def _now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(eq=False)
class Replica:
    """This broker's replica of one partition."""
    topic: str
    index: int
    role: str = OFFLINE
    state: PartitionState | None = None          # the state applied last
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


class ReplicaManager:
    def __init__(self, broker, store, catalog):
        from logcore.broker.replica_fetcher import ReplicaFetchers

        self.broker = broker
        self.store = store
        self.catalog = catalog
        self.config = broker.config
        self.me = broker.node_id
        self.partitions = broker.partitions
        self.brokers: dict = {}                               # live registrations by id
        self.controller_id: int = -1
        self.assignments: dict[str, TopicAssignment] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.replicas: dict[tuple[str, int], Replica] = {}
        self._hosted: set[tuple[str, int]] = set()            # recorded in the log dir this run
        self.shutting_down: set[int] = set()
        self.overrides = self.config.address_overrides()
        self.lag_max_ms = float(self.config["replica.lag.time.max.ms"])
        self.fetchers = ReplicaFetchers(self)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue | None = None
        self._tasks: list[asyncio.Task] = []
        self._watched_topics: set[str] = set()
        self._watched_states: set[tuple[str, int]] = set()
        self._checked_topics: set[str] = set()                # left-over replicas looked for
        self._stopped = False
        self.changed: asyncio.Event | None = None            # set whenever metadata changed
        # f(topic, partition, leader: bool), called on the loop when this broker starts leading
        # a partition (True) or stops (False): the group coordinator follows __consumer_offsets.
        self.leadership_listeners: list = []

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._events = asyncio.Queue()
        self.changed = asyncio.Event()
        self._tasks = [self.loop.create_task(self._run(), name="replica-manager"),
                       self.loop.create_task(self._shrink_loop(), name="isr-shrink"),
                       self.loop.create_task(self._checkpoint_loop(), name="hw-checkpoint")]
        store = self.store
        await asyncio.to_thread(store.client.ensure_path, SHUTDOWN_PATH)
        try:
            # Whose log dir this is and on which host, kept when the broker stops (readers of
            # the log dir name it; the Spark source prefers replicas on its own host).
            await asyncio.to_thread(self.partitions.root.record_broker, self.me, self.broker.host,
                                    self.broker.port)
        except SegLogError as exc:
            logger.error("broker %d: cannot record itself in %s: %s", self.me, self.partitions.root.url, exc)
        store.watch_brokers(lambda b: self._post(("brokers", b)))
        store.watch_controller(lambda c: self._post(("controller", c)))
        store.watch_topics(lambda names: self._post(("topics", names)))
        store.client.ChildrenWatch(SHUTDOWN_PATH, lambda ids: self._post(("shutdown", ids)))

    async def stop(self) -> None:
        self._stopped = True
        await self.fetchers.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for replica in self.replicas.values():
            self._fail_waiters(replica, E.NOT_LEADER_OR_FOLLOWER)

    def _post(self, event) -> None:
        """From any thread (kazoo's callbacks): queue `event` for the loop. Never blocks."""
        if self._stopped or self.loop is None:
            return
        try:
            self.loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:          # the loop is closed: the broker is stopping
            pass

    async def _run(self) -> None:
        while True:
            event = await self._events.get()
            try:
                await self._handle(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:   # noqa: BLE001 - one bad event must not stop the replicas
                if self.partitions.storage_failed(exc, f"applying {event[0]}"):
                    continue                # the log dir is offline: the broker is stopping
                if is_transient(exc):
                    # ZooKeeper away for a moment: the event is applied again (every event is
                    # idempotent), else a watch never set would never fire.
                    logger.warning("broker %d: handling %s failed: %s; again in %.1f s", self.me,
                                   event[0], exc, EVENT_RETRY_S)
                    self.loop.call_later(EVENT_RETRY_S, self._post, event)
                else:
                    logger.exception("broker %d: handling %s failed", self.me, event[0])
            self.changed.set()
            self.changed = asyncio.Event()

    async def _handle(self, event) -> None:
        kind = event[0]
        if kind == "brokers":
            self.brokers = dict(event[1])
            self.fetchers.brokers_changed()
        elif kind == "controller":
            self.controller_id = event[1] if event[1] is not None else -1
        elif kind == "shutdown":
            self.shutting_down = {int(i) for i in event[1] if str(i).isdigit()}
        elif kind == "topics":
            await self._topics_changed(event[1])
        elif kind == "assignment":
            await self._assignment_changed(event[1], event[2])
        elif kind == "config":
            await self._config_changed(event[1], event[2])
        elif kind == "state":
            await self._state_changed(event[1], event[2], event[3])
        elif kind == "registered":
            # Now that this broker is registered, apply the states read meanwhile.
            for key, state in sorted(self.states.items()):
                if key not in self.replicas or self.replicas[key].state is None:
                    await self._state_changed(key[0], key[1], state)

    def registered(self) -> None:
        """This broker's registration is in ZooKeeper (ClusterMember.register): states start to
        be applied. Before it, a restarted broker would act on states written for its previous
        process while that process's session may still be alive (KIP-380's broker epoch)."""
        self._post(("registered",))

    def _registration_epoch(self) -> int | None:
        reg = self.store.registration
        return reg.epoch if reg is not None else None

    # ------------------------------------------------------------------ topics
    async def _topics_changed(self, names) -> None:
        names = set(names)
        for name in sorted(names - self._watched_topics):
            # Marked once both watches are set: a failed call is made again (_run re-posts).
            await asyncio.to_thread(self.store.client.DataWatch, f"/brokers/topics/{name}",
                                    self._assignment_watch(name))
            await asyncio.to_thread(self.store.client.DataWatch, f"/config/topics/{name}",
                                    self._config_watch(name))
            self._watched_topics.add(name)
        for name in sorted(self._watched_topics - names):
            self._watched_topics.discard(name)
            await self._assignment_changed(name, None)

    # kazoo passes a watch function's third parameter the event: these take exactly two.
    def _assignment_watch(self, name: str):
        path = f"/brokers/topics/{name}"

        def on_assignment(raw, stat):
            if stat is None:
                self._post(("assignment", name, None))
                return False                      # the topic is gone: stop watching
            self._post(("assignment", name, TopicAssignment.from_json(name, raw, stat.version, path)))
            return None
        return on_assignment

    def _config_watch(self, name: str):
        def on_config(raw, stat):
            if stat is None:
                return False
            try:
                config = {k: str(v) for k, v in json.loads(raw or b"{}").get("config", {}).items()}
            except ValueError:
                logger.error("config of topic %s in ZooKeeper is not JSON; ignored", name)
                return None
            self._post(("config", name, config))
            return None
        return on_config

    async def _config_changed(self, name: str, config: dict[str, str]) -> None:
        if self.topic_configs.get(name) == config:
            return
        self.topic_configs[name] = config
        if name in self.partitions.topics:
            current = self.partitions.topics[name].config
            if current != config:
                await asyncio.to_thread(self._sync_local_config, name, config)

    def _sync_local_config(self, name: str, config: dict[str, str]) -> None:
        try:
            info = self.partitions.root.alter_topic_config(name, config)
            self.partitions.topics[name] = info
        except SegLogError as exc:
            logger.error("topic %s: cannot apply its config %s locally: %s", name, config, exc)

    async def _assignment_changed(self, name: str, ta: TopicAssignment | None) -> None:
        if ta is None:
            self.assignments.pop(name, None)
            self.topic_configs.pop(name, None)
            for key in [k for k in self.states if k[0] == name]:
                self.states.pop(key, None)
                self._watched_states.discard(key)
            removed = [r for k, r in self.replicas.items() if k[0] == name]
            for replica in removed:
                await self._stop_replica(replica, unhost=False)     # the whole topic goes
                self.replicas.pop(replica.key, None)
            if removed or name in self.partitions.topics:
                await asyncio.to_thread(self._delete_local_topic, name)
            return
        self.assignments[name] = ta
        hosted = [p for p, replicas in ta.partitions.items() if self.me in replicas]
        if hosted or name in self.partitions.topics:
            await asyncio.to_thread(self._ensure_local_topic, ta)
        for p in sorted(ta.partitions):
            key = (name, p)
            if key in self._watched_states:
                continue
            await asyncio.to_thread(self.store.watch_partition_state, name, p, self._state_watch(key))
            self._watched_states.add(key)
        # A replica that left the assignment (a reassignment) stops and is deleted; a partition
        # that gained this broker starts at the state already known (its epoch bump may have
        # been read before this assignment).
        for key, replica in list(self.replicas.items()):
            if key[0] == name and self.me not in ta.partitions.get(key[1], ()):
                await self._stop_replica(replica, delete=True)
                self.replicas.pop(key, None)
        if not hosted and name in self.partitions.topics:
            await asyncio.to_thread(self._delete_local_topic, name)
        for p in hosted:
            key = (name, p)
            if key not in self.replicas and key in self.states:
                await self._state_changed(name, p, self.states[key])
        if name not in self._checked_topics and name in self.partitions.topics:
            # First sight since this broker started: data of partitions moved away while it was
            # down is deleted as a reassigned-away replica is.
            self._checked_topics.add(name)
            for p in sorted(ta.partitions):
                if self.me not in ta.partitions[p] and (name, p) not in self.replicas and \
                        await asyncio.to_thread(self.partitions.root.partition_holds_data, name, p):
                    await self._stop_replica(Replica(name, p), delete=True)

    def _state_watch(self, key):
        def on_state(state):
            self._post(("state", key[0], key[1], state))
        return on_state

    def _ensure_local_topic(self, ta: TopicAssignment) -> None:
        """The local log root holds the topic with the cluster's id, partition count and config,
        with a folder only for the partitions this broker holds replicas of (`hosted` in the
        root's topics file: none at creation, each added as its replica starts, _set_hosted);
        recorded replicas that are no longer assigned here (a reassignment while this broker
        was away, or a log dir from before the record) are dropped from the record."""
        root = self.partitions.root
        mine = {p for p, replicas in ta.partitions.items() if self.me in replicas}
        count = max(ta.partitions) + 1 if ta.partitions else 0
        config = self.topic_configs.get(ta.name)
        if config is None:
            try:
                config, _ = self.store.topic_config(ta.name)
            except TopicNotFoundError:
                config = {}
            self.topic_configs[ta.name] = config
        with self.partitions.lock:
            try:
                info = root.describe_topic(ta.name)
            except TopicNotFoundError:
                info = None
            if info is not None and info.topic_id != ta.topic_id:
                # The topic was deleted and created again while this broker was away.
                logger.warning("topic %s: the local replica has topic id %s, the cluster's is %s;"
                               " dropping the old data", ta.name, info.topic_id, ta.topic_id)
                self._delete_local_topic(ta.name)
                info = None
            if info is None:
                if not mine:
                    return
                try:
                    info = root.create_topic(ta.name, count, config, topic_id=ta.topic_id, hosted=())
                except TopicExistsError:
                    info = root.describe_topic(ta.name)
            elif info.partitions < count:
                info = root.add_partitions(ta.name, count)
            held = set(range(info.partitions) if info.hosted is None else info.hosted)
            if info.hosted is None or held - mine:
                root.set_hosted(ta.name, remove=held - mine)
                self._hosted.difference_update((ta.name, p) for p in held - mine)
            self.partitions.open_topic(info, eager=False)

    def _delete_local_topic(self, name: str) -> None:
        self._hosted.difference_update([k for k in list(self._hosted) if k[0] == name])
        with self.partitions.lock:
            self.partitions.close_topic(name)
            try:
                self.partitions.root.delete_topic(name)
                logger.info("deleted the local replicas of topic %s", name)
            except TopicNotFoundError:
                pass
            except SegLogError as exc:
                logger.error("cannot delete the local replicas of topic %s: %s", name, exc)

    # ------------------------------------------------------------------ partition states
    async def _state_changed(self, topic: str, p: int, state: PartitionState | None) -> None:
        key = (topic, p)
        if state is None:
            self.states.pop(key, None)
            return
        old = self.states.get(key)
        if old is not None and (state.leader_epoch, state.zk_version) < (old.leader_epoch, old.zk_version):
            return                              # an older read than what we have
        self.states[key] = state
        ta = self.assignments.get(topic)
        if ta is None or self.me not in ta.partitions.get(p, ()):
            return
        broker_epoch = self._registration_epoch()
        if broker_epoch is None:
            return                              # not registered yet: `registered` applies it
        replica = self.replicas.get(key)
        if replica is None:
            replica = self.replicas[key] = Replica(topic, p)
        if replica.state is not None and state.leader_epoch < replica.epoch:
            return                              # stale (replication.md 0.10)
        if replica.state is not None and state.leader_epoch == replica.epoch and replica.role != OFFLINE:
            if state.zk_version >= replica.state.zk_version:
                replica.state = state            # the ISR changed at the same epoch
                if replica.role == LEADER:
                    self._maybe_increment_hw(replica)
            return
        if state.leader == self.me and state.written_before(broker_epoch):
            # Written for a previous process of this broker (its log may have lost an
            # unflushed tail since): leading at that epoch could make followers truncate
            # acknowledged records. The controller elects again for this registration.
            logger.warning("broker %d: the state of %s-%d names it leader at epoch %d, but was written"
                           " before its registration (broker epoch %d); waiting for the controller",
                           self.me, topic, p, state.leader_epoch, broker_epoch)
            await self._become_offline(replica, state)
        elif state.leader == self.me:
            await self._become_leader(replica, state)
        elif state.leader != NO_LEADER:
            await self._become_follower(replica, state)
        else:
            await self._become_offline(replica, state)

    def _partition(self, replica: Replica):
        part = self.partitions.get(replica.topic, replica.index)
        if part is None:
            raise TopicNotFoundError(f"{replica.topic}-{replica.index} is not open on broker {self.me}")
        return part

    async def _with_log(self, replica: Replica, fn):
        part = self._partition(replica)

        def run():
            try:
                return fn(part.log)
            finally:
                self.partitions.unpin_thread()
        return await asyncio.to_thread(run)

    async def _become_leader(self, replica: Replica, state: PartitionState) -> None:
        if not await self._set_hosted(replica.topic, replica.index, True):
            return
        was_leader = replica.role == LEADER
        self.fetchers.remove(replica)

        def lead(log):
            log.become_leader(state.leader_epoch)
            return log.log_end_offset, log.high_watermark

        try:
            leo, hw = await self._with_log(replica, lead)
        except SegLogError as exc:
            self.partitions.storage_failed(exc, f"becoming leader of {replica.topic}-{replica.index}")   # a failed disk: the broker stops
            logger.error("broker %d cannot lead %s-%d at epoch %d: %s", self.me, replica.topic,
                         replica.index, state.leader_epoch, exc)
            return
        replica.followers = reset_followers(self.assignment_of(replica), self.me, state.isr,
                                            replica.followers if was_leader else None, _now_ms())
        replica.state = state
        replica.role = LEADER
        replica.epoch_start_offset = leo
        logger.info("broker %d leads %s-%d at epoch %d (LEO %d, HW %d, ISR %s)", self.me, replica.topic,
                    replica.index, state.leader_epoch, leo, hw, list(state.isr))
        self._maybe_increment_hw(replica)
        self.partitions.notify(self._partition(replica))
        self._leadership(replica, True)

    def _leadership(self, replica: Replica, leader: bool) -> None:
        for listener in self.leadership_listeners:
            try:
                listener(replica.topic, replica.index, leader)
            except Exception:   # noqa: BLE001 - a listener's bug must not stop the replicas
                logger.exception("broker %d: leadership listener failed for %s-%d", self.me,
                                 replica.topic, replica.index)

    def _resign(self, replica: Replica) -> None:
        if replica.role == LEADER:
            self._leadership(replica, False)

    async def _become_follower(self, replica: Replica, state: PartitionState) -> None:
        # Stop leading before anything awaits: produce_check refuses from here, an acks=all
        # waiter registered later fails at once, and the log itself refuses a leader's append
        # from the moment become_follower runs under its lock (a batch the partition worker
        # still holds is not stamped with the new epoch).
        self._resign(replica)
        replica.role = OFFLINE
        self._fail_waiters(replica, E.NOT_LEADER_OR_FOLLOWER)
        self.fetchers.remove(replica)
        if not await self._set_hosted(replica.topic, replica.index, True):
            return
        try:
            await self._with_log(replica, lambda log: log.become_follower(state.leader_epoch))
        except SegLogError as exc:
            self.partitions.storage_failed(exc, f"becoming follower of {replica.topic}-{replica.index}")   # a failed disk: the broker stops
            logger.error("broker %d cannot follow %s-%d at epoch %d: %s", self.me, replica.topic,
                         replica.index, state.leader_epoch, exc)
            return
        replica.state = state
        replica.role = FOLLOWER
        replica.followers = {}
        logger.info("broker %d follows broker %d for %s-%d at epoch %d", self.me, state.leader,
                    replica.topic, replica.index, state.leader_epoch)
        self.fetchers.add(replica, state.leader)
        self.partitions.notify(self._partition(replica))

    async def _become_offline(self, replica: Replica, state: PartitionState) -> None:
        leading = replica.role == LEADER
        self._resign(replica)
        replica.role = OFFLINE
        self._fail_waiters(replica, E.NOT_LEADER_OR_FOLLOWER)
        self.fetchers.remove(replica)
        replica.state = state
        replica.followers = {}
        if leading:
            # The log stops taking a leader's appends too (batches still queued for it).
            try:
                await self._with_log(replica, lambda log: log.become_follower(state.leader_epoch))
            except SegLogError as exc:
                self.partitions.storage_failed(exc, f"stopping to lead {replica.topic}-{replica.index}")   # a failed disk: the broker stops
                logger.error("broker %d: %s-%d: cannot stop leading at epoch %d: %s", self.me,
                             replica.topic, replica.index, state.leader_epoch, exc)

    async def _stop_replica(self, replica: Replica, delete: bool = False, unhost: bool = True) -> None:
        """Kafka's StopReplica: no longer lead or follow. `unhost` drops it from the log dir's
        record of hosted replicas (not when the whole topic goes); with `delete` (the replica
        was reassigned away) its files go too and it is neither served nor counted."""
        self._resign(replica)
        self._fail_waiters(replica, E.NOT_LEADER_OR_FOLLOWER)
        self.fetchers.remove(replica)
        replica.role = OFFLINE
        if unhost:
            self._hosted.add(replica.key)           # so that the record is always rewritten
            await self._set_hosted(replica.topic, replica.index, False)
        else:
            self._hosted.discard(replica.key)
        if delete:
            async with replica.io:                   # a follower write in flight finishes first
                await asyncio.to_thread(self.partitions.drop_replica, replica.topic, replica.index)
            logger.info("broker %d: deleted its replica of %s-%d (reassigned away)", self.me,
                        replica.topic, replica.index)

    def removing_of(self, replica: Replica) -> tuple[int, ...]:
        """The replicas a reassignment is removing: they never join the ISR again (a fetch
        that arrives after the controller completed the move must not bring one back)."""
        ta = self.assignments.get(replica.topic)
        return ta.removing_replicas.get(replica.index, ()) if ta is not None else ()

    async def _set_hosted(self, topic: str, p: int, hosted: bool) -> bool:
        """The one place that keeps the log dir's record of the replicas this broker holds
        (LogRoot.set_hosted): a replica is recorded, and its folder made, before it first leads
        or follows (become leader / follower; later transitions find it recorded); a stopped one
        is dropped (its files stay unless it was reassigned away, _stop_replica). Readers of the log dir tell a partition held elsewhere from
        an empty one by it, with no broker to ask."""
        key = (topic, p)
        if hosted == (key in self._hosted):
            return True

        def run():
            with self.partitions.lock:
                self.partitions.root.set_hosted(topic, add=[p] if hosted else (),
                                                remove=() if hosted else [p])
        try:
            await asyncio.to_thread(run)
            if hosted:
                self._hosted.add(key)
            else:
                self._hosted.discard(key)
            return True
        except SegLogError as exc:
            self.partitions.storage_failed(exc, "recording the hosted replicas")   # a failed disk: the broker stops
            logger.error("broker %d: cannot record that it %s a replica of %s-%d in %s: %s", self.me,
                         "holds" if hosted else "no longer holds", topic, p,
                         self.partitions.root.url, exc)
            return False

    def assignment_of(self, replica: Replica) -> tuple[int, ...]:
        ta = self.assignments.get(replica.topic)
        return ta.partitions.get(replica.index, ()) if ta is not None else ()

    # ------------------------------------------------------------------ leader duties
    def role_of(self, topic: str, p: int) -> str | None:
        """LEADER, FOLLOWER or OFFLINE for a partition this broker holds a replica of, else None.
        (Called from the maintenance thread: a read of one dict entry.)"""
        replica = self.replicas.get((topic, p))
        return replica.role if replica is not None else None

    def leader_replica(self, topic: str, p: int) -> Replica | None:
        replica = self.replicas.get((topic, p))
        return replica if replica is not None and replica.role == LEADER else None

    def min_insync(self, replica: Replica) -> int:
        """min(min.insync.replicas, replica count): Kafka's effective minimum."""
        part = self.partitions.get(replica.topic, replica.index)
        if part is not None and part._log is not None:
            configured = part._log.config.min_insync_replicas
        else:
            configured = self.partitions.root.topic_config(replica.topic).min_insync_replicas
        return min(configured, max(1, len(self.assignment_of(replica))))

    def produce_check(self, topic: str, p: int, acks_all: bool) -> tuple[int, str | None]:
        """Before appending: only the leader takes produces, and acks=all needs an ISR of at
        least min.insync.replicas (else NOT_ENOUGH_REPLICAS, nothing appended)."""
        code = self.partition_error(topic, p)
        if code != E.NONE:
            return code, f"broker {self.me} is not the leader of {topic}-{p}"
        replica = self.replicas[(topic, p)]
        if acks_all:
            need = self.min_insync(replica)
            if len(replica.isr) < need:
                return E.NOT_ENOUGH_REPLICAS, (
                    f"The size of the current ISR {list(replica.isr)} is insufficient to satisfy the"
                    f" min.isr requirement of {need} for partition {topic}-{p}")
        return E.NONE, None

    def epoch_start_offset(self, topic: str, p: int) -> int:
        replica = self.replicas.get((topic, p))
        return replica.epoch_start_offset if replica is not None and replica.role == LEADER else 0

    def _effective_isr(self, replica: Replica) -> tuple[int, ...]:
        """The maximal ISR (KIP-497): an expansion being written already counts."""
        isr = replica.isr
        if replica.pending_isr is not None and len(replica.pending_isr) > len(isr):
            return replica.pending_isr
        return isr

    def _maybe_increment_hw(self, replica: Replica) -> None:
        part = self.partitions.get(replica.topic, replica.index)
        if part is None or part._log is None or replica.role != LEADER:
            return
        log = part._log
        candidate = high_watermark_candidate(
            log.log_end_offset, self._effective_isr(replica), self.me, replica.followers,
            log.config.min_insync_replicas, len(self.assignment_of(replica)))
        if candidate is not None and candidate > log.high_watermark:
            log.maybe_increment_high_watermark(candidate)
            self.partitions.notify(part)
        self._complete_waiters(replica, log.high_watermark)

    def after_append(self, part) -> None:
        """The partition manager appended (the leader's LEO moved): with an ISR of the leader
        alone the HW follows at once; parked follower fetches wake (notify)."""
        replica = self.replicas.get((part.topic, part.index))
        if replica is not None and replica.role == LEADER:
            self._maybe_increment_hw(replica)

    def on_follower_fetch(self, replica: Replica, follower: int, fetch_offset: int,
                          log_start: int, leader_leo: int, leader_epoch: int) -> None:
        """A follower's non-diverging fetch at `fetch_offset` reached the leader (its LEO then
        was `leader_leo`), checked at `leader_epoch`. A fetch parked in a long poll may come
        back after this broker was deposed: it then counts for nothing (an ISR write from it
        would name this broker leader at the new leader's epoch)."""
        if replica.role != LEADER or replica.epoch != leader_epoch:
            return
        state = replica.followers.get(follower)
        if state is None:
            state = replica.followers[follower] = FollowerState()
        state.on_fetch(fetch_offset, leader_leo, _now_ms())
        state.log_start_offset = log_start
        part = self.partitions.get(replica.topic, replica.index)
        if part is None or part._log is None:
            return
        if (follower not in replica.isr and replica.isr_change is None
                and follower in self.brokers and follower not in self.shutting_down
                and follower in self.assignment_of(replica) and follower not in self.removing_of(replica)
                and may_join(state, part._log.high_watermark, replica.epoch_start_offset)):
            new_isr = tuple(b for b in self.assignment_of(replica) if b in replica.isr or b == follower)
            logger.info("broker %d: %s-%d: follower %d caught up (LEO %d); expanding the ISR from %s"
                        " to %s", self.me, replica.topic, replica.index, follower, fetch_offset,
                        list(replica.isr), list(new_isr))
            self._change_isr(replica, new_isr)
        self._maybe_increment_hw(replica)

    def _change_isr(self, replica: Replica, new_isr: tuple[int, ...]) -> None:
        """Write a new ISR (the caller checked on the loop, with no await since, that this broker
        leads). The state it is based on is taken now: one read later could be a new leader's."""
        state = replica.state
        if replica.role != LEADER or state is None or state.leader != self.me:
            return
        new_isr = self._without_restarted(replica, state, new_isr)
        replica.pending_isr = new_isr
        replica.isr_change = self.loop.create_task(self._write_isr(replica, state, new_isr))

    def _without_restarted(self, replica: Replica, state: PartitionState,
                           isr: tuple[int, ...]) -> tuple[int, ...]:
        """`isr` less the members registered after `state` was written: they restarted (or their
        session expired) since, and may have lost what they had; writing them back would make
        an old membership look current (the controller drops them, KIP-380)."""
        keep = []
        for b in isr:
            reg = self.brokers.get(b)
            if b != self.me and reg is not None and state.written_before(reg.epoch):
                logger.info("broker %d: %s-%d: broker %d registered again since the state was written;"
                            " left out of the ISR until it catches up", self.me, replica.topic,
                            replica.index, b)
                continue
            keep.append(b)
        return tuple(keep)

    async def _write_isr(self, replica: Replica, state: PartitionState, new_isr: tuple[int, ...]) -> None:
        try:
            new = PartitionState(self.me, state.leader_epoch, new_isr, state.controller_epoch)
            try:
                written = await asyncio.to_thread(self.store.update_partition_state, replica.topic,
                                                  replica.index, new, state.zk_version)
            except CoordinatorUnavailableError as exc:
                # The outcome is unknown: ZooKeeper may have applied it. Until a read says, the
                # pending ISR keeps counting (the maximal ISR) and nothing else is written.
                written = await self._resolve_unknown_isr_write(replica, state, new, exc)
                if written is None:
                    return
            if replica.role == LEADER and replica.epoch == state.leader_epoch:
                replica.state = written
                if self.states.get(replica.key, written).zk_version <= written.zk_version:
                    self.states[replica.key] = written
        except ZkVersionConflictError:
            # Deposed, or the controller changed the ISR: re-read and apply what is there.
            fresh = await asyncio.to_thread(self.store.partition_state, replica.topic, replica.index,
                                            sync=True)
            logger.info("broker %d: %s-%d: the ISR write lost a race (state now %s); re-read",
                        self.me, replica.topic, replica.index, fresh)
            if fresh is not None:
                self._post(("state", replica.topic, replica.index, fresh))
        except Exception as exc:   # noqa: BLE001 - ZooKeeper away: the next check retries
            logger.warning("broker %d: %s-%d: writing the ISR %s failed: %s", self.me, replica.topic,
                           replica.index, list(new_isr), exc)
        finally:
            replica.pending_isr = None
            replica.isr_change = None
        if replica.role == LEADER:
            self._maybe_increment_hw(replica)

    async def _resolve_unknown_isr_write(self, replica: Replica, state: PartitionState,
                                         new: PartitionState, exc: Exception) -> PartitionState | None:
        """After an ISR write whose outcome is unknown (the connection broke before the answer):
        read the state znode until ZooKeeper answers, and recognise this broker's own write
        (Kafka re-reads and compares its proposed state). The state it wrote, or None: not
        applied, written by someone else (that state is applied), or this broker was deposed
        meanwhile."""
        logger.warning("broker %d: %s-%d: the outcome of writing the ISR %s is unknown (%s); reading"
                       " it back", self.me, replica.topic, replica.index, list(new.isr), exc)
        delay = 0.05
        while not self._stopped and replica.role == LEADER and replica.epoch == state.leader_epoch:
            try:
                fresh = await asyncio.to_thread(self.store.partition_state, replica.topic,
                                                replica.index, sync=True)
            except CoordinatorUnavailableError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if fresh is None or fresh.zk_version == state.zk_version:
                return None                      # not applied: the next check writes again
            if (fresh.zk_version == state.zk_version + 1 and fresh.leader == self.me
                    and fresh.leader_epoch == state.leader_epoch and fresh.isr == tuple(new.isr)
                    and fresh.controller_epoch == state.controller_epoch):
                logger.info("broker %d: %s-%d: the ISR write was applied (version %d)", self.me,
                            replica.topic, replica.index, fresh.zk_version)
                return fresh
            self._post(("state", replica.topic, replica.index, fresh))
            return None
        return None

    async def _shrink_loop(self) -> None:
        interval = max(0.05, self.lag_max_ms / 2000.0)
        while True:
            await asyncio.sleep(interval)
            now = _now_ms()
            for replica in list(self.replicas.values()):
                if replica.role != LEADER or replica.isr_change is not None:
                    continue
                part = self.partitions.get(replica.topic, replica.index)
                if part is None or part._log is None:
                    continue
                lagging = out_of_sync(replica.isr, self.me, replica.followers, part._log.log_end_offset,
                                      now, self.lag_max_ms)
                if lagging:
                    new_isr = tuple(b for b in replica.isr if b not in lagging)
                    logger.warning("broker %d: %s-%d: followers %s are more than %d ms behind;"
                                   " shrinking the ISR from %s to %s", self.me, replica.topic,
                                   replica.index, lagging, int(self.lag_max_ms), list(replica.isr),
                                   list(new_isr))
                    self._change_isr(replica, new_isr)

    async def _checkpoint_loop(self) -> None:
        """Each replica's HW to replication-offset-checkpoint (Kafka's
        replica.high.watermark.checkpoint.interval.ms); the logs write it at close too."""
        interval = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000.0
        written: dict[tuple[str, int], int] = {}
        while True:
            await asyncio.sleep(interval)
            due = []
            for key, replica in list(self.replicas.items()):
                part = self.partitions.get(*key)
                log = part._log if part is not None else None
                if log is not None and written.get(key) != log.high_watermark:
                    due.append((key, log, log.high_watermark))
            if due and not self.partitions.log_dir_failure.all_failed:
                await asyncio.to_thread(self._checkpoint, due, written)

    def _checkpoint(self, due, written) -> None:
        for key, log, hw in due:
            try:
                log.checkpoint_high_watermark()
                written[key] = hw
            except Exception as exc:   # noqa: BLE001 - closed meanwhile, or a disk error
                if self.partitions.storage_failed(exc, f"high watermark checkpoint of {key[0]}-{key[1]}"):
                    return          # the log dir is offline: the broker is stopping
                logger.debug("checkpointing %s-%d failed: %s", key[0], key[1], exc)

    # ------------------------------------------------------------------ acks=all
    async def wait_for_high_watermark(self, replica: Replica, required: int, timeout_s: float) -> int:
        """Park an acks=all write until the HW reaches `required` (its last offset + 1): the
        code of high_watermark_reached, or REQUEST_TIMED_OUT (the records may still commit)."""
        fut = self.high_watermark_reached(replica, required)
        if not fut.done():
            await asyncio.wait((fut,), timeout=timeout_s)
            if not fut.done():
                self.forget_waiter(replica, fut)
                return E.REQUEST_TIMED_OUT
        return fut.result()

    def high_watermark_reached(self, replica: Replica, required: int) -> asyncio.Future:
        """A future for an acks=all produce appended up to `required` (its last offset + 1),
        set once the HW passes it: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (the HW passed it with
        the ISR below min.insync.replicas) or NOT_LEADER_OR_FOLLOWER (leadership moved; the
        records may survive on the new leader). A caller that stops waiting (its timeout) hands
        it to forget_waiter. Futures, not a coroutine per partition: a produce waits for all of
        its partitions with one timer."""
        fut = self.loop.create_future()
        part = self.partitions.get(replica.topic, replica.index)
        if replica.role != LEADER or part is None or part._log is None:
            fut.set_result(E.NOT_LEADER_OR_FOLLOWER)
        elif part._log.high_watermark >= required:
            fut.set_result(self._enough(replica))
        else:
            replica.waiters.append((required, fut))
        return fut

    @staticmethod
    def forget_waiter(replica: Replica, fut: asyncio.Future) -> None:
        fut.cancel()
        replica.waiters = [w for w in replica.waiters if w[1] is not fut]

    def _enough(self, replica: Replica) -> int:
        return E.NONE if len(self._effective_isr(replica)) >= self.min_insync(replica) \
            else E.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    def _complete_waiters(self, replica: Replica, hw: int) -> None:
        if not replica.waiters:
            return
        keep = []
        for required, fut in replica.waiters:
            if fut.done():
                continue
            if hw >= required:
                fut.set_result(self._enough(replica))
            else:
                keep.append((required, fut))
        replica.waiters = keep

    @staticmethod
    def _fail_waiters(replica: Replica, code: int) -> None:
        for _, fut in replica.waiters:
            if not fut.done():
                fut.set_result(code)
        replica.waiters = []

    # ------------------------------------------------------------------ for handlers
    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        if broker_id in self.overrides:
            return self.overrides[broker_id]
        reg = self.brokers.get(broker_id)
        return (reg.host, reg.port) if reg is not None else None

    def partition_error(self, topic: str, p: int, current_epoch: int = -1) -> int:
        """The error a leader-only request (produce, consumer fetch, ListOffsets,
        OffsetForLeaderEpoch) gets for this partition here: NONE when this broker leads it at an
        epoch the client's `current_epoch` (-1: none given) agrees with."""
        state = self.states.get((topic, p))
        if state is None and topic not in self.assignments:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        replica = self.replicas.get((topic, p))
        if replica is None or replica.role != LEADER:
            if current_epoch >= 0 and state is not None and current_epoch > state.leader_epoch:
                return E.UNKNOWN_LEADER_EPOCH
            return E.NOT_LEADER_OR_FOLLOWER
        if current_epoch >= 0:
            if current_epoch < replica.epoch:
                return E.FENCED_LEADER_EPOCH
            if current_epoch > replica.epoch:
                return E.UNKNOWN_LEADER_EPOCH
        return E.NONE

    def current_leader(self, topic: str, p: int) -> dict:
        state = self.states.get((topic, p))
        if state is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
