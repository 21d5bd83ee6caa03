"""The classic members of a consumer group (KIP-848's online migration): consumers still
speaking JoinGroup / SyncGroup / Heartbeat / LeaveGroup in a group that a consumer-protocol
member upgraded (group_migration.py), or that joined a consumer group with members. As Kafka 4's
coordinator serves them:

- JoinGroup: the member's subscription (its first protocol's metadata, Kafka's consumer
  protocol) becomes its subscription in the group; the group epoch bumps when its topics
  change, the coordinator computes the target assignment, and the member reconciles towards
  it with the partitions its subscription says it owns (an eager consumer owns none when it
  rejoins). Answered at once, the records written: generation = its member epoch, protocol
  = its first protocol, no leader (every classic member is a follower: the coordinator
  assigns). A new dynamic member of JoinGroup v4+ gets MEMBER_ID_REQUIRED first.
- SyncGroup: its assigned partitions as the consumer protocol's assignment bytes;
  REBALANCE_IN_PROGRESS while the group epoch is past its epoch (unless it is revoking).
- Heartbeat: REBALANCE_IN_PROGRESS when it must rejoin: the group epoch moved past its epoch,
  it has partitions to revoke, or partitions it waits for were released; ILLEGAL_GENERATION
  for another generation than its member epoch.
- Its session timeout is its own (the JoinGroup's); told to rejoin it must within its
  rebalance timeout, and sync within it after joining, else it is fenced as Kafka does.
- LeaveGroup removes it (the last consumer-protocol member's leave is what downgrades).
"""
from __future__ import annotations

import asyncio
import logging
import uuid

from logcore.wire import error_codes as E
from logcore.coordinator import consumer_group_records as CG
from logcore.coordinator.consumer_group import UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, ConsumerGroup, ConsumerMember
from logcore.coordinator.consumer_protocol import MalformedConsumerProtocol, assignment_bytes, parse_subscription
from logcore.coordinator.group import CONSUMER_PROTOCOL
from logcore.coordinator.group_answers import join_error as _join_error, sync_error as _sync_error

logger = logging.getLogger(__name__)


class ClassicMembers:
    """Over the ConsumerGroupCoordinator (`coordinator`): its groups, member changes, records,
    sessions and fencing. Holds the join and sync deadlines of classic members."""

    def __init__(self, coordinator):
        self.coordinator = coordinator
        self._joins: dict[tuple[str, str], float] = {}      # told to rejoin: by when
        self._syncs: dict[tuple[str, str], float] = {}      # joined: by when it must sync

    def serves(self, group_id: str) -> bool:
        """Whether the classic APIs of `group_id` are this part's: a consumer group with members."""
        group = self.coordinator.groups.get(group_id)
        return group is not None and bool(group.members)

    # ------------------------------------------------------------------ JoinGroup
    async def join(self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool) -> dict:
        c = self.coordinator
        if not c.classic.min_session_ms <= session_timeout_ms <= c.classic.max_session_ms:
            return _join_error(E.INVALID_SESSION_TIMEOUT, member_id)
        group = c.groups[group_id]
        new_id = member_id or str(uuid.uuid4())
        joins_anew = new_id not in group.members and group.static_member(group_instance_id) is None
        if joins_anew and len(group.members) >= c.settings.max_size:
            return _join_error(E.GROUP_MAX_SIZE_REACHED, member_id)
        if protocol_type != CONSUMER_PROTOCOL or not protocols:
            return _join_error(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id and require_known_member and group_instance_id is None:
            logger.info("group %s: dynamic member with unknown member id joins the consumer group: %s, to rejoin"
                        " with it", group_id, new_id)
            return _join_error(E.MEMBER_ID_REQUIRED, new_id)
        member = group.members.get(new_id)
        if member is not None and member.metadata.classic is None:
            return _join_error(E.UNKNOWN_MEMBER_ID, member_id)     # a consumer-protocol member's id
        try:
            subscription = parse_subscription(protocols[0][1])
        except MalformedConsumerProtocol:
            return _join_error(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        records: list = []
        static = group.static_member(group_instance_id)
        if static is not None and static.member_id != new_id:
            if member_id:
                return _join_error(E.FENCED_INSTANCE_ID, member_id)
            # KIP-345: the instance is back under a new member id; the old one is gone (its
            # partitions free for the new one; unlike Kafka, the group rebalances)
            logger.info("group %s: static member %s (instance %s) replaced by %s", group_id, static.member_id,
                        group_instance_id, new_id)
            c.remove(group, static.member_id, records)
        if member is None:
            logger.info("group %s: member %s joins (classic protocol)", group_id, new_id)
            member = ConsumerMember(new_id)
        image = c.image()
        meta = CG.MemberMetadata(group_instance_id, subscription.rack_id, client_id, client_host,
                                 tuple(sorted(set(subscription.topics))), None, rebalance_timeout_ms, None,
                                 CG.ClassicMemberMetadata(session_timeout_ms, tuple(protocols)))
        owned = [(image[t][0], list(ps)) for t, ps in (subscription.owned or {}).items() if t in image]
        _, after = c.change_member(group, member, meta, owned, records)
        c.touch(group_id, after)
        code = await c.write(group, records)
        if code != E.NONE:
            return _join_error(code, new_id)
        key = (group_id, new_id)
        self._joins.pop(key, None)
        self._syncs[key] = _now() + rebalance_timeout_ms / 1000
        return {"throttle_time": 0, "error_code": E.NONE, "generation_id": after.member_epoch,
                "protocol_type": CONSUMER_PROTOCOL, "protocol_name": protocols[0][0], "leader": "",
                "member_id": new_id, "members": [], "skip_assignment": False}

    # ------------------------------------------------------------------ SyncGroup / Heartbeat
    def sync(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> dict:
        group = self.coordinator.groups[group_id]
        member, code = self._member(group, member_id, group_instance_id, generation_id)
        if code != E.NONE:
            return _sync_error(code)
        name = member.metadata.classic.protocols[0][0]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL) or \
                (protocol_name is not None and protocol_name != name):
            return _sync_error(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS:
            self._rejoin(group_id, member)
            return _sync_error(E.REBALANCE_IN_PROGRESS)
        self._syncs.pop((group_id, member_id), None)
        self.coordinator.touch(group_id, member)
        return {"throttle_time": 0, "error_code": E.NONE, "assignment": self._assignment(group, member),
                "protocol_type": CONSUMER_PROTOCOL, "protocol_name": name}

    def heartbeat(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        group = self.coordinator.groups[group_id]
        member, code = self._member(group, member_id, group_instance_id, generation_id)
        if code != E.NONE:
            return code
        self.coordinator.touch(group_id, member)
        if (member.member_epoch < group.group_epoch or member.state == UNREVOKED_PARTITIONS
                or (member.state == UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member))):
            self._rejoin(group_id, member)
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def _member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                generation_id: int) -> tuple[ConsumerMember | None, int]:
        member = group.members.get(member_id)
        if instance_id is not None:
            static = group.static_member(instance_id)
            if static is None:
                return None, E.UNKNOWN_MEMBER_ID
            if static.member_id != member_id:
                return None, E.FENCED_INSTANCE_ID
        if member is None or member.metadata.classic is None:
            return None, E.UNKNOWN_MEMBER_ID
        if generation_id != member.member_epoch:
            return None, E.ILLEGAL_GENERATION
        return member, E.NONE

    def _rejoin(self, group_id: str, member: ConsumerMember) -> None:
        """Told to rejoin: it must within its rebalance timeout (Kafka's join timeout)."""
        self._joins.setdefault((group_id, member.member_id),
                               _now() + max(member.metadata.rebalance_timeout_ms, 0) / 1000)

    def _assignment(self, group: ConsumerGroup, member: ConsumerMember) -> bytes:
        names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
        names.update({tid: n for n, (tid, _) in self.coordinator.image().items() if tid not in names})
        try:
            version = parse_subscription(member.metadata.classic.protocols[0][1]).version
        except MalformedConsumerProtocol:
            version = 0
        return assignment_bytes({names[t]: tuple(ps) for t, ps in member.assigned.items() if t in names}, version)

    # ------------------------------------------------------------------ LeaveGroup
    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        """LeaveGroup of (member id, group.instance.id) each, as the classic coordinator's."""
        c = self.coordinator
        group = c.groups[group_id]
        codes, leaving = [], []
        for mid, instance_id in members:
            member = group.members.get(mid)
            if instance_id is not None:
                member = group.static_member(instance_id)
                if member is not None and mid and mid != member.member_id:
                    codes.append(E.FENCED_INSTANCE_ID)
                    continue
            if member is None:
                codes.append(E.UNKNOWN_MEMBER_ID)
                continue
            codes.append(E.NONE)
            leaving.append(member)
        records: list = []
        for member in leaving:
            if c.groups.get(group_id) is not group:
                break                                   # downgraded: the rest leave the classic group
            logger.info("group %s: member %s left (classic protocol)", group_id, member.member_id)
            c.fence(group, member, records)
        code = await c.write(group, records)
        return [code if x == E.NONE else x for x in codes]

    # ------------------------------------------------------------------ timers
    def expired(self, now: float) -> list[tuple[str, str, str]]:
        """(group, member, why) of each member past its join or sync deadline (no longer held)."""
        out = []
        for timers, why in ((self._joins, "it did not rejoin in time"), (self._syncs, "it did not sync in time")):
            for key, deadline in list(timers.items()):
                if now >= deadline:
                    del timers[key]
                    out.append((*key, why))
        return out

    def forget(self, group_id: str, member_id: str | None = None) -> None:
        for timers in (self._joins, self._syncs):
            for key in [k for k in timers if k[0] == group_id and member_id in (None, k[1])]:
                del timers[key]


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a partition of the member's target it does not have yet is still another's."""
    target = group.target.get(member.member_id, {})
    return any(group.partition_epoch(t, p) != -1 for t, ps in target.items() for p in ps
               if p not in member.assigned.get(t, ()))


def _now() -> float:
    return asyncio.get_running_loop().time()

