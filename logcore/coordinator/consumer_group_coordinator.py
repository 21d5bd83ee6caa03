"""The coordinator of consumer-protocol groups (KIP-848): ConsumerGroupHeartbeat,
ConsumerGroupDescribe, and the member checks of OffsetCommit / OffsetFetch / TxnOffsetCommit for
these groups, beside the classic protocol of the GroupCoordinator.

It rides on the GroupCoordinator (`classic`): the same `__consumer_offsets` partitions, the same
placement (which partitions this broker coordinates, loading, NOT_COORDINATOR), the same appends
(acknowledged by the partition's high watermark in a cluster) and the same committed offsets.
The classic coordinator hands it the records of types 3..8 it reads back while loading a
partition and tells it when a partition is loaded or dropped.

A heartbeat (Kafka's GroupMetadataManager): the member joins with epoch 0, leaves with -1 (a
static member leaving for now: -2, its partitions kept for it until its session ends). A change
of its subscription, of the group's membership, or of a subscribed topic's partition count bumps
the group epoch; the next heartbeat computes the target assignment for it with the group's
server assignor (assignors.py); each member then reconciles towards its target
(consumer_group.reconcile): partitions still owned elsewhere are handed over only once
revoked. Every change is written as records (consumer_group_records) and applied to the group as
written; the heartbeat is answered once they are acknowledged. A member that does not
heartbeat for the session timeout, or does not revoke within its rebalance timeout, is fenced
(removed; the group epoch bumps).

Regular expressions are resolved apart from heartbeats, as Kafka does: a heartbeat that brings a
regex new to the group is answered with the assignment of what the group already knows (its
topic names, regexes resolved before); a task then matches the group's regexes against the
topics (topic_regex: RE2 syntax, whole names), writes what each matched (record type 16) and
bumps the group epoch if that changed a member's topics, so a later heartbeat assigns them.
Regexes are resolved again when a topic was created since (or every
`regex_refresh_interval_ms`), never twice within REGEX_MIN_REFRESH_MS for a group, and only
when a heartbeat of the group comes in. A regex's matches leave out the topics the principal of
the heartbeat that started the resolution may not DESCRIBE (its `may_describe`), as Kafka's
filterTopicDescribeAuthorizedTopics does; an ACL change is seen at the next resolution. A
deleted topic leaves the assignment at the next heartbeat (the subscribed topics' metadata
changes).

KIP-848's online migration (`migration`, group_migration.py): a heartbeat joining a classic
group with members upgrades it; the last consumer-protocol member leaving a group of classic
members downgrades it. Classic members inside a consumer group (`classic_members`,
classic_members.py) go through the same member changes, records and fencing as the others,
with their own session timeouts.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import Callable

from logcore.wire import error_codes as E
from logcore.coordinator import assignors as A
from logcore.coordinator import consumer_group_records as CG
from logcore.coordinator.consumer_group import (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                                UNREVOKED_PARTITIONS, ConsumerGroup, ConsumerMember, reconcile,
                                                regex_of)
from logcore.coordinator.classic_members import ClassicMembers
from logcore.coordinator.consumer_group_records import ConsumerGroupKey
from logcore.coordinator.group_migration import GroupMigration, MigrationRefused
from logcore.coordinator.migration_policy import BIDIRECTIONAL, MigrationPolicy
from logcore.coordinator.topic_regex import InvalidTopicRegex, compile_topic_regex, matching
from logcore.errors import SegLogError

logger = logging.getLogger(__name__)

TIMER_CHECK_S = 0.25
REGEX_MIN_REFRESH_MS = 10_000         # Kafka's: a group's regexes are resolved at most this often
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
# topic name -> (topic id, partition count): the topics of the cluster (or the broker) now
TopicImage = dict[str, tuple[uuid.UUID, int]]


@dataclass(frozen=True)
class ConsumerGroupSettings:
    """Kafka's group.consumer.* broker settings."""
    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 2 ** 31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")      # the first is the default
    regex_refresh_interval_ms: int = 600_000               # Kafka's group.consumer.regex.refresh.interval.ms
    migration_policy: MigrationPolicy = BIDIRECTIONAL      # Kafka's group.consumer.migration.policy


class BrokerTimeouts:
    """Every group's session timeout and heartbeat interval: the broker's settings. A broker
    with per-group configs gives its own (logcore.broker.group_configs), same two methods."""

    def __init__(self, settings: ConsumerGroupSettings):
        self.settings = settings

    def session_timeout_ms(self, group_id: str) -> int:
        return self.settings.session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.settings.heartbeat_interval_ms


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat request's fields (None: not sent, unchanged since the last)."""
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: list[tuple[uuid.UUID, list[int]]] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 0
    # the topics the connection's principal may DESCRIBE (None: no authorizer, every topic)
    may_describe: Callable[[str], bool] | None = None


class HeartbeatError(SegLogError):
    def __init__(self, code: int, message: str | None = None):
        super().__init__(message or f"error {code}")
        self.code = code
        self.message = message


# a record: its key, its value (None: tombstone); or a classic group's record, encoded already
Record = tuple[ConsumerGroupKey, object] | tuple[bytes, bytes | None]


class ConsumerGroupCoordinator:
    def __init__(self, classic, topics: Callable[[], TopicImage], settings: ConsumerGroupSettings,
                 timeouts=None):
        """`timeouts`: each group's session timeout and heartbeat interval (its group configs,
        KIP-848's consumer.session.timeout.ms and consumer.heartbeat.interval.ms), looked up at
        every heartbeat; the broker's settings when None."""
        self.classic = classic                 # the GroupCoordinator: placement, appends, offsets
        self.topics = topics
        self.settings = settings
        self.timeouts = timeouts if timeouts is not None else BrokerTimeouts(settings)
        self.groups: dict[str, ConsumerGroup] = {}
        self._sessions: dict[tuple[str, str], float] = {}           # (group, member) -> deadline
        self._revocations: dict[tuple[str, str], tuple[int, float]] = {}   # -> (epoch, deadline)
        self._timers: asyncio.Task | None = None
        self._fencing: set[asyncio.Task] = set()
        self._resolving: dict[str, asyncio.Task] = {}            # group -> its regexes' resolution
        # The topics seen last, and when (wall-clock ms) one was first seen that had not been:
        # the version a resolution is of (Kafka's metadata image offset).
        self._known_topics: frozenset[str] | None = None
        self._topics_version = 0
        # KIP-848's online migration: groups turned from one protocol into the other, and the
        # classic members inside consumer groups (their JoinGroup, SyncGroup, Heartbeat, leaves).
        self.migration = GroupMigration(self, settings.migration_policy)
        self.classic_members = ClassicMembers(self)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._timers = asyncio.get_running_loop().create_task(self._run_timers())

    async def stop(self) -> None:
        if self._timers is not None:
            self._timers.cancel()
        for task in list(self._resolving.values()):
            task.cancel()

    def owns(self, group_id: str) -> bool:
        """Whether `group_id` is a consumer-protocol group here."""
        return group_id in self.groups

    # ------------------------------------------------------------------ loading (the classic coordinator's hooks)
    def apply_record(self, key: ConsumerGroupKey, value: bytes | None, where: str) -> None:
        """A record of types 3..8 read back from the log."""
        parsed = None if value is None else CG.parse_value(key.type, value, where)
        group = self.groups.get(key.group)
        if group is None:
            if value is None:
                return
            group = self.groups[key.group] = ConsumerGroup(key.group)
        group.replay(key, parsed)
        if key.type == CG.GROUP_METADATA and value is None and not group.members:
            del self.groups[key.group]

    def resume(self, in_partition: Callable[[str], bool], now: float) -> int:
        """The groups just loaded: every member's session (and pending revocation) starts now.
        The number of groups."""
        count = 0
        for gid, group in self.groups.items():
            if not in_partition(gid):
                continue
            count += 1
            for m in group.members.values():
                self._sessions[(gid, m.member_id)] = now + self.session_timeout_ms(gid, m) / 1000
                if m.state == UNREVOKED_PARTITIONS:
                    self._revocations[(gid, m.member_id)] = (m.member_epoch, now + _rebalance_s(m))
        return count

    def unload(self, in_partition: Callable[[str], bool]) -> None:
        for gid in [g for g in self.groups if in_partition(g)]:
            del self.groups[gid]
            self.forget_timers(gid)

    def forget_timers(self, gid: str, member_id: str | None = None) -> None:
        """Stop the timers of a group's members (of one of them)."""
        for timers in (self._sessions, self._revocations):
            for k in [k for k in timers if k[0] == gid and member_id in (None, k[1])]:
                del timers[k]
        self.classic_members.forget(gid, member_id)

    def session_timeout_ms(self, gid: str, member: ConsumerMember) -> int:
        """A classic member's own session timeout; the group's for a consumer-protocol one."""
        classic = member.metadata.classic
        return classic.session_timeout_ms if classic is not None else self.timeouts.session_timeout_ms(gid)

    def touch(self, gid: str, member: ConsumerMember) -> None:
        """The member was heard from: its session starts again."""
        self._sessions[(gid, member.member_id)] = _now() + self.session_timeout_ms(gid, member) / 1000

    # ------------------------------------------------------------------ ConsumerGroupHeartbeat
    async def heartbeat(self, hb: Heartbeat) -> dict:
        try:
            self._validate(hb)
            code = self.classic.coordinator_error(hb.group_id)
            if code != E.NONE:
                raise HeartbeatError(code)
            await self.classic.ensure_topic()
            if hb.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return await self._leave(hb)
            return await self._heartbeat(hb)
        except HeartbeatError as exc:
            return heartbeat_error(exc.code, exc.message)

    def _validate(self, hb: Heartbeat) -> None:
        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(E.INVALID_REQUEST, message)
        if not hb.group_id:
            raise invalid("GroupId can't be empty.")
        if hb.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if hb.rack_id == "":
            raise invalid("RackId can't be empty.")
        if hb.member_epoch > 0 or hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH or hb.version >= 1:
            if not hb.member_id:
                raise invalid("MemberId can't be empty.")
        if hb.member_epoch == 0:
            if hb.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if hb.owned is None or hb.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            # An empty list of names joins subscribed to nothing (Kafka 4.1 accepts it: librdkafka
            # rejoins so after an unsubscribe() and subscribe() in quick succession).
            if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when"
                              " (re-)joining.")
        elif hb.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if hb.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif hb.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if hb.subscribed_topic_regex:
            try:
                compile_topic_regex(hb.subscribed_topic_regex)
            except InvalidTopicRegex as exc:
                raise HeartbeatError(E.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{hb.subscribed_topic_regex}`"
                                     f" is not a valid regular expression: {exc}.") from None
        if hb.server_assignor is not None and hb.server_assignor not in self.settings.assignors:
            raise HeartbeatError(E.UNSUPPORTED_ASSIGNOR,
                                 f"ServerAssignor {hb.server_assignor} is not supported. Supported assignors: "
                                 + ", ".join(self.settings.assignors) + ".")

    def _group_for(self, group_id: str, create: bool, records: list[Record]) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.classic.groups.get(group_id)
        if classic is not None and classic.members:
            if not create:
                raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            try:                                # KIP-848's online upgrade: its records go first
                return self.migration.upgrade(classic, records)
            except MigrationRefused as exc:
                raise HeartbeatError(E.GROUP_ID_NOT_FOUND, str(exc)) from None
        if not create:
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        return ConsumerGroup(group_id)          # in self.groups once its first records are written

    async def _heartbeat(self, hb: Heartbeat) -> dict:
        joining = hb.member_epoch == 0
        records: list[Record] = []
        group = self._group_for(hb.group_id, joining, records)
        member_id = hb.member_id or str(uuid.uuid4())
        try:
            if group.members.get(member_id) is None and len(group.members) >= self.settings.max_size:
                raise HeartbeatError(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity"
                                     f" of {self.settings.max_size} members.")
            member = self._member(group, member_id, hb, joining, records)
        except HeartbeatError:
            await self.write(group, records)       # an upgrade done already stays (a classic group no more)
            raise
        meta = member.metadata
        updated_meta = CG.MemberMetadata(
            hb.instance_id if hb.instance_id is not None else meta.instance_id,
            hb.rack_id if hb.rack_id is not None else meta.rack_id,
            hb.client_id, hb.client_host,
            tuple(sorted(set(hb.subscribed_topic_names))) if hb.subscribed_topic_names is not None
            else meta.subscribed_topic_names,
            hb.subscribed_topic_regex if hb.subscribed_topic_regex is not None else meta.subscribed_topic_regex,
            hb.rebalance_timeout_ms if hb.rebalance_timeout_ms != -1 else meta.rebalance_timeout_ms,
            hb.server_assignor if hb.server_assignor is not None else meta.server_assignor)
        before, after = self.change_member(group, member, updated_meta, hb.owned, records)
        self.touch(group.group_id, after)
        # A new group is coordinated from its first records on (no await since _group_for: its
        # partition cannot have been dropped meanwhile).
        self.groups.setdefault(group.group_id, group)
        code = await self.write(group, records)
        if code != E.NONE:
            raise HeartbeatError(code)
        self._maybe_resolve(group, hb.may_describe)
        full = joining or (hb.rebalance_timeout_ms != -1 and hb.subscribed_topic_names is not None
                           and hb.owned is not None)
        response = {"throttle_time": 0, "error_code": E.NONE, "error_message": None, "member_id": member_id,
                    "member_epoch": after.member_epoch,
                    "heartbeat_interval": self.timeouts.heartbeat_interval_ms(group.group_id), "assignment": None}
        if full or after.assigned != before.assigned or joining:
            response["assignment"] = {"topic_partitions": [
                {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(after.assigned.items())]}
        return response

    def change_member(self, group: ConsumerGroup, member: ConsumerMember, updated_meta: CG.MemberMetadata,
                      owned: list[tuple[uuid.UUID, list[int]]] | None,
                      records: list[Record]) -> tuple[ConsumerMember, ConsumerMember]:
        """A member's heartbeat or (classic) JoinGroup: its metadata written when it changed, the
        group epoch bumped when its topics (or the subscribed topics' metadata) changed, the
        target computed for a new group epoch, and the member reconciled towards it (`owned`:
        the partitions it says it owns). The member before and after reconciling."""
        member_id = member.member_id
        meta = member.metadata
        image = self.image()
        # A new group starts at epoch 1; a member's subscription bumps it when its names change
        # or when what it subscribes to resolves to other topics (a regex new to the group
        # resolves later: its bump comes then).
        bump = group.group_epoch == 0
        if updated_meta != meta or member_id not in group.members:
            before = group.member_topic_names(member) if member_id in group.members else set()
            old_regex = regex_of(member)
            last_of_old = old_regex is not None and group.subscribed_regexes().get(old_regex) == 1
            self.apply(group, records, ConsumerGroupKey(CG.MEMBER_METADATA, group.group_id, member_id), updated_meta)
            new_regex = regex_of(group.members[member_id])
            if new_regex != old_regex and last_of_old and old_regex in group.resolved:
                self.apply(group, records, _regex_key(group.group_id, old_regex), None)
            bump = (bump or updated_meta.subscribed_topic_names != meta.subscribed_topic_names
                    or group.member_topic_names(group.members[member_id]) != before)
        bump = self.refresh_metadata(group, records, image) or bump
        if bump:
            self.apply(group, records, ConsumerGroupKey(CG.GROUP_METADATA, group.group_id), group.group_epoch + 1)
            logger.info("group %s: epoch %d", group.group_id, group.group_epoch)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, records)
        before = group.members[member_id]
        after = reconcile(before, group.assignment_epoch, group.target.get(member_id, {}), group.partition_epoch,
                          owned)
        if after != before:
            self.apply(group, records, ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, group.group_id, member_id),
                        after.current())
            key = (group.group_id, member_id)
            if after.state == UNREVOKED_PARTITIONS:
                self._revocations[key] = (after.member_epoch, _now() + _rebalance_s(after))
            else:
                self._revocations.pop(key, None)
        return before, group.members[member_id]

    def _member(self, group: ConsumerGroup, member_id: str, hb: Heartbeat, joining: bool,
                records: list[Record]) -> ConsumerMember:
        """The member the heartbeat is from: an existing one (its epoch checked), a new one, or
        a static member replacing its earlier incarnation (Kafka's rules)."""
        if hb.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise HeartbeatError(E.UNKNOWN_MEMBER_ID,
                                         f"Member {member_id} is not a member of group {group.group_id}.")
                logger.info("group %s: member %s joins (consumer protocol)", group.group_id, member_id)
                return ConsumerMember(member_id)
            _check_epoch(member, hb)
            return member
        static = group.static_member(hb.instance_id)
        if joining:
            if static is None:
                existing = group.members.get(member_id)
                if existing is not None:
                    _check_epoch(existing, hb)
                    return existing
                logger.info("group %s: static member %s (instance %s) joins", group.group_id, member_id,
                            hb.instance_id)
                return ConsumerMember(member_id)
            if static.member_id == member_id:
                _check_epoch(static, hb)
                return static
            if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(E.UNRELEASED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {hb.instance_id} cannot join the"
                                     f" group because the instance id is owned by {static.member_id} member.")
            # The instance is back under a new member id: it takes over the old one's partitions.
            new = replace(static, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            target = dict(group.target.get(static.member_id, {}))
            self.remove(group, static.member_id, records)
            gid = group.group_id
            self.apply(group, records, ConsumerGroupKey(CG.MEMBER_METADATA, gid, member_id), new.metadata)
            self.apply(group, records, ConsumerGroupKey(CG.TARGET_ASSIGNMENT_MEMBER, gid, member_id), target)
            self.apply(group, records, ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, gid, member_id), new.current())
            logger.info("group %s: static member %s (instance %s) replaces %s", gid, member_id, hb.instance_id,
                        static.member_id)
            return group.members[member_id]
        if static is None:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Instance id {hb.instance_id} is unknown.")
        if static.member_id != member_id:
            raise HeartbeatError(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id"
                                 f" {hb.instance_id} was fenced by member {static.member_id}.")
        _check_epoch(static, hb)
        return static

    def refresh_metadata(self, group: ConsumerGroup, records: list[Record], image: TopicImage) -> bool:
        """Write the subscribed topics' metadata when it changed; whether it did."""
        names = group.subscribed_names()
        wanted = {n: CG.TopicMetadata(image[n][0], n, image[n][1]) for n in sorted(names) if n in image}
        if wanted == group.subscription_metadata:
            return False
        self.apply(group, records, ConsumerGroupKey(CG.PARTITION_METADATA, group.group_id), wanted)
        return True

    def _member_topics(self, group: ConsumerGroup, member: ConsumerMember) -> frozenset[uuid.UUID]:
        meta = group.subscription_metadata
        return frozenset(meta[n].topic_id for n in group.member_topic_names(member) if n in meta)

    def image(self) -> TopicImage:
        """The topics now; a name not seen before moves the topic version on."""
        image = self.topics()
        names = frozenset(image)
        if self._known_topics is None or names - self._known_topics:
            self._topics_version = _wall_ms()
        self._known_topics = names
        return image

    # ------------------------------------------------------------------ regular expressions
    def _maybe_resolve(self, group: ConsumerGroup, may_describe: Callable[[str], bool] | None) -> None:
        """Start resolving the group's regexes if one is not resolved yet, a topic appeared
        since, or the refresh interval passed (Kafka's conditions); at most every
        REGEX_MIN_REFRESH_MS, one resolution of a group at a time. `may_describe`: the
        heartbeat's principal's (Kafka resolves with the request context of the heartbeat)."""
        gid = group.group_id
        regexes = group.subscribed_regexes()
        if not regexes or gid in self._resolving:
            return
        now = _wall_ms()
        if now <= group.last_resolution_ms + REGEX_MIN_REFRESH_MS:
            return
        if (any(r not in group.resolved for r in regexes) or group.last_resolution_version < self._topics_version
                or now > group.last_resolution_ms + self.settings.regex_refresh_interval_ms):
            task = asyncio.get_running_loop().create_task(self._resolve(group, may_describe))
            self._resolving[gid] = task
            task.add_done_callback(lambda _t: self._resolving.pop(gid, None))

    async def _resolve(self, group: ConsumerGroup, may_describe: Callable[[str], bool] | None) -> None:
        """Match the group's regexes against the topics now, leaving out those `may_describe`
        refuses, and write what each matched; the group epoch bumps when that changes a
        member's topics."""
        gid = group.group_id
        if self.groups.get(gid) is not group:
            return                                  # unloaded, or deleted, since
        image = self.image()
        now = _wall_ms()
        records: list[Record] = []
        changed = []
        # each topic authorized once, whichever regexes match it (as Kafka does)
        visible = None if may_describe is None else functools.cache(may_describe)
        for regex in sorted(group.subscribed_regexes()):
            try:
                topics = frozenset(matching(regex, image, INTERNAL_TOPICS, visible))
            except InvalidTopicRegex as exc:        # refused at the heartbeat: only from an old record
                logger.error("group %s: regular expression %r ignored: %s", gid, regex, exc)
                continue
            old = group.resolved.get(regex)
            if (old.topics if old is not None else frozenset()) != topics:
                changed.append(regex)
            self.apply(group, records, _regex_key(gid, regex), CG.ResolvedRegex(topics, self._topics_version, now))
        if self.refresh_metadata(group, records, image) or changed:
            self.apply(group, records, ConsumerGroupKey(CG.GROUP_METADATA, gid), group.group_epoch + 1)
            logger.info("group %s: epoch %d (regular expressions %s resolved to other topics)", gid,
                        group.group_epoch, ", ".join(changed) or "unchanged; topic metadata")
        await self.write(group, records)

    def assignor_of(self, group: ConsumerGroup) -> str:
        """The group's assignor: the one most of its members ask for, else the default."""
        votes: dict[str, int] = {}
        for m in group.members.values():
            if m.metadata.server_assignor:
                votes[m.metadata.server_assignor] = votes.get(m.metadata.server_assignor, 0) + 1
        if not votes:
            return self.settings.assignors[0]
        return max(sorted(votes), key=lambda name: votes[name])

    def _compute_target(self, group: ConsumerGroup, records: list[Record]) -> None:
        spec = A.AssignmentSpec(
            {mid: A.MemberSpec(self._member_topics(group, m), m.instance_id, group.target.get(mid, {}))
             for mid, m in group.members.items()},
            {t.topic_id: t.partitions for t in group.subscription_metadata.values()})
        result = A.ASSIGNORS[self.assignor_of(group)].assign(spec)
        for mid in group.members:
            new = result.get(mid, {})
            if new != group.target.get(mid):
                self.apply(group, records, ConsumerGroupKey(CG.TARGET_ASSIGNMENT_MEMBER, group.group_id, mid), new)
        self.apply(group, records, ConsumerGroupKey(CG.TARGET_ASSIGNMENT_METADATA, group.group_id), group.group_epoch)

    # ------------------------------------------------------------------ leaving and fencing
    async def _leave(self, hb: Heartbeat) -> dict:
        records: list[Record] = []
        group = self._group_for(hb.group_id, False, records)
        if hb.instance_id is None:
            member = group.members.get(hb.member_id)
            if member is None:
                raise HeartbeatError(E.UNKNOWN_MEMBER_ID,
                                     f"Member {hb.member_id} is not a member of group {group.group_id}.")
            logger.info("group %s: member %s left", group.group_id, member.member_id)
            self.fence(group, member, records)
        else:
            member = group.static_member(hb.instance_id)
            if member is None:
                raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Instance id {hb.instance_id} is unknown.")
            if member.member_id != hb.member_id:
                raise HeartbeatError(E.FENCED_INSTANCE_ID, f"Static member {hb.member_id} with instance id"
                                     f" {hb.instance_id} was fenced by member {member.member_id}.")
            if hb.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # Gone for now: its partitions wait for it until its session ends.
                logger.info("group %s: static member %s (instance %s) left for now", group.group_id,
                            member.member_id, hb.instance_id)
                left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
                self.apply(group, records, ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, group.group_id,
                                                             member.member_id), left.current())
                self._revocations.pop((group.group_id, member.member_id), None)
            else:
                logger.info("group %s: static member %s (instance %s) left", group.group_id, member.member_id,
                            hb.instance_id)
                self.fence(group, member, records)
        code = await self.write(group, records)
        if code != E.NONE:
            raise HeartbeatError(code)
        return {"throttle_time": 0, "error_code": E.NONE, "error_message": None, "member_id": hb.member_id,
                "member_epoch": hb.member_epoch, "heartbeat_interval": 0, "assignment": None}

    def remove(self, group: ConsumerGroup, member_id: str, records: list[Record]) -> None:
        """The member's tombstones, in Kafka's order."""
        gid = group.group_id
        for t in (CG.CURRENT_MEMBER_ASSIGNMENT, CG.TARGET_ASSIGNMENT_MEMBER, CG.MEMBER_METADATA):
            self.apply(group, records, ConsumerGroupKey(t, gid, member_id), None)
        self.forget_timers(gid, member_id)

    def fence(self, group: ConsumerGroup, member: ConsumerMember, records: list[Record]) -> None:
        """Remove the member, and its regex's resolution if no member is left subscribed to it;
        the group epoch bumps (the next heartbeat reassigns). The last consumer-protocol member
        gone, with classic members left, the group turns back into a classic group when the
        migration policy allows (KIP-848's online downgrade)."""
        if self.migration.downgrade(group, {member.member_id}, records):
            return
        self.remove(group, member.member_id, records)
        regex = regex_of(member)
        if regex is not None and regex in group.resolved and regex not in group.subscribed_regexes():
            self.apply(group, records, _regex_key(group.group_id, regex), None)
        self.refresh_metadata(group, records, self.image())
        self.apply(group, records, ConsumerGroupKey(CG.GROUP_METADATA, group.group_id), group.group_epoch + 1)

    async def _run_timers(self) -> None:
        while True:
            await asyncio.sleep(TIMER_CHECK_S)
            now = _now()
            for (gid, mid), deadline in list(self._sessions.items()):
                if now >= deadline:
                    self._sessions.pop((gid, mid), None)
                    self._fence_later(gid, mid, None, "its session expired")
            for (gid, mid), (epoch, deadline) in list(self._revocations.items()):
                if now >= deadline:
                    self._revocations.pop((gid, mid), None)
                    self._fence_later(gid, mid, epoch, f"it did not revoke its partitions of epoch {epoch} in time")
            for gid, mid, why in self.classic_members.expired(now):
                self._fence_later(gid, mid, None, why)

    def _fence_later(self, gid: str, mid: str, epoch: int | None, why: str) -> None:
        group = self.groups.get(gid)
        member = group.members.get(mid) if group is not None else None
        if member is None or (epoch is not None and member.member_epoch != epoch):
            return
        logger.info("group %s: member %s fenced: %s", gid, mid, why)
        records: list[Record] = []
        self.fence(group, member, records)
        task = asyncio.get_running_loop().create_task(self.write(group, records))
        self._fencing.add(task)
        task.add_done_callback(self._fencing.discard)

    # ------------------------------------------------------------------ records
    def apply(self, group: ConsumerGroup, records: list[Record], key: ConsumerGroupKey, value) -> None:
        """Record a change and apply it to the group at once (as a load would replay it)."""
        records.append((key, value))
        group.replay(key, value)

    async def write(self, group: ConsumerGroup, records: list[Record]) -> int:
        """Append the records to the group's partition; NONE once acknowledged. The group is in
        memory as they say already (a failed append leaves the partition to be reloaded by its
        next coordinator, as Kafka's failover does)."""
        if not records:
            return E.NONE
        encoded = [(k, v) if isinstance(k, bytes) else (CG.key(k), CG.encode_value(k.type, v)) for k, v in records]
        code = await self.classic.append(group.group_id, encoded)
        if code != E.NONE:
            logger.warning("group %s: writing %d records failed: error %d", group.group_id, len(records), code)
        return code

    async def drop_if_empty(self, group_id: str) -> bool:
        """Delete an empty consumer group (its records' tombstones; its committed offsets stay):
        to make way for a classic group of this id, or for DeleteGroups. False while it has
        members."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members:
            return False
        records: list[Record] = []
        for regex in sorted(group.resolved):
            self.apply(group, records, _regex_key(group_id, regex), None)
        for t in (CG.TARGET_ASSIGNMENT_METADATA, CG.PARTITION_METADATA, CG.GROUP_METADATA):
            self.apply(group, records, ConsumerGroupKey(t, group_id), None)
        code = await self.write(group, records)
        if code != E.NONE:
            return False
        if self.groups.get(group_id) is group:
            del self.groups[group_id]
        logger.info("group %s: empty consumer group deleted", group_id)
        return True

    # ------------------------------------------------------------------ offsets and describe
    def check_commit(self, group_id: str, member_epoch: int, member_id: str, api_version: int | None) -> int:
        """Whether this member at this epoch may commit the group's offsets (`api_version`: the
        OffsetCommit's, None for TxnOffsetCommit)."""
        return self.groups[group_id].check_commit(member_epoch, member_id, api_version)

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9's member check (no member id and a negative epoch: an admin)."""
        return self.groups[group_id].check_fetch(member_id, member_epoch)

    def describe(self, group_id: str, version: int) -> dict:
        """ConsumerGroupDescribe's answer for one group."""
        group = self.groups.get(group_id)
        if group is None:
            classic = self.classic.groups.get(group_id)
            message = (f"Group {group_id} is not a consumer group." if classic is not None and classic.members
                       else f"Group {group_id} not found.")
            return {"error_code": E.GROUP_ID_NOT_FOUND, "error_message": message, "group_id": group_id,
                    "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                    "members": []}
        names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
        names.update({tid: n for n, (tid, _) in self.topics().items() if tid not in names})
        return group.description(names, self.assignor_of(group))


def _check_epoch(member: ConsumerMember, hb: Heartbeat) -> None:
    """FENCED_MEMBER_EPOCH unless the heartbeat is at the member's epoch, or at its previous one
    with nothing but its assigned partitions (the answer bumping the epoch was lost)."""
    received = hb.member_epoch
    if received > member.member_epoch:
        raise HeartbeatError(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch"
                             f" ({received}) than the one known by the group coordinator ({member.member_epoch})."
                             " The member must abandon all its partitions and rejoin.")
    if received < member.member_epoch:
        subset = hb.owned is not None and all(p in member.assigned.get(t, ()) for t, ps in hb.owned for p in ps)
        if received != member.previous_member_epoch or not subset:
            raise HeartbeatError(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch"
                                 f" ({received}) than the one known by the group coordinator"
                                 f" ({member.member_epoch}). The member must abandon all its partitions and rejoin.")


def _regex_key(group_id: str, regex: str) -> ConsumerGroupKey:
    return ConsumerGroupKey(CG.REGULAR_EXPRESSION, group_id, regex=regex)


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _rebalance_s(member: ConsumerMember) -> float:
    return max(member.metadata.rebalance_timeout_ms, 0) / 1000


def _now() -> float:
    return asyncio.get_running_loop().time()


def heartbeat_error(code: int, message: str | None = None) -> dict:
    """ConsumerGroupHeartbeat's answer refusing with `code` (the broker answers it too); the
    member epoch is Kafka's on an error, the field's default 0."""
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
