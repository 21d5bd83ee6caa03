"""KIP-848's online migration of a live group between the two protocols, as Kafka 4 does it
(its GroupMetadataManager's upgrade and downgrade), under `group.consumer.migration.policy`.

Upgrade: a consumer-protocol member joining a classic group with members turns it into a
consumer group at once. Its members stay, as classic members of the consumer group
(classic_members.py serves their JoinGroup, SyncGroup, Heartbeat and leaves): each at member
epoch = the classic generation, with the partitions of its last assignment, its subscription
read from its protocol metadata. The records: the classic group's metadata tombstone, then
the consumer group's (each member's metadata with its classic session timeout and protocols,
the subscribed topics, the group epoch, each target, the target epoch, each member's current
assignment). Parked JoinGroup and SyncGroup answers get REBALANCE_IN_PROGRESS. Refused
(GROUP_ID_NOT_FOUND, Kafka's messages) when the policy has no upgrade, the group's protocol
type is not "consumer", it has more members than group.consumer.max.size, or a member's
metadata does not parse.

Downgrade: when the last consumer-protocol member leaves (or is fenced) and classic members are
left, the policy allowing, the group turns back into a classic group: the consumer group's
tombstones, then the classic group's metadata (generation = the group epoch, each member with
its assignment as the consumer protocol's bytes), Stable, and a rebalance starts at once.

Committed offsets are the group id's whatever its protocol: they stay.
"""
from __future__ import annotations

import logging

from logcore.coordinator import consumer_group_records as CG
from logcore.coordinator import offsets_topic as OT
from logcore.coordinator.consumer_group import STABLE, ConsumerGroup, ConsumerMember
from logcore.coordinator.consumer_group_records import ConsumerGroupKey
from logcore.coordinator.consumer_protocol import (MalformedConsumerProtocol, assignment_bytes, parse_assignment,
                                                   parse_subscription)
from logcore.coordinator.group import CONSUMER_PROTOCOL, Group, Member
from logcore.coordinator.migration_policy import MigrationPolicy
from logcore.errors import SegLogError

logger = logging.getLogger(__name__)


class MigrationRefused(SegLogError):
    """An upgrade refused; the message is Kafka's."""


class GroupMigration:
    """Over the ConsumerGroupCoordinator (`coordinator`: its groups, records, timers; its
    `classic` GroupCoordinator hands over and takes back classic groups)."""

    def __init__(self, coordinator, policy: MigrationPolicy):
        self.coordinator = coordinator
        self.policy = policy

    # ------------------------------------------------------------------ classic -> consumer
    def upgrade(self, classic: Group, records: list) -> ConsumerGroup:
        """The consumer group `classic` becomes (in the coordinator's groups from now on), its
        records appended to `records`; MigrationRefused when it may not."""
        gid = classic.group_id
        if not self.policy.upgrade:
            raise MigrationRefused(f"Cannot upgrade classic group {gid} to consumer group because online upgrade"
                                   " is disabled.")
        if classic.protocol_type != CONSUMER_PROTOCOL:
            raise MigrationRefused(f"Cannot upgrade classic group {gid} to consumer group because the group does"
                                   " not use the consumer embedded protocol.")
        if len(classic.members) > self.coordinator.settings.max_size:
            raise MigrationRefused(f"Cannot upgrade classic group {gid} to consumer group because the group size"
                                   " exceeds the consumer group maximum size.")
        image = self.coordinator.image()
        try:
            members = [_consumer_member(classic, m, image) for m in classic.members.values()]
        except MalformedConsumerProtocol as exc:
            logger.warning("group %s: not upgraded: %s", gid, exc)
            raise MigrationRefused(f"Cannot upgrade classic group {gid} to consumer group because the embedded"
                                   " consumer protocol is malformed.") from None
        group = ConsumerGroup(gid)
        epoch = classic.generation
        records.append((OT.group_key(gid), None))
        apply = self.coordinator.apply
        for m in members:
            apply(group, records, ConsumerGroupKey(CG.MEMBER_METADATA, gid, m.member_id), m.metadata)
        self.coordinator.refresh_metadata(group, records, image)
        apply(group, records, ConsumerGroupKey(CG.GROUP_METADATA, gid), epoch)
        for m in members:
            apply(group, records, ConsumerGroupKey(CG.TARGET_ASSIGNMENT_MEMBER, gid, m.member_id), m.assigned)
        apply(group, records, ConsumerGroupKey(CG.TARGET_ASSIGNMENT_METADATA, gid), epoch)
        for m in members:
            apply(group, records, ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id), m.current())
        self.coordinator.classic.release(gid)
        self.coordinator.groups[gid] = group
        for m in group.members.values():
            self.coordinator.touch(gid, m)
        logger.info("group %s: converted the classic group (generation %d, %d members) to a consumer group",
                    gid, epoch, len(members))
        return group

    # ------------------------------------------------------------------ consumer -> classic
    def downgrade(self, group: ConsumerGroup, leaving: set[str], records: list) -> bool:
        """Turn `group` back into a classic group if, without the `leaving` members, only
        classic members are left (and the policy allows); whether it did."""
        gid = group.group_id
        staying = [m for mid, m in group.members.items() if mid not in leaving]
        if not staying or any(m.metadata.classic is None for m in staying):
            return False
        if not self.policy.downgrade:
            logger.info("group %s: cannot downgrade the consumer group to a classic group: the online downgrade"
                        " is disabled", gid)
            return False
        names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
        names.update({tid: n for n, (tid, _) in self.coordinator.image().items() if tid not in names})
        classic = Group(gid, generation=group.group_epoch, protocol_type=CONSUMER_PROTOCOL)
        for m in staying:
            meta = m.metadata
            protocols = [(name, bytes(data)) for name, data in meta.classic.protocols]
            classic.members[m.member_id] = Member(
                m.member_id, meta.instance_id, meta.client_id, meta.client_host, meta.classic.session_timeout_ms,
                meta.rebalance_timeout_ms, CONSUMER_PROTOCOL, protocols, 0.0,
                assignment_bytes({names[t]: tuple(ps) for t, ps in m.assigned.items() if t in names},
                                 _subscription_version(protocols)))
        classic.protocol = classic.select_protocol()
        classic.leader = staying[0].member_id
        self._tombstones(group, records)
        self.coordinator.groups.pop(gid, None)
        self.coordinator.forget_timers(gid)
        records.append(self.coordinator.classic.adopt(
            classic, f"Downgrade group {gid} from consumer to classic for member leaving."))
        logger.info("group %s: converted the consumer group (epoch %d) to a classic group of %d members", gid,
                    group.group_epoch, len(staying))
        return True

    def _tombstones(self, group: ConsumerGroup, records: list) -> None:
        """Every record of the group's, in Kafka's order."""
        gid = group.group_id
        apply = self.coordinator.apply
        mids = list(group.members)
        for t in (CG.CURRENT_MEMBER_ASSIGNMENT, CG.TARGET_ASSIGNMENT_MEMBER):
            for mid in mids:
                apply(group, records, ConsumerGroupKey(t, gid, mid), None)
        apply(group, records, ConsumerGroupKey(CG.TARGET_ASSIGNMENT_METADATA, gid), None)
        for mid in mids:
            apply(group, records, ConsumerGroupKey(CG.MEMBER_METADATA, gid, mid), None)
        for regex in sorted(group.resolved):
            apply(group, records, ConsumerGroupKey(CG.REGULAR_EXPRESSION, gid, regex=regex), None)
        apply(group, records, ConsumerGroupKey(CG.PARTITION_METADATA, gid), None)
        apply(group, records, ConsumerGroupKey(CG.GROUP_METADATA, gid), None)


def _consumer_member(classic: Group, m: Member, image) -> ConsumerMember:
    """A classic group's member as a classic member of the consumer group it becomes."""
    protocol = classic.protocol or m.protocols[0][0]
    subscription = parse_subscription(m.metadata_for(protocol))
    assigned = {image[t][0]: frozenset(ps) for t, ps in parse_assignment(m.assignment).items()
                if t in image and ps}
    meta = CG.MemberMetadata(m.group_instance_id, subscription.rack_id, m.client_id, m.client_host,
                             tuple(sorted(set(subscription.topics))), None, m.rebalance_timeout_ms, None,
                             CG.ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)))
    return ConsumerMember(m.member_id, meta, classic.generation, classic.generation, STABLE, assigned, {})


def _subscription_version(protocols: list[tuple[str, bytes]]) -> int:
    try:
        return parse_subscription(protocols[0][1]).version
    except MalformedConsumerProtocol:
        return 0
