"""The records of consumer-protocol groups (KIP-848) in `__consumer_offsets`, in Kafka's layout,
so that Kafka's tools read a log this broker wrote (and this broker reads Kafka's).

A key is an int16 record type then the key's fields as non-flexible strings; a value is an int16
version (0) then flexible fields (compact strings and arrays, 16-byte topic ids, tagged fields):

  type 3  ConsumerGroupMetadata            (group)          -> group epoch
  type 4  ConsumerGroupPartitionMetadata   (group)          -> subscribed topics: id, name, partitions
  type 5  ConsumerGroupMemberMetadata      (group, member)  -> instance/rack/client ids, host,
                                                               subscription, rebalance timeout, assignor;
                                                               a classic member's session timeout and
                                                               protocols (tagged field 0)
  type 6  ConsumerGroupTargetAssignmentMetadata (group)     -> assignment epoch
  type 7  ConsumerGroupTargetAssignmentMember   (group, member) -> the member's target partitions
  type 8  ConsumerGroupCurrentMemberAssignment  (group, member) -> member epoch, previous epoch,
                                                               state, assigned and pending revocation
  type 16 ConsumerGroupRegularExpression   (group, regex)   -> the topics it matched, the version
                                                               of the topics it was matched against,
                                                               when (ms)

A null value (tombstone) removes what the key names. Kafka 4.1 also writes a metadata hash as a
tagged field of type 3 instead of type 4 records; both read here (the tag is skipped), and this
broker writes type 4 records as Kafka 4.0 did.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from logcore.coordinator import record_fields as F
from logcore.coordinator.record_fields import I8, I16, I32, I64, RecordReader

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
KEY_TYPES = frozenset({GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_ASSIGNMENT_METADATA,
                       TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT, REGULAR_EXPRESSION})
_MEMBER_KEYS = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0

# topic id -> partitions
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True)
class ConsumerGroupKey:
    """The key of a consumer-group record: its type, the group, and the member (types 5, 7, 8)
    or the regular expression (type 16)."""
    type: int
    group: str
    member: str | None = None
    regex: str | None = None


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a member speaking the classic protocol inside a consumer group (KIP-848's online
    migration) joined with: its session timeout and its (name, metadata) protocols."""
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None     # None: the member speaks the consumer protocol


@dataclass(frozen=True)
class ResolvedRegex:
    """What a group's regular expression matched: topic names, the version of the topics seen
    (the coordinator's topic image version) and when (wall-clock ms)."""
    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(frozen=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


# ------------------------------------------------------------------------------ writing

def key(k: ConsumerGroupKey) -> bytes:
    out = I16.pack(k.type) + F.string(k.group)
    if k.type in _MEMBER_KEYS:
        out += F.string(k.member or "")
    elif k.type == REGULAR_EXPRESSION:
        out += F.string(k.regex or "")
    return out


def _assignment(a: Assignment) -> bytes:
    return F.compact_array([t.bytes + F.compact_array([I32.pack(p) for p in sorted(parts)]) + F.NO_TAGGED_FIELDS
                            for t, parts in sorted(a.items()) if parts])


def _value(*fields: bytes) -> bytes:
    return I16.pack(VALUE_VERSION) + b"".join(fields) + F.NO_TAGGED_FIELDS


def group_epoch_value(epoch: int) -> bytes:
    return _value(I32.pack(epoch))


def partition_metadata_value(topics: dict[str, TopicMetadata]) -> bytes:
    return _value(F.compact_array([
        t.topic_id.bytes + F.compact_string(t.name) + I32.pack(t.partitions) + F.compact_array([])
        + F.NO_TAGGED_FIELDS for _, t in sorted(topics.items())]))


def member_metadata_value(m: MemberMetadata) -> bytes:
    fields = (F.compact_string(m.instance_id) + F.compact_string(m.rack_id) + F.compact_string(m.client_id)
              + F.compact_string(m.client_host)
              + F.compact_array([F.compact_string(t) for t in m.subscribed_topic_names])
              + F.compact_string(m.subscribed_topic_regex) + I32.pack(m.rebalance_timeout_ms)
              + F.compact_string(m.server_assignor))
    if m.classic is None:
        return _value(fields)
    # a nullable struct: a presence marker (1) before its fields
    classic = (F.uvarint(1) + I32.pack(m.classic.session_timeout_ms)
               + F.compact_array([F.compact_string(name) + F.uvarint(len(meta) + 1) + bytes(meta)
                                  + F.NO_TAGGED_FIELDS for name, meta in m.classic.protocols])
               + F.NO_TAGGED_FIELDS)
    # one tagged field: tag 0, its size, the struct
    return I16.pack(VALUE_VERSION) + fields + F.uvarint(1) + F.uvarint(0) + F.uvarint(len(classic)) + classic


def assignment_epoch_value(epoch: int) -> bytes:
    return _value(I32.pack(epoch))


def target_member_value(a: Assignment) -> bytes:
    return _value(_assignment(a))


def resolved_regex_value(r: ResolvedRegex) -> bytes:
    return _value(F.compact_array([F.compact_string(t) for t in sorted(r.topics)]), I64.pack(r.version),
                  I64.pack(r.timestamp_ms))


def current_assignment_value(c: CurrentAssignment) -> bytes:
    return _value(I32.pack(c.member_epoch), I32.pack(c.previous_member_epoch), I8.pack(c.state),
                  _assignment(c.assigned), _assignment(c.pending_revocation))


# ------------------------------------------------------------------------------ reading

def parse_key(r: RecordReader, record_type: int) -> ConsumerGroupKey:
    """The rest of a key whose int16 type `r` has read."""
    group = r.nullable_string() or ""
    member = (r.nullable_string() or "") if record_type in _MEMBER_KEYS else None
    regex = (r.nullable_string() or "") if record_type == REGULAR_EXPRESSION else None
    return ConsumerGroupKey(record_type, group, member, regex)


def _read_assignment(r: RecordReader) -> Assignment:
    out: Assignment = {}
    for _ in range(F.read_compact_array_length(r)):
        topic = uuid.UUID(bytes=F.read_uuid(r))
        parts = frozenset(r.i32() for _ in range(F.read_compact_array_length(r)))
        F.skip_tagged_fields(r)
        if parts:
            out[topic] = parts
    return out


def _read_classic(r: RecordReader) -> ClassicMemberMetadata | None:
    if r.i8() <= 0:                             # the nullable struct's presence marker: 0 (or -1) for null
        return None
    session = r.i32()
    protocols = []
    for _ in range(F.read_compact_array_length(r)):
        name = r.compact_string()
        protocols.append((name, r.take(r.uvarint() - 1)))
        F.skip_tagged_fields(r)
    F.skip_tagged_fields(r)
    return ClassicMemberMetadata(session, tuple(protocols))


def parse_value(record_type: int, value: bytes, where: str):
    """The value of a record of `record_type`: an int epoch (types 3, 6), {name: TopicMetadata}
    (4), MemberMetadata (5), an Assignment (7), CurrentAssignment (8) or ResolvedRegex (16)."""
    r = RecordReader(value, where)
    r.i16()                                     # the version: 0 is the only one
    if record_type in (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA):
        return r.i32()
    if record_type == PARTITION_METADATA:
        topics = {}
        for _ in range(F.read_compact_array_length(r)):
            topic_id = uuid.UUID(bytes=F.read_uuid(r))
            name = r.compact_string()
            count = r.i32()
            for _ in range(F.read_compact_array_length(r)):   # racks per partition: not used
                r.i32()
                for _ in range(F.read_compact_array_length(r)):
                    r.compact_string()
                F.skip_tagged_fields(r)
            F.skip_tagged_fields(r)
            topics[name] = TopicMetadata(topic_id, name, count)
        return topics
    if record_type == MEMBER_METADATA:
        instance = F.read_compact_nullable_string(r)
        rack = F.read_compact_nullable_string(r)
        client_id = r.compact_string()
        host = r.compact_string()
        names = tuple(r.compact_string() for _ in range(F.read_compact_array_length(r)))
        regex = F.read_compact_nullable_string(r)
        rebalance = r.i32()
        assignor = F.read_compact_nullable_string(r)
        tagged = F.skip_tagged_fields(r)
        classic = _read_classic(RecordReader(tagged[0], where)) if 0 in tagged else None
        return MemberMetadata(instance, rack, client_id, host, names, regex, rebalance, assignor, classic)
    if record_type == TARGET_ASSIGNMENT_MEMBER:
        return _read_assignment(r)
    if record_type == CURRENT_MEMBER_ASSIGNMENT:
        epoch, previous, state = r.i32(), r.i32(), r.i8()
        return CurrentAssignment(epoch, previous, state, _read_assignment(r), _read_assignment(r))
    if record_type == REGULAR_EXPRESSION:
        topics = frozenset(r.compact_string() for _ in range(F.read_compact_array_length(r)))
        return ResolvedRegex(topics, r.i64(), r.i64())
    raise ValueError(f"record type {record_type} is not a consumer-group record")


def encode_value(record_type: int, value) -> bytes | None:
    """The bytes of `value` for a record of `record_type` (None: a tombstone)."""
    if value is None:
        return None
    if record_type == GROUP_METADATA:
        return group_epoch_value(value)
    if record_type == PARTITION_METADATA:
        return partition_metadata_value(value)
    if record_type == MEMBER_METADATA:
        return member_metadata_value(value)
    if record_type == TARGET_ASSIGNMENT_METADATA:
        return assignment_epoch_value(value)
    if record_type == TARGET_ASSIGNMENT_MEMBER:
        return target_member_value(value)
    if record_type == CURRENT_MEMBER_ASSIGNMENT:
        return current_assignment_value(value)
    if record_type == REGULAR_EXPRESSION:
        return resolved_regex_value(value)
    raise ValueError(f"record type {record_type} is not a consumer-group record")
