"""A consumer-protocol group (KIP-848) as its coordinator holds it: the members (ConsumerMember),
the group epoch, the target assignment and its epoch, and the subscribed topics' metadata
(ConsumerGroup); and the reconciliation of a member towards its target (`reconcile`).

The group is what its records say: every change is a record of consumer_group_records,
applied here by `replay` the moment it is written and again when a coordinator loads the
partition, so a new coordinator rebuilds the same group.

Epochs: the group epoch goes up with every change of membership, subscription or subscribed
topic metadata; the target assignment is computed for a group epoch (its assignment epoch);
each member moves to the target epoch as it reconciles. A member gives up partitions before
another gets them: while it still owns partitions its target no longer has, it stays in its
epoch with them pending revocation (UNREVOKED_PARTITIONS) and gets nothing new; a partition
still owned by another member is withheld (UNRELEASED_PARTITIONS) until that member released it.
The group's state follows: Empty (no member), Assigning (target behind the group epoch),
Reconciling (a member not at the target epoch yet), Stable.

Regular expressions: a member subscribes to topic names and/or one regex; the group holds what
each regex it uses matched (`resolved`, written by the coordinator apart from heartbeats, as
Kafka resolves them asynchronously). A member's topics are its names plus what its regex
matched so far; a regex not resolved yet adds nothing.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from logcore.wire import error_codes as E
from logcore.coordinator import consumer_group_records as CG
from logcore.coordinator.consumer_group_records import Assignment, ConsumerGroupKey

# MemberState, as Kafka numbers it in the records
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = 0, 1, 2
MEMBER_STATE_NAMES = {STABLE: "stable", UNREVOKED_PARTITIONS: "unrevoked_partitions",
                      UNRELEASED_PARTITIONS: "unreleased_partitions"}
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP = "Empty", "Assigning", "Reconciling", "Stable"


@dataclass(frozen=True)
class ConsumerMember:
    member_id: str
    metadata: CG.MemberMetadata = CG.MemberMetadata(None, None, "", "", (), None, -1, None)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    @property
    def instance_id(self) -> str | None:
        return self.metadata.instance_id

    def current(self) -> CG.CurrentAssignment:
        return CG.CurrentAssignment(self.member_epoch, self.previous_member_epoch, self.state,
                                    self.assigned, self.pending_revocation)

    def reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscription_metadata: dict[str, CG.TopicMetadata] = field(default_factory=dict)
    resolved: dict[str, CG.ResolvedRegex] = field(default_factory=dict)
    # of the last resolution replayed (Kafka keeps them when a regex is deleted too)
    last_resolution_ms: int = 0
    last_resolution_version: int = -1

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if any(not m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return RECONCILING
        return STABLE_GROUP

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member owning the partition (assigned or pending revocation), -1
        when no member owns it."""
        for m in self.members.values():
            if partition in m.assigned.get(topic_id, ()) or partition in m.pending_revocation.get(topic_id, ()):
                return m.member_epoch
        return -1

    def member_topic_names(self, member: ConsumerMember) -> set[str]:
        """The member's subscribed names and what its regex matched so far."""
        names = set(member.metadata.subscribed_topic_names)
        regex = regex_of(member)
        if regex is not None and regex in self.resolved:
            names |= self.resolved[regex].topics
        return names

    def subscribed_names(self) -> set[str]:
        return {t for m in self.members.values() for t in self.member_topic_names(m)}

    def subscribed_regexes(self) -> dict[str, int]:
        """Each regex a member subscribes to, and how many members do."""
        out: dict[str, int] = {}
        for m in self.members.values():
            regex = regex_of(m)
            if regex is not None:
                out[regex] = out.get(regex, 0) + 1
        return out

    # ------------------------------------------------------------------ offsets and describe
    def check_commit(self, member_epoch: int, member_id: str, api_version: int | None) -> int:
        """Whether this member at this epoch may commit the group's offsets (`api_version`: the
        OffsetCommit's, None for TxnOffsetCommit), as Kafka's ConsumerGroup checks it: a classic
        member (KIP-848's online migration) commits with its generation = its member epoch."""
        if member_epoch < 0 and not self.members:
            return E.NONE                   # an admin or a consumer outside the group: empty group only
        member = self.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        classic = member.metadata.classic is not None
        if api_version is not None and api_version < 9 and not classic:
            return E.UNSUPPORTED_VERSION    # consumer-protocol members commit with v9+
        if member_epoch != member.member_epoch:
            return E.ILLEGAL_GENERATION if classic else E.STALE_MEMBER_EPOCH
        return E.NONE

    def check_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9's member check (no member id and a negative epoch: an admin)."""
        if member_id is None and member_epoch < 0:
            return E.NONE
        member = self.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def description(self, names: dict[uuid.UUID, str], assignor: str) -> dict:
        """ConsumerGroupDescribe's answer for the group (`names`: topic names by id); v1 marks
        each member's type, 0 classic, 1 consumer."""
        def parts(a: Assignment) -> dict:
            return {"topic_partitions": [{"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                                         for t, ps in sorted(a.items(), key=lambda x: names.get(x[0], ""))]}
        members = [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.metadata.rack_id,
                    "member_epoch": m.member_epoch, "client_id": m.metadata.client_id,
                    "client_host": m.metadata.client_host,
                    "subscribed_topic_names": list(m.metadata.subscribed_topic_names),
                    "subscribed_topic_regex": m.metadata.subscribed_topic_regex,
                    "assignment": parts(m.assigned), "target_assignment": parts(self.target.get(m.member_id, {})),
                    "member_type": 0 if m.metadata.classic is not None else 1}
                   for m in self.members.values()]
        return {"error_code": E.NONE, "error_message": None, "group_id": self.group_id, "group_state": self.state,
                "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "assignor_name": assignor, "members": members}

    # ------------------------------------------------------------------ records
    def replay(self, key: ConsumerGroupKey, value) -> None:
        """Apply one record (value parsed; None for a tombstone), as Kafka's replay does."""
        t = key.type
        if t == CG.GROUP_METADATA:
            if value is not None:
                self.group_epoch = value
        elif t == CG.REGULAR_EXPRESSION:
            if value is None:
                self.resolved.pop(key.regex, None)
            else:
                self.resolved[key.regex] = value
                self.last_resolution_ms = value.timestamp_ms
                self.last_resolution_version = value.version
        elif t == CG.PARTITION_METADATA:
            self.subscription_metadata = dict(value) if value is not None else {}
        elif t == CG.TARGET_ASSIGNMENT_METADATA:
            if value is not None:
                self.assignment_epoch = value
        elif t == CG.TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target.pop(key.member, None)
            else:
                self.target[key.member] = dict(value)
        elif t == CG.MEMBER_METADATA:
            if value is None:
                self.members.pop(key.member, None)
            else:
                old = self.members.get(key.member) or ConsumerMember(key.member)
                self.members[key.member] = replace(old, metadata=value)
        elif t == CG.CURRENT_MEMBER_ASSIGNMENT:
            old = self.members.get(key.member) or ConsumerMember(key.member)
            if value is None:
                # Kafka: the member is out of the group until its metadata tombstone follows.
                self.members[key.member] = replace(old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                   previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                   state=STABLE, assigned={}, pending_revocation={})
            else:
                self.members[key.member] = replace(
                    old, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                    state=value.state if value.state in MEMBER_STATE_NAMES else STABLE,
                    assigned=dict(value.assigned), pending_revocation=dict(value.pending_revocation))


def regex_of(member: ConsumerMember) -> str | None:
    """The member's regex; an empty one (librdkafka sends "" for none) is none, as in Kafka."""
    return member.metadata.subscribed_topic_regex or None


# ------------------------------------------------------------------------------ reconciliation

def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment, partition_epoch,
              owned: list[tuple[uuid.UUID, list[int]]] | None) -> ConsumerMember:
    """The member's next assignment state towards `target` (Kafka's CurrentAssignmentBuilder).
    `partition_epoch(topic, p)`: the epoch of the member owning a partition, -1 for none;
    `owned`: the partitions the member says it owns (None when its heartbeat did not say)."""
    if member.state == STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state == UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        # Revoked: the member moves on to the next epoch, towards the latest target.
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)


def _owns_any(owned: list[tuple[uuid.UUID, list[int]]] | None, assignment: Assignment) -> bool:
    """Whether the member still owns a partition of `assignment` (unknown counts as owned)."""
    if owned is None:
        return True
    return any(p in assignment.get(t, ()) for t, parts in owned for p in parts)


def _next(member: ConsumerMember, member_epoch: int, target_epoch: int, target: Assignment, partition_epoch,
          owned) -> ConsumerMember:
    unreleased = False
    assigned: dict[uuid.UUID, set[int]] = {}
    revoking: Assignment = {}
    adding: dict[uuid.UUID, set[int]] = {}
    for topic in set(target) | set(member.assigned):
        wanted = set(target.get(topic, ()))
        current = set(member.assigned.get(topic, ()))
        keep = current & wanted
        if keep:
            assigned[topic] = keep
        if current - keep:
            revoking[topic] = frozenset(current - keep)
        new = wanted - keep
        free = {p for p in new if partition_epoch(topic, p) == -1}
        unreleased = unreleased or free != new
        if free:
            adding[topic] = free
    if revoking and _owns_any(owned, revoking):
        # Revoke first: same epoch, only the kept partitions, the rest pending revocation.
        return _updated(member, UNREVOKED_PARTITIONS, member_epoch, assigned, revoking)
    for topic, parts in adding.items():
        assigned.setdefault(topic, set()).update(parts)
    state = UNRELEASED_PARTITIONS if unreleased else STABLE
    return _updated(member, state, target_epoch, assigned, {})


def _updated(member: ConsumerMember, state: int, epoch: int, assigned: dict, revoking: Assignment) -> ConsumerMember:
    return replace(member, state=state, member_epoch=epoch, previous_member_epoch=member.member_epoch,
                   assigned={t: frozenset(ps) for t, ps in assigned.items() if ps},
                   pending_revocation={t: frozenset(ps) for t, ps in revoking.items() if ps})
