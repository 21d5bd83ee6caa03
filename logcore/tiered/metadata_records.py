"""The records of Kafka's `__remote_log_metadata` topic, in Kafka's layout (RemoteLogMetadataSerde),
and which partition of that topic holds a user partition's (RemoteLogMetadataTopicPartitioner).

A record value is the metadata-record frame: unsigned varints frame version (1), api key and
version (0), then the message in Kafka's flexible encoding (compact strings and arrays, 16-byte
uuids, nullable compact bytes, an empty tagged-field section after every struct). The key is null.

| api key | message | carries |
|---|---|---|
| 0 | RemoteLogSegmentMetadataRecord | a new copy attempt: offsets, epochs, size, state |
| 1 | RemoteLogSegmentMetadataUpdateRecord | a state change (custom metadata with the finish) |
| 2 | RemotePartitionDeleteMetadataRecord | a partition's remote data being deleted |
| 3 | RemoteLogSegmentMetadataSnapshotRecord | one segment as a snapshot lists it |
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from logcore.errors import CorruptIndexError, RemoteStorageError
from logcore.records.partitioner import murmur2
from logcore.tiered.metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata,
                                     RemoteLogSegmentState, RemotePartitionDeleteState,
                                     TopicIdPartition)

TOPIC = "__remote_log_metadata"
FRAME_VERSION = 1
SEGMENT_METADATA, SEGMENT_UPDATE, PARTITION_DELETE, SEGMENT_SNAPSHOT = 0, 1, 2, 3
_I8, _I32, _I64 = struct.Struct(">b"), struct.Struct(">i"), struct.Struct(">q")


def metadata_partition(tip: TopicIdPartition, partitions: int) -> int:
    """The partition of `__remote_log_metadata` that holds `tip`'s records: murmur2 of Java's
    Objects.hash(topic id's low bits, high bits, partition) as 4 big-endian bytes, made positive,
    mod the partition count (Kafka's RemoteLogMetadataTopicPartitioner)."""
    value = tip.topic_id.int
    h = 1
    for long in (value & (2**64 - 1), value >> 64):
        h = (31 * h + ((long ^ (long >> 32)) & 0xFFFFFFFF)) & 0xFFFFFFFF      # Long.hashCode
    h = (31 * h + tip.partition) & 0xFFFFFFFF
    return (murmur2(h.to_bytes(4, "big")) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class SegmentUpdate:
    """RemoteLogSegmentMetadataUpdateRecord: a segment's new state."""
    segment_id: RemoteLogSegmentId
    state: RemoteLogSegmentState
    broker_id: int
    event_timestamp_ms: int
    custom_metadata: bytes | None


@dataclass(frozen=True)
class PartitionDelete:
    """RemotePartitionDeleteMetadataRecord (Kafka's DELETE_PARTITION_MARKED/STARTED/FINISHED)."""
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    broker_id: int
    event_timestamp_ms: int


# -- the flexible encoding ---------------------------------------------------------------------

class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)

    def fixed(self, fmt: struct.Struct, v: int) -> None:
        self.out += fmt.pack(v)

    def string(self, s: str) -> None:
        raw = s.encode()
        self.uvarint(len(raw) + 1)
        self.out += raw

    def uuid(self, u: uuid.UUID) -> None:
        self.out += u.bytes

    def nullable_bytes(self, b: bytes | None) -> None:
        if b is None:
            self.uvarint(0)
        else:
            self.uvarint(len(b) + 1)
            self.out += b

    def end_struct(self) -> None:
        self.uvarint(0)           # no tagged fields


class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise ValueError(f"truncated at byte {self.pos} (needs {n} more)")
        piece = self.data[self.pos:self.pos + n]
        self.pos += n
        return piece

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("varint longer than 5 bytes")

    def fixed(self, fmt: struct.Struct) -> int:
        return fmt.unpack(self._take(fmt.size))[0]

    def string(self) -> str:
        n = self.uvarint()
        if n == 0:
            raise ValueError("null string where a string is required")
        return bytes(self._take(n - 1)).decode()

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def nullable_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else bytes(self._take(n - 1))

    def end_struct(self) -> None:
        for _ in range(self.uvarint()):        # tagged fields: none are known, skip them
            self.uvarint()
            self._take(self.uvarint())


def _write_tip(w: _Writer, tip: TopicIdPartition) -> None:
    w.string(tip.topic)
    w.uuid(tip.topic_id)
    w.fixed(_I32, tip.partition)
    w.end_struct()


def _read_tip(r: _Reader) -> TopicIdPartition:
    topic, topic_id, partition = r.string(), r.uuid(), r.fixed(_I32)
    r.end_struct()
    return TopicIdPartition(topic_id, topic, partition)


def _write_segment_id(w: _Writer, sid: RemoteLogSegmentId) -> None:
    _write_tip(w, sid.topic_id_partition)
    w.uuid(sid.id)
    w.end_struct()


def _read_segment_id(r: _Reader) -> RemoteLogSegmentId:
    tip = _read_tip(r)
    sid = RemoteLogSegmentId(tip, r.uuid())
    r.end_struct()
    return sid


def _write_epochs(w: _Writer, epochs: dict[int, int]) -> None:
    w.uvarint(len(epochs) + 1)
    for epoch, offset in sorted(epochs.items()):
        w.fixed(_I32, epoch)
        w.fixed(_I64, offset)
        w.end_struct()


def _read_epochs(r: _Reader) -> dict[int, int]:
    n = r.uvarint()
    epochs = {}
    for _ in range(max(0, n - 1)):
        epoch, offset = r.fixed(_I32), r.fixed(_I64)
        r.end_struct()
        epochs[epoch] = offset
    return epochs


def _frame(api_key: int) -> _Writer:
    w = _Writer()
    w.uvarint(FRAME_VERSION)
    w.uvarint(api_key)
    w.uvarint(0)
    return w


def _framed(w: _Writer) -> bytes:
    """The record's bytes once its fields are written (the struct's tagged fields end it)."""
    w.end_struct()
    return bytes(w.out)


def _write_segment_fields(w: _Writer, meta: RemoteLogSegmentMetadata) -> None:
    """A segment's fields after its id, as the metadata and snapshot records both have them."""
    w.fixed(_I64, meta.start_offset)
    w.fixed(_I64, meta.end_offset)
    w.fixed(_I32, meta.broker_id)
    w.fixed(_I64, meta.max_timestamp_ms)
    w.fixed(_I64, meta.event_timestamp_ms)
    _write_epochs(w, meta.segment_leader_epochs)
    w.fixed(_I32, meta.segment_size_in_bytes)
    _write_custom_and_state(w, meta)


def _write_custom_and_state(w: _Writer, meta: RemoteLogSegmentMetadata) -> None:
    w.nullable_bytes(meta.custom_metadata)
    w.fixed(_I8, int(meta.state))


# -- records -----------------------------------------------------------------------------------

def encode_segment_metadata(meta: RemoteLogSegmentMetadata) -> bytes:
    """RemoteLogSegmentMetadataRecord (api key 0): a copy attempt as Kafka's RLM adds it."""
    w = _frame(SEGMENT_METADATA)
    _write_segment_id(w, meta.segment_id)
    _write_segment_fields(w, meta)
    return _framed(w)


def encode_segment_update(meta: RemoteLogSegmentMetadata) -> bytes:
    """RemoteLogSegmentMetadataUpdateRecord (api key 1): `meta`'s state, broker and event time."""
    w = _frame(SEGMENT_UPDATE)
    _write_segment_id(w, meta.segment_id)
    w.fixed(_I32, meta.broker_id)
    w.fixed(_I64, meta.event_timestamp_ms)
    _write_custom_and_state(w, meta)
    return _framed(w)


def encode_partition_delete(event: PartitionDelete) -> bytes:
    """RemotePartitionDeleteMetadataRecord (api key 2): a step of a partition's remote deletion."""
    w = _frame(PARTITION_DELETE)
    _write_tip(w, event.topic_id_partition)
    w.fixed(_I32, event.broker_id)
    w.fixed(_I64, event.event_timestamp_ms)
    w.fixed(_I8, event.state)
    return _framed(w)


def encode_segment_snapshot(meta: RemoteLogSegmentMetadata) -> bytes:
    """RemoteLogSegmentMetadataSnapshotRecord (api key 3): one segment, without its partition."""
    w = _frame(SEGMENT_SNAPSHOT)
    w.uuid(meta.segment_id.id)
    _write_segment_fields(w, meta)
    return _framed(w)


def decode(value: bytes, *, source: str = TOPIC, tip: TopicIdPartition | None = None
           ) -> RemoteLogSegmentMetadata | SegmentUpdate | PartitionDelete:
    """One record value; a snapshot record needs the partition it belongs to (`tip`).
    CorruptIndexError names `source` for anything else than these four messages."""
    try:
        r = _Reader(value)
        frame = r.uvarint()
        if frame != FRAME_VERSION:
            raise ValueError(f"frame version {frame} (only {FRAME_VERSION} exists)")
        api_key, version = r.uvarint(), r.uvarint()
        if version != 0:
            raise ValueError(f"version {version} of record type {api_key} (only 0 exists)")
        if api_key == SEGMENT_METADATA:
            sid = _read_segment_id(r)
            start, end, broker, max_ts, event_ts = (r.fixed(_I64), r.fixed(_I64), r.fixed(_I32),
                                                    r.fixed(_I64), r.fixed(_I64))
            epochs, size, custom, state = _read_epochs(r), r.fixed(_I32), r.nullable_bytes(), r.fixed(_I8)
            result = RemoteLogSegmentMetadata(sid, start, end, max_ts, epochs, size, RemoteLogSegmentState(state),
                                              custom, broker, event_ts)
        elif api_key == SEGMENT_UPDATE:
            sid = _read_segment_id(r)
            broker, event_ts, custom, state = r.fixed(_I32), r.fixed(_I64), r.nullable_bytes(), r.fixed(_I8)
            result = SegmentUpdate(sid, RemoteLogSegmentState(state), broker, event_ts, custom)
        elif api_key == PARTITION_DELETE:
            tip_ = _read_tip(r)
            broker, event_ts, state = r.fixed(_I32), r.fixed(_I64), r.fixed(_I8)
            result = PartitionDelete(tip_, RemotePartitionDeleteState(state), broker, event_ts)
        elif api_key == SEGMENT_SNAPSHOT:
            if tip is None:
                raise ValueError("a snapshot record read without its partition")
            seg = r.uuid()
            start, end, broker, max_ts, event_ts = (r.fixed(_I64), r.fixed(_I64), r.fixed(_I32),
                                                    r.fixed(_I64), r.fixed(_I64))
            epochs, size, custom, state = _read_epochs(r), r.fixed(_I32), r.nullable_bytes(), r.fixed(_I8)
            result = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, seg), start, end, max_ts, epochs, size,
                                              RemoteLogSegmentState(state), custom, broker, event_ts)
        else:
            raise ValueError(f"unknown record type {api_key}")
        r.end_struct()
        if r.pos != len(value):
            raise ValueError(f"{len(value) - r.pos} bytes after the record")
        return result
    except (ValueError, UnicodeDecodeError, struct.error, RemoteStorageError) as exc:
        raise CorruptIndexError(f"unreadable remote log metadata record: {exc}", file=source) from None
