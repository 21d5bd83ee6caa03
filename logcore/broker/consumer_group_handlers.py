"""Consumer-protocol group (KIP-848) handlers of the Broker: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), and the group APIs that answer a consumer-protocol group
differently from a classic one: OffsetCommit and OffsetFetch check its member id and epoch
(STALE_MEMBER_EPOCH), ListGroups lists it as type "consumer", DescribeGroups answers it as
Kafka does (not a classic group: Dead, and GROUP_ID_NOT_FOUND from v6). JoinGroup, SyncGroup,
Heartbeat and LeaveGroup for a consumer group with members go to its classic members
(KIP-848's online migration, logcore/coordinator/classic_members.py); JoinGroup for an empty
one drops it first (its offsets kept) and makes a classic group.

Everything else goes to the classic GroupHandlers (group_handlers.py). The coordinator is
logcore/coordinator/consumer_group_coordinator.py; the broker registers these in its handler
table when `group.coordinator.rebalance.protocols` has `consumer`.
"""
from __future__ import annotations

import uuid

from logcore.wire import error_codes as E
from logcore.broker.member_host import member_host
from logcore.broker.group_handlers import (commit_answer, heartbeat_args, join_args, leave_answer, leave_args,
                                           offsets_to_commit, sync_args)
from logcore.coordinator.consumer_group_coordinator import ConsumerGroupSettings, Heartbeat, heartbeat_error
from logcore.coordinator.group_answers import join_error
from logcore.coordinator import assignors
from logcore.coordinator.migration_policy import migration_policy
from logcore.log.partition_metadata import parse_topic_id
from logcore.security.acl import AclOperation as Op, ResourceType as R
from logcore.wire.protocol import ZERO_UUID, Request

def consumer_protocol_enabled(config) -> bool:
    """Whether `group.coordinator.rebalance.protocols` serves the consumer protocol."""
    return "consumer" in config["group.coordinator.rebalance.protocols"]


def consumer_group_settings(config) -> ConsumerGroupSettings:
    """The group.consumer.* settings (BrokerConfig checked them)."""
    names = tuple(dict.fromkeys(assignors.assignor_name(a) for a in config["group.consumer.assignors"]))
    return ConsumerGroupSettings(heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
                                 session_timeout_ms=config["group.consumer.session.timeout.ms"],
                                 max_size=config["group.consumer.max.size"], assignors=names,
                                 migration_policy=migration_policy(config["group.consumer.migration.policy"]))


def topic_image(membership, partitions) -> dict[str, tuple[uuid.UUID, int]]:
    """Every topic with an id and its partition count: the cluster's (a cluster member) or this
    broker's."""
    rm = membership.replica_manager
    if rm is not None:
        return {name: (parse_topic_id(ta.topic_id), max(ta.partitions) + 1)
                for name, ta in list(rm.assignments.items()) if ta.topic_id and ta.partitions}
    out = {}
    for name, info in list(partitions.topics.items()):
        topic_id = partitions.topic_uuid(name)
        if topic_id != ZERO_UUID:
            out[name] = (topic_id, info.partitions)
    return out


class ConsumerGroupHandlers:
    """Over the ConsumerGroupCoordinator (`groups`) and the classic GroupHandlers (`classic`);
    the broker's `authorizer` narrows a member's regex to the topics its principal may DESCRIBE."""

    def __init__(self, groups, classic, authorizer):
        self.groups = groups
        self.classic = classic
        self.authorizer = authorizer

    def handlers(self) -> dict:
        """The broker's handler table entries these answer."""
        return {8: self.offset_commit, 9: self.offset_fetch, 11: self.join_group, 12: self.heartbeat,
                13: self.leave_group, 14: self.sync_group, 15: self.describe_groups,
                16: self.list_groups, 68: self.consumer_group_heartbeat, 69: self.consumer_group_describe}

    async def consumer_group_heartbeat(self, req: Request) -> dict:
        b = req.body
        try:
            rebalance = b.rebalance_timeout
            owned = None if b.topic_partitions is None else [(t.topic_id, list(t.partitions))
                                                             for t in b.topic_partitions]
            hb = Heartbeat(group_id=b.group_id, member_id=b.member_id, member_epoch=b.member_epoch,
                           instance_id=b.instance_id, rack_id=b.rack_id,
                           rebalance_timeout_ms=round(rebalance.total_seconds() * 1000),
                           subscribed_topic_names=None if b.subscribed_topic_names is None
                           else tuple(b.subscribed_topic_names),
                           subscribed_topic_regex=getattr(b, "subscribed_topic_regex", None),
                           server_assignor=b.server_assignor, owned=owned, client_id=req.client_id or "",
                           client_host=member_host(req),
                           version=req.api_version, may_describe=self._describable(req))
        except (AttributeError, TypeError, ValueError) as exc:
            return heartbeat_error(E.INVALID_REQUEST, f"malformed ConsumerGroupHeartbeat: {exc}")
        return await self.groups.heartbeat(hb)

    def _describable(self, req: Request):
        """Whether the request's principal may DESCRIBE a topic; None without an authorizer."""
        if not self.authorizer.enabled:
            return None
        return lambda topic: self.authorizer.allows(req, Op.DESCRIBE, R.TOPIC, topic)

    async def consumer_group_describe(self, req: Request) -> dict:
        out = []
        for gid in req.body.group_ids:
            code = self.groups.classic.coordinator_error(gid)
            if code != E.NONE:
                out.append({"error_code": code, "group_id": gid, "group_state": "", "group_epoch": -1,
                            "assignment_epoch": -1, "assignor_name": "", "members": []})
                continue
            out.append(self.groups.describe(gid, req.api_version))
        return {"throttle_time": 0, "groups": out}

    # ------------------------------------------------------------------ the classic APIs' consumer-group side
    async def offset_commit(self, req: Request):
        b = req.body
        if not self.groups.owns(b.group_id) or self.groups.classic.coordinator_error(b.group_id) != E.NONE:
            return await self.classic.offset_commit(req)
        code = self.groups.check_commit(b.group_id, b.generation_id_or_member_epoch, b.member_id, req.api_version)
        offsets, results = offsets_to_commit(b.topics, code, self.classic.membership.topic_catalog.partition_exists)

        async def finish() -> dict:
            return commit_answer(results, await self.groups.classic.offsets.commit(b.group_id, offsets))
        return finish()

    async def offset_fetch(self, req: Request) -> dict:
        answer = await self.classic.offset_fetch(req)
        if req.api_version < 9:
            return answer
        asked = {g.group_id: g for g in req.body.groups}
        for group in answer["groups"]:
            g = asked.get(group["group_id"])
            if g is None or group["error_code"] != E.NONE or not self.groups.owns(g.group_id):
                continue
            code = self.groups.check_fetch(g.group_id, g.member_id, g.member_epoch)
            if code != E.NONE:
                group.update(error_code=code, topics=[])
        return answer

    def _classic_members_of(self, group_id: str):
        """The classic members' part when `group_id` is a consumer group with members here."""
        members = self.groups.classic_members
        if members.serves(group_id) and self.groups.classic.coordinator_error(group_id) == E.NONE:
            return members
        return None

    async def join_group(self, req: Request):
        b = req.body
        members = self._classic_members_of(b.group_id)
        if members is not None:
            return await members.join(**join_args(req))
        if self.groups.owns(b.group_id) and self.groups.classic.coordinator_error(b.group_id) == E.NONE:
            if not await self.groups.drop_if_empty(b.group_id):
                return join_error(E.INCONSISTENT_GROUP_PROTOCOL, b.member_id)
        return await self.classic.join_group(req)

    async def sync_group(self, req: Request):
        members = self._classic_members_of(req.body.group_id)
        if members is None:
            return await self.classic.sync_group(req)
        b = req.body
        return members.sync(**sync_args(req), protocol_type=getattr(b, "protocol_type", None),
                            protocol_name=getattr(b, "protocol_name", None))

    async def heartbeat(self, req: Request) -> dict:
        members = self._classic_members_of(req.body.group_id)
        if members is None:
            return await self.classic.heartbeat(req)
        return {"throttle_time": 0, "error_code": members.heartbeat(**heartbeat_args(req))}

    async def leave_group(self, req: Request) -> dict:
        members = self._classic_members_of(req.body.group_id)
        if members is None:
            return await self.classic.leave_group(req)
        leaving = leave_args(req)
        return leave_answer(req, leaving, await members.leave(req.body.group_id, leaving))

    async def describe_groups(self, req: Request) -> dict:
        answer = await self.classic.describe_groups(req)
        for group in answer["groups"]:
            gid = group["group_id"]
            if group["error_code"] == E.NONE and self.groups.owns(gid):
                group.update(group_state="Dead", protocol_type="", protocol_data="", members=[])
                if req.api_version >= 6:
                    group.update(error_code=E.GROUP_ID_NOT_FOUND, error_message=f"Group {gid} is not a classic group.")
        return answer

    async def list_groups(self, req: Request) -> dict:
        answer = await self.classic.list_groups(req)
        mine = set(self.groups.groups)
        answer["groups"] = [g for g in answer["groups"] if g["group_id"] not in mine]
        states = {s.lower() for s in getattr(req.body, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(req.body, "types_filter", ()) or ()}
        if not types or "consumer" in types:
            for gid, group in list(self.groups.groups.items()):
                if states and group.state.lower() not in states:
                    continue
                answer["groups"].append({"group_id": gid, "protocol_type": "consumer", "group_state": group.state,
                                         "group_type": "consumer"})
        return answer
