"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46) on a cluster
member (KIP-455, ZooKeeper mode).

Held by the `Broker` (logcore/broker/broker.py), like ClusterHandlers. Any broker takes the
request: it checks each partition against the cluster's metadata as Kafka's controller does
(UNKNOWN_TOPIC_OR_PARTITION; INVALID_REPLICA_ASSIGNMENT for an empty list, duplicates, negative
or not-alive new brokers; NO_REASSIGNMENT_IN_PROGRESS for a cancel of nothing;
INVALID_REPLICATION_FACTOR when v1's allow_replication_factor_change is false and the count
changes), hands the valid ones to the controller through /admin/reassign_partitions and answers
once the topic znodes show them started (or done), or REQUEST_TIMED_OUT after the request's
timeout. The removal of replication throttles that kafka-reassign-partitions --verify sends
(IncrementalAlterConfigs) is answered by config_handlers.py. The controller's side: logcore/cluster/controller.py, "reassignment".
"""
from __future__ import annotations

import asyncio
import time

from logcore.wire import error_codes as E
from logcore.broker.cluster_handlers import await_metadata
from logcore.errors import SegLogError, ZkVersionConflictError


def _ids(replicas) -> str:
    return "[" + ", ".join(str(b) for b in replicas) + "]"


class ReassignmentHandlers:
    """`membership` holds the replica manager (the cluster's metadata and its ZooKeeper store),
    read at each request."""

    def __init__(self, membership):
        self.membership = membership

    @property
    def replica_manager(self):
        return self.membership.replica_manager

    async def alter_partition_reassignments(self, req) -> dict:
        body = req.body
        timeout_s = max(0.0, body.timeout.total_seconds())
        allow_rf_change = getattr(body, "allow_replication_factor_change", True)
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        order: list[tuple[str, int]] = []
        asked: dict[tuple[str, int], tuple[int, ...] | None] = {}
        current = await self._read_assignments([t.name for t in body.topics])
        for t in body.topics:
            for p in t.partitions:
                key = (t.name, p.partition_index)
                order.append(key)
                target = None if p.replicas is None else tuple(int(b) for b in p.replicas)
                error = self._check_reassignment(current.get(t.name), key, target, allow_rf_change)
                if error is not None:
                    results[key] = error
                else:
                    asked[key] = target
        if asked:
            try:
                await self._request_reassignments(asked, timeout_s)
            except SegLogError as exc:
                for key in asked:
                    results[key] = (E.error_code(exc), str(exc))
                asked = {}
            await await_metadata(self.replica_manager,
                                 lambda: all(self._reassignment_applied(k, r) for k, r in asked.items()),
                                 timeout_s)
            for key, target in asked.items():
                results.setdefault(key, (E.NONE, None) if self._reassignment_applied(key, target) else
                                   (E.REQUEST_TIMED_OUT, f"the reassignment of {key[0]}-{key[1]} was not taken"
                                    f" up by the controller within {timeout_s:g} s"))
        by_topic: dict[str, list] = {}
        for key in order:
            code, message = results[key]
            by_topic.setdefault(key[0], []).append({"partition_index": key[1], "error_code": code,
                                                    "error_message": message})
        return {"throttle_time": 0, "allow_replication_factor_change": allow_rf_change,
                "error_code": E.NONE, "error_message": None,
                "responses": [{"name": n, "partitions": parts} for n, parts in by_topic.items()]}

    async def _read_assignments(self, names) -> dict:
        """The topics' znodes as ZooKeeper has them now (not this broker's watched view, which
        may lag the controller's last write by a moment): {name: TopicAssignment}."""
        from logcore.cluster.zookeeper_store import BROKER_TOPICS
        from logcore.errors import TopicNotFoundError
        store = self.replica_manager.store

        def read():
            store.client.sync(BROKER_TOPICS)
            wanted = store.list_topics() if names is None else sorted(set(names))
            out = {}
            for name in wanted:
                try:
                    out[name] = store.topic(name)
                except TopicNotFoundError:
                    pass
            return out
        return await asyncio.to_thread(read)

    def _check_reassignment(self, ta, key, target, allow_rf_change: bool):
        """None when the controller may take this reassignment, else (error code, message)."""
        rm = self.replica_manager
        name, p = key
        if ta is None or p not in ta.partitions:
            return E.UNKNOWN_TOPIC_OR_PARTITION, f"The partition {name}-{p} does not exist."
        if target is None:
            if not ta.reassigning(p):
                return E.NO_REASSIGNMENT_IN_PROGRESS, f"No reassignment of {name}-{p} is in progress."
            return None
        if not target:
            return E.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
        if len(set(target)) != len(target):
            return E.INVALID_REPLICA_ASSIGNMENT, \
                f"Duplicate replica ids in partition reassignment replica list: {_ids(target)}"
        if any(b < 0 for b in target):
            return E.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {_ids(target)}"
        origin = ta.origin_replicas(p)
        adding = [b for b in target if b not in origin]
        if any(b not in rm.brokers for b in adding):
            return E.INVALID_REPLICA_ASSIGNMENT, (
                f"Replica assignment has brokers that are not alive. Replica list: {_ids(adding)},"
                f" live broker list: {_ids(sorted(rm.brokers))}")
        if not allow_rf_change and len(target) != len(origin):
            return E.INVALID_REPLICATION_FACTOR, (
                f"The replication factor is changed from {len(origin)} to {len(target)} but"
                " allowReplicationFactorChange is false")
        return None

    def _reassignment_applied(self, key, target) -> bool:
        """The topic znode (as watched) shows the reassignment started, finished or cancelled."""
        ta = self.replica_manager.assignments.get(key[0])
        if ta is None or key[1] not in ta.partitions:
            return True                                   # deleted meanwhile: nothing to wait for
        if target is None:
            return not ta.reassigning(key[1])
        return ta.target_replicas(key[1]) == tuple(target)

    async def _request_reassignments(self, targets, timeout_s: float) -> None:
        """Hand them to the controller (/admin/reassign_partitions), waiting while an earlier
        request is pending."""
        store = self.replica_manager.store
        deadline = time.monotonic() + max(timeout_s, 1.0)
        while True:
            try:
                await asyncio.to_thread(store.request_reassignments, targets)
                return
            except ZkVersionConflictError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.1)

    async def list_partition_reassignments(self, req) -> dict:
        topics = req.body.topics
        current = await self._read_assignments(None if topics is None else [t.name for t in topics])
        if topics is None:
            wanted = [(n, p) for n, ta in sorted(current.items()) for p in sorted(ta.partitions)]
        else:
            wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
        by_topic: dict[str, list] = {}
        for name, p in wanted:
            ta = current.get(name)
            if ta is None or not ta.reassigning(p):
                continue
            by_topic.setdefault(name, []).append({
                "partition_index": p, "replicas": list(ta.partitions[p]),
                "adding_replicas": list(ta.adding_replicas.get(p, ())),
                "removing_replicas": list(ta.removing_replicas.get(p, ()))})
        return {"throttle_time": 0, "error_code": E.NONE, "error_message": None,
                "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()]}
