"""A member of a consumer group over Kafka's classic group protocol, for
`seglog consume --bootstrap-server --group G` (kafka-console-consumer --group).

The member finds the group's coordinator (FindCoordinator), joins (JoinGroup, protocol type
`consumer`, assignor `range`, its subscription in Kafka's ConsumerProtocolSubscription v0
layout), and, when the coordinator makes it the leader, assigns every member's subscribed
partitions with Kafka's RangeAssignor rule (members sorted by id; each topic's partitions cut in
consecutive ranges, the first `partitions % members` members one more); SyncGroup hands the
assignments out (ConsumerProtocolAssignment v0). Other members may be any Kafka consumer that
offers `range` (the Java consumer's default list does). `heartbeat()` keeps the membership and
says when the group rebalances; `commit()` is OffsetCommit with the member's generation, so
kafka-consumer-groups sees the group's offsets and lag; `leave()` is LeaveGroup.
"""
from __future__ import annotations

import struct
import time

from logcore.errors import InvalidConfigError
from logcore.wire.api_keys import (FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, METADATA, OFFSET_COMMIT,
                                   OFFSET_FETCH, SYNC_GROUP)
from logcore.wire.client import KafkaConnection, KafkaConnectionError, KafkaError, bootstrap, error_name
from logcore.wire.error_codes import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION,
                                      MEMBER_ID_REQUIRED, NONE, NOT_COORDINATOR, REBALANCE_IN_PROGRESS,
                                      UNKNOWN_MEMBER_ID)
from logcore.wire.primitives import WireReader

# FindCoordinator below v4 (one key), OffsetFetch v1..v7 (one group), OffsetCommit up to v8
# (v9+ belongs to KIP-848 members); JoinGroup v4+ hands out member ids (MEMBER_ID_REQUIRED).
WINDOWS = {FIND_COORDINATOR: (1, 3), JOIN_GROUP: (1, 9), SYNC_GROUP: (1, 5), HEARTBEAT: (1, 4),
           LEAVE_GROUP: (1, 5), OFFSET_COMMIT: (2, 8), OFFSET_FETCH: (1, 7), METADATA: (1, 12)}
PROTOCOL_TYPE = "consumer"
ASSIGNOR = "range"
COORDINATOR_MOVED = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS})
REJOIN = frozenset({REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID})
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


class Rebalance(Exception):
    """The group rebalances (or dropped this member): join again."""


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: topics, null user data."""
    return _I16.pack(0) + _I32.pack(len(topics)) + b"".join(_string(t) for t in topics) + _I32.pack(-1)


def decode_subscription(data: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription of any version (later fields are skipped)."""
    r = WireReader(data)
    r.unpack(_I16)
    return [r.string(False) for _ in range(r.array_length(False))]


def encode_assignment(partitions: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: partitions by topic, null user data."""
    out = bytearray(_I16.pack(0) + _I32.pack(len(partitions)))
    for topic, ps in sorted(partitions.items()):
        out += _string(topic) + _I32.pack(len(ps)) + b"".join(_I32.pack(p) for p in ps)
    return bytes(out + _I32.pack(-1))


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    if not data:
        return {}
    r = WireReader(data)
    r.unpack(_I16)
    out = {}
    for _ in range(r.array_length(False)):
        topic = r.string(False)
        out[topic] = [r.unpack(_I32)[0] for _ in range(r.array_length(False))]
    return out


def range_assign(subscriptions: dict[str, list[str]], partition_counts: dict[str, int]) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: {member: {topic: partitions}} for {member: subscribed topics}."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
    for topic, count in sorted(partition_counts.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        each, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            n = each + (1 if i < extra else 0)
            if n:
                out[member][topic] = list(range(start, start + n))
            start += n
    return out


class ConsoleGroup:
    """This process as one member of group `group_id`, subscribed to `topic`."""

    def __init__(self, servers: str, group_id: str, topic: str, *, client_id: str, timeout_s: float,
                 session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 3_000,
                 rebalance_timeout_ms: int = 300_000, security=None):
        if not group_id:
            raise InvalidConfigError("--group must not be empty")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise InvalidConfigError(f"heartbeat.interval.ms={heartbeat_interval_ms} must be below"
                                     f" session.timeout.ms={session_timeout_ms}")
        self.servers = servers
        self.group_id = group_id
        self.topic = topic
        self.timeout_s = timeout_s
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = ""
        self.generation = -1
        self.assigned: list[int] = []
        self._bootstrap = bootstrap(servers, timeout_s=timeout_s, client_id=client_id, windows=WINDOWS,
                                    option="--bootstrap-server", security=security)
        self._coordinator: KafkaConnection | None = None
        self._next_heartbeat = 0.0

    # ------------------------------------------------------------------ the coordinator
    def _request(self, api_key: int, body: dict, codes) -> object:
        """Send to the coordinator; find it again while it moved or is loading."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                response = self._coordinator_connection().request(api_key, body)
            except KafkaConnectionError:
                self._drop_coordinator()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
                continue
            moved = [c for c in codes(response) if c in COORDINATOR_MOVED]
            if not moved:
                return response
            self._drop_coordinator()
            if time.monotonic() >= deadline:
                raise KafkaError(f"the coordinator of group {self.group_id} did not answer within"
                                 f" {self.timeout_s:g} s: {error_name(moved[0])}", moved[0])
            time.sleep(0.2)

    def _coordinator_connection(self) -> KafkaConnection:
        if self._coordinator is not None and self._coordinator.connected:
            return self._coordinator
        response = self._bootstrap.request(FIND_COORDINATOR, {"key": self.group_id, "key_type": 0})
        code = int(response.error_code)
        if code != NONE:
            raise KafkaConnectionError(f"FindCoordinator of group {self.group_id}: {error_name(code)}", code)
        self._coordinator = KafkaConnection(response.host, int(response.port), timeout_s=self.timeout_s + 5,
                                            client_id=self._bootstrap.client_id, windows=WINDOWS,
                                            origin=f"coordinator of group {self.group_id}",
                                            security=self._bootstrap.security).connect()
        return self._coordinator

    def _drop_coordinator(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None

    # ------------------------------------------------------------------ membership
    def join(self) -> list[int]:
        """Join (or rejoin) the group; the partitions of the topic assigned to this member."""
        while True:
            response = self._request(JOIN_GROUP, {
                "group_id": self.group_id, "session_timeout": self.session_timeout_ms,
                "rebalance_timeout": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": PROTOCOL_TYPE, "reason": None,
                "protocols": [{"name": ASSIGNOR, "metadata": encode_subscription([self.topic])}]},
                lambda r: [int(r.error_code)])
            code = int(response.error_code)
            if code == MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
                continue
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code == REBALANCE_IN_PROGRESS:
                continue
            if code != NONE:
                raise KafkaError(f"JoinGroup of group {self.group_id}: {error_name(code)}", code)
            self.member_id, self.generation = response.member_id, int(response.generation_id)
            if response.protocol_name not in (None, ASSIGNOR):
                raise KafkaError(f"group {self.group_id} chose assignor {response.protocol_name!r}; seglog"
                                 f" consume offers {ASSIGNOR!r} only")
            assignments = []
            if response.leader == self.member_id:
                assignments = self._assign({m.member_id: decode_subscription(m.metadata) for m in response.members})
            sync = self._request(SYNC_GROUP, {
                "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": PROTOCOL_TYPE, "protocol_name": ASSIGNOR,
                "assignments": assignments}, lambda r: [int(r.error_code)])
            code = int(sync.error_code)
            if code in REJOIN:
                if code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            if code != NONE:
                raise KafkaError(f"SyncGroup of group {self.group_id}: {error_name(code)}", code)
            self.assigned = sorted(decode_assignment(sync.assignment).get(self.topic, []))
            self._next_heartbeat = time.monotonic() + self.heartbeat_interval_s
            return self.assigned

    def _assign(self, subscriptions: dict[str, list[str]]) -> list[dict]:
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        body = self._bootstrap.request(METADATA, {"topics": [{"name": t} for t in topics],
                                                  "allow_auto_topic_creation": False})
        counts = {t.name: len(t.partitions) for t in body.topics if int(t.error_code) == NONE}
        plan = range_assign(subscriptions, counts)
        return [{"member_id": m, "assignment": encode_assignment(parts)} for m, parts in sorted(plan.items())]

    def heartbeat_due(self) -> bool:
        return time.monotonic() >= self._next_heartbeat

    def heartbeat(self) -> None:
        """Heartbeat; Rebalance when the group rebalances or dropped this member."""
        response = self._request(HEARTBEAT, {"group_id": self.group_id, "generation_id": self.generation,
                                             "member_id": self.member_id, "group_instance_id": None},
                                 lambda r: [int(r.error_code)])
        self._next_heartbeat = time.monotonic() + self.heartbeat_interval_s
        code = int(response.error_code)
        if code in REJOIN:
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            raise Rebalance(error_name(code))
        if code != NONE:
            raise KafkaError(f"Heartbeat of group {self.group_id}: {error_name(code)}", code)

    def leave(self) -> None:
        if not self.member_id:
            return
        try:
            self._request(LEAVE_GROUP, {"group_id": self.group_id, "member_id": self.member_id,
                                        "members": [{"member_id": self.member_id, "group_instance_id": None,
                                                     "reason": "the console consumer is closing"}]},
                          lambda r: [int(r.error_code)])
        except KafkaError:
            pass                        # the session timeout removes the member anyway
        self.member_id = ""

    # ------------------------------------------------------------------ offsets
    def committed(self, partitions: list[int]) -> dict[int, int]:
        """The group's committed offsets of `partitions` (absent: none committed)."""
        if not partitions:
            return {}
        response = self._request(OFFSET_FETCH, {
            "group_id": self.group_id, "require_stable": True,
            "topics": [{"name": self.topic, "partition_indexes": partitions}]},
            lambda r: [int(getattr(r, "error_code", NONE))])
        code = int(getattr(response, "error_code", NONE))
        if code != NONE:
            raise KafkaError(f"OffsetFetch of group {self.group_id}: {error_name(code)}", code)
        out = {}
        for t in response.topics:
            for p in t.partitions:
                if int(p.error_code) != NONE:
                    raise KafkaError(f"OffsetFetch of group {self.group_id}, {t.name}-{p.partition_index}:"
                                     f" {error_name(p.error_code)}", int(p.error_code))
                if int(p.committed_offset) >= 0:
                    out[int(p.partition_index)] = int(p.committed_offset)
        return out

    def commit(self, offsets: dict[int, int]) -> None:
        """Commit the next offset to read of each partition; Rebalance when this generation ended."""
        if not offsets:
            return
        response = self._request(OFFSET_COMMIT, {
            "group_id": self.group_id, "generation_id": self.generation,
            "generation_id_or_member_epoch": self.generation, "member_id": self.member_id,
            "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": self.topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
                for p, o in sorted(offsets.items())]}]},
            lambda r: [int(p.error_code) for t in r.topics for p in t.partitions])
        for t in response.topics:
            for p in t.partitions:
                code = int(p.error_code)
                if code in REJOIN:
                    raise Rebalance(error_name(code))
                if code != NONE:
                    raise KafkaError(f"OffsetCommit of group {self.group_id}, {t.name}-{p.partition_index}:"
                                     f" {error_name(code)}", code)

    def close(self) -> None:
        self.leave()
        self._drop_coordinator()
        self._bootstrap.close()
