"""KIP-848's online migration between the classic and the consumer group protocol on one
`seglog broker` (a subprocess shared by the module): raw requests first, each step and answer
seen (a classic group upgraded by a ConsumerGroupHeartbeat, its classic members rejoining and
syncing inside the consumer group, the group restored after a SIGKILL of the broker, the
downgrade when the last consumer-protocol member leaves, Kafka's refusal with
group.consumer.migration.policy=disabled); then real clients: Kafka 4.1.1's Java consumer and
librdkafka going classic -> consumer -> classic while records are consumed."""
from __future__ import annotations

import signal
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

from logcore.broker.config import BrokerConfig
from logcore.coordinator.consumer_protocol import parse_assignment
from logcore.errors import InvalidConfigError
from logcore.wire import error_codes as E
from logcore.wire.client import KafkaConnection

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "broker"))
sys.path.insert(0, str(TESTS))
from broker_helpers import create, wait_until  # noqa: E402
from kafka_reference import kafka_unavailable  # noqa: E402

sys.path.insert(0, str(TESTS / "kafka_clients"))
from group_member import GroupMemberProcess, compile_group_member  # noqa: E402
from java_program import JavaProgram, JavaUnavailable  # noqa: E402

import broker_process  # noqa: E402

pytestmark = pytest.mark.timeout(300)

JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE_GROUPS, LIST, CG_HB, CG_DESCRIBE = 11, 12, 13, 14, 15, 16, 68, 69
SETTINGS = {"offsets.topic.num.partitions": "2", "num.partitions": "4",
            "group.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "200",
            "group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("gm-broker")
    started: list = []
    start = broker_process.start_factory(base, started)
    b = start(**SETTINGS)
    create(b, "t", 4)
    b.restart = lambda **extra: start(b.root, **SETTINGS, **extra)
    b.started = started
    yield b
    for s in started:
        s.stop()


def subscription(topics, owned=None, version=1) -> bytes:
    """Kafka's consumer protocol subscription (v1: with owned partitions)."""
    out = struct.pack(">hi", version, len(topics)) + b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    out += struct.pack(">i", -1)
    if version >= 1:
        owned = owned or {}
        out += struct.pack(">i", len(owned))
        for t, ps in owned.items():
            out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
            out += b"".join(struct.pack(">i", p) for p in ps)
    return out


def assignment(parts: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 1, len(parts))
    for t, ps in parts.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def join(conn, group, member, owned=None, protocol="range", instance=None):
    return conn.request(JOIN, {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000,
                               "member_id": member, "group_instance_id": instance, "protocol_type": "consumer",
                               "protocols": [{"name": protocol, "metadata": subscription(["t"], owned)}]}, 5)


def sync(conn, group, member, generation, assignments=(), protocol="range"):
    return conn.request(SYNC, {"group_id": group, "generation_id": generation, "member_id": member,
                               "group_instance_id": None,
                               "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]}, 3)


def heartbeat(conn, group, member, generation) -> int:
    return conn.request(HEARTBEAT, {"group_id": group, "generation_id": generation, "member_id": member,
                                    "group_instance_id": None}, 3).error_code


def leave(conn, group, member) -> int:
    r = conn.request(LEAVE, {"group_id": group, "members": [{"member_id": member, "group_instance_id": None}]}, 3)
    return r.members[0].error_code if r.error_code == E.NONE else r.error_code


def cg_heartbeat(conn, group, member, epoch, owned=None, topics=None, rebalance_ms=-1):
    return conn.request(CG_HB, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None,
        "rebalance_timeout": rebalance_ms, "subscribed_topic_names": topics, "server_assignor": None,
        "topic_partitions": None if owned is None else [{"topic_id": t, "partitions": ps} for t, ps in owned]}, 1)


def cg_describe(conn, group):
    return conn.request(CG_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}, 1).groups[0]


def describe_groups(conn, group):
    return conn.request(DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False}, 5).groups[0]


def list_groups(conn) -> dict[str, tuple[str, str]]:
    r = conn.request(LIST, {"states_filter": [], "types_filter": []}, 5)
    return {g.group_id: (g.group_type, g.group_state) for g in r.groups}


def classic_group(broker, conn, group) -> tuple[str, str, int]:
    """Two classic members a and b, a the leader giving itself 0,1 and b 2,3: their ids and generation."""
    a = join(conn, group, "")
    assert a.error_code == E.MEMBER_ID_REQUIRED
    a_id = a.member_id
    with KafkaConnection(broker.started[-1].host, broker.started[-1].port, client_id="b") as other:
        b = other.request(JOIN, {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000,
                                 "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                 "protocols": [{"name": "range", "metadata": subscription(["t"])}]}, 5)
        b_id = b.member_id
        # both join the same generation: b's join is parked until a's comes
        other.send(JOIN, {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000,
                                "member_id": b_id, "group_instance_id": None, "protocol_type": "consumer",
                                "protocols": [{"name": "range", "metadata": subscription(["t"])}]}, 5)
        a = join(conn, group, a_id)
        b = other.receive()
    assert a.error_code == b.error_code == E.NONE and a.generation_id == b.generation_id
    leader_id = a.leader
    follower_id = b_id if leader_id == a_id else a_id
    gen = a.generation_id
    with KafkaConnection(broker.started[-1].host, broker.started[-1].port, client_id="f") as other:
        other.send(SYNC, {"group_id": group, "generation_id": gen, "member_id": follower_id,
                                "group_instance_id": None, "assignments": []}, 3)
        s = sync(conn, group, leader_id, gen, [(leader_id, assignment({"t": [0, 1]})),
                                               (follower_id, assignment({"t": [2, 3]}))])
        assert s.error_code == E.NONE and other.receive().error_code == E.NONE
    return leader_id, follower_id, gen


@pytest.fixture
def conn(broker):
    now = broker.started[-1]                # the broker running now (tests restart it)
    with KafkaConnection(now.host, now.port, client_id="raw") as c:
        yield c


def test_upgrade_classic_members_inside_the_consumer_group_then_downgrade(broker, conn):
    leader, follower, gen = classic_group(broker, conn, "mg")
    commit = conn.request(8, {"group_id": "mg", "generation_id_or_member_epoch": gen, "member_id": leader,
                              "group_instance_id": None, "retention_time_ms": -1, "topics": [
                                  {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                                "committed_leader_epoch": -1,
                                                                "committed_metadata": ""}]}]}, 7)
    assert commit.topics[0].partitions[0].error_code == E.NONE

    # a consumer-protocol member joins: the group is a consumer group at once, the classic
    # members in it with their partitions, at member epoch = the classic generation
    c = cg_heartbeat(conn, "mg", "c", 0, owned=[], topics=["t"], rebalance_ms=10000)
    assert (c.error_code, c.member_epoch) == (E.NONE, gen + 1)
    assert list(c.assignment.topic_partitions) == []        # every partition still a classic member's
    d = cg_describe(conn, "mg")
    assert (d.error_code, d.group_epoch) == (E.NONE, gen + 1)
    members = {m.member_id: m for m in d.members}
    assert {mid: m.member_type for mid, m in members.items()} == {leader: 0, follower: 0, "c": 1}
    assert members[leader].member_epoch == gen
    assert [list(tp.partitions) for tp in members[leader].assignment.topic_partitions] == [[0, 1]]
    assert list_groups(conn)["mg"] == ("consumer", d.group_state)
    assert describe_groups(conn, "mg").group_state == "Dead"        # not a classic group (Kafka, before v6)

    # the classic members are told to rejoin; an eager consumer rejoins owning nothing
    assert heartbeat(conn, "mg", leader, gen) == E.REBALANCE_IN_PROGRESS
    assert heartbeat(conn, "mg", leader, gen + 5) == E.ILLEGAL_GENERATION
    j = join(conn, "mg", leader)
    assert (j.error_code, j.generation_id, j.protocol_name, j.leader, list(j.members)) == \
        (E.NONE, gen + 1, "range", "", [])
    s = sync(conn, "mg", leader, j.generation_id)
    assert s.error_code == E.NONE
    mine = parse_assignment(bytes(s.assignment))
    j2 = join(conn, "mg", follower)
    s2 = sync(conn, "mg", follower, j2.generation_id)
    theirs = parse_assignment(bytes(s2.assignment))
    c = cg_heartbeat(conn, "mg", "c", c.member_epoch, owned=[])
    got = {p for tp in c.assignment.topic_partitions for p in tp.partitions} if c.assignment else set()
    assert sorted(got | set(mine.get("t", ())) | set(theirs.get("t", ()))) == [0, 1, 2, 3]
    assert not got & set(mine.get("t", ())) and not got & set(theirs.get("t", ()))
    assert len(got) >= 1
    assert heartbeat(conn, "mg", leader, j.generation_id) == E.NONE
    # a classic member's commit: its generation is its member epoch (ILLEGAL_GENERATION else)
    def commit_as(member, generation):
        return conn.request(8, {"group_id": "mg", "generation_id_or_member_epoch": generation, "member_id": member,
                                "group_instance_id": None, "retention_time_ms": -1, "topics": [
                                    {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 9,
                                                                  "committed_leader_epoch": -1,
                                                                  "committed_metadata": ""}]}]},
                            7).topics[0].partitions[0].error_code
    assert commit_as(leader, j.generation_id - 1) == E.ILLEGAL_GENERATION
    assert commit_as(leader, j.generation_id) == E.NONE

    # SIGKILLed and restarted: the mixed group is read back from __consumer_offsets
    d_before = cg_describe(conn, "mg")
    broker.started[-1].stop(signal.SIGKILL)
    new = broker.restart()
    with KafkaConnection(new.host, new.port, client_id="raw2") as conn2:
        d2 = cg_describe(conn2, "mg")
        assert d2.error_code == E.NONE
        assert {m.member_id: (m.member_type, m.member_epoch) for m in d2.members} == \
            {m.member_id: (m.member_type, m.member_epoch) for m in d_before.members}
        assert {m.member_id: m.member_type for m in d2.members} == {leader: 0, follower: 0, "c": 1}
        assert heartbeat(conn2, "mg", leader, j.generation_id) == E.NONE
        f = conn2.request(9, {"groups": [{"group_id": "mg", "member_id": None, "member_epoch": -1,
                                          "topics": [{"name": "t", "partition_indexes": [0]}]}]}, 9)
        assert f.groups[0].topics[0].partitions[0].committed_offset == 9

        # the classic follower leaves: still a consumer group; then the consumer member leaves:
        # only a classic member is left, the group is a classic group again and rebalances
        assert leave(conn2, "mg", follower) == E.NONE
        assert {m.member_id for m in cg_describe(conn2, "mg").members} == {leader, "c"}
        gone = cg_heartbeat(conn2, "mg", "c", -1)
        assert gone.error_code == E.NONE
        assert list_groups(conn2)["mg"] == ("classic", "PreparingRebalance")
        assert cg_describe(conn2, "mg").error_code == E.GROUP_ID_NOT_FOUND
        # generation = the group epoch, past the member's epoch (the follower's leave bumped it):
        # the member rejoins, as after any ILLEGAL_GENERATION
        assert heartbeat(conn2, "mg", leader, j.generation_id) == E.ILLEGAL_GENERATION
        j3 = join(conn2, "mg", leader)
        assert (j3.error_code, j3.leader) == (E.NONE, leader)
        s3 = sync(conn2, "mg", leader, j3.generation_id, [(leader, assignment({"t": [0, 1, 2, 3]}))])
        assert s3.error_code == E.NONE
        dg = describe_groups(conn2, "mg")
        assert (dg.group_state, [m.member_id for m in dg.members]) == ("Stable", [leader])
        f = conn2.request(9, {"groups": [{"group_id": "mg", "member_id": None, "member_epoch": -1,
                                          "topics": [{"name": "t", "partition_indexes": [0]}]}]}, 9)
        assert f.groups[0].topics[0].partitions[0].committed_offset == 9
        assert leave(conn2, "mg", leader) == E.NONE


def test_static_classic_member_inside_a_consumer_group(conn):
    """A static classic member back under a new member id replaces its old incarnation; the old
    id with the instance id is fenced."""
    c = cg_heartbeat(conn, "ms", "c", 0, owned=[], topics=["t"], rebalance_ms=10000)
    assert c.error_code == E.NONE
    first = join(conn, "ms", "", instance="i1")
    assert first.error_code == E.NONE
    again = join(conn, "ms", "", instance="i1")
    assert again.error_code == E.NONE and again.member_id != first.member_id
    assert {m.member_id: m.instance_id for m in cg_describe(conn, "ms").members} == \
        {"c": None, again.member_id: "i1"}
    assert join(conn, "ms", first.member_id, instance="i1").error_code == E.FENCED_INSTANCE_ID
    assert heartbeat(conn, "ms", first.member_id, first.generation_id) == E.UNKNOWN_MEMBER_ID
    assert leave(conn, "ms", again.member_id) == E.NONE
    assert cg_heartbeat(conn, "ms", "c", -1).error_code == E.NONE

# ------------------------------------------------------------------------------ real clients
MIG_TOPIC, MIG_GROUP, MIG_PARTITIONS = "mig", "mig-group", 4


@pytest.fixture(scope="module")
def member_program(kafka_jars, tmp_path_factory):
    try:
        return compile_group_member(kafka_jars, tmp_path_factory.mktemp("mig-classes"))
    except JavaUnavailable as exc:
        kafka_unavailable(str(exc))


class Member:
    """A member's view from its events: what it owns, its ownership intervals (wall-clock ms),
    the records it got."""

    def __init__(self, name: str):
        self.name = name
        self.owned: dict[int, float] = {}                   # partition -> since
        self.intervals: list[tuple[int, float, float]] = []  # (partition, from, to)
        self.records: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def on(self, event: dict) -> None:
        with self.lock:
            kind, t = event["event"], event["t"]
            if kind == "assigned":
                for p in event["partitions"]:
                    self.owned.setdefault(p, t)
            elif kind == "revoked":
                for p in event["partitions"]:
                    if p in self.owned:
                        self.intervals.append((p, self.owned.pop(p), t))
            elif kind == "records":
                self.records |= {tuple(o) for o in event["offsets"]}
            elif kind == "error":
                self.errors.append(event["message"])

    def assignment(self) -> set[int]:
        with self.lock:
            return set(self.owned)


class JavaMember(Member):
    def __init__(self, program: JavaProgram, bootstrap: str, name: str, protocol: str, *assignors: str):
        super().__init__(name)
        self.process = GroupMemberProcess(program, [bootstrap, MIG_GROUP, MIG_TOPIC, protocol, *assignors],
                                          self.on, name)

    def leave(self) -> None:
        self.process.leave()

    def kill(self) -> None:
        self.process.kill()


class LibrdkafkaMember(Member):
    """librdkafka's consumer (classic protocol by default), polled and committed in a thread."""

    def __init__(self, bootstrap: str, name: str, protocol: str):
        super().__init__(name)
        from confluent_kafka import Consumer
        self.stop = threading.Event()
        conf = {"bootstrap.servers": bootstrap, "group.id": MIG_GROUP, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": name}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        self.consumer = Consumer(conf)
        self.consumer.subscribe([MIG_TOPIC], on_assign=self._assigned, on_revoke=self._revoked)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assigned(self, _c, parts) -> None:
        self.on({"event": "assigned", "t": time.time() * 1000, "partitions": [tp.partition for tp in parts]})

    def _revoked(self, _c, parts) -> None:
        self.on({"event": "revoked", "t": time.time() * 1000, "partitions": [tp.partition for tp in parts]})

    def _run(self) -> None:
        from confluent_kafka import TopicPartition
        while not self.stop.is_set():
            msgs = [m for m in self.consumer.consume(100, 0.1) if not m.error()]
            if not msgs:
                continue
            self.on({"event": "records", "t": time.time() * 1000, "offsets": [[m.partition(), m.offset()] for m in msgs]})
            nxt = {m.partition(): m.offset() + 1 for m in msgs}
            try:
                self.consumer.commit(offsets=[TopicPartition(MIG_TOPIC, p, o) for p, o in nxt.items()],
                                     asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - a commit refused while partitions move
                self.on({"event": "error", "t": time.time() * 1000, "message": str(exc)})
        self.consumer.close()

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(30)

    def kill(self) -> None:
        self.leave()


def produce_mig(bootstrap: str, start: int, count: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(start, start + count):
        p.produce(MIG_TOPIC, value=b"%d" % i, partition=i % MIG_PARTITIONS)
    assert p.flush(30) == 0


def test_rolling_upgrade_and_downgrade_with_real_clients(broker, member_program):
    """Two classic consumers (Kafka's Java consumer) share a topic; one is restarted with
    group.protocol=consumer (its new instance starting before the old one stops): the group
    becomes a consumer group and all go on consuming; the classic ones leave: a plain consumer
    group; a classic librdkafka consumer joins it, and the
    consumer-protocol member leaves: a classic group again. Every record is consumed, no
    partition is ever owned by two members at once, and the offsets are committed to the end."""
    pytest.importorskip("confluent_kafka")
    now = broker.started[-1]
    bootstrap = f"{now.host}:{now.port}"
    create(now, MIG_TOPIC, MIG_PARTITIONS)
    members: list[Member] = []
    produced = 0

    def feed(count=40):
        nonlocal produced
        produce_mig(bootstrap, produced, count)
        produced += count

    def start(member):
        members.append(member)
        return member

    def split(*ms) -> bool:
        """Each member owns partitions, together all of them, none twice."""
        sets = [m.assignment() for m in ms]
        return all(sets) and sorted(p for s in sets for p in s) == list(range(MIG_PARTITIONS))

    def consumed_all() -> bool:
        got = set().union(*(m.records for m in members))
        return len(got) == produced

    def group(conn) -> tuple[str, list[int]]:
        d = cg_describe(conn, MIG_GROUP)
        if d.error_code != E.NONE:
            return list_groups(conn).get(MIG_GROUP, ("", ""))[0], []
        return "consumer", sorted(m.member_type for m in d.members)

    try:
        with KafkaConnection(now.host, now.port, client_id="observer") as conn:
            feed()
            # a rebalances cooperatively (it keeps what it may while it rejoins), b eagerly
            a = start(JavaMember(member_program, bootstrap, "a-classic", "classic",
                                 "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"))
            b = start(JavaMember(member_program, bootstrap, "b-classic", "classic"))
            assert wait_until(lambda: split(a, b) and consumed_all(), 60), (a.owned, b.owned)
            assert group(conn)[0] == "classic"

            # the rolling upgrade: b's new instance, with the consumer protocol, starts beside it
            # (the group becomes a consumer group with two classic members), then b stops
            b2 = start(JavaMember(member_program, bootstrap, "b-consumer", "consumer"))
            feed()
            assert wait_until(lambda: split(a, b, b2) and consumed_all(), 60), (a.owned, b.owned, b2.owned)
            assert group(conn) == ("consumer", [0, 0, 1])       # two classic members, a consumer one
            b.leave()
            feed()
            assert wait_until(lambda: split(a, b2) and consumed_all(), 60), (a.owned, b2.owned)
            assert group(conn) == ("consumer", [0, 1])

            # the classic member leaves: a plain consumer group
            a.leave()
            feed()
            assert wait_until(lambda: b2.assignment() == set(range(MIG_PARTITIONS)) and consumed_all(), 60)
            assert group(conn) == ("consumer", [1])

            # back: a classic librdkafka consumer joins, the consumer-protocol member leaves
            c = start(LibrdkafkaMember(bootstrap, "c-classic", "classic"))
            feed()
            assert wait_until(lambda: split(b2, c) and consumed_all(), 60), (b2.owned, c.owned)
            assert group(conn) == ("consumer", [0, 1])
            b2.leave()
            feed()
            assert wait_until(lambda: c.assignment() == set(range(MIG_PARTITIONS)) and consumed_all(), 60)
            assert group(conn)[0] == "classic"
            assert describe_groups(conn, MIG_GROUP).group_state == "Stable"
            c.leave()

            # every record consumed and committed to the end
            f = conn.request(9, {"groups": [{"group_id": MIG_GROUP, "member_id": None, "member_epoch": -1,
                                             "topics": [{"name": MIG_TOPIC, "partition_indexes":
                                                         list(range(MIG_PARTITIONS))}]}]}, 9)
            committed = {p.partition_index: p.committed_offset for p in f.groups[0].topics[0].partitions}
            assert committed == {p: produced // MIG_PARTITIONS for p in range(MIG_PARTITIONS)}
    finally:
        for m in members:
            if isinstance(m, JavaMember):
                m.kill()
            else:
                m.leave()
    # no partition owned by two members at once (each member's own clock: one host)
    intervals = sorted((p, t0, t1, m.name) for m in members for p, t0, t1 in m.intervals)
    for (p, _, end, who), (q, start_, _, other) in zip(intervals, intervals[1:]):
        if p == q:
            assert start_ >= end, f"partition {p}: {other} got it at {start_} before {who} gave it up at {end}"


def test_kafka_dump_tool_reads_the_converted_groups_records(broker, kafka_jars):
    """Kafka 4.1.1's DumpLogSegments decodes what the migrations wrote: a classic member's
    metadata (tagged ClassicMemberMetadata), the classic group's tombstone and metadata."""
    segments = sorted(broker.root.glob("__consumer_offsets-*/*.log"))
    out = kafka_jars.run_tool("kafka.tools.DumpLogSegments",
                              ["--files", ",".join(map(str, segments)), "--offsets-decoder", "--print-data-log"])
    assert out.returncode == 0, out.stderr[-2000:]
    mine = [ln for ln in out.stdout.splitlines() if '"groupId":"mg"' in ln or '"group":"mg"}' in ln]
    classic_members = [ln for ln in mine if '"type":"5"' in ln and '"classicMemberMetadata":{"sessionTimeoutMs":10000' in ln]
    assert classic_members and '"supportedProtocols":[{"name":"range"' in classic_members[0], mine[:20]
    assert any('"type":"2"' in ln and "payload: <DELETE>" in ln for ln in mine), mine[:20]
    assert any('"type":"2"' in ln and '"protocolType":"consumer"' in ln for ln in mine), mine[:20]

def test_migration_policy_disabled_refuses_the_upgrade(broker, conn):
    leader, follower, gen = classic_group(broker, conn, "mg-off")
    broker.started[-1].stop(signal.SIGTERM)
    new = broker.restart(**{"group.consumer.migration.policy": "disabled"})
    with KafkaConnection(new.host, new.port, client_id="raw3") as conn3:
        r = cg_heartbeat(conn3, "mg-off", "c", 0, owned=[], topics=["t"], rebalance_ms=10000)
        assert r.error_code == E.GROUP_ID_NOT_FOUND
        assert r.error_message == ("Cannot upgrade classic group mg-off to consumer group because online upgrade"
                                   " is disabled.")
        assert list_groups(conn3)["mg-off"][0] == "classic"
    with pytest.raises(InvalidConfigError, match="group.consumer.migration.policy"):
        BrokerConfig.from_props({"group.consumer.migration.policy": "sideways"})
