# Over 600 lines: one store over every znode kind Kafka keeps (brokers, topics, partition state, controller, configs, admin).
"""Cluster metadata in ZooKeeper with Kafka's (2.x, ZooKeeper-mode) znode layout and JSON.

    /brokers/ids/<id>                          ephemeral: the broker's registration; its czxid is
                                               the broker epoch (KIP-380)
    /brokers/topics/<t>                        {"version":3,"topic_id":..,"partitions":{"0":[1,2]},
                                                "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<t>/partitions/<p>/state   {"version":1,"leader":1,"leader_epoch":0,
                                                "isr":[1,2],"controller_epoch":1}
    /controller                                ephemeral {"version":1,"brokerid":1,"timestamp":"ms"}
    /controller_epoch                          "1"
    /config/topics/<t>                         {"version":1,"config":{"k":"v"}}
    /config/changes/config_change_NNNNNNNNNN   {"version":2,"entity_path":"topics/<t>"}
    /admin/delete_topics/<t>                   a deletion request (the controller carries it out)
    /admin/preferred_replica_election          {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /admin/unclean_leader_election             seglog's own, the same JSON: an unclean election of
                                               these leaderless partitions (ElectLeaders UNCLEAN)
    /admin/reassign_partitions                 {"version":1,"partitions":[{"topic":..,"partition":..,
                                                "replicas":[..]}]}: reassignments for the controller
                                               (AlterPartitionReassignments; "replicas":null cancels)
    /admin/controlled_shutdown/<id>            seglog's own, ephemeral: broker <id> is shutting down
                                               (Kafka's ControlledShutdown request, as a znode)
    /isr_change_notification/isr_change_NNNNNNNNNN
                                               {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /cluster/id                                {"version":"1","id":"<22-char base64>"}
    /latest_producer_id_block                  {"version":1,"broker":1,"block_start":"0","block_end":"999"}

Writes that depend on what was read are conditional on the znode version: a lost race raises
ZkVersionConflictError. Controller writes are fenced: the same transaction checks the version of
/controller_epoch that the controller set when it was elected, so a deposed controller's write
fails with ControllerMovedError (Kafka's wrapRequestWithControllerEpochCheck).

Sessions: kazoo reconnects by itself. SUSPENDED (connection lost) is not LOST (session expired):
ephemerals survive a suspension and nothing is redone. After LOST kazoo starts a new session but
recreates nothing, so the store re-registers the broker (a new czxid: a new broker epoch) and calls
the session listeners given to `on_new_session` (the controller re-runs its election there). The
kazoo listener itself never blocks: the work runs on kazoo's callback thread via handler.spawn.
Watches go through kazoo's DataWatch / ChildrenWatch, which re-arm themselves after a reconnect;
their callbacks mean "re-read", not "one change".
"""
from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from logcore.cluster.compare_and_set import WriteOutcome, classify_write, compare_and_set
from logcore.errors import (BrokerIdInUseError, ControllerMovedError, CoordinatorUnavailableError,
                            CorruptRecordError, TopicExistsError, TopicNotFoundError,
                            ZkVersionConflictError)

logger = logging.getLogger(__name__)

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_ELECTION = "/admin/preferred_replica_election"
UNCLEAN_ELECTION = "/admin/unclean_leader_election"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGES = "/isr_change_notification"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PERSISTENT_PATHS = (BROKER_IDS, BROKER_TOPICS, "/brokers/seqid", CONFIG_TOPICS, CONFIG_CHANGES,
                    "/config/brokers", DELETE_TOPICS, ISR_CHANGES, "/cluster", CONTROLLED_SHUTDOWN)

NO_LEADER = -1
LEADER_DURING_DELETE = -2


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _dumps(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _loads(raw: bytes, path: str):
    try:
        return json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptRecordError(f"znode {path} does not hold JSON: {e}", file=path) from None


def is_transient(exc: BaseException) -> bool:
    """A failure of ZooKeeper's connection, not of the request: CoordinatorUnavailableError, or
    kazoo's own connection-level errors (watch calls go to kazoo directly). Worth retrying."""
    from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError
    from kazoo.handlers.threading import KazooTimeoutError
    return isinstance(exc, (CoordinatorUnavailableError, ConnectionClosedError, ConnectionLoss,
                            OperationTimeoutError, SessionExpiredError, KazooTimeoutError))


def _coordinator_errors(method):
    """Turn kazoo's connection-level failures into CoordinatorUnavailableError naming the
    ensemble and the operation (the caller retries or gives up; nothing is known to be written
    for a write that failed this way)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        from kazoo.exceptions import (ConnectionClosedError, ConnectionLoss, OperationTimeoutError,
                                      SessionExpiredError)
        from kazoo.handlers.threading import KazooTimeoutError
        try:
            return method(self, *args, **kwargs)
        except (ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError,
                KazooTimeoutError) as e:
            raise CoordinatorUnavailableError(
                f"zookeeper.connect={self.hosts}: {method.__name__} failed: {type(e).__name__}"
                f" {e or ''}".rstrip()) from e
    return wrapper


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    host: str
    port: int
    endpoints: tuple[str, ...]
    rack: str | None = None
    epoch: int = -1                  # the registration znode's czxid (the broker epoch)

    def to_json(self) -> bytes:
        protocols = {}
        for ep in self.endpoints:
            name = ep.split("://", 1)[0]
            protocols[name] = name if name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL") \
                else "PLAINTEXT"
        doc = {"version": 4, "host": self.host, "port": self.port, "jmx_port": -1,
               "timestamp": _now_ms(), "endpoints": list(self.endpoints),
               "listener_security_protocol_map": protocols}
        if self.rack is not None:
            doc["rack"] = self.rack
        return _dumps(doc)

    @classmethod
    def from_json(cls, broker_id: int, raw: bytes, czxid: int, path: str) -> "BrokerRegistration":
        d = _loads(raw, path)
        return cls(broker_id, d.get("host") or "", int(d.get("port", -1)),
                   tuple(d.get("endpoints", ())), d.get("rack"), czxid)


@dataclass(frozen=True)
class PartitionState:
    """A partition's leader and ISR as the state znode holds them; `zk_version` is the znode's
    version (Kafka's zkVersion / partition epoch), the expected version of the next update."""
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    # The zxid of the write that made this version (the znode's mzxid; -1: not known). A broker
    # whose registration (czxid, its broker epoch) is newer than it restarted since this state
    # was written: its leadership or ISR membership in it belongs to its previous process.
    mzxid: int = field(default=-1, compare=False)

    def same_content(self, other: "PartitionState") -> bool:
        """The same leader, epochs and ISR (whatever the znode versions)."""
        return (self.leader, self.leader_epoch, tuple(self.isr), self.controller_epoch) == \
            (other.leader, other.leader_epoch, tuple(other.isr), other.controller_epoch)

    def written_before(self, registration_epoch: int) -> bool:
        """Whether this state was written before a registration with that broker epoch."""
        return 0 <= self.mzxid < registration_epoch

    def to_json(self) -> bytes:
        return _dumps({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                       "isr": list(self.isr), "controller_epoch": self.controller_epoch})

    @classmethod
    def from_json(cls, raw: bytes, zk_version: int, path: str, mzxid: int = -1) -> "PartitionState":
        d = _loads(raw, path)
        try:
            return cls(int(d["leader"]), int(d["leader_epoch"]), tuple(int(b) for b in d["isr"]),
                       int(d["controller_epoch"]), zk_version, mzxid)
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptRecordError(f"partition state {path} lacks or mangles {e}", file=path) from None


@dataclass(frozen=True)
class TopicAssignment:
    name: str
    topic_id: str
    partitions: dict[int, tuple[int, ...]]        # partition -> replicas in preference order
    zk_version: int = -1
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        def enc(m):
            return {str(p): list(r) for p, r in sorted(m.items()) if r}
        return _dumps({"version": 3, "topic_id": self.topic_id, "partitions": enc(self.partitions),
                       "adding_replicas": enc(self.adding_replicas),
                       "removing_replicas": enc(self.removing_replicas)})

    def reassigning(self, partition: int) -> bool:
        """Whether `partition` has a reassignment in progress (adding or removing replicas)."""
        return bool(self.adding_replicas.get(partition) or self.removing_replicas.get(partition))

    def target_replicas(self, partition: int) -> tuple[int, ...]:
        """Where `partition` is going: its replicas without the ones being removed (TRS)."""
        removing = set(self.removing_replicas.get(partition, ()))
        return tuple(r for r in self.partitions.get(partition, ()) if r not in removing)

    def origin_replicas(self, partition: int) -> tuple[int, ...]:
        """Where `partition` came from: its replicas without the ones being added (ORS)."""
        adding = set(self.adding_replicas.get(partition, ()))
        return tuple(r for r in self.partitions.get(partition, ()) if r not in adding)

    @classmethod
    def from_json(cls, name: str, raw: bytes, zk_version: int, path: str) -> "TopicAssignment":
        d = _loads(raw, path)

        def dec(m):
            return {int(p): tuple(int(b) for b in r) for p, r in (m or {}).items()}
        return cls(name, d.get("topic_id", ""), dec(d.get("partitions")), zk_version,
                   dec(d.get("adding_replicas")), dec(d.get("removing_replicas")))


@dataclass(frozen=True)
class ControllerEpoch:
    """What a controller fences its writes with: the epoch it holds and the version of
    /controller_epoch it set."""
    epoch: int
    zk_version: int


class ZooKeeperStore:
    """Cluster metadata in ZooKeeper. `hosts` is Kafka's zookeeper.connect: host:port[,host:port]
    with an optional chroot suffix (`/seglog`)."""

    def __init__(self, hosts: str, *, session_timeout_ms: int = 18000, connect_timeout_s: float = 15.0):
        from kazoo.client import KazooClient     # runtime dependency of the cluster store only
        self.hosts = hosts
        self.session_timeout_ms = session_timeout_ms
        self.client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000.0)
        self._connect_timeout = connect_timeout_s
        self._lock = threading.Lock()
        self._registration: BrokerRegistration | None = None
        self._session_lost = False
        self._new_session_callbacks: list[Callable[[], None]] = []
        self.client.add_listener(self._on_state)

    # ------------------------------------------------------------------ session
    def start(self) -> "ZooKeeperStore":
        from kazoo.handlers.threading import KazooTimeoutError
        try:
            self.client.start(timeout=self._connect_timeout)
        except KazooTimeoutError:
            self.client.stop()
            raise CoordinatorUnavailableError(
                f"zookeeper.connect={self.hosts}: no ZooKeeper answered within {self._connect_timeout:.0f} s") from None
        for p in PERSISTENT_PATHS:
            self.client.ensure_path(p)
        return self

    def close(self) -> None:
        """End the session: its ephemerals (broker registration, /controller) go at once."""
        self.client.stop()
        self.client.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    @property
    def connected(self) -> bool:
        """Whether the session is connected now (not suspended, not closed)."""
        return self.client.connected

    @property
    def session_id(self) -> int:
        return self.client.client_id[0] if self.client.client_id else 0

    def on_new_session(self, fn: Callable[[], None]) -> None:
        """Call `fn()` (on kazoo's callback thread) after the session expired and a new one was
        established, once the broker registration (if any) has been redone."""
        self._new_session_callbacks.append(fn)

    def _on_state(self, state) -> None:
        from kazoo.protocol.states import KazooState
        # Never block here: kazoo calls listeners on its connection thread.
        if state == KazooState.LOST:
            self._session_lost = True
            logger.warning("ZooKeeper session expired (%s): ephemerals are gone", self.hosts)
        elif state == KazooState.SUSPENDED:
            logger.info("ZooKeeper connection lost (%s); session may still be alive", self.hosts)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self.client.handler.spawn(self._after_new_session)

    def _after_new_session(self) -> None:
        reg = self._registration
        if reg is not None:
            try:
                self.register_broker(reg.broker_id, reg.host, reg.port, reg.endpoints, rack=reg.rack)
            except Exception:                                # noqa: BLE001 - logged, retried by the owner
                logger.exception("re-registering broker %d after session expiry failed", reg.broker_id)
        for fn in list(self._new_session_callbacks):
            try:
                fn()
            except Exception:                                # noqa: BLE001
                logger.exception("new-session callback %r failed", fn)

    # ------------------------------------------------------------------ cluster id
    def cluster_id(self) -> str:
        """The cluster id, created on first call (Kafka's /cluster/id)."""
        from kazoo.exceptions import NodeExistsError

        from logcore.log.partition_metadata import format_topic_id, new_topic_id
        try:
            self.client.create(CLUSTER_ID, _dumps({"version": "1", "id": format_topic_id(new_topic_id())}))
        except NodeExistsError:
            pass
        raw, _ = self.client.get(CLUSTER_ID)
        return _loads(raw, CLUSTER_ID)["id"]

    # ------------------------------------------------------------------ brokers
    def register_broker(self, broker_id: int, host: str, port: int, endpoints=None, *,
                        rack: str | None = None, wait_s: float | None = None) -> int:
        """Create /brokers/ids/<id> as an ephemeral of this session and return the broker epoch
        (its czxid). A registration left by an older session of the same broker is waited for
        (up to `wait_s`, default the session timeout): ZooKeeper removes it when that session
        expires. A live foreign registration after that raises BrokerIdInUseError."""
        from kazoo.exceptions import NoNodeError, NodeExistsError
        endpoints = tuple(endpoints or (f"PLAINTEXT://{host}:{port}",))
        reg = BrokerRegistration(int(broker_id), host, int(port), endpoints, rack)
        path = f"{BROKER_IDS}/{broker_id}"
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
        self._registration = BrokerRegistration(reg.broker_id, host, int(port), endpoints, rack, stat.czxid)
        return stat.czxid

    def _bounded(self, result, timeout_s: float | None, what: str):
        """The value of a kazoo async call, waiting at most `timeout_s` (None: as long as it
        takes). While the connection is down kazoo keeps a request queued until it is back, so
        a call on a path that must finish (a stop) is bounded: CoordinatorUnavailableError then,
        and the outcome is unknown."""
        from kazoo.handlers.threading import KazooTimeoutError
        try:
            return result.get(timeout=timeout_s)
        except KazooTimeoutError:
            raise CoordinatorUnavailableError(
                f"zookeeper.connect={self.hosts}: {what} got no answer within {timeout_s:.1f} s") from None

    @_coordinator_errors
    def deregister_broker(self, timeout_s: float | None = None) -> None:
        """Remove this broker's registration (a clean shutdown) without ending the session."""
        from kazoo.exceptions import NoNodeError
        reg, self._registration = self._registration, None
        if reg is not None:
            try:
                self._bounded(self.client.delete_async(f"{BROKER_IDS}/{reg.broker_id}"), timeout_s,
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
            path = f"{BROKER_IDS}/{child}"
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
        if self.client.exists(f"{DELETE_TOPICS}/{name}"):
            raise TopicExistsError(f"topic {name!r} is marked for deletion in ZooKeeper ({self.hosts})")
        ta = TopicAssignment(name, topic_id, {int(p): tuple(r) for p, r in assignment.items()}, 0)
        t = self.client.transaction()
        cfg_path = f"{CONFIG_TOPICS}/{name}"
        if self.client.exists(cfg_path):
            t.set_data(cfg_path, _dumps({"version": 1, "config": dict(config or {})}))
        else:
            t.create(cfg_path, _dumps({"version": 1, "config": dict(config or {})}))
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
                config = {k: str(v) for k, v in _loads(raw or b"{}", path).get("config", {}).items()}
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

    def request_reassignments(self, targets: dict[tuple[str, int], list[int] | None]) -> None:
        """Hand reassignments to the controller through /admin/reassign_partitions (Kafka's
        znode and JSON; seglog's `"replicas": null` cancels). One pending request at a time:
        ZkVersionConflictError while another one is there."""
        from kazoo.exceptions import NodeExistsError
        doc = {"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": None if r is None else list(r)}
            for (t, p), r in sorted(targets.items())]}
        try:
            self.client.create(REASSIGN_PARTITIONS, _dumps(doc), makepath=True)
        except NodeExistsError:
            raise ZkVersionConflictError(
                f"a partition reassignment request is already pending ({REASSIGN_PARTITIONS})") from None

    def pending_reassignments(self) -> tuple[dict[tuple[str, int], tuple[int, ...] | None], int] | None:
        """The pending /admin/reassign_partitions request ({(topic, partition): replicas or
        None to cancel}) and its znode version; None when there is none."""
        from kazoo.exceptions import NoNodeError
        try:
            raw, stat = self.client.get(REASSIGN_PARTITIONS)
        except NoNodeError:
            return None
        out = {}
        for i, d in enumerate(_loads(raw, REASSIGN_PARTITIONS).get("partitions", [])):
            try:
                replicas = d.get("replicas")
                out[(str(d["topic"]), int(d["partition"]))] = \
                    None if replicas is None else tuple(int(b) for b in replicas)
            except (KeyError, TypeError, ValueError) as e:
                raise CorruptRecordError(f"{REASSIGN_PARTITIONS}: partitions[{i}] lacks or mangles {e}",
                                         file=REASSIGN_PARTITIONS) from None
        return out, stat.version

    def topic_config(self, name: str) -> tuple[dict[str, str], int]:
        """The topic's config overrides and the znode version."""
        from kazoo.exceptions import NoNodeError
        path = f"{CONFIG_TOPICS}/{name}"
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            raise TopicNotFoundError(f"topic {name!r} has no config in ZooKeeper ({path})") from None
        return {k: str(v) for k, v in _loads(raw, path).get("config", {}).items()}, stat.version

    def set_topic_config(self, name: str, config: dict[str, str], expected_version: int) -> int:
        """Replace the overrides if the znode is at `expected_version` and announce the change
        with a /config/changes sequential node, as Kafka's AdminZkClient does."""
        from kazoo.exceptions import BadVersionError, NoNodeError
        path = f"{CONFIG_TOPICS}/{name}"
        t = self.client.transaction()
        t.set_data(path, _dumps({"version": 1, "config": {k: str(v) for k, v in config.items()}}),
                   version=expected_version)
        t.create(f"{CONFIG_CHANGES}/config_change_", _dumps({"version": 2, "entity_path": f"topics/{name}"}),
                 sequence=True)
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
            self.client.create(f"{DELETE_TOPICS}/{name}")
        except NodeExistsError:
            pass

    def watch_deletions(self, fn: Callable[[list[str]], None]):
        return self.client.ChildrenWatch(DELETE_TOPICS, lambda children: fn(sorted(children)))

    def remove_topic(self, name: str, fence: ControllerEpoch) -> None:
        """The controller's last step of a deletion: remove the topic's znodes and the request."""
        paths = self._subtree(topic_path(name)) if self.client.exists(topic_path(name)) else []
        for extra in (f"{CONFIG_TOPICS}/{name}", f"{DELETE_TOPICS}/{name}"):
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
    def partition_state(self, topic: str, partition: int, *, sync: bool = False) -> PartitionState | None:
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
        return PartitionState.from_json(raw, stat.version, path, stat.mzxid)

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        from kazoo.exceptions import NoNodeError
        try:
            parts = self.client.get_children(f"{topic_path(topic)}/partitions")
        except NoNodeError:
            return {}
        out = {}
        for p in sorted(int(x) for x in parts):
            s = self.partition_state(topic, p)
            if s is not None:
                out[p] = s
        return out

    def watch_partition_state(self, topic: str, partition: int,
                              fn: Callable[[PartitionState | None], object]):
        """fn(state) now and after every change (None while absent); fn returning False ends the
        watch. Apply a state only if its leader_epoch is newer than yours (equal: adopt the ISR
        and version)."""
        path = partition_state_path(topic, partition)

        def on_data(raw, stat):
            return fn(None if stat is None else PartitionState.from_json(raw or b"{}", stat.version, path,
                                                                                stat.mzxid))
        return self.client.DataWatch(path, on_data)

    def partition_state_write_outcome(self, topic: str, partition: int, based_on: PartitionState,
                                      proposed: PartitionState) -> tuple[WriteOutcome, PartitionState | None]:
        """After a write of `proposed` conditional on `based_on` whose answer was lost (a
        connection loss: CoordinatorUnavailableError): read the state znode back, caught up with
        the ensemble's leader, and say whether it holds that write. Returns the outcome and the
        state read. CoordinatorUnavailableError again: still not known, ask again later."""
        fresh = self.partition_state(topic, partition, sync=True)
        return classify_write(fresh, based_on, proposed, same=PartitionState.same_content), fresh

    def create_partition_states(self, topic: str, states: dict[int, PartitionState],
                                fence: ControllerEpoch) -> dict[int, PartitionState]:
        """The controller's initial states of new partitions, in one fenced transaction."""
        t = self.client.transaction()
        t.check(CONTROLLER_EPOCH, fence.zk_version)
        base = f"{topic_path(topic)}/partitions"
        if not self.client.exists(base):
            t.create(base)
        for p, s in sorted(states.items()):
            if not self.client.exists(f"{base}/{p}"):
                t.create(f"{base}/{p}")
            t.create(partition_state_path(topic, p), s.to_json())
        self._commit_fenced(t, fence, f"create states of {topic!r}")
        return {p: PartitionState(s.leader, s.leader_epoch, s.isr, s.controller_epoch, 0)
                for p, s in states.items()}

    def update_partition_state(self, topic: str, partition: int, new: PartitionState,
                               expected_version: int, *, fence: ControllerEpoch | None = None) -> PartitionState:
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
        return PartitionState(new.leader, new.leader_epoch, tuple(new.isr), new.controller_epoch,
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
        return int(_loads(raw, CONTROLLER)["brokerid"])

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
        t.create(CONTROLLER, _dumps({"version": 1, "brokerid": int(broker_id), "timestamp": _now_ms()}),
                 ephemeral=True)
        t.set_data(CONTROLLER_EPOCH, str(current.epoch + 1).encode(), version=current.zk_version)
        results = t.commit()
        if any(isinstance(r, Exception) for r in results):
            return None
        return ControllerEpoch(current.epoch + 1, results[1].version)

    @_coordinator_errors
    def resign_controller(self, broker_id: int, timeout_s: float | None = None) -> None:
        """Delete /controller if this session holds it (each call bounded by `timeout_s`)."""
        from kazoo.exceptions import BadVersionError, NoNodeError
        try:
            raw, stat = self._bounded(self.client.get_async(CONTROLLER), timeout_s, "reading /controller")
        except NoNodeError:
            return
        if stat.ephemeralOwner == self.session_id and _loads(raw, CONTROLLER).get("brokerid") == broker_id:
            try:
                self._bounded(self.client.delete_async(CONTROLLER, version=stat.version), timeout_s,
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
        reg_path = f"{BROKER_IDS}/{broker_id}"
        try:
            raw, stat = self.client.get(CONTROLLER)
            _, reg = self.client.get(reg_path)
        except NoNodeError:
            return False
        if (int(_loads(raw, CONTROLLER).get("brokerid", -1)) != broker_id or reg.czxid != broker_epoch
                or reg.ephemeralOwner != stat.ephemeralOwner):
            return False
        t = self.client.transaction()
        t.check(reg_path, reg.version)
        t.delete(CONTROLLER, version=stat.version)
        return not any(isinstance(r, Exception) for r in t.commit())

    def watch_controller(self, fn: Callable[[int | None], None]):
        """fn(controller id or None) now and whenever /controller changes."""
        def on_data(raw, stat):
            fn(None if stat is None else int(_loads(raw, CONTROLLER)["brokerid"]))
        return self.client.DataWatch(CONTROLLER, on_data)

    # ------------------------------------------------------------------ notifications
    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> str:
        """A leader that changed ISRs tells the controller (it then refreshes metadata)."""
        return self.client.create(
            f"{ISR_CHANGES}/isr_change_",
            _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}),
            sequence=True)

    def isr_change_notifications(self) -> dict[str, list[tuple[str, int]]]:
        """{notification name: [(topic, partition)]}, oldest first."""
        from kazoo.exceptions import NoNodeError
        out = {}
        for name in sorted(self.client.get_children(ISR_CHANGES)):
            path = f"{ISR_CHANGES}/{name}"
            try:
                raw, _ = self.client.get(path)
            except NoNodeError:
                continue
            out[name] = [(d["topic"], int(d["partition"])) for d in _loads(raw, path)["partitions"]]
        return out

    def delete_isr_change_notifications(self, names) -> None:
        from kazoo.exceptions import NoNodeError
        for name in names:
            try:
                self.client.delete(f"{ISR_CHANGES}/{name}")
            except NoNodeError:
                pass

    def request_preferred_election(self, partitions: list[tuple[str, int]]) -> None:
        """Kafka's /admin/preferred_replica_election (one pending request at a time)."""
        from kazoo.exceptions import NodeExistsError
        try:
            self.client.create(PREFERRED_ELECTION, _dumps(
                {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}))
        except NodeExistsError:
            raise ZkVersionConflictError(
                f"a preferred replica election is already pending ({PREFERRED_ELECTION})") from None

    def request_unclean_election(self, partitions: list[tuple[str, int]]) -> None:
        """seglog's /admin/unclean_leader_election (one pending request at a time)."""
        from kazoo.exceptions import NodeExistsError
        try:
            self.client.create(UNCLEAN_ELECTION, _dumps(
                {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}))
        except NodeExistsError:
            raise ZkVersionConflictError(
                f"an unclean leader election is already pending ({UNCLEAN_ELECTION})") from None

    def pending_preferred_elections(self) -> tuple[list[tuple[str, int]], int] | None:
        """The partitions of the pending preferred-replica election request and its znode
        version (for `finish_preferred_elections`); None when there is none."""
        return self._pending_elections(PREFERRED_ELECTION)

    def pending_unclean_elections(self) -> tuple[list[tuple[str, int]], int] | None:
        """The same for the pending unclean leader election request."""
        return self._pending_elections(UNCLEAN_ELECTION)

    def finish_preferred_elections(self, version: int) -> None:
        """Consume the preferred election request read at `version` (a newer one stays)."""
        self._finish_request(PREFERRED_ELECTION, version)

    def finish_unclean_elections(self, version: int) -> None:
        self._finish_request(UNCLEAN_ELECTION, version)

    def finish_reassignments(self, version: int) -> None:
        """Consume the reassignment request read at `version` (a newer one stays)."""
        self._finish_request(REASSIGN_PARTITIONS, version)

    def watch_admin_requests(self, fn: Callable[[], None]) -> None:
        """fn() now and whenever a request for the controller appears, changes or goes: preferred
        and unclean elections, partition reassignments (fn means "re-read")."""
        for path in (PREFERRED_ELECTION, UNCLEAN_ELECTION, REASSIGN_PARTITIONS):
            self.client.DataWatch(path, lambda _data, _stat: fn())

    def watch_controlled_shutdowns(self, fn: Callable[[set[int]], None]):
        """fn(ids of the brokers announcing a controlled shutdown) now and on every change."""
        self.client.ensure_path(CONTROLLED_SHUTDOWN)
        return self.client.ChildrenWatch(
            CONTROLLED_SHUTDOWN, lambda children: fn({int(c) for c in children if c.isdigit()}))

    def _pending_elections(self, path: str) -> tuple[list[tuple[str, int]], int] | None:
        """The partitions of a pending election request at `path` and its znode version."""
        from kazoo.exceptions import NoNodeError
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return [(d["topic"], int(d["partition"])) for d in _loads(raw, path).get("partitions", [])], stat.version

    def _finish_request(self, path: str, version: int) -> None:
        from kazoo.exceptions import BadVersionError, NoNodeError
        try:
            self.client.delete(path, version=version)
        except (NoNodeError, BadVersionError):     # a newer request stays for the next pass
            pass

    @_coordinator_errors
    def announce_controlled_shutdown(self, broker_id: int, timeout_s: float | None = None) -> None:
        """This broker is stopping: the controller moves its leaderships and ISR memberships.
        Ephemeral: it goes with the session. Waits at most `timeout_s` for ZooKeeper."""
        from kazoo.exceptions import NodeExistsError
        try:
            self._bounded(self.client.create_async(f"{CONTROLLED_SHUTDOWN}/{broker_id}", b"", ephemeral=True,
                                                   makepath=True), timeout_s, "announcing a controlled shutdown")
        except NodeExistsError:
            pass

    def shutting_down(self) -> set[int]:
        from kazoo.exceptions import NoNodeError
        try:
            return {int(c) for c in self.client.get_children(CONTROLLED_SHUTDOWN) if c.isdigit()}
        except NoNodeError:
            return set()


    def claim_producer_id_block(self, broker_id: int, size: int) -> tuple[int, int]:
        """The next block of `size` producer ids for this broker (first, last), claimed with a
        compare-and-set on /latest_producer_id_block as Kafka's ZooKeeper mode does."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        def read() -> tuple[int, int | None]:        # (last id claimed, znode version or None)
            try:
                raw, stat = self.client.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                return -1, None
            return (int(_loads(raw, PRODUCER_ID_BLOCK).get("block_end", -1)) if raw else -1), stat.version

        def write(current, block):
            data = _dumps({"version": 1, "broker": int(broker_id), "block_start": str(block[0]),
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


_WRAPPED = ("cluster_id", "register_broker", "deregister_broker", "brokers", "watch_brokers",
            "create_topic", "list_topics", "topics_marked_for_deletion", "topic", "watch_topics",
            "set_assignment", "topic_config", "set_topic_config", "request_topic_deletion",
            "watch_deletions", "remove_topic", "partition_state", "partition_states",
            "watch_partition_state", "create_partition_states", "update_partition_state",
            "controller_epoch", "controller", "try_become_controller", "resign_controller",
            "depose_dead_controller",
            "watch_controller", "notify_isr_change", "isr_change_notifications",
            "delete_isr_change_notifications", "request_preferred_election",
            "request_unclean_election", "pending_preferred_elections", "pending_unclean_elections",
            "finish_preferred_elections", "finish_unclean_elections", "finish_reassignments",
            "watch_admin_requests", "watch_controlled_shutdowns", "assignments",
            "partition_state_write_outcome", "watch_assignment", "watch_topic_config",
            "announce_controlled_shutdown", "shutting_down", "claim_producer_id_block",
            "set_reassignment", "request_reassignments", "pending_reassignments")
for _name in _WRAPPED:
    setattr(ZooKeeperStore, _name, _coordinator_errors(getattr(ZooKeeperStore, _name)))
