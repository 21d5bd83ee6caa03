"""Consumer groups against `seglog broker`: subscribe(), rebalancing, committed offsets in
`__consumer_offsets` surviving a broker restart (clean and SIGKILL), kafka-python groups, the
coordinator's session expiry over the raw protocol, and OffsetForLeaderEpoch."""
from __future__ import annotations

import signal
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from broker_helpers import (connect, create, parse_response, produce, recv_frame,  # noqa: E402
                            request_frame)
from logcore.coordinator import offsets_topic as OT  # noqa: E402
from logcore.log.log_root import LogRoot  # noqa: E402

FAST_GROUPS = {"group.min.session.timeout.ms": 100, "offsets.topic.num.partitions": 3}


def _consumer(b, group: str, **conf) -> Consumer:
    settings = {"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "session.timeout.ms": 3000, "heartbeat.interval.ms": 100,
                "fetch.wait.max.ms": 50, "topic.metadata.refresh.interval.ms": 1000}
    settings.update(conf)
    return Consumer(settings)


def _poll_until(consumers: list[Consumer], done, timeout: float = 20) -> dict:
    """Poll every consumer in turn until done(got) or timeout; got[i] = [(partition, offset, value)]."""
    got = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while not done(got) and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                got[i].append((m.partition(), m.offset(), m.value()))
    return got


def test_subscribe_two_consumers_rebalance_and_commit(broker_factory):
    b = broker_factory(**FAST_GROUPS)
    create(b, "grp", 4)
    produce(b, "grp", [b"v%d" % i for i in range(400)])
    c1 = _consumer(b, "g")
    c1.subscribe(["grp"])
    first = _poll_until([c1], lambda got: len(got[0]) >= 100)
    assert len(first[0]) >= 100
    assert sorted(tp.partition for tp in c1.assignment()) == [0, 1, 2, 3]

    c2 = _consumer(b, "g")
    c2.subscribe(["grp"])

    def split(_got):
        a1 = {tp.partition for tp in c1.assignment()}
        a2 = {tp.partition for tp in c2.assignment()}
        return a1 and a2 and not a1 & a2 and a1 | a2 == {0, 1, 2, 3}

    _poll_until([c1, c2], split)
    a1 = {tp.partition for tp in c1.assignment()}
    a2 = {tp.partition for tp in c2.assignment()}
    assert a1 and a2 and not a1 & a2 and a1 | a2 == {0, 1, 2, 3}, (a1, a2)

    # Commit explicit positions from each member of the current generation.
    c1.commit(offsets=[TopicPartition("grp", p, 7 + p) for p in sorted(a1)], asynchronous=False)
    c2.commit(offsets=[TopicPartition("grp", p, 7 + p) for p in sorted(a2)], asynchronous=False)
    committed = c1.committed([TopicPartition("grp", p) for p in range(4)], timeout=10)
    assert [(tp.partition, tp.offset) for tp in committed] == [(p, 7 + p) for p in range(4)]

    # c2 leaves: c1 takes every partition back.
    c2.close()
    _poll_until([c1], lambda _: len(c1.assignment()) == 4)
    assert sorted(tp.partition for tp in c1.assignment()) == [0, 1, 2, 3]
    c1.close()

    # The commits are records of __consumer_offsets, in Kafka's layout.
    b.stop()
    with LogRoot.open(str(b.root)) as root:
        part = OT.partition_for("g", 3)
        records = list(root.log(OT.TOPIC, part).read_records(0))
    offsets = {}
    for r in records:
        key = OT.parse_key(r.key, "test")
        if isinstance(key, OT.OffsetKey):
            offsets[(key.topic, key.partition)] = OT.parse_offset_value(r.value, "test").offset
    assert offsets == {("grp", p): 7 + p for p in range(4)}
    assert any(isinstance(OT.parse_key(r.key, "test"), OT.GroupKey) for r in records)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_committed_offsets_survive_a_restart_mid_life(broker_factory, how):
    b = broker_factory(**FAST_GROUPS)
    create(b, "resume", 2)
    produce(b, "resume", [b"a%d" % i for i in range(100)])
    c1 = _consumer(b, "rg", **{"reconnect.backoff.max.ms": 200})
    c1.subscribe(["resume"])
    got = _poll_until([c1], lambda g: len(g[0]) >= 100)[0]
    assert len(got) == 100
    c1.commit(offsets=[TopicPartition("resume", 0, 30), TopicPartition("resume", 1, 20)], asynchronous=False)

    # Restart the broker on the same port while c1 is a member.
    assert b.stop(how) in (0, -signal.SIGKILL)
    b2 = broker_factory(b.root, listeners=f"PLAINTEXT://127.0.0.1:{b.port}", **FAST_GROUPS)
    produce(b2, "resume", [b"b%d" % i for i in range(10)], partition=0)
    ends = {p: max(o for q, o, _ in got if q == p) + 1 for p in (0, 1)}
    # c1 goes on at the restarted coordinator (which read the group back with its members: c1
    # continues from its position) or, had its session ended, rejoins and restarts from the
    # committed offsets; either way it reads what was produced after the restart.
    news = lambda g: {v for _, _, v in g[0] if v.startswith(b"b")}  # noqa: E731
    after = _poll_until([c1], lambda g: len(news(g)) == 10, timeout=30)
    assert news(after) == {b"b%d" % i for i in range(10)}
    firsts = {}
    for p, o, _ in after[0]:
        firsts.setdefault(p, o)
    assert firsts[0] in (30, ends[0]) and firsts.get(1, 20) in (20, ends[1])
    c1.close()

    # A new member of the group resumes from the committed offsets.
    c2 = _consumer(b2, "rg")
    c2.subscribe(["resume"])
    resumed = _poll_until([c2], lambda g: len(g[0]) >= (50 - 30) + (50 - 20) + 10)[0]
    firsts = {}
    for p, o, _ in resumed:
        firsts.setdefault(p, o)
    assert firsts == {0: 30, 1: 20}
    assert len(resumed) == (50 - 30) + (50 - 20) + 10
    c2.close()


def test_kafka_python_consumer_group(broker_factory):
    kafka = pytest.importorskip("kafka")
    b = broker_factory(**FAST_GROUPS)
    create(b, "kp", 2)
    produce(b, "kp", [b"k%d" % i for i in range(50)])
    c = kafka.KafkaConsumer("kp", bootstrap_servers=b.bootstrap, group_id="kpg", auto_offset_reset="earliest",
                            enable_auto_commit=False, consumer_timeout_ms=3000, session_timeout_ms=3000,
                            heartbeat_interval_ms=300)
    values = []
    for m in c:
        values.append(m.value)
        if len(values) == 50:
            break
    assert sorted(values) == sorted(b"k%d" % i for i in range(50))
    c.commit()
    tps = [kafka.TopicPartition("kp", p) for p in (0, 1)]
    assert sum(c.committed(tp) for tp in tps) == 50
    c.close()
    c2 = kafka.KafkaConsumer(bootstrap_servers=b.bootstrap, group_id="kpg", enable_auto_commit=False)
    assert sum(c2.committed(tp) for tp in tps) == 50
    c2.close()


# ------------------------------------------------------------------ raw protocol

def _call(sock, key: int, version: int, body, cid: int = 1):
    sock.sendall(request_frame(key, version, body, cid))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    return parse_response(key, version, frame)[1]


def _join(sock, member_id: str, session_ms: int):
    import datetime

    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
    return _call(sock, 11, 5, JoinGroupRequest(
        group_id="raw", session_timeout=datetime.timedelta(milliseconds=session_ms),
        rebalance_timeout=datetime.timedelta(seconds=5), member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),)))


def test_join_sync_heartbeat_and_session_expiry(broker_factory):
    from kio.schema.heartbeat.v3.request import HeartbeatRequest
    from kio.schema.sync_group.v3.request import SyncGroupRequestAssignment, SyncGroupRequest
    b = broker_factory(**FAST_GROUPS)
    with connect(b) as s:
        too_short = _join(s, "", 50)
        assert too_short.error_code.value == 26            # INVALID_SESSION_TIMEOUT
        first = _join(s, "", 400)
        assert first.error_code.value == 79 and first.member_id      # MEMBER_ID_REQUIRED
        joined = _join(s, first.member_id, 400)
        assert joined.error_code.value == 0 and joined.leader == first.member_id
        assert [m.member_id for m in joined.members] == [first.member_id]
        gen = joined.generation_id
        sync = _call(s, 14, 3, SyncGroupRequest(group_id="raw", generation_id=gen, member_id=first.member_id,
                                                group_instance_id=None, assignments=(
                                                    SyncGroupRequestAssignment(member_id=first.member_id,
                                                                        assignment=b"mine"),)))
        assert sync.error_code.value == 0 and sync.assignment == b"mine"
        # DescribeGroups names the member's host as Kafka does (kafka-consumer-groups' HOST column)
        from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
        described = _call(s, 15, 5, DescribeGroupsRequest(groups=("raw",), include_authorized_operations=False))
        assert [m.client_host for m in described.groups[0].members] == ["/127.0.0.1"]
        hb = lambda g: _call(s, 12, 3, HeartbeatRequest(group_id="raw", generation_id=g,  # noqa: E731
                                                        member_id=first.member_id, group_instance_id=None))
        assert hb(gen).error_code.value == 0
        assert hb(gen + 5).error_code.value == 22            # ILLEGAL_GENERATION
        time.sleep(0.8)                                      # no heartbeat for twice the session
        assert hb(gen).error_code.value == 25                # UNKNOWN_MEMBER_ID: expired


def test_offset_for_leader_epoch(broker_factory):
    from kio.schema.offset_for_leader_epoch.v2.request import (OffsetForLeaderEpochRequest,
                                                               OffsetForLeaderPartition,
                                                               OffsetForLeaderTopic)
    b = broker_factory()
    create(b, "epochs", 1)
    produce(b, "epochs", [b"x"] * 10, acks="all")
    b.stop()
    b2 = broker_factory(b.root)           # a restart: a new leader epoch
    produce(b2, "epochs", [b"y"] * 5, acks="all")
    with LogRoot.open(str(b2.root)) as root:
        entries = root.log("epochs", 0).epoch_cache.entries
    assert len(entries) == 2 and entries[1][1] == 10
    (e0, _), (e1, _) = entries

    def ask(epoch: int, current: int = -1):
        body = OffsetForLeaderEpochRequest(topics=(OffsetForLeaderTopic(topic="epochs", partitions=(
            OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch),)),))
        with connect(b2) as s:
            p = _call(s, 23, 2, body).topics[0].partitions[0]
        return p.error_code.value, p.leader_epoch, p.end_offset

    assert ask(e0) == (0, e0, 10)              # the old epoch ended where the new one began
    assert ask(e1) == (0, e1, 15)              # the latest epoch ends at the log end
    assert ask(e1 + 1) == (0, -1, -1)          # an epoch the log never had: undefined
    assert ask(e0, current=e1 + 1)[0] == 75    # the client knows a newer leader: UNKNOWN_LEADER_EPOCH
    assert ask(e0, current=e0)[0] == 74        # the client's leader is older: FENCED_LEADER_EPOCH


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_stable_group_goes_on_after_a_restart_without_rebalancing(broker_factory, how):
    """Kafka's loadGroup: the coordinator reads a group back Stable with the members,
    assignments and generation last written; a member that goes on heartbeating keeps its id and
    commits with it, and one that stops is expired after its session."""
    from logcore.wire.client import KafkaConnection
    b = broker_factory(**FAST_GROUPS)
    create(b, "stay", 2)
    group = {"group_id": "stable"}

    def join(conn, member_id: str):
        return conn.request(11, {**group, "session_timeout": 2000, "rebalance_timeout": 5000,
                                 "member_id": member_id, "protocol_type": "consumer",
                                 "protocols": [{"name": "range", "metadata": b"subscription"}]})

    def commit(conn, generation: int, member_id: str, offset: int) -> int:
        r = conn.request(8, {**group, "generation_id_or_member_epoch": generation, "member_id": member_id,
                             "topics": [{"name": "stay", "partitions": [
                                 {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]})
        return int(r.topics[0].partitions[0].error_code)

    with KafkaConnection("127.0.0.1", b.port, timeout_s=10) as conn:
        member = join(conn, "").member_id                  # MEMBER_ID_REQUIRED hands out the id
        joined = join(conn, member)
        assert int(joined.error_code) == 0 and joined.leader == member
        generation = joined.generation_id
        sync = conn.request(14, {**group, "generation_id": generation, "member_id": member,
                                 "assignments": [{"member_id": member, "assignment": b"partitions 0-1"}]})
        assert int(sync.error_code) == 0
        assert commit(conn, generation, member, 5) == 0

    assert b.stop(how) in (0, -signal.SIGKILL)
    b2 = broker_factory(b.root, listeners=f"PLAINTEXT://127.0.0.1:{b.port}", **FAST_GROUPS)
    with KafkaConnection("127.0.0.1", b2.port, timeout_s=10) as conn:
        hb = conn.request(12, {**group, "generation_id": generation, "member_id": member})
        assert int(hb.error_code) == 0                      # the same member, the same generation
        assert commit(conn, generation, member, 9) == 0
        described = conn.request(15, {"groups": ["stable"]}).groups[0]
        assert (described.group_state, described.protocol_data) == ("Stable", "range")
        assert [(m.member_id, bytes(m.member_assignment), bytes(m.member_metadata))
                for m in described.members] == [(member, b"partitions 0-1", b"subscription")]
        fetched = conn.request(9, {"groups": [{"group_id": "stable", "topics": [
            {"name": "stay", "partition_indexes": [0]}]}]}).groups[0]
        assert int(fetched.topics[0].partitions[0].committed_offset) == 9
        time.sleep(2.6)                                     # no heartbeat for more than the session
        hb = conn.request(12, {**group, "generation_id": generation, "member_id": member})
        assert int(hb.error_code) == 25                     # UNKNOWN_MEMBER_ID: expired
        assert commit(conn, generation, member, 11) == 25
