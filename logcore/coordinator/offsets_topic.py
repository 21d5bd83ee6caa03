"""The records of the internal `__consumer_offsets` topic, in Kafka's own binary layout.

Two kinds of records share the compacted topic, told apart by the key's version:
- an offset commit: key v1 (group, topic, partition) -> value v3 (offset, leader epoch,
  metadata, commit timestamp); a null value (tombstone) forgets the offset;
- group metadata: key v2 (group) -> value v3 (protocol type, generation, protocol, leader,
  state timestamp, members).
A group lives in partition abs(java hashCode(group id)) % offsets.topic.num.partitions, as in
Kafka, so a root written by this broker reads the same way in Kafka's tools.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from logcore.errors import CorruptRecordError

TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
TOPIC_CONFIG = {"cleanup.policy": "compact"}     # segment.bytes: offsets.topic.segment.bytes

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's choice: Utils.abs(groupId.hashCode()) % partitions (Java String.hashCode)."""
    h = 0
    for unit in _utf16_units(group_id):
        h = (31 * h + unit) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _utf16_units(text: str):
    data = text.encode("utf-16-be")
    return struct.unpack(f">{len(data) // 2}H", data)


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

def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    data = value.encode()
    return _I16.pack(len(data)) + data


def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return _I32.pack(-1)
    return _I32.pack(len(value)) + bytes(value)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_KEY_VERSION) + _string(group) + _string(topic) + _I32.pack(partition)


def offset_value(c: CommittedOffset) -> bytes:
    return (_I16.pack(OFFSET_VALUE_VERSION) + _I64.pack(c.offset) + _I32.pack(c.leader_epoch)
            + _string(c.metadata) + _I64.pack(c.commit_timestamp))


def group_key(group: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + _string(group)


def group_value(g: GroupRecord) -> bytes:
    out = [_I16.pack(GROUP_VALUE_VERSION), _string(g.protocol_type), _I32.pack(g.generation),
           _string(g.protocol), _string(g.leader), _I64.pack(g.state_timestamp), _I32.pack(len(g.members))]
    for m in g.members:
        out += [_string(m.member_id), _string(m.group_instance_id), _string(m.client_id),
                _string(m.client_host), _I32.pack(m.rebalance_timeout_ms), _I32.pack(m.session_timeout_ms),
                _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(out)


# ------------------------------------------------------------------------------ reading

class _Reader:
    def __init__(self, data: bytes, where: str):
        self.data = data
        self.pos = 0
        self.where = where

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.where}: record of {len(self.data)} bytes ends at byte"
                                     f" {self.pos} where {n} more were expected")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode(errors="replace")

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else bytes(self._take(n))


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


def parse_key(key: bytes, where: str) -> OffsetKey | GroupKey | None:
    """The key of a record of the topic; None for a key version this broker does not know."""
    r = _Reader(key, where)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.string() or "")
    return None


def parse_offset_value(value: bytes, where: str) -> CommittedOffset:
    r = _Reader(value, where)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    timestamp = r.i64()
    return CommittedOffset(offset, epoch, metadata, timestamp)


def parse_group_value(value: bytes, where: str) -> GroupRecord:
    r = _Reader(value, where)
    version = r.i16()
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id = r.string() or ""
        host = r.string() or ""
        rebalance = r.i32() if version >= 1 else 0
        session = r.i32()
        members.append(MemberRecord(member_id, instance, client_id, host, rebalance, session,
                                    r.bytes_() or b"", r.bytes_() or b""))
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, members)
