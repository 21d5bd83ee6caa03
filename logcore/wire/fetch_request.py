"""Fetch requests encoded by hand (v4..v12, the versions that name topics), and decoded in C
(v4..v16).

Decoding: on three brokers the leader reads four or more Fetch requests per record (each
follower's, the consumers'). Through kio's reader parse_request took 3.3 us for a follower's
two-partition v12 request and 4.5 us for a consumer's four-partition v16 one, most of it
building the dataclass tree; `decode_fetch_request` (logcore/records/fetchwire.c) builds the same
kio dataclasses of the version read, so every handler sees the same request (parse_request
2.0-2.2 us, the decoder 0.6-1.1 us of it). Tests compare the two on generated, mutated and
truncated requests of every version here. Where kio departs from Kafka's parser, the decoder
follows Kafka: a null array is refused (kio reads None), a null cluster id is read (kio refuses
it), an unknown tagged field is skipped (kio refuses it), and an array longer than the frame is
refused before anything is allocated for it.

Encoding:

A follower sends one Fetch per round to each leader it follows, naming every partition it
follows there (full fetch requests: no KIP-227 sessions). Built through kio (a dict turned into a
dataclass tree, then written field by field) a request cost about 6.6 us per partition: 6.6 ms
per round for a follower of 1,000 partitions. Packed directly it costs about 0.45 us per
partition (measured: 6 partitions 7 us against 62; 1,000 partitions 0.44 ms against 6.6). The
byte layout is Kafka's FetchRequest schema, the same that kio writes
(tests compare the two for every version here); fields the body leaves out take the schema's
defaults, as `protocol.build` gives them. A follower's rounds go further (FetchRequestTemplate):
the request is encoded once for its partitions and only the fields that change are patched
(two partitions: 1.2 us a round against 10 us encoded afresh from a dict).
"""
from __future__ import annotations

import datetime
import struct
import sys
import uuid
from functools import cache

from kio.index import load_request_schema

from logcore.records import wire_codec
from logcore.wire.api_keys import FETCH
from logcore.wire.primitives import array_length, uvarint, write_string

FIRST_VERSION, LAST_VERSION = 4, 12     # encoded here; v13+ name topics by id
DECODED_FIRST, DECODED_LAST = 4, 16     # decoded in C
FLEXIBLE_FROM = 12
_HEADER = struct.Struct(">hhi")          # api_key, api_version, correlation_id
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_CORRELATION = _I32                      # at byte 8: size, api_key, api_version, correlation_id
_PATCHED = struct.Struct(">iqiqi")       # v12 partition after its index: what a template patches
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
    return bytes(_encode(correlation_id, client_id, version, body)[0])


@cache
def _classes(version: int) -> tuple:
    """The kio classes of Fetch request `version`, as the C decoder takes them."""
    request = load_request_schema(FETCH, version)
    module = sys.modules[request.__module__]                # loaded with the request class
    return (request, module.FetchTopic, module.FetchPartition, getattr(module, "ForgottenTopic", None),
            getattr(module, "ReplicaState", None), uuid.UUID, uuid.SafeUUID.unknown)


def decode_fetch_request(frame, version: int):
    """(correlation_id, client_id, body) of a Fetch request frame (size prefix removed) of
    version DECODED_FIRST..DECODED_LAST: body is kio's FetchRequest of that version, equal to
    what kio's reader gives. Raises ValueError naming the byte position on a malformed frame;
    trailing bytes are ignored, as Kafka's parser and parse_request ignore them."""
    return wire_codec.decode_fetch_request(frame, version, _classes(version))


def _partition_format(version: int) -> struct.Struct:
    """A partition's fixed fields: partition, [current_leader_epoch v9+], fetch_offset,
    [last_fetched_epoch v12+], [log_start_offset v5+], partition_max_bytes."""
    return struct.Struct(">i" + ("i" if version >= 9 else "") + "q" + ("i" if version >= 12 else "")
                         + ("q" if version >= 5 else "") + "i")


def _encode(correlation_id: int, client_id: str | None, version: int, body: dict) -> tuple[bytearray, list[int], int]:
    """The frame, where each partition's fixed fields start in it (in request order) and where
    the session id and epoch are (v7+)."""
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
    session_at = len(out)
    if version >= 7:
        out += _SESSION.pack(body.get("session_id", 0), body.get("session_epoch", -1))
    fmt = _partition_format(version)
    positions = []
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
            positions.append(len(out))
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
    return out, positions, session_at


class FetchRequestTemplate:
    """A follower's Fetch request, encoded once for its leader's partitions and patched each
    round: only the correlation id and each partition's fields (leader epoch, fetch offset,
    last fetched epoch, log start offset, max bytes) change from round to round, while the
    partitions and the request's own fields stay as long as the follower's set of partitions
    (in a fetch session, as long as the set of partitions a round names: `set_session` patches
    the session's id and epoch).
    `encode_request` sends it as it sends a Fetch dict (the template's version and client id
    must be the connection's).

    `head` (the request's own fields, as encode_fetch_request takes them) and `partitions`
    (the (topic, partition) pairs in order) say what it was built for; `set_partition(i, ...)`
    patches the i-th partition."""

    def __init__(self, client_id: str | None, version: int, head: dict, partitions: list[tuple[str, int]]):
        if version < 12:
            raise ValueError(f"a Fetch request template is for v12 (last_fetched_epoch), not v{version}")
        self.version = version
        self.client_id = client_id
        self.head = dict(head)
        self.partitions = tuple(partitions)
        topics: dict[str, list] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append({"partition": index, "fetch_offset": 0, "partition_max_bytes": 0})
        self._frame, self._positions, self._session_at = _encode(0, client_id, version, {
            **head, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
        # The frame groups partitions by topic: where each of `partitions` sits, in its order.
        at = dict(zip(((t, p["partition"]) for t, ps in topics.items() for p in ps), self._positions))
        self._positions = [at[key] + 4 for key in partitions]    # past the partition index

    def set_partition(self, i: int, current_leader_epoch: int, fetch_offset: int, last_fetched_epoch: int,
                      log_start_offset: int, partition_max_bytes: int) -> None:
        _PATCHED.pack_into(self._frame, self._positions[i], current_leader_epoch, fetch_offset,
                           last_fetched_epoch, log_start_offset, partition_max_bytes)

    def set_session(self, session_id: int, epoch: int) -> None:
        """Patches the request's fetch session id and epoch (KIP-227)."""
        _SESSION.pack_into(self._frame, self._session_at, session_id, epoch)

    def encode(self, correlation_id: int, client_id: str | None, version: int) -> bytes:
        """The frame for request `correlation_id` (a copy: the template is patched again while
        a transport may still hold the bytes)."""
        if version != self.version or client_id != self.client_id:
            raise ValueError(f"a Fetch template built for v{self.version} and client id {self.client_id!r}"
                             f" cannot go out as v{version} for {client_id!r}")
        _CORRELATION.pack_into(self._frame, 8, correlation_id)
        return bytes(self._frame)
