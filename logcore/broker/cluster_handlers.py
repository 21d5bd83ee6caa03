"""The Broker's answers as a cluster member (zookeeper.connect set): Metadata from the cluster's
state, topic creation and deletion through the ZooKeeper catalog, and ElectLeaders; and for both
coordinators' internal topics, FindCoordinator's leader and the topic's creation at the first ask.

Held by the `Broker` (logcore/broker/broker.py); it reads the membership's `replica_manager` (the
ReplicaManager, which keeps the cluster's metadata as ZooKeeper's watches report it) and
`catalog` at each request (join_cluster sets them).
Metadata follows Kafka's ZooKeeper-era rules (replication.md 1.11): live brokers only; a
partition whose leader is not alive answers LEADER_NOT_AVAILABLE with leader -1 and its epoch;
replicas and ISR unfiltered; offline replicas = assigned replicas on brokers that are not alive.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from logcore.event_wait import wait_event
from logcore.wire import error_codes as E
from logcore.coordinator import offsets_topic as OT
from logcore.wire.protocol import ZERO_UUID
from logcore.cluster.zookeeper_store import NO_LEADER
from logcore.errors import (InvalidConfigError, InvalidReplicationFactorError, SegLogError,
                            TopicExistsError, TopicNotFoundError, ZkVersionConflictError)
from logcore.log.partition_metadata import parse_topic_id
from logcore.broker.describe_handlers import auto_create_asked, failed_topic

logger = logging.getLogger("logcore.broker.broker")

INT32_MIN = -(2 ** 31)
PREFERRED, UNCLEAN = 0, 1


async def await_metadata(replica_manager, done, timeout_s: float) -> bool:
    """Wait until `done()` holds for the cluster metadata (ZooKeeper's watches update it)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if not await wait_event(replica_manager.changed, remaining):
            return done()
    return True


def no_coordinator(message: str) -> dict:
    """FindCoordinator's answer while no broker can coordinate (the client asks again)."""
    return {"throttle_time": 0, "error_code": E.COORDINATOR_NOT_AVAILABLE, "error_message": message,
            "node_id": -1, "host": "", "port": -1}


async def find_internal_coordinator(membership, topic: str, key: str, what: str, partition_for, create) -> dict:
    """The coordinator of `key` (a `what`: group, transactional id) in the cluster: the leader of
    its partition of the internal `topic`, from the cluster metadata. COORDINATOR_NOT_AVAILABLE
    while the topic cannot be created (`create()`: None once it exists, else why not) or the
    partition has no live leader (the client asks again)."""
    rm = membership.replica_manager
    if topic not in rm.assignments:
        message = await create()
        if message is not None:
            return no_coordinator(message)
    ta = rm.assignments.get(topic)
    if ta is None or not ta.partitions:
        return no_coordinator(f"{topic} is being created")
    p = partition_for(key or "", max(ta.partitions) + 1)
    state = rm.states.get((topic, p))
    reg = rm.brokers.get(state.leader) if state is not None else None
    if reg is None:
        return no_coordinator(f"{topic}-{p}, the partition of {what} {key!r}, has no live leader")
    return {"throttle_time": 0, "error_code": E.NONE, "error_message": None,
            "node_id": state.leader, "host": reg.host, "port": reg.port}


async def create_internal_topic(membership, topic: str, count: int, config: dict, rf: int,
                                rf_setting: str) -> str | None:
    """Create a coordinator's internal topic (compacted) through the catalog; None when it
    exists now, else why not. Kafka's rule: not created while fewer brokers than the replication
    factor (the setting `rf_setting`) live."""
    rm = membership.replica_manager
    try:
        # Asked of ZooKeeper, not of this broker's view (which may lag: a broker just started).
        live = sorted(await asyncio.to_thread(rm.store.brokers))
        if len(live) < rf:
            message = f"{topic} not created: {rf_setting}={rf} but only {len(live)} live brokers {live}"
            logger.warning("%s", message)
            return message
        await asyncio.to_thread(membership.catalog.create_topic, topic, count, config, replication_factor=rf)
        logger.info("created %s in the cluster (%d partitions, replication factor %d, compacted)", topic, count, rf)
    except TopicExistsError:
        pass
    except Exception as exc:   # noqa: BLE001 - ZooKeeper away, a bad setting: the client retries
        logger.warning("creating %s failed: %s", topic, exc)
        return f"{topic} could not be created: {exc}"
    await await_metadata(rm, lambda: topic in rm.assignments, 5.0)
    return None


def _preferred_refusal(name: str, p: int, preferred: int, state, live) -> tuple[int, str] | None:
    """Why ElectLeaders (PREFERRED) elects nothing for `name`-`p` given its `state` and the `live`
    brokers; None when the controller should move the leadership to `preferred`."""
    if state.leader == preferred:
        return E.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
    if preferred not in live or preferred not in state.isr:
        return (E.PREFERRED_LEADER_NOT_AVAILABLE,
                f"Failed to elect leader for partition {name}-{p} under strategy"
                f" PreferredReplicaPartitionLeaderElectionStrategy: broker {preferred}"
                " is not alive or not in the ISR")
    return None


class ClusterHandlers:
    """Over the broker's `config`; `membership` holds the replica manager, the catalog and the
    cluster id."""

    def __init__(self, config, membership):
        self.config = config
        self.membership = membership

    # ------------------------------------------------------------------ Metadata
    def _cluster_topic_uuid(self, name: str) -> uuid.UUID:
        ta = self.membership.replica_manager.assignments.get(name)
        return parse_topic_id(ta.topic_id) if ta is not None and ta.topic_id else ZERO_UUID

    async def cluster_metadata(self, body) -> dict:
        rm = self.membership.replica_manager
        if body.topics is None:
            names = sorted(rm.assignments)
        else:
            names = []
            for t in body.topics:
                name = t.name
                if name is None and getattr(t, "topic_id", None) not in (None, ZERO_UUID):
                    name = next((n for n, ta in rm.assignments.items()
                                 if ta.topic_id and parse_topic_id(ta.topic_id) == t.topic_id), None)
                names.append(name)
        allow_create = auto_create_asked(body, self.config)
        topics = []
        for name in names:
            if name is None:
                topics.append(failed_topic(E.UNKNOWN_TOPIC_ID, None))
                continue
            if name not in rm.assignments and allow_create:
                error = await self._cluster_auto_create(name)
                if error != E.NONE:
                    topics.append(failed_topic(error, name))
                    continue
            ta = rm.assignments.get(name)
            if ta is None:
                topics.append(failed_topic(E.UNKNOWN_TOPIC_OR_PARTITION, name))
                continue
            topics.append({"error_code": E.NONE, "name": name, "topic_id": self._cluster_topic_uuid(name),
                           "is_internal": name.startswith("__"), "partitions": self._partitions_metadata(ta),
                           "topic_authorized_operations": INT32_MIN})
        brokers = [{"node_id": b, "host": reg.host, "port": reg.port, "rack": reg.rack}
                   for b, reg in sorted(rm.brokers.items())]
        return {"throttle_time": 0, "brokers": brokers, "cluster_id": self.membership.cluster_id,
                "controller_id": rm.controller_id, "topics": topics,
                "cluster_authorized_operations": INT32_MIN}

    def _partitions_metadata(self, ta) -> list[dict]:
        rm = self.membership.replica_manager
        live = rm.brokers
        parts = []
        for p, replicas in sorted(ta.partitions.items()):
            state = rm.states.get((ta.name, p))
            offline = [r for r in replicas if r not in live]
            if state is None:
                parts.append({"error_code": E.LEADER_NOT_AVAILABLE, "partition_index": p, "leader_id": -1,
                              "leader_epoch": -1, "replica_nodes": list(replicas), "isr_nodes": [],
                              "offline_replicas": offline})
                continue
            leader = state.leader if state.leader in live else NO_LEADER
            parts.append({"error_code": E.NONE if leader != NO_LEADER else E.LEADER_NOT_AVAILABLE,
                          "partition_index": p, "leader_id": leader, "leader_epoch": state.leader_epoch,
                          "replica_nodes": list(replicas), "isr_nodes": list(state.isr),
                          "offline_replicas": offline})
        return parts

    async def _cluster_auto_create(self, name: str) -> int:
        rf = self.config["default.replication.factor"]
        try:
            await asyncio.to_thread(self.membership.catalog.create_topic, name, self.config["num.partitions"], {},
                                    replication_factor=rf)
            logger.info("auto-created topic %s (replication factor %d)", name, rf)
        except TopicExistsError:
            pass
        except InvalidReplicationFactorError as exc:
            logger.info("auto-create of topic %s refused: %s", name, exc)
            return E.INVALID_REPLICATION_FACTOR
        except SegLogError as exc:
            logger.info("auto-create of topic %s refused: %s", name, exc)
            return E.error_code(exc)
        await self.await_cluster(lambda: name in self.membership.replica_manager.assignments, 5.0)
        # Leaders come a moment later: clients retry on LEADER_NOT_AVAILABLE meanwhile.
        return E.NONE

    async def await_cluster(self, done, timeout_s: float) -> bool:
        return await await_metadata(self.membership.replica_manager, done, timeout_s)

    def _has_leaders(self, name: str, partitions: int | None = None) -> bool:
        rm = self.membership.replica_manager
        ta = rm.assignments.get(name)
        if ta is None or (partitions is not None and len(ta.partitions) < partitions):
            return False
        return all((s := rm.states.get((name, p))) is not None and s.leader in rm.brokers
                   for p in ta.partitions)

    # ------------------------------------------------------------------ CreateTopics / DeleteTopics
    async def cluster_create_topics(self, req) -> dict:
        body = req.body
        timeout_s = max(0.0, body.timeout.total_seconds())
        results, created = [], []
        seen = set()
        for t in body.topics:
            res = {"name": t.name, "error_code": E.NONE, "error_message": None,
                   "num_partitions": -1, "replication_factor": -1, "configs": []}
            results.append(res)
            try:
                if t.name in seen:
                    raise _Refused(E.INVALID_REQUEST, f"topic {t.name!r} is listed twice")
                seen.add(t.name)
                if t.name == OT.TOPIC:
                    raise _Refused(E.INVALID_REQUEST, f"{OT.TOPIC} is created by the group coordinator")
                configs = {c.name: c.value for c in t.configs if c.value is not None}
                assignment = None
                if t.assignments:
                    if t.num_partitions != -1 or t.replication_factor != -1:
                        raise _Refused(E.INVALID_REQUEST, "give either an assignment or a partition count"
                                       " and replication factor, not both")
                    assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
                partitions = t.num_partitions if t.num_partitions != -1 else self.config["num.partitions"]
                rf = t.replication_factor if t.replication_factor != -1 else self.config["default.replication.factor"]
                if assignment is None and partitions < 1:
                    raise _Refused(E.INVALID_PARTITIONS, f"number of partitions {partitions} must be at least 1")
                if assignment is None and rf < 1:
                    raise _Refused(E.INVALID_REPLICATION_FACTOR, f"replication factor {rf} must be at least 1")
                live = len(self.membership.replica_manager.brokers)
                if assignment is None and rf > live:
                    raise _Refused(E.INVALID_REPLICATION_FACTOR,
                                   f"Replication factor: {rf} larger than available brokers: {live}.")
                if body.validate_only:
                    from logcore.log.config import validate_topic_overrides
                    from logcore.log.topic_name import validate_topic_name
                    validate_topic_name(t.name)
                    validate_topic_overrides(configs)
                    if t.name in self.membership.replica_manager.assignments:
                        raise _Refused(E.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
                    info_partitions, info_rf = (len(assignment), len(assignment[0])) if assignment else (partitions, rf)
                else:
                    try:
                        info = await asyncio.to_thread(self.membership.catalog.create_topic, t.name, partitions,
                                                       configs, replication_factor=rf, assignment=assignment)
                    except InvalidConfigError as exc:
                        if assignment is not None:
                            raise _Refused(E.INVALID_REPLICA_ASSIGNMENT, str(exc)) from None
                        raise
                    info_partitions = info.partitions
                    info_rf = len(assignment[0]) if assignment else rf
                    created.append((t.name, info.partitions))
                res.update(num_partitions=info_partitions, replication_factor=info_rf)
            except _Refused as exc:
                res.update(error_code=exc.code, error_message=str(exc))
            except TopicExistsError:
                res.update(error_code=E.TOPIC_ALREADY_EXISTS, error_message=f"Topic '{t.name}' already exists.")
            except SegLogError as exc:
                res.update(error_code=E.error_code(exc), error_message=str(exc))
        # Kafka answers once the new partitions have leaders (or the request's timeout passed).
        if created and timeout_s > 0:
            await self.await_cluster(lambda: all(self._has_leaders(n, p) for n, p in created), timeout_s)
        return {"throttle_time": 0, "topics": results}

    async def cluster_delete_topics(self, req, wanted) -> dict:
        rm = self.membership.replica_manager
        timeout_s = max(0.0, req.body.timeout.total_seconds())
        out, deleting = [], []
        for name, topic_id in wanted:
            if name is None and topic_id not in (None, ZERO_UUID):
                name = next((n for n, ta in rm.assignments.items()
                             if ta.topic_id and parse_topic_id(ta.topic_id) == topic_id), None)
                if name is None:
                    out.append({"name": None, "topic_id": topic_id, "error_code": E.UNKNOWN_TOPIC_ID})
                    continue
            res = {"name": name, "topic_id": self._cluster_topic_uuid(name), "error_code": E.NONE,
                   "error_message": None}
            out.append(res)
            try:
                if name == OT.TOPIC:
                    raise _Refused(E.INVALID_TOPIC_EXCEPTION, f"{OT.TOPIC} is internal; it cannot be deleted")
                await asyncio.to_thread(self.membership.catalog.delete_topic, name)
                deleting.append(name)
            except _Refused as exc:
                res.update(error_code=exc.code, error_message=str(exc))
            except TopicNotFoundError:
                res.update(error_code=E.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"topic {name!r} does not exist")
            except SegLogError as exc:
                res.update(error_code=E.error_code(exc), error_message=str(exc))
        if deleting and timeout_s > 0:
            await self.await_cluster(lambda: not any(n in rm.assignments for n in deleting), timeout_s)
        return {"throttle_time": 0, "responses": out}

    async def cluster_create_partitions(self, req) -> dict:
        body = req.body
        timeout_s = max(0.0, body.timeout.total_seconds())
        results, grown = [], []
        for t in body.topics:
            res = {"name": t.name, "error_code": E.NONE, "error_message": None}
            results.append(res)
            ta = self.membership.replica_manager.assignments.get(t.name)
            if t.name == OT.TOPIC:
                res.update(error_code=E.INVALID_REQUEST,
                           error_message=f"{OT.TOPIC} is internal: its partition count maps groups to"
                                         " coordinators and cannot change")
            elif ta is None:
                res.update(error_code=E.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Topic '{t.name}' does not exist.")
            elif t.count <= len(ta.partitions):
                res.update(error_code=E.INVALID_PARTITIONS,
                           error_message=f"Topic currently has {len(ta.partitions)} partitions, which is higher"
                                         f" than the requested {t.count}.")
            else:
                # Kafka's CreatePartitions assignments: the replicas of each new partition, in order
                manual = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
                try:
                    await asyncio.to_thread(self.membership.catalog.add_partitions, t.name, t.count, manual,
                                            validate_only=body.validate_only)
                    if not body.validate_only:
                        grown.append((t.name, t.count))
                except (InvalidConfigError, InvalidReplicationFactorError) as exc:
                    res.update(error_code=E.INVALID_REPLICA_ASSIGNMENT if manual else E.error_code(exc),
                               error_message=str(exc))
                except SegLogError as exc:
                    res.update(error_code=E.error_code(exc), error_message=str(exc))
        if grown and timeout_s > 0:
            await self.await_cluster(lambda: all(self._has_leaders(n, c) for n, c in grown), timeout_s)
        return {"throttle_time": 0, "results": results}

    # ------------------------------------------------------------------ ElectLeaders
    async def elect_leaders(self, req) -> dict:
        body = req.body
        kind = getattr(body, "election_type", PREFERRED)
        timeout_s = max(0.0, body.timeout.total_seconds())
        rm = self.membership.replica_manager
        if body.topic_partitions is None:
            wanted = [(n, p) for n, ta in sorted(rm.assignments.items()) for p in sorted(ta.partitions)]
        else:
            wanted = [(t.topic, p) for t in body.topic_partitions for p in t.partitions]
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        asked = []
        unsure = {}             # refused from this broker's view: decided again from ZooKeeper's
        for name, p in wanted:
            ta = rm.assignments.get(name)
            state = rm.states.get((name, p))
            if ta is None or p not in ta.partitions or state is None:
                results[(name, p)] = (E.UNKNOWN_TOPIC_OR_PARTITION, f"{name}-{p} does not exist")
                continue
            replicas = ta.partitions[p]
            if kind == PREFERRED:
                refusal = _preferred_refusal(name, p, replicas[0], state, rm.brokers)
                if refusal is None:
                    asked.append((name, p))
                elif refusal[0] == E.PREFERRED_LEADER_NOT_AVAILABLE:
                    unsure[(name, p)] = (replicas[0], refusal)
                else:
                    results[(name, p)] = refusal
            elif kind == UNCLEAN:
                if state.leader in rm.brokers:
                    results[(name, p)] = (E.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
                elif not any(r in rm.brokers for r in replicas):
                    results[(name, p)] = (E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                          f"Failed to elect leader for partition {name}-{p}: no replica is alive")
                else:
                    asked.append((name, p))
            else:
                return {"throttle_time": 0, "error_code": E.INVALID_REQUEST, "replica_election_results": []}
        if unsure:
            asked += await self._recheck_preferred(unsure, results)
        if asked:
            try:
                await self._request_election(kind, asked, timeout_s)
            except SegLogError as exc:
                for key in asked:
                    results[key] = (E.error_code(exc), str(exc))
                asked = []

            def elected(key):
                state = rm.states.get(key)
                if state is None:
                    return False
                if kind == PREFERRED:
                    return state.leader == rm.assignments[key[0]].partitions[key[1]][0]
                return state.leader in rm.brokers
            await self.await_cluster(lambda: all(elected(k) for k in asked), timeout_s)
            for key in asked:
                results.setdefault(key, (E.NONE, None) if elected(key) else
                                   (E.REQUEST_TIMED_OUT, f"the election of {key[0]}-{key[1]} did not complete"
                                    f" within {timeout_s:g} s"))
        by_topic: dict[str, list] = {}
        for (name, p), (code, message) in results.items():
            if body.topic_partitions is None and code == E.ELECTION_NOT_NEEDED:
                continue        # asked for all: Kafka's controller answers only what it acted on
            by_topic.setdefault(name, []).append({"partition_id": p, "error_code": code, "error_message": message})
        return {"throttle_time": 0, "error_code": E.NONE,
                "replica_election_results": [{"topic": t, "partition_result": r} for t, r in by_topic.items()]}

    async def _recheck_preferred(self, unsure: dict, results: dict) -> list[tuple[str, int]]:
        """The partitions of `unsure` ({key: (preferred replica, refusal from this broker's view)})
        whose preferred replica is live and in the ISR as ZooKeeper has it now; the others'
        refusals go to `results`. This broker's view follows ZooKeeper's watches and may lag it (a
        replica just back in the ISR): Kafka's controller decides from its current state."""
        store = self.membership.replica_manager.store

        def read():
            # One sync catches this ZooKeeper server up with the ensemble's leader for every read.
            keys = list(unsure)
            states = {keys[0]: store.partition_state(*keys[0], sync=True)}
            states.update((key, store.partition_state(*key)) for key in keys[1:])
            return store.brokers(), states
        try:
            live, states = await asyncio.to_thread(read)
        except Exception as exc:   # noqa: BLE001 - ZooKeeper away: this broker's view answers
            logger.warning("ElectLeaders: re-reading %d partition states failed (%s)", len(unsure), exc)
            live, states = {}, {}
        elect = []
        for (name, p), (preferred, refusal) in unsure.items():
            state = states.get((name, p))
            fresh = refusal if state is None else _preferred_refusal(name, p, preferred, state, live)
            if fresh is None:
                elect.append((name, p))
            else:
                results[(name, p)] = fresh
        return elect

    async def _request_election(self, kind: int, partitions, timeout_s: float) -> None:
        """Hand the election to the controller through ZooKeeper (Kafka's
        /admin/preferred_replica_election; seglog's /admin/unclean_leader_election)."""
        store = self.membership.replica_manager.store
        deadline = time.monotonic() + max(timeout_s, 1.0)
        while True:
            try:
                if kind == PREFERRED:
                    await asyncio.to_thread(store.request_preferred_election, partitions)
                else:
                    await asyncio.to_thread(store.request_unclean_election, partitions)
                return
            except ZkVersionConflictError:          # another request pending: wait for it
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.1)


class _Refused(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
