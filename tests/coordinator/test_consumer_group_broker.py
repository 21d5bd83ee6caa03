"""KIP-848's consumer group protocol on one `seglog broker` (a subprocess, shared by the module):
ConsumerGroupHeartbeat as a member speaks it (raw requests, so each step and error is seen),
the member-epoch checks of OffsetCommit / OffsetFetch, ListGroups / DescribeGroups /
ConsumerGroupDescribe, static members, session expiry, the group restored from
__consumer_offsets after a SIGKILL, librdkafka's consumers with group.protocol=consumer, and Kafka's
DumpLogSegments decoding the records."""
from __future__ import annotations

import re
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from logcore.broker.config import BrokerConfig
from logcore.errors import InvalidConfigError
from logcore.wire import error_codes as E
from logcore.wire.client import KafkaConnection

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "broker"))
sys.path.insert(0, str(TESTS))
from broker_helpers import create, produce, wait_until  # noqa: E402

sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402

pytestmark = pytest.mark.timeout(300)

HB, DESCRIBE, COMMIT, FETCH, LIST, DESCRIBE_GROUPS = 68, 69, 8, 9, 16, 15
SETTINGS = {"offsets.topic.num.partitions": "3", "num.partitions": "4",
            "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "200",
            "group.consumer.min.session.timeout.ms": "2000", "group.consumer.session.timeout.ms": "3000",
            "group.consumer.max.size": "3"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("cg-broker")
    started: list = []
    start = broker_process.start_factory(base, started)
    b = start(**SETTINGS)
    create(b, "t", 4)
    create(b, "u", 2)
    b.restart = lambda: start(b.root, **SETTINGS)
    yield b
    for s in started:
        s.stop()


@pytest.fixture
def conn(broker):
    with KafkaConnection(broker.host, broker.port, client_id="raw-member") as c:
        yield c


def topic_ids(conn) -> dict[str, uuid.UUID]:
    md = conn.request(3, {"topics": None, "allow_auto_topic_creation": False}, 12)
    return {t.name: t.topic_id for t in md.topics}


def heartbeat(conn, group, member, epoch, *, topics=None, owned=None, instance=None, assignor=None,
              regex=None, rebalance_ms=-1, version=1):
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance,
            "rebalance_timeout": rebalance_ms, "subscribed_topic_names": topics, "server_assignor": assignor,
            "topic_partitions": None if owned is None else [{"topic_id": t, "partitions": ps} for t, ps in owned]}
    if regex is not None:
        body["subscribed_topic_regex"] = regex
    return conn.request(HB, body, version)


def join(conn, group, member, topics=("t",), **kw):
    return heartbeat(conn, group, member, 0, topics=list(topics), owned=[], rebalance_ms=30000, **kw)


def assigned(resp) -> dict[uuid.UUID, list[int]]:
    if resp.assignment is None:
        return None
    return {t.topic_id: sorted(t.partitions) for t in resp.assignment.topic_partitions}


def describe(conn, group):
    return conn.request(DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}, 0).groups[0]


def test_members_reconcile_revoking_before_assigning(conn):
    t = topic_ids(conn)["t"]
    a = join(conn, "g1", "a")
    assert (a.error_code, a.member_epoch, assigned(a)) == (E.NONE, 1, {t: [0, 1, 2, 3]})
    assert a.heartbeat_interval.total_seconds() == 0.2
    b = join(conn, "g1", "b")
    # b's partitions are still a's: b moves to epoch 2 with nothing yet
    assert (b.error_code, b.member_epoch, assigned(b)) == (E.NONE, 2, {})
    # a must give two up first, staying at epoch 1
    a = heartbeat(conn, "g1", "a", 1, owned=[(t, [0, 1, 2, 3])])
    assert a.member_epoch == 1 and len(assigned(a)[t]) == 2
    kept = assigned(a)[t]
    b = heartbeat(conn, "g1", "b", 2, owned=[])
    assert b.assignment is None or assigned(b) == {}
    a = heartbeat(conn, "g1", "a", 1, owned=[(t, kept)])
    assert (a.error_code, a.member_epoch) == (E.NONE, 2)
    b = heartbeat(conn, "g1", "b", 2, owned=[])
    assert assigned(b) == {t: sorted({0, 1, 2, 3} - set(kept))}
    d = describe(conn, "g1")
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == \
        (E.NONE, "Stable", 2, 2, "uniform")
    assert {m.member_id: m.member_epoch for m in d.members} == {"a": 2, "b": 2}
    assert {m.member_id: m.assignment.topic_partitions[0].topic_name for m in d.members} == {"a": "t", "b": "t"}

    # OffsetCommit v9 with the member epoch; a stale epoch, or v8, is refused
    def commit(epoch, member="a", version=9):
        r = conn.request(COMMIT, {"group_id": "g1", "generation_id_or_member_epoch": epoch, "member_id": member,
                                  "topics": [{"name": "t", "partitions": [
                                      {"partition_index": kept[0], "committed_offset": 5}]}]}, version)
        return r.topics[0].partitions[0].error_code
    assert commit(1) == E.STALE_MEMBER_EPOCH
    assert commit(3) == E.STALE_MEMBER_EPOCH
    assert commit(2, version=8) == E.UNSUPPORTED_VERSION
    assert commit(2, member="nobody") == E.UNKNOWN_MEMBER_ID
    assert commit(2) == E.NONE

    def fetch(member, epoch):
        r = conn.request(FETCH, {"groups": [{"group_id": "g1", "member_id": member, "member_epoch": epoch,
                                             "topics": [{"name": "t", "partition_indexes": [kept[0]]}]}]}, 9)
        g = r.groups[0]
        return g.error_code, [p.committed_offset for tp in g.topics for p in tp.partitions]
    assert fetch("a", 1) == (E.STALE_MEMBER_EPOCH, [])
    assert fetch("a", 2) == (E.NONE, [5])
    assert fetch(None, -1) == (E.NONE, [5])           # an admin

    # ListGroups' type filter, DescribeGroups for a group that is not classic
    def listed(types):
        r = conn.request(LIST, {"states_filter": [], "types_filter": types}, 5)
        return {g.group_id: (g.group_type, g.group_state, g.protocol_type) for g in r.groups}
    assert listed(["consumer"])["g1"] == ("consumer", "Stable", "consumer")
    assert "g1" not in listed(["classic"])
    dg = conn.request(DESCRIBE_GROUPS, {"groups": ["g1"], "include_authorized_operations": False}, 5).groups[0]
    assert (dg.error_code, dg.group_state, dg.members) == (E.NONE, "Dead", ())

    # a leaves: b gets every partition at the next epoch
    left = heartbeat(conn, "g1", "a", -1)
    assert (left.error_code, left.member_epoch) == (E.NONE, -1)
    b = heartbeat(conn, "g1", "b", 2, owned=[(t, assigned(b)[t])])
    assert (b.member_epoch, assigned(b)) == (3, {t: [0, 1, 2, 3]})


def test_delete_groups_of_a_consumer_group(conn):
    """DeleteGroups (42) on a KIP-848 group: NON_EMPTY_GROUP while a member is in it; once it
    left, the group and its committed offsets are gone."""
    t = topic_ids(conn)["t"]
    m = join(conn, "g-del", "m")
    assert m.error_code == E.NONE
    heartbeat(conn, "g-del", "m", m.member_epoch, owned=[(t, assigned(m)[t])])
    r = conn.request(COMMIT, {"group_id": "g-del", "generation_id_or_member_epoch": m.member_epoch, "member_id": "m",
                              "topics": [{"name": "t", "partitions": [
                                  {"partition_index": 0, "committed_offset": 7}]}]}, 9)
    assert r.topics[0].partitions[0].error_code == E.NONE

    def delete():
        return conn.request(42, {"groups_names": ["g-del"]}, 2).results[0].error_code
    assert delete() == E.NON_EMPTY_GROUP
    assert heartbeat(conn, "g-del", "m", -1).error_code == E.NONE
    assert delete() == E.NONE
    assert describe(conn, "g-del").error_code == E.GROUP_ID_NOT_FOUND
    f = conn.request(FETCH, {"groups": [{"group_id": "g-del", "member_id": None, "member_epoch": -1,
                                         "topics": [{"name": "t", "partition_indexes": [0]}]}]}, 9)
    assert [p.committed_offset for tp in f.groups[0].topics for p in tp.partitions] == [-1]
    assert delete() == E.GROUP_ID_NOT_FOUND


def test_heartbeat_errors(conn):
    assert join(conn, "g2", "m", assignor="sticky").error_code == E.UNSUPPORTED_ASSIGNOR
    r = join(conn, "g2", "")
    assert r.error_code == E.INVALID_REQUEST and "MemberId" in r.error_message
    assert heartbeat(conn, "g2", "m", 0, topics=["t"], owned=[]).error_code == E.INVALID_REQUEST   # no timeout
    assert join(conn, "g2", "m", regex="t[").error_code == E.INVALID_REGULAR_EXPRESSION
    r = join(conn, "g2", "m", regex="t(?=x)")             # a lookahead: not RE2, Kafka refuses it too
    assert r.error_code == E.INVALID_REGULAR_EXPRESSION and "lookahead" in r.error_message
    assert heartbeat(conn, "nogroup", "m", 3).error_code == E.GROUP_ID_NOT_FOUND
    assert heartbeat(conn, "g2", "m", -3).error_code == E.INVALID_REQUEST
    assert join(conn, "g2", "m").error_code == E.NONE
    assert heartbeat(conn, "g2", "m", 7, owned=[]).error_code == E.FENCED_MEMBER_EPOCH
    assert heartbeat(conn, "g2", "other", 1, owned=[]).error_code == E.UNKNOWN_MEMBER_ID
    assert join(conn, "g2", "m2").error_code == E.NONE
    assert join(conn, "g2", "m3").error_code == E.NONE
    assert join(conn, "g2", "m4").error_code == E.GROUP_MAX_SIZE_REACHED       # group.consumer.max.size=3
    # a classic member joins a consumer group with members as a classic member of it (KIP-848's
    # online migration), but not past group.consumer.max.size, nor with another protocol type
    r = conn.request(11, {"group_id": "g2", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                          "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}, 5)
    assert r.error_code == E.GROUP_MAX_SIZE_REACHED
    assert heartbeat(conn, "g2", "m3", -1).error_code == E.NONE
    r = conn.request(11, {"group_id": "g2", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                          "protocol_type": "connect", "protocols": [{"name": "range", "metadata": b""}]}, 5)
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_regex_subscription(conn):
    """A regex new to the group is resolved after the heartbeat that brought it (Kafka's
    asynchronous resolution): the first answer assigns the literal topic only, a later one
    (after the group epoch bumped) the regex's topics too."""
    ids = topic_ids(conn)
    r = join(conn, "g3", "x", topics=("u",), regex="[t]")
    assert (r.error_code, r.member_epoch, assigned(r)) == (E.NONE, 1, {ids["u"]: [0, 1]})
    owned = [(ids["u"], [0, 1])]
    answers = [r]

    def regex_assigned() -> bool:
        answers.append(heartbeat(conn, "g3", "x", answers[-1].member_epoch, owned=owned))
        return answers[-1].assignment is not None
    assert wait_until(regex_assigned, timeout=10), answers
    assert (answers[-1].member_epoch, assigned(answers[-1])) == (2, {ids["u"]: [0, 1], ids["t"]: [0, 1, 2, 3]})
    d = describe(conn, "g3")
    assert (d.group_epoch, d.members[0].subscribed_topic_regex) == (2, "[t]")
    # an empty regex (librdkafka's "none") subscribes to nothing more; the regex's topic goes
    r = heartbeat(conn, "g3", "x", 2, topics=["u"], regex="", owned=owned + [(ids["t"], [0, 1, 2, 3])])
    assert (r.error_code, r.member_epoch, assigned(r)) == (E.NONE, 2, {ids["u"]: [0, 1]})    # revoke t first
    r = heartbeat(conn, "g3", "x", 2, owned=owned)
    assert (r.member_epoch, describe(conn, "g3").group_epoch) == (3, 3)


def test_static_member_rejoins_without_rebalance(conn):
    t = topic_ids(conn)["t"]
    s1 = join(conn, "g4", "s1", instance="i1")
    o = join(conn, "g4", "o")
    s1 = heartbeat(conn, "g4", "s1", 1, owned=[(t, [0, 1, 2, 3])], instance="i1")
    mine = assigned(s1)[t]                      # what s1 keeps; it revokes the rest
    s1 = heartbeat(conn, "g4", "s1", s1.member_epoch, owned=[(t, mine)], instance="i1")
    assert s1.member_epoch == 2
    epoch = describe(conn, "g4").group_epoch
    # the instance id is still s1's: another member may not take it
    assert join(conn, "g4", "s2", instance="i1").error_code == E.UNRELEASED_INSTANCE_ID
    assert heartbeat(conn, "g4", "s2", -2, instance="i1").error_code == E.FENCED_INSTANCE_ID
    left = heartbeat(conn, "g4", "s1", -2, instance="i1")
    assert (left.error_code, left.member_epoch) == (E.NONE, -2)
    s2 = join(conn, "g4", "s2", instance="i1")
    assert s2.error_code == E.NONE and describe(conn, "g4").group_epoch == epoch     # no rebalance
    d = {m.member_id: m for m in describe(conn, "g4").members}
    assert set(d) == {"s2", "o"} and d["s2"].instance_id == "i1"
    assert (s2.member_epoch, assigned(s2)) == (2, {t: mine})      # s1's partitions, at once
    assert o.error_code == E.NONE


def test_session_expiry_fences_a_silent_member(conn):
    join(conn, "g5", "quiet")
    assert wait_until(lambda: not describe(conn, "g5").members, timeout=10)       # session 3 s
    assert describe(conn, "g5").group_state == "Empty"


def test_librdkafka_consumers(broker):
    from confluent_kafka import Consumer
    produce(broker, "t", [b"%d" % i for i in range(40)])

    def consumer(name):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rk", "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": name})
        c.subscribe(["t"])
        return c
    cs = [consumer("c1"), consumer("c2")]
    seen: dict[int, list] = {0: [], 1: []}
    deadline = time.monotonic() + 30
    while len(seen[0]) + len(seen[1]) < 40 or not all(c.assignment() for c in cs):
        assert time.monotonic() < deadline, ({i: len(v) for i, v in seen.items()}, [c.assignment() for c in cs])
        for i, c in enumerate(cs):
            m = c.poll(0.1)
            if m is not None and not m.error():
                seen[i].append((m.partition(), m.offset()))
                c.commit(m, asynchronous=False)
    parts = [{tp.partition for tp in c.assignment()} for c in cs]
    assert parts[0] | parts[1] == {0, 1, 2, 3} and not parts[0] & parts[1] and len(parts[0]) == 2
    cs[1].close()                       # its partitions move to c1
    assert wait_until(lambda: (cs[0].poll(0.1), len(cs[0].assignment()) == 4)[1], timeout=20)
    cs[0].close()
    with KafkaConnection(broker.host, broker.port) as conn:
        r = conn.request(FETCH, {"groups": [{"group_id": "rk", "topics": None}]}, 9).groups[0]
        committed = {p.partition_index: p.committed_offset for tp in r.topics for p in tp.partitions}
    assert sum(committed.values()) == 40


def test_librdkafka_regex_subscription(broker):
    """librdkafka (group.protocol=consumer) subscribed to a regex and a topic name, as Kafka
    serves it: the name's partitions first, the regex's in a later assignment (resolved after
    the heartbeat); a topic created later that matches is assigned at the next resolution (at
    most every 10 s), a deleted one leaves the assignment at the next heartbeat."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient
    create(broker, "rx-a", 2)
    create(broker, "lit", 1)
    assigns: list[list] = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rx", "group.protocol": "consumer",
                  "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe(["^rx-.*", "lit"], on_assign=lambda _c, ps: assigns.append(sorted((p.topic, p.partition) for p in ps)))

    def assignment_holds(wanted) -> bool:
        c.poll(0.1)
        return wanted(sorted((p.topic, p.partition) for p in c.assignment()))
    try:
        assert wait_until(lambda: assignment_holds(lambda a: len(a) == 3), timeout=15), (assigns, c.assignment())
        assert assigns[:2] == [[("lit", 0)], [("rx-a", 0), ("rx-a", 1)]], assigns
        started = time.monotonic()
        create(broker, "rx-b", 1)
        assert wait_until(lambda: assignment_holds(lambda a: ("rx-b", 0) in a), timeout=25), (assigns, c.assignment())
        assert time.monotonic() - started < 20
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})       # must outlive the future
        admin.delete_topics(["rx-a"])["rx-a"].result(15)
        assert wait_until(lambda: assignment_holds(lambda a: a == [("lit", 0), ("rx-b", 0)]), timeout=15), \
            c.assignment()
    finally:
        c.close()


def test_group_is_restored_after_a_kill(broker, conn):
    t = topic_ids(conn)["t"]
    r = join(conn, "g6", "k")
    before = describe(conn, "g6")
    conn.close()
    broker.stop(signal.SIGKILL)
    b2 = broker.restart()
    with KafkaConnection(b2.host, b2.port) as c2:
        assert wait_until(lambda: describe(c2, "g6").error_code == E.NONE, timeout=20)
        after = describe(c2, "g6")
        assert (after.group_epoch, after.assignment_epoch, after.group_state) == \
            (before.group_epoch, before.assignment_epoch, before.group_state)
        assert [(m.member_id, m.member_epoch) for m in after.members] == [("k", r.member_epoch)]
        again = heartbeat(c2, "g6", "k", r.member_epoch, owned=[(t, [0, 1, 2, 3])])
        assert (again.error_code, again.member_epoch) == (E.NONE, r.member_epoch)


def test_settings_are_checked():
    base = {"log.dirs": "x"}
    BrokerConfig.from_props({**base, "group.coordinator.rebalance.protocols": "classic"})
    with pytest.raises(InvalidConfigError, match="rebalance.protocols"):
        BrokerConfig.from_props({**base, "group.coordinator.rebalance.protocols": "consumer"})
    with pytest.raises(InvalidConfigError, match="group.consumer.assignors"):
        BrokerConfig.from_props({**base, "group.consumer.assignors": "sticky"})
    with pytest.raises(InvalidConfigError, match="min.session.timeout"):
        BrokerConfig.from_props({**base, "group.consumer.session.timeout.ms": "1000"})
    with pytest.raises(InvalidConfigError, match="must be below"):
        BrokerConfig.from_props({**base, "group.consumer.session.timeout.ms": "45000",
                                 "group.consumer.max.heartbeat.interval.ms": "60000",
                                 "group.consumer.heartbeat.interval.ms": "50000"})


def test_kafka_dump_tool_reads_the_records(broker, kafka_jars):
    """Kafka 4.1.1's DumpLogSegments decodes the groups' records (Kafka's own record types), the
    resolved regular expressions (type 16) included."""
    segments = sorted(broker.root.glob("__consumer_offsets-*/*.log"))
    out = kafka_jars.run_tool("kafka.tools.DumpLogSegments",
                              ["--files", ",".join(map(str, segments)), "--offsets-decoder", "--print-data-log"])
    assert out.returncode == 0, out.stderr[-2000:]
    types = {int(t) for t in re.findall(r'key: \{"type":"(\d+)","data":\{"groupId":"g1"', out.stdout)}
    assert types >= {3, 4, 5, 6, 7, 8}, out.stdout[-3000:]
    assert '"memberId":"a"' in out.stdout and '"assignmentEpoch":2' in out.stdout
    assert re.search(r'key: \{"type":"16","data":\{"groupId":"g3","regularExpression":"\[t\]"\}\} '
                     r'payload: \{"version":"0","data":\{"topics":\["t"\]', out.stdout), \
        [ln for ln in out.stdout.splitlines() if '"type":"16"' in ln]
