"""The consumer protocol embedded in the classic group protocol (protocol type "consumer"): a
member's subscription (JoinGroup's protocol metadata) and its assignment (SyncGroup's bytes),
as Kafka's ConsumerProtocol lays them out: an int16 version, then non-flexible fields.

  Subscription v0: topics [string], user data (bytes); v1: + owned partitions [topic, [int32]];
               v2: + generation id (int32); v3: + rack id (nullable string)
  Assignment   v0..v3: partitions [topic, [int32]], user data (bytes)

A version above the newest known is read as the newest (its extra fields ignored), as Kafka's
consumer does. The coordinator reads these for a classic member of a consumer group (KIP-848's
online migration) and writes that member's assignment.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from logcore.coordinator import record_fields as F
from logcore.coordinator.record_fields import I16, I32, RecordReader
from logcore.errors import SegLogError

# topic name -> partitions
TopicPartitions = dict[str, tuple[int, ...]]


class MalformedConsumerProtocol(SegLogError):
    pass


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned: TopicPartitions | None = None        # v1+
    generation_id: int = -1                     # v2+
    rack_id: str | None = None                  # v3+


def parse_subscription(data: bytes) -> Subscription:
    r = RecordReader(data, "consumer protocol subscription")
    try:
        version = r.i16()
        if version < 0:
            raise MalformedConsumerProtocol(f"subscription version {version}")
        topics = tuple(r.string() for _ in range(_count(r)))
        user_data = r.bytes_()
        owned, generation, rack = None, -1, None
        if version >= 1:
            owned = _partitions(r)
        if version >= 2:
            generation = r.i32()
        if version >= 3:
            rack = r.nullable_string()
        return Subscription(version, topics, user_data, owned, generation, rack)
    except (SegLogError, struct.error, UnicodeDecodeError) as exc:
        raise MalformedConsumerProtocol(str(exc)) from None


def parse_assignment(data: bytes) -> TopicPartitions:
    """The partitions of an assignment (empty bytes: none, as a member not yet synced has)."""
    if not data:
        return {}
    r = RecordReader(data, "consumer protocol assignment")
    try:
        r.i16()
        return _partitions(r)
    except (SegLogError, struct.error, UnicodeDecodeError) as exc:
        raise MalformedConsumerProtocol(str(exc)) from None


def assignment_bytes(partitions: TopicPartitions, version: int) -> bytes:
    """An assignment with no user data, in `version` (capped at the newest, 3)."""
    items = [F.string(t) + I32.pack(len(ps)) + b"".join(I32.pack(p) for p in sorted(ps))
             for t, ps in sorted(partitions.items()) if ps]
    return I16.pack(min(max(version, 0), 3)) + I32.pack(len(items)) + b"".join(items) + F.bytes_(None)


def _count(r: RecordReader) -> int:
    n = r.i32()
    if n < 0:
        return 0
    if n > len(r.data):
        raise MalformedConsumerProtocol(f"array of {n} items in {len(r.data)} bytes")
    return n


def _partitions(r: RecordReader) -> TopicPartitions:
    out: TopicPartitions = {}
    for _ in range(_count(r)):
        topic = r.string()
        out[topic] = tuple(r.i32() for _ in range(_count(r)))
    return out
