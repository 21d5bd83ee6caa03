# Over 600 lines: one store over every znode kind Kafka keeps (brokers, topics, partition state, controller, configs, admin).
"""Cluster metadata in ZooKeeper with Kafka's (2.x, ZooKeeper-mode) znode layout and JSON: the one
way into ZooKeeper for the controller and the brokers, watches included (the layout is in
logcore.cluster.znode_paths, what each znode holds in logcore.cluster.znode_json, the session in
logcore.cluster.zookeeper_session).

Writes that depend on what was read are conditional on the znode version: a lost race raises
ZkVersionConflictError (logcore.cluster.compare_and_set reads again). Controller writes are
fenced: the same transaction checks the version of /controller_epoch that the controller set
when it was elected, so a deposed controller's write fails with ControllerMovedError (Kafka's
wrapRequestWithControllerEpochCheck).

Watches go through kazoo's DataWatch / ChildrenWatch, which re-arm themselves after a reconnect;
their callbacks mean "re-read", not "one change".
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from logcore.cluster.admin_requests import AdminRequests
from logcore.cluster.change_notices import config_changes
from logcore.cluster.compare_and_set import WriteOutcome, classify_write, compare_and_set
from logcore.cluster.znode_acls import OPEN, ZnodeAcls
from logcore.cluster.znode_json import (NO_LEADER, BrokerRegistration, ControllerEpoch, LeaderAndIsr,
                                        TopicAssignment, controller_from_json, controller_json, dumps,
                                        loads, topic_config_from_json, topic_config_json)
from logcore.cluster.znode_paths import (BROKER_IDS, BROKER_TOPICS, CLUSTER_ID,
                                         CONTROLLER, CONTROLLER_EPOCH, DELETE_TOPICS, PRODUCER_ID_BLOCK,
                                         broker_path, deletion_path, partition_path, partition_state_path,
                                         partitions_path, topic_config_path, topic_path)
from logcore.cluster.zookeeper_session import ZooKeeperSession, coordinator_errors, is_transient
from logcore.errors import (BrokerIdInUseError, ControllerMovedError, CoordinatorUnavailableError,
                            CorruptRecordError, TopicExistsError, TopicNotFoundError,
                            ZkVersionConflictError)

# The broker side imports these from here until it moves to logcore/replication (issue 26) and
# imports them from their modules; `PartitionState` is LeaderAndIsr's name there until then.
PartitionState = LeaderAndIsr
__all__ = ["ZooKeeperStore", "NO_LEADER", "LeaderAndIsr", "PartitionState", "TopicAssignment", "is_transient",
           "BROKER_TOPICS"]

logger = logging.getLogger(__name__)


class ZooKeeperStore:
    """Cluster metadata in ZooKeeper. `hosts` is Kafka's zookeeper.connect: host:port[,host:port]
    with an optional chroot suffix (`/seglog`); `login`, `acls` and `tls`: ZooKeeperSession's."""

    def __init__(self, hosts: str, *, session_timeout_ms: int = 18000, connect_timeout_s: float = 15.0,
                 login=None, acls: ZnodeAcls = OPEN, tls=None):
        self._session = ZooKeeperSession(hosts, session_timeout_ms=session_timeout_ms,
                                         connect_timeout_s=connect_timeout_s, login=login, acls=acls, tls=tls)
        self.hosts = hosts
        self.session_timeout_ms = session_timeout_ms
        self.client = self._session.client        # the store's own: callers use its methods
        self._registration: BrokerRegistration | None = None
        self.requests = AdminRequests(self._session)              # /admin: what the controller is asked
        self._session.on_new_session(self._register_again)     # first: before the others' callbacks

    # ------------------------------------------------------------------ session
    def start(self) -> "ZooKeeperStore":
        self._session.start()
        return self

    def close(self) -> None:
        """End the session: its ephemerals (broker registration, /controller) go at once."""
        self._session.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    @property
    def connected(self) -> bool:
        """Whether the session is connected now (not suspended, not closed)."""
        return self._session.connected

    @property
    def session_id(self) -> int:
        return self._session.session_id

    def on_new_session(self, fn: Callable[[], None]) -> None:
        """Call `fn()` (on kazoo's callback thread) after the session expired and a new one was
        established, once the broker registration (if any) has been redone."""
        self._session.on_new_session(fn)

    def _register_again(self) -> None:
        reg = self._registration
        if reg is not None:
            try:
                self.register_broker(reg.broker_id, reg.host, reg.port, reg.endpoints, rack=reg.rack,
                                     protocols=dict(reg.protocols))
            except Exception:                                # noqa: BLE001 - logged, retried by the owner
                logger.exception("re-registering broker %d after session expiry failed", reg.broker_id)

    # ------------------------------------------------------------------ cluster id
    def cluster_id(self) -> str:
        """The cluster id, created on first call (Kafka's /cluster/id)."""
        from kazoo.exceptions import NodeExistsError

        from logcore.log.partition_metadata import format_topic_id, new_topic_id
        try:
            self.client.create(CLUSTER_ID, dumps({"version": "1", "id": format_topic_id(new_topic_id())}))
        except NodeExistsError:
            pass
        raw, _ = self.client.get(CLUSTER_ID)
        return loads(raw, CLUSTER_ID)["id"]

    # ------------------------------------------------------------------ brokers
    def register_broker(self, broker_id: int, host: str, port: int, endpoints=None, *,
                        rack: str | None = None, wait_s: float | None = None,
                        protocols: dict[str, str] | None = None) -> int:
        """Create /brokers/ids/<id> as an ephemeral of this session and return the broker epoch
        (its czxid). A registration left by an older session of the same broker is waited for
        (up to `wait_s`, default the session timeout): ZooKeeper removes it when that session
        expires. A live foreign registration after that raises BrokerIdInUseError."""
        from kazoo.exceptions import NoNodeError, NodeExistsError
        endpoints = tuple(endpoints or (f"PLAINTEXT://{host}:{port}",))
        protocols = tuple(sorted((protocols or {}).items()))
        reg = BrokerRegistration(int(broker_id), host, int(port), endpoints, rack, protocols=protocols)
        path = broker_path(broker_id)
        wait = (self.session_timeout_ms / 1000.0 + 2.0) if wait_s is None else wait_s
        deadline = time.monotonic() + wait
        while True:
            try:
                _, stat = self.client.create(path, reg.to_json(), ephemeral=True, include_data=True)
                break
            except NodeExistsError:
                try:
                    _, stat = self.client.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id:
                    break                # our own create landed before a connection loss
                if time.monotonic() >= deadline:
                    raise BrokerIdInUseError(
                        f"broker.id={broker_id} is registered at {path} by another live ZooKeeper"
                        f" session (0x{stat.ephemeralOwner:x}); is another broker running with this id?"
                    ) from None
                time.sleep(0.2)
        self._registration = BrokerRegistration(reg.broker_id, host, int(port), endpoints, rack, stat.czxid, protocols)
        return stat.czxid

    @coordinator_errors
    def deregister_broker(self, timeout_s: float | None = None) -> None:
        """Remove this broker's registration (a clean shutdown) without ending the session."""
        from kazoo.exceptions import NoNodeError
        reg, self._registration = self._registration, None
        if reg is not None:
            try:
                self._session.bounded(self.client.delete_async(broker_path(reg.broker_id)), timeout_s,
                              "deregistering the broker")
            except NoNodeError:
                pass

    @property
    def registration(self) -> BrokerRegistration | None:
        return self._registration

    def brokers(self) -> dict[int, BrokerRegistration]:
        """Every registered (live) broker by id, with its epoch."""
        from kazoo.exceptions import NoNodeError
        out = {}
        for child in self.client.get_children(BROKER_IDS):
            path = broker_path(child)
            try:
                raw, stat = self.client.get(path)
            except NoNodeError:
                continue
            out[int(child)] = BrokerRegistration.from_json(int(child), raw, stat.czxid, path)
        return dict(sorted(out.items()))

    def watch_brokers(self, fn: Callable[[dict[int, BrokerRegistration]], None]):
        """Call fn(brokers) now and whenever /brokers/ids changes. A delete and recreate between
        two callbacks shows as a larger epoch for the same id (a bounced broker)."""
        def on_children(_children):
            try:
                brokers = self.brokers()
            except CoordinatorUnavailableError as exc:     # the session is closing or lost
                logger.debug("reading /brokers/ids failed: %s", exc)
                return
            fn(brokers)
        return self.client.ChildrenWatch(BROKER_IDS, on_children)

    # ------------------------------------------------------------------ topics
    def create_topic(self, name: str, topic_id: str, assignment: dict[int, list[int]],
                     config: dict[str, str] | None = None) -> TopicAssignment:
        """Write the topic's config and assignment in one transaction (Kafka writes the config
        first, so a watcher of /brokers/topics always finds it). TopicExistsError when the topic
        exists or is still being deleted."""
        from kazoo.exceptions import NodeExistsError
        if self.client.exists(deletion_path(name)):
            raise TopicExistsError(f"topic {name!r} is marked for deletion in ZooKeeper ({self.hosts})")
        ta = TopicAssignment(name, topic_id, {int(p): tuple(r) for p, r in assignment.items()}, 0)
        t = self.client.transaction()
        cfg_path = topic_config_path(name)
        if self.client.exists(cfg_path):
            t.set_data(cfg_path, topic_config_json(config))
        else:
            t.create(cfg_path, topic_config_json(config))
        t.create(topic_path(name), ta.to_json())
        results = t.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if any(isinstance(r, NodeExistsError) for r in failures):
            raise TopicExistsError(f"topic {name!r} already exists in ZooKeeper ({self.hosts})")
        if failures:
            raise failures[0]
        return ta

    def list_topics(self) -> list[str]:
        return sorted(self.client.get_children(BROKER_TOPICS))

    def topics_marked_for_deletion(self) -> list[str]:
        return sorted(self.client.get_children(DELETE_TOPICS))

    def topic(self, name: str) -> TopicAssignment:
        from kazoo.exceptions import NoNodeError
        path = topic_path(name)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            raise TopicNotFoundError(f"topic {name!r} does not exist in ZooKeeper ({self.hosts})") from None
        return TopicAssignment.from_json(name, raw, stat.version, path)

    def watch_topics(self, fn: Callable[[list[str]], None]):
        return self.client.ChildrenWatch(BROKER_TOPICS, lambda children: fn(sorted(children)))

    def assignments(self, names=None) -> dict[str, TopicAssignment]:
        """{name: TopicAssignment} of `names` (None: every topic) as the ensemble's leader has them
        now: the server this session uses is caught up first (a watcher's view may lag the
        controller's last write by a moment). Absent topics are left out."""
        self.client.sync(BROKER_TOPICS)
        out = {}
        for name in (self.list_topics() if names is None else sorted(set(names))):
            try:
                out[name] = self.topic(name)
            except TopicNotFoundError:
                pass
        return out

    def watch_assignment(self, name: str, fn: Callable[[TopicAssignment | None], object]):
        """fn(assignment) now and whenever the topic znode changes (partitions added, a
        reassignment); fn(None) once when the topic is gone, and the watch ends. fn returning
        False ends it too."""
        path = topic_path(name)

        def on_data(raw, stat):
            if stat is None:
                fn(None)
                return False
            return fn(TopicAssignment.from_json(name, raw, stat.version, path))
        return self.client.DataWatch(path, on_data)

    def watch_topic_config(self, name: str, fn: Callable[[dict[str, str]], object]):
        """fn(config overrides) now and whenever /config/topics/<t> changes; the watch ends when
        the znode is gone (or fn returns False). A znode that is not JSON is logged and skipped."""
        path = topic_config_path(name)

        def on_data(raw, stat):
            if stat is None:
                return False
            try:
                config = topic_config_from_json(raw or b"{}", path)
            except CorruptRecordError:
                logger.error("config of topic %s in ZooKeeper is not JSON; ignored", name)
                return None
            return fn(config)
        return self.client.DataWatch(path, on_data)

    def set_assignment(self, ta: TopicAssignment, partitions: dict[int, list[int]]) -> TopicAssignment:
        """Replace the topic's assignment if the znode is still at `ta.zk_version`
        (ZkVersionConflictError otherwise); used to add partitions."""
        from kazoo.exceptions import BadVersionError, NoNodeError
        new = TopicAssignment(ta.name, ta.topic_id, {int(p): tuple(r) for p, r in partitions.items()},
                              -1, ta.adding_replicas, ta.removing_replicas)
        try:
            stat = self.client.set(topic_path(ta.name), new.to_json(), version=ta.zk_version)
        except BadVersionError:
            raise ZkVersionConflictError(
                f"{topic_path(ta.name)} changed since version {ta.zk_version}; re-read it") from None
        except NoNodeError:
            raise TopicNotFoundError(f"topic {ta.name!r} does not exist in ZooKeeper ({self.hosts})") from None
        return TopicAssignment(new.name, new.topic_id, new.partitions, stat.version,
                               new.adding_replicas, new.removing_replicas)

    def set_reassignment(self, ta: TopicAssignment, partition: int, replicas, adding, removing,
                         fence: ControllerEpoch) -> TopicAssignment:
        """The controller's write of one partition's replicas and adding / removing replicas
        (Kafka's topic znode v3), fenced by /controller_epoch and conditional on `ta.zk_version`
        (ZkVersionConflictError: re-read)."""
        def put(m, value):
            m = dict(m)
            if value:
                m[partition] = tuple(value)
            else:
                m.pop(partition, None)
            return m
        new = TopicAssignment(ta.name, ta.topic_id, put(ta.partitions, replicas), -1,
                              put(ta.adding_replicas, adding), put(ta.removing_replicas, removing))
        path = topic_path(ta.name)
        t = self.client.transaction()
        t.check(CONTROLLER_EPOCH, fence.zk_version)
        t.set_data(path, new.to_json(), version=ta.zk_version)
        results = self._commit_fenced(t, fence, f"reassign {ta.name}-{partition}", cas_path=path,
                                      expected_version=ta.zk_version)
        return TopicAssignment(new.name, new.topic_id, new.partitions, results[1].version,
                               new.adding_replicas, new.removing_replicas)

    def topic_config(self, name: str) -> tuple[dict[str, str], int]:
        """The topic's config overrides and the znode version."""
        from kazoo.exceptions import NoNodeError
        path = topic_config_path(name)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            raise TopicNotFoundError(f"topic {name!r} has no config in ZooKeeper ({path})") from None
        return topic_config_from_json(raw, path), stat.version

    def set_topic_config(self, name: str, config: dict[str, str], expected_version: int) -> int:
        """Replace the overrides if the znode is at `expected_version` and announce the change
        with a /config/changes sequential node, as Kafka's AdminZkClient does."""
        from kazoo.exceptions import BadVersionError, NoNodeError
        path = topic_config_path(name)
        t = self.client.transaction()
        t.set_data(path, topic_config_json(config),
                   version=expected_version)
        config_changes(self.client).add(t, dumps({"version": 2, "entity_path": f"topics/{name}"}))
        results = t.commit()
        if isinstance(results[0], BadVersionError):
            raise ZkVersionConflictError(f"{path} changed since version {expected_version}; re-read it")
        if isinstance(results[0], NoNodeError):
            raise TopicNotFoundError(f"topic {name!r} has no config in ZooKeeper ({path})")
        for r in results:
            if isinstance(r, Exception):
                raise r
        return results[0].version

    def request_topic_deletion(self, name: str) -> None:
        """Kafka's DeleteTopics in ZooKeeper mode: create /admin/delete_topics/<t>; the
        controller deletes the topic's znodes once its replicas are gone."""
        from kazoo.exceptions import NodeExistsError
        if not self.client.exists(topic_path(name)):
            raise TopicNotFoundError(f"topic {name!r} does not exist in ZooKeeper ({self.hosts})")
        try:
            self.client.create(deletion_path(name))
        except NodeExistsError:
            pass

    def watch_deletions(self, fn: Callable[[list[str]], None]):
        return self.client.ChildrenWatch(DELETE_TOPICS, lambda children: fn(sorted(children)))

    def remove_topic(self, name: str, fence: ControllerEpoch) -> None:
        """The controller's last step of a deletion: remove the topic's znodes and the request."""
        paths = self._subtree(topic_path(name)) if self.client.exists(topic_path(name)) else []
        for extra in (topic_config_path(name), deletion_path(name)):
            if self.client.exists(extra):
                paths.append(extra)
        t = self.client.transaction()
        t.check(CONTROLLER_EPOCH, fence.zk_version)
        for p in paths:
            t.delete(p)
        self._commit_fenced(t, fence, f"delete topic {name!r}")

    def _subtree(self, path: str) -> list[str]:
        """`path` and everything under it, deepest first."""
        out = []
        for child in self.client.get_children(path):
            out += self._subtree(f"{path}/{child}")
        return out + [path]

    # ------------------------------------------------------------------ partition state
    def partition_state(self, topic: str, partition: int, *, sync: bool = False) -> LeaderAndIsr | None:
        """The state znode (None if not created yet); `sync` first catches the server up with the
        leader of the ensemble, for reads whose freshness matters."""
        from kazoo.exceptions import NoNodeError
        path = partition_state_path(topic, partition)
        if sync:
            self.client.sync(path)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return LeaderAndIsr.from_json(raw, stat.version, path, stat.mzxid)

    def partition_states(self, topic: str) -> dict[int, LeaderAndIsr]:
        from kazoo.exceptions import NoNodeError
        try:
            parts = self.client.get_children(partitions_path(topic))
        except NoNodeError:
            return {}
        out = {}
        for p in sorted(int(x) for x in parts):
            s = self.partition_state(topic, p)
            if s is not None:
                out[p] = s
        return out

    def watch_partition_state(self, topic: str, partition: int,
                              fn: Callable[[LeaderAndIsr | None], object]):
        """fn(state) now and after every change (None while absent); fn returning False ends the
        watch. Apply a state only if its leader_epoch is newer than yours (equal: adopt the ISR
        and version)."""
        path = partition_state_path(topic, partition)

        def on_data(raw, stat):
            return fn(None if stat is None else LeaderAndIsr.from_json(raw or b"{}", stat.version, path,
                                                                                stat.mzxid))
        return self.client.DataWatch(path, on_data)

    def partition_state_write_outcome(self, topic: str, partition: int, based_on: LeaderAndIsr,
                                      proposed: LeaderAndIsr) -> tuple[WriteOutcome, LeaderAndIsr | None]:
        """After a write of `proposed` conditional on `based_on` whose answer was lost (a
        connection loss: CoordinatorUnavailableError): read the state znode back, caught up with
        the ensemble's leader, and say whether it holds that write. Returns the outcome and the
        state read. CoordinatorUnavailableError again: still not known, ask again later."""
        fresh = self.partition_state(topic, partition, sync=True)
        return classify_write(fresh, based_on, proposed, same=LeaderAndIsr.same_content), fresh

    def create_partition_states(self, topic: str, states: dict[int, LeaderAndIsr],
                                fence: ControllerEpoch) -> dict[int, LeaderAndIsr]:
        """The controller's initial states of new partitions, in one fenced transaction."""
        t = self.client.transaction()
        t.check(CONTROLLER_EPOCH, fence.zk_version)
        if not self.client.exists(partitions_path(topic)):
            t.create(partitions_path(topic))
        for p, s in sorted(states.items()):
            if not self.client.exists(partition_path(topic, p)):
                t.create(partition_path(topic, p))
            t.create(partition_state_path(topic, p), s.to_json())
        self._commit_fenced(t, fence, f"create states of {topic!r}")
        return {p: LeaderAndIsr(s.leader, s.leader_epoch, s.isr, s.controller_epoch, 0)
                for p, s in states.items()}

    def update_partition_state(self, topic: str, partition: int, new: LeaderAndIsr,
                               expected_version: int, *, fence: ControllerEpoch | None = None) -> LeaderAndIsr:
        """Compare-and-set the state znode: succeeds only at `expected_version` (else
        ZkVersionConflictError, a lost race: re-read). With `fence` (a controller's write) the
        transaction also checks /controller_epoch (else ControllerMovedError). Without it this
        is the leader's own ISR update (Kafka 2.6 style). Returns the state with its new version."""
        from kazoo.exceptions import BadVersionError, NoNodeError
        path = partition_state_path(topic, partition)
        if fence is None:
            try:
                stat = self.client.set(path, new.to_json(), version=expected_version)
            except BadVersionError:
                raise ZkVersionConflictError(
                    f"{path} is no longer at version {expected_version}; re-read the partition state") from None
            except NoNodeError:
                raise TopicNotFoundError(f"partition state {path} does not exist") from None
        else:
            t = self.client.transaction()
            t.check(CONTROLLER_EPOCH, fence.zk_version)
            t.set_data(path, new.to_json(), version=expected_version)
            results = self._commit_fenced(t, fence, f"update {path}", cas_path=path,
                                          expected_version=expected_version)
            stat = results[1]
        return LeaderAndIsr(new.leader, new.leader_epoch, tuple(new.isr), new.controller_epoch,
                              stat.version, stat.mzxid)

    def _commit_fenced(self, t, fence: ControllerEpoch, what: str, *, cas_path: str | None = None,
                       expected_version: int | None = None):
        from kazoo.exceptions import (BadVersionError, NoNodeError, NodeExistsError, RolledBackError,
                                      RuntimeInconsistency)
        results = t.commit()
        if not any(isinstance(r, Exception) for r in results):
            return results
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise ControllerMovedError(
                f"controller epoch {fence.epoch} (version {fence.zk_version} of {CONTROLLER_EPOCH}) is"
                f" stale: another controller was elected; refused to {what}")
        for r in results[1:]:
            if isinstance(r, BadVersionError):
                raise ZkVersionConflictError(
                    f"{cas_path or what} is no longer at version {expected_version}; re-read it")
            if isinstance(r, NodeExistsError):
                raise ZkVersionConflictError(f"{what}: a znode already exists (written by someone else)")
            if isinstance(r, NoNodeError):
                raise TopicNotFoundError(f"{what}: a znode does not exist")
        raise next(r for r in results if isinstance(r, Exception)
                   and not isinstance(r, (RolledBackError, RuntimeInconsistency)))

    # ------------------------------------------------------------------ controller
    def controller_epoch(self) -> ControllerEpoch | None:
        from kazoo.exceptions import NoNodeError
        try:
            raw, stat = self.client.get(CONTROLLER_EPOCH)
        except NoNodeError:
            return None
        return ControllerEpoch(int(raw.decode().strip()), stat.version)

    def controller(self) -> int | None:
        """The id of the active controller, or None."""
        from kazoo.exceptions import NoNodeError
        try:
            raw, _ = self.client.get(CONTROLLER)
        except NoNodeError:
            return None
        return int(loads(raw, CONTROLLER)["brokerid"])

    def try_become_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Kafka's registerControllerAndIncrementControllerEpoch: in one transaction create the
        ephemeral /controller and bump /controller_epoch at the version read. Returns the new
        epoch to fence writes with, or None when another broker won (or holds office)."""
        from kazoo.exceptions import NodeExistsError
        if self.controller_epoch() is None:
            try:
                self.client.create(CONTROLLER_EPOCH, b"0")
            except NodeExistsError:
                pass
        current = self.controller_epoch()
        t = self.client.transaction()
        t.create(CONTROLLER, controller_json(broker_id),
                 ephemeral=True)
        t.set_data(CONTROLLER_EPOCH, str(current.epoch + 1).encode(), version=current.zk_version)
        results = t.commit()
        if any(isinstance(r, Exception) for r in results):
            return None
        return ControllerEpoch(current.epoch + 1, results[1].version)

    @coordinator_errors
    def resign_controller(self, broker_id: int, timeout_s: float | None = None) -> None:
        """Delete /controller if this session holds it (each call bounded by `timeout_s`)."""
        from kazoo.exceptions import BadVersionError, NoNodeError
        try:
            raw, stat = self._session.bounded(self.client.get_async(CONTROLLER), timeout_s, "reading /controller")
        except NoNodeError:
            return
        if stat.ephemeralOwner == self.session_id and loads(raw, CONTROLLER).get("brokerid") == broker_id:
            try:
                self._session.bounded(self.client.delete_async(CONTROLLER, version=stat.version), timeout_s,
                              "deleting /controller")
            except (NoNodeError, BadVersionError):
                pass

    def depose_dead_controller(self, broker_id: int, broker_epoch: int) -> bool:
        """Delete /controller when it is held by broker `broker_id`'s session, the one that made its
        registration of epoch (czxid) `broker_epoch`: that broker's listener refuses connections
        (logcore.cluster.liveness), so its process is gone though its session has not expired
        yet. Only /controller goes (every broker then runs the election again; /controller_epoch
        fences a deposed controller's writes); the registration stays until ZooKeeper expires
        the session (replication.md 4.2). True if it was deleted here."""
        from kazoo.exceptions import NoNodeError
        reg_path = broker_path(broker_id)
        try:
            raw, stat = self.client.get(CONTROLLER)
            _, reg = self.client.get(reg_path)
        except NoNodeError:
            return False
        if (controller_from_json(raw, CONTROLLER) != broker_id or reg.czxid != broker_epoch
                or reg.ephemeralOwner != stat.ephemeralOwner):
            return False
        t = self.client.transaction()
        t.check(reg_path, reg.version)
        t.delete(CONTROLLER, version=stat.version)
        return not any(isinstance(r, Exception) for r in t.commit())

    def watch_controller(self, fn: Callable[[int | None], None]):
        """fn(controller id or None) now and whenever /controller changes."""
        def on_data(raw, stat):
            fn(None if stat is None else int(loads(raw, CONTROLLER)["brokerid"]))
        return self.client.DataWatch(CONTROLLER, on_data)

    # ------------------------------------------------------------------ requests
    # What brokers ask of the controller lives in `self.requests` (AdminRequests); the calls
    # brokers and tools make today go through these.
    def request_preferred_election(self, partitions: list[tuple[str, int]]) -> None:
        self.requests.request_preferred_election(partitions)

    def request_unclean_election(self, partitions: list[tuple[str, int]]) -> None:
        self.requests.request_unclean_election(partitions)

    def request_reassignments(self, targets: dict[tuple[str, int], list[int] | None]) -> None:
        self.requests.request_reassignments(targets)

    def pending_reassignments(self):
        return self.requests.pending_reassignments()

    def announce_controlled_shutdown(self, broker_id: int, timeout_s: float | None = None) -> None:
        self.requests.announce_controlled_shutdown(broker_id, timeout_s)

    def shutting_down(self) -> set[int]:
        return self.requests.shutting_down()

    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> str:
        return self.requests.notify_isr_change(partitions)

    def isr_change_notifications(self) -> dict[str, list[tuple[str, int]]]:
        return self.requests.isr_change_notifications()

    def delete_isr_change_notifications(self, names) -> None:
        self.requests.delete_isr_change_notifications(names)

    # ------------------------------------------------------------------ producer ids
    def claim_producer_id_block(self, broker_id: int, size: int) -> tuple[int, int]:
        """The next block of `size` producer ids for this broker (first, last), claimed with a
        compare-and-set on /latest_producer_id_block as Kafka's ZooKeeper mode does."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        def read() -> tuple[int, int | None]:        # (last id claimed, znode version or None)
            try:
                raw, stat = self.client.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                return -1, None
            return (int(loads(raw, PRODUCER_ID_BLOCK).get("block_end", -1)) if raw else -1), stat.version

        def write(current, block):
            data = dumps({"version": 1, "broker": int(broker_id), "block_start": str(block[0]),
                           "block_end": str(block[1])})
            try:
                if current[1] is None:
                    self.client.create(PRODUCER_ID_BLOCK, data)
                else:
                    self.client.set(PRODUCER_ID_BLOCK, data, version=current[1])
            except (BadVersionError, NodeExistsError):
                raise ZkVersionConflictError("another broker claimed a block") from None
            return block
        try:
            return compare_and_set(read, lambda current: (current[0] + 1, current[0] + size), write,
                                   attempts=100)
        except ZkVersionConflictError:
            raise ZkVersionConflictError(f"could not claim a producer id block at {PRODUCER_ID_BLOCK}") from None


_WRAPPED = ("cluster_id", "register_broker", "brokers", "watch_brokers", "create_topic", "list_topics",
            "topics_marked_for_deletion", "topic", "watch_topics", "assignments", "watch_assignment",
            "watch_topic_config", "set_assignment", "topic_config", "set_topic_config",
            "request_topic_deletion", "watch_deletions", "remove_topic", "partition_state",
            "partition_states", "watch_partition_state", "partition_state_write_outcome",
            "create_partition_states", "update_partition_state", "controller_epoch", "controller",
            "try_become_controller", "depose_dead_controller", "watch_controller",
            "claim_producer_id_block", "set_reassignment")
for _name in _WRAPPED:
    setattr(ZooKeeperStore, _name, coordinator_errors(getattr(ZooKeeperStore, _name)))
