"""Fetch responses encoded as pieces: encoded fields, and the records of local segments as open
file ranges that the server sends with sendfile (zero-copy).

kio encodes a whole response into one buffer, which would copy every fetched byte twice (into the
buffer, then into the transport's). This encoder writes the fields of Fetch v4..v16 by hand and
leaves each partition's records, after their length prefix, as a separate piece: a FileSlice
(sent with sendfile), or bytes (remote-tier or object-store data, small local reads). The byte
layout is Kafka's FetchResponse schema, the same that kio writes (tests compare the two); the
tagged fields are written when set (v12+: a follower's diverging epoch, the current leader
after NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH); the snapshot id and node endpoints are
never set and left out, as kio leaves out a tagged field at its default.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from logcore.log.file_slice import FileSlice
from logcore.wire.primitives import array_length, uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_PRODUCER = struct.Struct(">qq")
_HEAD_V7 = struct.Struct(">ihi")         # throttle_time, error_code, session_id
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
_PARTITION_V4 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
FLEXIBLE_FROM = 12
TOPIC_ID_FROM = 13
INLINE_MAX = 64 * 1024        # bytes records up to this size are copied into the field buffer

Piece = bytes | FileSlice


@dataclass
class EncodedResponse:
    """A whole response frame (size prefix included) as pieces to send in order."""
    pieces: list[Piece]

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.pieces)

    def slices(self) -> list[FileSlice]:
        return [p for p in self.pieces if isinstance(p, FileSlice)]

    def close(self) -> None:
        for piece in self.slices():
            piece.close()

    def to_bytes(self) -> bytes:
        """The frame as one buffer (copies the slices: for tests and transports without sendfile)."""
        return b"".join(p.read() if isinstance(p, FileSlice) else p for p in self.pieces)


def encode_fetch_response(correlation_id: int, version: int, body: dict) -> EncodedResponse:
    """Encode `body` (the Fetch handler's dict: Kafka field names) as Fetch response `version`."""
    if not 4 <= version <= 16:
        raise ValueError(f"Fetch response version {version} is not encoded here (4..16)")
    flexible = version >= FLEXIBLE_FROM
    pieces: list[Piece] = []
    out = bytearray(b"\0\0\0\0")                         # size prefix, filled in at the end
    out += _I32.pack(correlation_id)
    if flexible:
        out.append(0)                                   # response header tagged fields
    throttle = int(body.get("throttle_time", 0))
    if version >= 7:
        out += _HEAD_V7.pack(throttle, int(body.get("error_code", 0)), int(body.get("session_id", 0)))
    else:
        out += _I32.pack(throttle)
    topics = body.get("responses", [])
    array_length(out, len(topics), flexible)
    for topic in topics:
        if version >= TOPIC_ID_FROM:
            tid = topic["topic_id"]
            out += tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid)
        else:
            name = topic["topic"].encode()
            if flexible:
                uvarint(out, len(name) + 1)
            else:
                out += _I16.pack(len(name))
            out += name
        partitions = topic["partitions"]
        array_length(out, len(partitions), flexible)
        for p in partitions:
            if version >= 5:
                out += _PARTITION_V5.pack(p["partition_index"], int(p["error_code"]), p["high_watermark"],
                                          p["last_stable_offset"], p["log_start_offset"])
            else:
                out += _PARTITION_V4.pack(p["partition_index"], int(p["error_code"]), p["high_watermark"],
                                          p["last_stable_offset"])
            aborted = p.get("aborted_transactions")
            array_length(out, None if aborted is None else len(aborted), flexible)
            for a in aborted or ():
                out += _PRODUCER.pack(a["producer_id"], a["first_offset"])
                if flexible:
                    out.append(0)
            if version >= 11:
                out += _I32.pack(p.get("preferred_read_replica", -1))
            records = p.get("records")
            if records is None:
                array_length(out, None, flexible)
            else:
                array_length(out, len(records), flexible)
                if isinstance(records, FileSlice) or len(records) > INLINE_MAX:
                    pieces.append(bytes(out))
                    pieces.append(records)
                    out = bytearray()
                else:
                    out += records
            if flexible:
                _partition_tags(out, p)
        if flexible:
            out.append(0)                               # topic tagged fields
    if flexible:
        out.append(0)                                   # response tagged fields
    pieces.append(bytes(out))
    total = sum(len(p) for p in pieces)
    first = pieces[0]
    pieces[0] = _I32.pack(total - 4) + first[4:]
    return EncodedResponse(pieces)


_DIVERGING = struct.Struct(">iqB")      # epoch, end_offset, no tagged fields
_LEADER = struct.Struct(">iiB")         # leader_id, leader_epoch, no tagged fields


def _partition_tags(out: bytearray, p: dict) -> None:
    """A partition's tagged fields: 0 diverging_epoch, 1 current_leader, when given."""
    tags = []
    diverging = p.get("diverging_epoch")
    if diverging is not None:
        tags.append((0, _DIVERGING.pack(diverging["epoch"], diverging["end_offset"], 0)))
    leader = p.get("current_leader")
    if leader is not None:
        tags.append((1, _LEADER.pack(leader["leader_id"], leader["leader_epoch"], 0)))
    uvarint(out, len(tags))
    for tag, data in tags:
        uvarint(out, tag)
        uvarint(out, len(data))
        out += data
