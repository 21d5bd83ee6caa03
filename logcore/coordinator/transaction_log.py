"""The records of the internal `__transaction_state` topic, in Kafka's own binary layout.

One record per transactional id and state change, in the compacted topic (the last one wins):
- key: int16 version (0) | string transactional id (TransactionLogKey v0);
- value: int16 version, then TransactionLogValue: int64 producer id | int16 producer epoch |
  int32 transaction timeout ms | int8 status | nullable array of (string topic, array of int32
  partition) | int64 last update timestamp | int64 start timestamp. Version 0 is written (what
  Kafka writes for clients of transaction version 0/1); version 1 (flexible: compact strings and
  arrays, tagged fields for the previous/next producer id, the next epoch and the client's
  transaction version) is read too.
- a null value (tombstone) removes an expired transactional id.
A transactional id lives in partition abs(java hashCode(id)) % partitions, as in Kafka, so a
root written by this broker reads the same way in Kafka's tools (kafka-dump-log
--transaction-log-decoder).
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from logcore.coordinator import record_fields as F
from logcore.coordinator.record_fields import I8, I16, I32, I64, RecordReader
from logcore.errors import CorruptRecordError

TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
TOPIC_CONFIG = {"cleanup.policy": "compact"}     # with segment.bytes and min.insync.replicas from the settings

partition_for = F.partition_for      # the partition a transactional id lives in, as Kafka chooses


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids, as written in the status byte."""
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's DescribeTransactions / ListTransactions use."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> "TxnState | None":
        return _BY_NAME.get(name)


_NAMES = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
          TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
          TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
          TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_BY_NAME = {name: state for state, name in _NAMES.items()}


@dataclass(frozen=True)
class TxnRecord:
    """One TransactionLogValue."""
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()   # (topic, partition ids), sorted
    last_update_ms: int = -1
    start_ms: int = -1
    # version 1's tagged fields (read; written as their defaults are not in version 0)
    previous_producer_id: int = -1
    next_producer_id: int = -1
    next_producer_epoch: int = -1
    client_transaction_version: int = 0

    def partition_set(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.partitions for p in ps}


def group_partitions(parts) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(topic, partition) pairs as the record's sorted (topic, partition ids) tuples."""
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))


# ------------------------------------------------------------------------------ writing

def encode_key(transactional_id: str) -> bytes:
    return I16.pack(KEY_VERSION) + F.string(transactional_id)


def encode_value(r: TxnRecord) -> bytes:
    out = [I16.pack(VALUE_VERSION), I64.pack(r.producer_id), I16.pack(r.producer_epoch),
           I32.pack(r.timeout_ms), I8.pack(int(r.state)), I32.pack(len(r.partitions))]
    for topic, ids in r.partitions:
        out.append(F.string(topic))
        out.append(I32.pack(len(ids)))
        out.extend(I32.pack(p) for p in ids)
    out += [I64.pack(r.last_update_ms), I64.pack(r.start_ms)]
    return b"".join(out)


# ------------------------------------------------------------------------------ reading

def parse_key(key: bytes, where: str = "__transaction_state record") -> str | None:
    """The transactional id of a record's key; None for a key version this broker does not know."""
    r = RecordReader(key, where)
    if r.i16() != KEY_VERSION:
        return None
    return r.string()


def parse_value(value: bytes, where: str = "__transaction_state record") -> TxnRecord:
    r = RecordReader(value, where)
    version = r.i16()
    if version not in (0, 1):
        raise CorruptRecordError(f"{where}: unknown TransactionLogValue version {version}")
    flexible = version >= 1
    pid, epoch, timeout, status = r.i64(), r.i16(), r.i32(), r.i8()
    try:
        state = TxnState(status)
    except ValueError:
        raise CorruptRecordError(f"{where}: unknown transaction status {status}") from None
    count = r.uvarint() - 1 if flexible else r.i32()
    partitions = []
    for _ in range(max(count, 0)):
        topic = r.compact_string() if flexible else r.string()
        n = r.uvarint() - 1 if flexible else r.i32()
        ids = tuple(r.i32() for _ in range(max(n, 0)))
        if flexible:
            _skip_tags(r)
        partitions.append((topic, ids))
    last_update, start = r.i64(), r.i64()
    tags = {}
    if flexible:
        tags = _read_tags(r)
    return TxnRecord(pid, epoch, timeout, state, tuple(partitions), last_update, start,
                     previous_producer_id=_tag_i64(tags, 0, -1), next_producer_id=_tag_i64(tags, 1, -1),
                     next_producer_epoch=_tag_int(tags, 3, ">h", -1),
                     client_transaction_version=_tag_int(tags, 2, ">h", 0))


def _read_tags(r: RecordReader) -> dict[int, bytes]:
    tags = {}
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        tags[tag] = r.take(r.uvarint())
    return tags


def _skip_tags(r: RecordReader) -> None:
    _read_tags(r)


def _tag_i64(tags: dict[int, bytes], tag: int, default: int) -> int:
    return _tag_int(tags, tag, ">q", default)


def _tag_int(tags: dict[int, bytes], tag: int, fmt: str, default: int) -> int:
    raw = tags.get(tag)
    if raw is None or len(raw) != struct.calcsize(fmt):
        return default
    return struct.unpack(fmt, raw)[0]


@dataclass
class TxnRecords:
    """What a partition of the topic holds: the last record of each transactional id."""
    latest: dict[str, TxnRecord] = field(default_factory=dict)

    def apply(self, key: bytes | None, value: bytes | None, where: str) -> None:
        if key is None:
            return
        tid = parse_key(key, where)
        if tid is None:
            return
        if value is None:
            self.latest.pop(tid, None)
        else:
            self.latest[tid] = parse_value(value, where)
