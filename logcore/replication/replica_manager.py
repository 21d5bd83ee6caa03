"""A cluster member's replicas: which partitions this broker leads or follows, as ZooKeeper says.

Design (replication.md 4.9, the watch-based one): every broker watches ZooKeeper itself; there
are no LeaderAndIsr / UpdateMetadata requests. The controller (logcore.cluster.controller)
writes each partition's state znode (leader, leader_epoch, isr, controller_epoch); every broker
watches /brokers/ids, /brokers/topics, each topic's assignment and config, and every partition's
state znode, and
- keeps the metadata it answers clients with (live brokers, assignments, leaders, ISRs, epochs);
- for the partitions it holds a replica of, applies each new leader epoch: become leader (the
  epoch cache gets (epoch, LEO) at once; followers get a grace period) or become follower (the
  replica fetcher pulls from the leader, replica_fetcher.py). A state with an older
  epoch is ignored; one with the same epoch only updates the ISR and the znode version.

Each replica is a Partition (partition.py): as leader it tracks each follower's fetches, moves
the high watermark to the smallest LEO of the ISR (not while the ISR is below
min.insync.replicas) and answers the acks=all produces waiting for it; the ISR writer
(isr_writer.py) shrinks the ISR of followers lagging more than replica.lag.time.max.ms and adds
followers that caught up, with a compare-and-set on the state znode (Kafka 2.6's way).

ZooKeeper callbacks arrive on kazoo's threads: each only posts an event to the broker's event
loop, where one task applies them in order; blocking work (ZooKeeper calls, opening logs) runs
in threads.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from logcore.event_wait import cancel_and_wait
from logcore.wire import error_codes as E
from logcore.cluster.znode_json import NO_LEADER, LeaderAndIsr, TopicAssignment
from logcore.cluster.zookeeper_session import is_transient
from logcore.errors import SegLogError, TopicExistsError, TopicNotFoundError
from logcore.replication.follower_state import reset_followers
from logcore.replication.isr_writer import IsrWriter
from logcore.replication.partition import FOLLOWER, LEADER, OFFLINE, Partition, now_ms
from logcore.replication.replica_fetcher import ReplicaFetchers

logger = logging.getLogger(__name__)

EVENT_RETRY_S = 0.5            # an event that failed on a ZooKeeper call is applied again then


class ReplicaManager:
    def __init__(self, broker, store, catalog):
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
        self.states: dict[tuple[str, int], LeaderAndIsr] = {}
        self.replicas: dict[tuple[str, int], Partition] = {}
        self._hosted: set[tuple[str, int]] = set()            # recorded in the log dir this run
        self.shutting_down: set[int] = set()
        self.overrides = self.config.address_overrides()
        self.lag_max_ms = float(self.config["replica.lag.time.max.ms"])
        self.fetchers = ReplicaFetchers(self)
        self.isr_writer = IsrWriter(self)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue | None = None
        self._tasks: list[asyncio.Task] = []
        self._watched_topics: set[str] = set()
        self._watched_states: set[tuple[str, int]] = set()
        self._checked_topics: set[str] = set()                # left-over replicas looked for
        self.stopped = False
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
                       self.loop.create_task(self.isr_writer.shrink_loop(), name="isr-shrink"),
                       self.loop.create_task(self._checkpoint_loop(), name="hw-checkpoint")]
        store = self.store
        try:
            # Whose log dir this is and on which host, kept when the broker stops (readers of
            # the log dir name it; the Spark source prefers replicas on its own host).
            await asyncio.to_thread(self.partitions.root.record_broker, self.me, self.broker.host,
                                    self.broker.port)
        except SegLogError as exc:
            logger.error("broker %d: cannot record itself in %s: %s", self.me, self.partitions.root.url, exc)
        store.watch_brokers(lambda b: self.post(("brokers", b)))
        store.watch_controller(lambda c: self.post(("controller", c)))
        store.watch_topics(lambda names: self.post(("topics", names)))
        await asyncio.to_thread(store.requests.watch_controlled_shutdowns,
                                lambda ids: self.post(("shutdown", ids)))

    async def stop(self) -> None:
        self.stopped = True
        await self.fetchers.stop()
        await asyncio.gather(*(cancel_and_wait(task) for task in self._tasks))
        for replica in self.replicas.values():
            replica.fail_waiters(E.NOT_LEADER_OR_FOLLOWER)

    def post(self, event) -> None:
        """From any thread (kazoo's callbacks): queue `event` for the loop. Never blocks."""
        if self.stopped or self.loop is None:
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
                    self.loop.call_later(EVENT_RETRY_S, self.post, event)
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
        self.post(("registered",))

    def _registration_epoch(self) -> int | None:
        reg = self.store.registration
        return reg.epoch if reg is not None else None

    # ------------------------------------------------------------------ topics
    async def _topics_changed(self, names) -> None:
        names = set(names)
        for name in sorted(names - self._watched_topics):
            # Marked once both watches are set: a failed call is made again (_run re-posts).
            await asyncio.to_thread(self.store.watch_assignment, name,
                                    lambda ta, name=name: self.post(("assignment", name, ta)))
            await asyncio.to_thread(self.store.watch_topic_config, name,
                                    lambda config, name=name: self.post(("config", name, config)))
            self._watched_topics.add(name)
        for name in sorted(self._watched_topics - names):
            self._watched_topics.discard(name)
            await self._assignment_changed(name, None)

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
            # the overrides as ZooKeeper has them (a deleted one goes), applied to the open logs
            info = self.partitions.root.set_topic_config(name, config)
            self.partitions.reconfigure_topic(info)
        except SegLogError as exc:
            logger.error("topic %s: cannot apply its config %s locally: %s", name, config, exc)

    async def _assignment_changed(self, name: str, ta: TopicAssignment | None) -> None:
        if ta is None:
            self.assignments.pop(name, None)
            self.topic_configs.pop(name, None)
            # Kafka has only the leader at deletion time delete a partition's remote data (the
            # replica's role, not self.states: the state znodes' watches may fire first)
            led = [p for (t, p), r in self.replicas.items() if t == name and r.role == LEADER]
            for key in [k for k in self.states if k[0] == name]:
                self.states.pop(key, None)
                self._watched_states.discard(key)
            removed = [r for k, r in self.replicas.items() if k[0] == name]
            for replica in removed:
                await self._stop_replica(replica, unhost=False)     # the whole topic goes
                self.replicas.pop(replica.key, None)
            if removed or name in self.partitions.topics:
                await asyncio.to_thread(self._delete_local_topic, name, led)
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
                    await self._stop_replica(Partition(name, p, self), delete=True)

    def _state_watch(self, key):
        def on_state(state):
            self.post(("state", key[0], key[1], state))
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

    def _delete_local_topic(self, name: str, remote_partitions: Sequence[int] = ()) -> None:
        """remote_partitions: those whose remote data goes too (the topic was deleted and this
        broker led them); a replica that only moved away leaves the remote data alone."""
        self._hosted.difference_update([k for k in list(self._hosted) if k[0] == name])
        with self.partitions.lock:
            self.partitions.close_topic(name)
            try:
                self.partitions.root.delete_topic(name, remote_partitions)
                logger.info("deleted the local replicas of topic %s", name)
            except TopicNotFoundError:
                pass
            except SegLogError as exc:
                logger.error("cannot delete the local replicas of topic %s: %s", name, exc)

    # ------------------------------------------------------------------ partition states
    async def _state_changed(self, topic: str, p: int, state: LeaderAndIsr | None) -> None:
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
            replica = self.replicas[key] = Partition(topic, p, self)
        if replica.state is not None and state.leader_epoch < replica.epoch:
            return                              # stale (replication.md 0.10)
        if replica.state is not None and state.leader_epoch == replica.epoch and replica.role != OFFLINE:
            if state.zk_version >= replica.state.zk_version:
                replica.state = state            # the ISR changed at the same epoch
                self.state_changed(replica)
                if replica.role == LEADER:
                    replica.maybe_increment_hw()
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

    def _partition(self, replica: Partition):
        part = self.partitions.get(replica.topic, replica.index)
        if part is None:
            raise TopicNotFoundError(f"{replica.topic}-{replica.index} is not open on broker {self.me}")
        return part

    async def _with_log(self, replica: Partition, fn):
        part = self._partition(replica)

        def run():
            try:
                return fn(part.log)
            finally:
                self.partitions.unpin_thread()
        return await asyncio.to_thread(run)

    async def _become_leader(self, replica: Partition, state: LeaderAndIsr) -> None:
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
                                            replica.followers if was_leader else None, now_ms())
        replica.state = state
        replica.role = LEADER
        replica.epoch_start_offset = leo
        logger.info("broker %d leads %s-%d at epoch %d (LEO %d, HW %d, ISR %s)", self.me, replica.topic,
                    replica.index, state.leader_epoch, leo, hw, list(state.isr))
        replica.maybe_increment_hw()
        self.partitions.notify(self._partition(replica))
        self._leadership(replica, True)

    def _leadership(self, replica: Partition, leader: bool) -> None:
        for listener in self.leadership_listeners:
            try:
                listener(replica.topic, replica.index, leader)
            except Exception:   # noqa: BLE001 - a listener's bug must not stop the replicas
                logger.exception("broker %d: leadership listener failed for %s-%d", self.me,
                                 replica.topic, replica.index)

    def _resign(self, replica: Partition) -> None:
        if replica.role == LEADER:
            self._leadership(replica, False)

    async def _become_follower(self, replica: Partition, state: LeaderAndIsr) -> None:
        # Stop leading before anything awaits: produce_check refuses from here, an acks=all
        # waiter registered later fails at once, and the log itself refuses a leader's append
        # from the moment become_follower runs under its lock (a batch the partition worker
        # still holds is not stamped with the new epoch).
        self._resign(replica)
        replica.role = OFFLINE
        replica.fail_waiters(E.NOT_LEADER_OR_FOLLOWER)
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

    async def _become_offline(self, replica: Partition, state: LeaderAndIsr) -> None:
        leading = replica.role == LEADER
        self._resign(replica)
        replica.role = OFFLINE
        replica.fail_waiters(E.NOT_LEADER_OR_FOLLOWER)
        self.fetchers.remove(replica)
        replica.state = state
        replica.followers = {}
        self.state_changed(replica)
        if leading:
            # The log stops taking a leader's appends too (batches still queued for it).
            try:
                await self._with_log(replica, lambda log: log.become_follower(state.leader_epoch))
            except SegLogError as exc:
                self.partitions.storage_failed(exc, f"stopping to lead {replica.topic}-{replica.index}")   # a failed disk: the broker stops
                logger.error("broker %d: %s-%d: cannot stop leading at epoch %d: %s", self.me,
                             replica.topic, replica.index, state.leader_epoch, exc)

    async def _stop_replica(self, replica: Partition, delete: bool = False, unhost: bool = True) -> None:
        """Kafka's StopReplica: no longer lead or follow. `unhost` drops it from the log dir's
        record of hosted replicas (not when the whole topic goes); with `delete` (the replica
        was reassigned away) its files go too and it is neither served nor counted."""
        self._resign(replica)
        replica.fail_waiters(E.NOT_LEADER_OR_FOLLOWER)
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

    def removing_of(self, replica: Partition) -> tuple[int, ...]:
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

    def assignment_of(self, replica: Partition) -> tuple[int, ...]:
        ta = self.assignments.get(replica.topic)
        return ta.partitions.get(replica.index, ()) if ta is not None else ()

    # ------------------------------------------------------------------ leader duties
    def role_of(self, topic: str, p: int) -> str | None:
        """LEADER, FOLLOWER or OFFLINE for a partition this broker holds a replica of, else None.
        (Called from the maintenance thread: a read of one dict entry.)"""
        replica = self.replicas.get((topic, p))
        return replica.role if replica is not None else None

    def leader_replica(self, topic: str, p: int) -> Partition | None:
        replica = self.replicas.get((topic, p))
        return replica if replica is not None and replica.role == LEADER else None

    def topic_min_insync(self, topic: str) -> int:
        """min.insync.replicas of a topic whose log is not open here."""
        return self.partitions.root.topic_config(topic).min_insync_replicas

    def may_be_in_isr(self, replica: Partition, broker: int) -> bool:
        """`broker` is live, not shutting down, and an assigned replica a reassignment keeps."""
        return (broker in self.brokers and broker not in self.shutting_down
                and broker in self.assignment_of(replica) and broker not in self.removing_of(replica))

    def open_log(self, topic: str, p: int):
        """The partition's log when it is open here (never opens it), else None."""
        part = self.partitions.get(topic, p)
        return part.log_if_open if part is not None else None

    def state_written(self, key: tuple[str, int], written: LeaderAndIsr) -> None:
        """The ISR writer's own state write succeeded: it is the newest known state."""
        if self.states.get(key, written).zk_version <= written.zk_version:
            self.states[key] = written

    def state_changed(self, replica: Partition) -> None:
        """The replica's ISR or role changed without an append: a follower's session may no
        longer set the partition aside (partitions.notify_state)."""
        part = self.partitions.get(replica.topic, replica.index)
        if part is not None:
            self.partitions.notify_state(part)

    def notify(self, replica: Partition) -> None:
        """Wake the consumers' fetches parked on the partition (its HW moved); a follower's,
        which reads to the LEO, waits for the log to grow."""
        part = self.partitions.get(replica.topic, replica.index)
        if part is not None:
            self.partitions.notify_high_watermark(part)

    def produce_check(self, topic: str, p: int, acks_all: bool) -> tuple[int, str | None]:
        """Before appending: only the leader takes produces, and acks=all needs an ISR of at
        least min.insync.replicas (else NOT_ENOUGH_REPLICAS, nothing appended)."""
        code = self.partition_error(topic, p)
        if code != E.NONE:
            return code, f"broker {self.me} is not the leader of {topic}-{p}"
        if acks_all:
            message = self.replicas[(topic, p)].isr_too_small()
            if message is not None:
                return E.NOT_ENOUGH_REPLICAS, message
        return E.NONE, None

    def epoch_start_offset(self, topic: str, p: int) -> int:
        replica = self.replicas.get((topic, p))
        return replica.epoch_start_offset if replica is not None and replica.role == LEADER else 0

    # The broker's replication policy (single_node.SingleNode is the other one).
    replica_logs = True              # logs open as replicas: epoch and HW from replication
    replicates = True                # acks=all waits for the HW (the ISR's copies)
    serves_followers = True          # a Fetch / ListOffsets may come from a follower

    def append_check(self, part, acks_all: bool) -> tuple[int, str | None]:
        """Nothing beyond produce_check (the ISR size was checked there)."""
        return E.NONE, None

    def appended(self, part) -> None:
        """The broker's PartitionManager appended to `part` (its PartitionLog): the replica's
        HW may follow."""
        replica = self.replicas.get((part.topic, part.index))
        if replica is not None:
            replica.appended()

    async def _checkpoint_loop(self) -> None:
        """Each replica's HW to replication-offset-checkpoint (Kafka's
        replica.high.watermark.checkpoint.interval.ms); the logs write it at close too."""
        interval = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000.0
        written: dict[tuple[str, int], int] = {}
        while True:
            await asyncio.sleep(interval)
            due = []
            for key, replica in list(self.replicas.items()):
                log = self.open_log(*key)
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
    @staticmethod
    async def wait_for_high_watermark(replica: Partition, required: int, timeout_s: float) -> int:
        """Partition.wait_for_high_watermark (the replica-manager tests call it here)."""
        return await replica.wait_for_high_watermark(required, timeout_s)

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

    def low_watermark(self, topic: str, p: int, leader_start: int) -> int | None:
        """DeleteRecords' low watermark of a partition this broker leads, whose own log start
        is `leader_start` (Partition.low_watermark); None when it does not lead it."""
        replica = self.replicas.get((topic, p))
        return replica.low_watermark(leader_start) if replica is not None else None

    def current_leader(self, topic: str, p: int) -> dict:
        state = self.states.get((topic, p))
        if state is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
