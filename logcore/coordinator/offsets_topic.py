"""The records of the internal `__consumer_offsets` topic, in Kafka's own binary layout.

Two kinds of records share the compacted topic, told apart by the key's version:
- an offset commit: key v1 (group, topic, partition) -> value v3 (offset, leader epoch,
  metadata, commit timestamp); a null value (tombstone) forgets the offset;
- group metadata: key v2 (group) -> value v3 (protocol type, generation, protocol, leader,
  state timestamp, members).
- consumer-protocol (KIP-848) group records: key versions 3..8 and 16 (consumer_group_records).
A group lives in partition abs(java hashCode(group id)) % offsets.topic.num.partitions, as in
Kafka, so a root written by this broker reads the same way in Kafka's tools.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from logcore.coordinator import consumer_group_records as CG
from logcore.coordinator import record_fields as F
from logcore.coordinator.record_fields import I16, I32, I64, RecordReader

TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
TOPIC_CONFIG = {"cleanup.policy": "compact"}     # segment.bytes: offsets.topic.segment.bytes

partition_for = F.partition_for      # the partition a group lives in, as Kafka chooses


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: list[MemberRecord] = field(default_factory=list)


# ------------------------------------------------------------------------------ writing

def offset_key(group: str, topic: str, partition: int) -> bytes:
    return I16.pack(OFFSET_KEY_VERSION) + F.string(group) + F.string(topic) + I32.pack(partition)


def offset_value(c: CommittedOffset) -> bytes:
    return (I16.pack(OFFSET_VALUE_VERSION) + I64.pack(c.offset) + I32.pack(c.leader_epoch)
            + F.string(c.metadata) + I64.pack(c.commit_timestamp))


def group_key(group: str) -> bytes:
    return I16.pack(GROUP_KEY_VERSION) + F.string(group)


def group_value(g: GroupRecord) -> bytes:
    out = [I16.pack(GROUP_VALUE_VERSION), F.string(g.protocol_type), I32.pack(g.generation),
           F.string(g.protocol), F.string(g.leader), I64.pack(g.state_timestamp), I32.pack(len(g.members))]
    for m in g.members:
        out += [F.string(m.member_id), F.string(m.group_instance_id), F.string(m.client_id),
                F.string(m.client_host), I32.pack(m.rebalance_timeout_ms), I32.pack(m.session_timeout_ms),
                F.bytes_(m.subscription), F.bytes_(m.assignment)]
    return b"".join(out)


# ------------------------------------------------------------------------------ reading

@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


def parse_key(key: bytes, where: str) -> OffsetKey | GroupKey | CG.ConsumerGroupKey | None:
    """The key of a record of the topic; None for a key version this broker does not know.
    Versions 3..8 and 16 are the consumer-protocol group records (consumer_group_records)."""
    r = RecordReader(key, where)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.nullable_string() or "", r.nullable_string() or "", r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.nullable_string() or "")
    if version in CG.KEY_TYPES:
        return CG.parse_key(r, version)
    return None


def parse_offset_value(value: bytes, where: str) -> CommittedOffset:
    r = RecordReader(value, where)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.nullable_string() or ""
    timestamp = r.i64()
    return CommittedOffset(offset, epoch, metadata, timestamp)


def parse_group_value(value: bytes, where: str) -> GroupRecord:
    r = RecordReader(value, where)
    version = r.i16()
    protocol_type = r.nullable_string() or ""
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.nullable_string() or ""
        instance = r.nullable_string() if version >= 3 else None
        client_id = r.nullable_string() or ""
        host = r.nullable_string() or ""
        rebalance = r.i32() if version >= 1 else 0
        session = r.i32()
        members.append(MemberRecord(member_id, instance, client_id, host, rebalance, session,
                                    r.bytes_() or b"", r.bytes_() or b""))
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, members)
