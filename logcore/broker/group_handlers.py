"""Consumer group handlers of the Broker: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

Held by the `Broker` (logcore/broker/broker.py), which dispatches to these methods by API key;
they hand the requests to the GroupCoordinator (logcore/coordinator/group_coordinator.py).

In a cluster (the membership's topic_catalog is ClusterTopics) FindCoordinator names the broker leading the group's
partition of `__consumer_offsets` (creating the topic through the catalog at the first ask, as
Kafka does), and every group API is answered NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
by a broker that does not coordinate the group (GroupCoordinator.coordinator_error).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from logcore.wire import error_codes as E
from logcore.broker.member_host import member_host
from logcore.broker.cluster_handlers import create_internal_topic, find_internal_coordinator
from logcore.coordinator import offsets_topic as OT
from logcore.coordinator.group_answers import join_error, sync_error
from logcore.coordinator.group_offsets import OFFSET_METADATA_MAX_BYTES
from logcore.wire.protocol import Request

logger = logging.getLogger("logcore.broker.broker")

if TYPE_CHECKING:
    from logcore.broker.broker import Result


def offsets_to_commit(topics, code: int, partition_exists) -> tuple[dict, list[tuple[str, int, int]]]:
    """The offsets an OffsetCommit or TxnOffsetCommit asks to store, and (topic, partition,
    error) for each of its partitions: `code` for all when it is not NONE, else the
    partition's own (unknown, metadata too large, or NONE: stored with the others)."""
    results: list[tuple[str, int, int]] = []
    offsets: dict[tuple[str, int], OT.CommittedOffset] = {}
    now = int(time.time() * 1000)
    for t in topics:
        for p in t.partitions:
            error = code
            if error == E.NONE:
                if not partition_exists(t.name, p.partition_index):
                    error = E.UNKNOWN_TOPIC_OR_PARTITION
                elif p.committed_metadata is not None and \
                        len(p.committed_metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                    error = E.OFFSET_METADATA_TOO_LARGE
                else:
                    offsets[(t.name, p.partition_index)] = OT.CommittedOffset(
                        p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                        p.committed_metadata or "", now)
            results.append((t.name, p.partition_index, error))
    return offsets, results


def commit_answer(results: list[tuple[str, int, int]], stored: int) -> dict:
    """The answer to an offset commit: each partition's own error, else how the store went."""
    by_topic: dict[str, list] = {}
    for topic, index, error in results:
        by_topic.setdefault(topic, []).append({"partition_index": index,
                                               "error_code": stored if error == E.NONE else error})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


def join_args(req: Request) -> dict:
    """A JoinGroup's fields, as the coordinators take them."""
    b = req.body
    session_ms = int(b.session_timeout.total_seconds() * 1000)
    rebalance = getattr(b, "rebalance_timeout", None)
    return dict(group_id=b.group_id, member_id=b.member_id,
                group_instance_id=getattr(b, "group_instance_id", None), client_id=req.client_id or "",
                client_host=member_host(req), session_timeout_ms=session_ms,
                rebalance_timeout_ms=int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms,
                protocol_type=b.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in b.protocols],
                require_known_member=req.api_version >= 4)


def sync_args(req: Request) -> dict:
    b = req.body
    return dict(group_id=b.group_id, generation_id=b.generation_id, member_id=b.member_id,
                group_instance_id=getattr(b, "group_instance_id", None))


def heartbeat_args(req: Request) -> dict:
    b = req.body
    return dict(group_id=b.group_id, generation_id=b.generation_id, member_id=b.member_id,
                group_instance_id=getattr(b, "group_instance_id", None))


def leave_args(req: Request) -> list[tuple[str, str | None]]:
    """The (member id, group.instance.id) of each member a LeaveGroup names (v3+: a batch)."""
    b = req.body
    if req.api_version < 3:
        return [(b.member_id, None)]
    return [(m.member_id, m.group_instance_id) for m in b.members]


def leave_answer(req: Request, members: list[tuple[str, str | None]], codes: list[int]) -> dict:
    if req.api_version < 3:
        return {"throttle_time": 0, "error_code": codes[0]}
    return {"throttle_time": 0, "error_code": E.NONE, "members": [
        {"member_id": mid, "group_instance_id": iid, "error_code": c} for (mid, iid), c in zip(members, codes)]}


class GroupHandlers:
    """Over the `coordinator` (GroupCoordinator) and the broker's `config`; `advertised`: this
    broker's (host, port); `membership` says who coordinates a group (this broker alone, or
    the leader of the group's __consumer_offsets partition in the cluster)."""

    def __init__(self, coordinator, config, advertised: tuple[str, int], membership, transactions=None):
        """`transactions`: the TransactionHandlers that answer FindCoordinator for a
        transactional id (key type 1)."""
        self.groups = coordinator
        self.config = config
        self.node_id = config.node_id
        self.host, self.port = advertised
        self.membership = membership
        self.transactions = transactions

    # ------------------------------------------------------------------ group coordinator
    async def find_coordinator(self, req: Request) -> dict:
        body = req.body
        key_type = getattr(body, "key_type", 0)
        keys = getattr(body, "coordinator_keys", None)
        if keys is None:
            return await self._find_coordinator(key_type, body.key)
        # v4+: several keys of one type, an answer for each (KIP-699)
        coordinators = []
        for key in keys:
            one = await self._find_coordinator(key_type, key)
            coordinators.append({"key": key, **{k: one[k] for k in (
                "node_id", "host", "port", "error_code", "error_message")}})
        return {"throttle_time": 0, "coordinators": coordinators}

    async def _find_coordinator(self, key_type: int, key: str) -> dict:
        if key_type == 1 and self.transactions is not None:      # TRANSACTION: transaction_handlers.py
            return await self.transactions.find_coordinator(key)
        if key_type != 0:
            return {"throttle_time": 0, "error_code": E.INVALID_REQUEST,
                    "error_message": f"unknown coordinator key type {key_type}",
                    "node_id": -1, "host": "", "port": -1}
        return await self.membership.topic_catalog.find_coordinator(key)

    async def local_find_coordinator(self, key) -> dict:
        # The one broker coordinates every group. __consumer_offsets is created at the first
        # JoinGroup or OffsetCommit, not here: assign() consumers ask too and never need it.
        return {"throttle_time": 0, "error_code": E.NONE, "error_message": None,
                "node_id": self.node_id, "host": self.host, "port": self.port}

    async def cluster_find_coordinator(self, group_id: str) -> dict:
        """The leader of the group's __consumer_offsets partition, from the cluster metadata;
        COORDINATOR_NOT_AVAILABLE while the topic cannot be created or the partition has no
        live leader (the client asks again)."""
        return await find_internal_coordinator(self.membership, OT.TOPIC, group_id, "group", OT.partition_for,
                                               self._create_offsets_topic)

    async def _create_offsets_topic(self) -> str | None:
        """Create __consumer_offsets in the cluster (offsets.topic.replication.factor replicas,
        offsets.topic.num.partitions partitions, compacted); None when it exists now, else why
        not."""
        config = {**OT.TOPIC_CONFIG, "segment.bytes": str(self.config["offsets.topic.segment.bytes"])}
        return await create_internal_topic(self.membership, OT.TOPIC, self.config["offsets.topic.num.partitions"],
                                           config, self.config["offsets.topic.replication.factor"],
                                           "offsets.topic.replication.factor")

    async def describe_groups(self, req: Request) -> dict:
        out = []
        for g in req.body.groups:
            answer = self.groups.describe(g)
            code = self.groups.coordinator_error(g)
            if code != E.NONE:
                answer.update(error_code=code, group_state="", protocol_type="", protocol_data="", members=[])
            out.append(answer)
        return {"throttle_time": 0, "groups": out}

    async def list_groups(self, req: Request) -> dict:
        """ListGroups: every group this coordinator knows (all are classic groups), filtered by
        state (v4+) and type (v5+) as Kafka does."""
        states = {s.lower() for s in getattr(req.body, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(req.body, "types_filter", ()) or ()}
        groups = []
        # In a cluster the coordinator knows only the groups of the partitions it leads.
        error = E.COORDINATOR_LOAD_IN_PROGRESS if self.groups.loading else E.NONE
        if not types or "classic" in types:
            for group in list(self.groups.groups.values()):
                if states and group.state.lower() not in states:
                    continue
                groups.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                               "group_state": group.state, "group_type": "classic"})
        return {"throttle_time": 0, "error_code": error, "groups": groups}

    async def join_group(self, req: Request) -> Result:
        b = req.body
        code = self.groups.coordinator_error(b.group_id)
        if code != E.NONE:
            return join_error(code, b.member_id)
        return self.groups.join(**join_args(req))

    async def sync_group(self, req: Request) -> Result:
        b = req.body
        code = self.groups.coordinator_error(b.group_id)
        if code != E.NONE:
            return sync_error(code)
        return self.groups.sync(**sync_args(req), assignments=[(a.member_id, bytes(a.assignment))
                                                                 for a in b.assignments])

    async def heartbeat(self, req: Request) -> dict:
        b = req.body
        code = self.groups.coordinator_error(b.group_id)
        if code != E.NONE:
            return {"throttle_time": 0, "error_code": code}
        return {"throttle_time": 0, "error_code": self.groups.heartbeat(**heartbeat_args(req))}

    async def leave_group(self, req: Request) -> dict:
        b = req.body
        code = self.groups.coordinator_error(b.group_id)
        if code != E.NONE:
            return {"throttle_time": 0, "error_code": code, "members": []}
        # v3+ (KIP-345): a batch of members, each named by member id and/or group.instance.id.
        members = leave_args(req)
        return leave_answer(req, members, self.groups.leave(b.group_id, members))

    async def delete_groups(self, req: Request) -> dict:
        results = await self.groups.admin.delete_groups(list(req.body.groups_names))
        return {"throttle_time": 0, "results": [{"group_id": g, "error_code": c} for g, c in results]}

    async def offset_delete(self, req: Request) -> dict:
        b = req.body
        asked = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
        known = [tp for tp in asked if self._partition_exists(*tp)]
        code, results = await self.groups.admin.delete_offsets(b.group_id, known)
        if code != E.NONE:
            return {"throttle_time": 0, "error_code": code, "topics": []}
        by_topic: dict[str, list] = {}
        for tp in asked:
            by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": results.get(
                tp, E.UNKNOWN_TOPIC_OR_PARTITION)})
        return {"throttle_time": 0, "error_code": E.NONE,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def offset_commit(self, req: Request) -> Result:
        b = req.body
        generation = b.generation_id_or_member_epoch
        code = self.groups.coordinator_error(b.group_id)
        if code == E.NONE:
            code = self.groups.check_commit(b.group_id, generation, b.member_id,
                                            getattr(b, "group_instance_id", None))
        offsets, results = offsets_to_commit(b.topics, code, self._partition_exists)

        async def finish() -> dict:
            return commit_answer(results, await self.groups.offsets.commit(b.group_id, offsets))
        return finish()

    async def offset_fetch(self, req: Request) -> dict:
        b = req.body
        v = req.api_version
        if v >= 8:
            groups = [(g.group_id, None if g.topics is None else
                       [(t.name, list(t.partition_indexes)) for t in g.topics]) for g in b.groups]
        else:
            groups = [(b.group_id, None if b.topics is None else
                       [(t.name, list(t.partition_indexes)) for t in b.topics])]
        answers = []
        for group_id, topics in groups:
            code = self.groups.coordinator_error(group_id)
            if code != E.NONE:
                # v2+ say it once for the group; v1 on each partition asked for.
                answers.append({"group_id": group_id, "error_code": code, "topics": [
                    {"name": t, "partitions": [
                        {"partition_index": p, "error_code": code if v < 2 else E.NONE,
                         "committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""}
                        for p in parts]} for t, parts in (topics or [])]})
                continue
            found = self.groups.offsets.committed(group_id, topics)
            # KIP-447: an offset an open transaction is about to change is not stable yet.
            stable = getattr(b, "require_stable", False)
            answers.append({"group_id": group_id, "error_code": E.NONE, "topics": [
                {"name": t, "partitions": [
                    {"partition_index": p, "error_code": E.UNSTABLE_OFFSET_COMMIT, "committed_offset": -1,
                     "committed_leader_epoch": -1, "metadata": ""}
                    if stable and self.groups.offsets.unstable(group_id, t, p) else
                    {"partition_index": p, "error_code": E.NONE,
                     "committed_offset": c.offset if c else -1,
                     "committed_leader_epoch": c.leader_epoch if c else -1,
                     "metadata": c.metadata if c else ""} for p, c in parts]}
                for t, parts in found]})
        if v >= 8:
            return {"throttle_time": 0, "groups": answers}
        return {"throttle_time": 0, "error_code": answers[0]["error_code"], "topics": answers[0]["topics"]}

    def _partition_exists(self, topic: str, index: int) -> bool:
        """A partition a group may commit an offset for: in a cluster one of the cluster's (the
        coordinator need not hold a replica of it), else one of this broker's."""
        return self.membership.topic_catalog.partition_exists(topic, index)
