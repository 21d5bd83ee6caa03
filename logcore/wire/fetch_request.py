"""Fetch requests encoded by hand (v4..v12, the versions that name topics).

A follower sends one Fetch per round to each leader it follows, naming every partition it
follows there (full fetch requests: no KIP-227 sessions). Built through kio (a dict turned into a
dataclass tree, then written field by field) a request cost about 6.6 us per partition: 6.6 ms
per round for a follower of 1,000 partitions. Packed directly it costs about 0.45 us per
partition (measured: 6 partitions 7 us against 62; 1,000 partitions 0.44 ms against 6.6). The
byte layout is Kafka's FetchRequest schema, the same that kio writes
(tests compare the two for every version here); fields the body leaves out take the schema's
defaults, as `protocol.build` gives them.
"""
from __future__ import annotations

import datetime
import struct

from logcore.wire.api_keys import FETCH
from logcore.wire.primitives import array_length, uvarint, write_string

FIRST_VERSION, LAST_VERSION = 4, 12     # v13+ name topics by id
FLEXIBLE_FROM = 12
_HEADER = struct.Struct(">hhi")          # api_key, api_version, correlation_id
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_HEAD_V4 = struct.Struct(">iiiib")       # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
_SESSION = struct.Struct(">ii")          # session_id, session_epoch (v7+)
_MAX_BYTES_DEFAULT = 0x7FFFFFFF


def _ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


def encode_fetch_request(correlation_id: int, client_id: str | None, version: int, body: dict) -> bytes:
    """The whole frame (size prefix included) of Fetch request `version` for a dict of Kafka's
    field names (replica_id, max_wait, min_bytes, ..., topics / topic, partitions / partition,
    fetch_offset, ...). max_wait is a timedelta or milliseconds. Raises ValueError for a version
    outside 4..12, KeyError for a missing field that has no default, struct.error for a value
    out of its field's range."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"Fetch request version {version} is not encoded here"
                         f" ({FIRST_VERSION}..{LAST_VERSION})")
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(b"\0\0\0\0")                          # size prefix, filled in at the end
    out += _HEADER.pack(FETCH, version, correlation_id)
    client = None if client_id is None else client_id.encode()
    out += _I16.pack(-1 if client is None else len(client))  # header v1/v2: never compact
    if client:
        out += client
    if flexible:
        out.append(0)                                       # request header tagged fields
    out += _HEAD_V4.pack(body.get("replica_id", -1), _ms(body["max_wait"]), body["min_bytes"],
                         body.get("max_bytes", _MAX_BYTES_DEFAULT), body.get("isolation_level", 0))
    if version >= 7:
        out += _SESSION.pack(body.get("session_id", 0), body.get("session_epoch", -1))
    # Per partition: partition, [current_leader_epoch v9+], fetch_offset, [last_fetched_epoch
    # v12+], [log_start_offset v5+], partition_max_bytes.
    fmt = struct.Struct(">i" + ("i" if version >= 9 else "") + "q" + ("i" if version >= 12 else "")
                        + ("q" if version >= 5 else "") + "i")
    topics = body["topics"]
    array_length(out, len(topics), flexible)
    for topic in topics:
        write_string(out, topic["topic"], flexible)
        partitions = topic["partitions"]
        array_length(out, len(partitions), flexible)
        for p in partitions:
            fields = [p["partition"]]
            if version >= 9:
                fields.append(p.get("current_leader_epoch", -1))
            fields.append(p["fetch_offset"])
            if version >= 12:
                fields.append(p.get("last_fetched_epoch", -1))
            if version >= 5:
                fields.append(p.get("log_start_offset", -1))
            fields.append(p["partition_max_bytes"])
            out += fmt.pack(*fields)
            if flexible:
                out.append(0)                               # partition tagged fields
        if flexible:
            out.append(0)                                   # topic tagged fields
    if version >= 7:
        forgotten = body.get("forgotten_topics_data") or ()
        array_length(out, len(forgotten), flexible)
        for topic in forgotten:
            write_string(out, topic["topic"], flexible)
            indexes = topic.get("partitions") or ()
            array_length(out, len(indexes), flexible)
            for index in indexes:
                out += _I32.pack(index)
            if flexible:
                out.append(0)
    if version >= 11:
        write_string(out, body.get("rack_id", ""), flexible)
    if flexible:
        cluster_id = body.get("cluster_id")
        if cluster_id is None:                              # a tagged field at its default: absent
            out.append(0)
        else:
            value = bytearray()
            write_string(value, cluster_id, True)
            out += b"\x01\x00"                              # one tagged field, tag 0
            uvarint(out, len(value))
            out += value
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
