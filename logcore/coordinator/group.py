"""A classic consumer group as its coordinator holds it: its members (Member), its generation,
protocol and leader (Group), and the states of Kafka's classic protocol it moves through:
Empty -> PreparingRebalance -> CompletingRebalance -> Stable.

Plain data and the group's own rules (the protocol vote, whether every member has rejoined);
the state machine that drives them is the GroupCoordinator's, the committed offsets are
GroupOffsets'.
"""
from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

from logcore.coordinator import offsets_topic as OT

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
DEAD = "Dead"                       # how DescribeGroups names a group the coordinator does not know
AUTHORIZED_OPERATIONS_OMITTED = -(1 << 31)   # Kafka's answer when operations were not asked for
CONSUMER_PROTOCOL = "consumer"      # the protocol type of Kafka's consumers (their subscriptions are readable)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_seen: float
    assignment: bytes = b""
    join: asyncio.Future | None = None      # the parked JoinGroup response
    sync: asyncio.Future | None = None      # the parked SyncGroup response

    def metadata_for(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)   # member id -> expiry (MEMBER_ID_REQUIRED issued)
    changed: asyncio.Event | None = None
    rebalance: asyncio.Task | None = None
    last_newcomer: float = 0.0
    state_timestamp_ms: int = -1             # wall clock when it last became Empty (-1: unknown)

    def static_member(self, instance_id: str | None) -> str | None:
        """The member id of the static member with this group.instance.id (KIP-345), if any."""
        if instance_id is None:
            return None
        return next((mid for mid, m in self.members.items() if m.group_instance_id == instance_id), None)

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members of a consumer group subscribe to (their metadata for the
        chosen protocol); None when they cannot be known (another protocol type, no protocol
        chosen yet, or metadata that does not parse)."""
        if self.protocol_type != CONSUMER_PROTOCOL or self.protocol is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            found = subscription_topics(m.metadata_for(self.protocol))
            if found is None:
                return None
            topics.update(found)
        return topics

    def supported(self) -> set[str]:
        names = None
        for m in self.members.values():
            mine = {name for name, _ in m.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol all members support."""
        candidates = self.supported()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name, _ in m.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name])

    def description(self) -> dict:
        """DescribeGroups' answer for the group, as Kafka's classic coordinator gives it: the
        chosen protocol and each member's metadata and assignment only while the group is
        Stable, members without them otherwise."""
        stable = self.state == STABLE and self.protocol is not None
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata_for(self.protocol) if stable else b"",
                    "member_assignment": m.assignment if stable else b""}
                   for m in self.members.values()]
        return {"error_code": 0, "group_id": self.group_id, "group_state": self.state,
                "protocol_type": self.protocol_type or "", "protocol_data": self.protocol if stable else "",
                "members": members, "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def record(self, now_ms: int) -> OT.GroupRecord:
        """The group's metadata as __consumer_offsets keeps it (`now_ms`: its timestamp unless
        it is Empty since a known time)."""
        return OT.GroupRecord(
            self.protocol_type or "", self.generation, self.protocol, self.leader,
            self.state_timestamp_ms if self.state == EMPTY and self.state_timestamp_ms >= 0 else now_ms,
            [OT.MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                             m.rebalance_timeout_ms, m.session_timeout_ms,
                             m.metadata_for(self.protocol) if self.protocol else b"", m.assignment)
             for m in self.members.values()])

    def all_joined(self) -> bool:
        return not self.pending and all(m.join is not None for m in self.members.values())


def subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a consumer protocol subscription (every version starts with its version
    and the topics, as int16-length strings); None if it does not parse."""
    try:
        count = struct.unpack_from(">i", metadata, 2)[0]
        pos, topics = 6, []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                return None
            topics.append(bytes(metadata[pos + 2:pos + 2 + n]).decode())
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def resume(groups, now: float) -> None:
    """Groups read back from the log: Stable with the members of their last generation (their
    sessions start now), Empty without (Kafka's loadGroup)."""
    for group in groups:
        group.state = STABLE if group.members else EMPTY
        for m in group.members.values():
            m.last_seen = now
