"""Consumer groups on a three-broker seglog cluster: __consumer_offsets created through
ZooKeeper at the first FindCoordinator (not while fewer brokers live than its replication
factor), the coordinator is the leader of the group's partition, other brokers answer
NOT_COORDINATOR, and a group survives the SIGKILL of its coordinator with its committed offsets
(confluent-kafka and kafka-python consumers)."""
from __future__ import annotations

import json
import time

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

from logcore.coordinator import offsets_topic as OT  # noqa: E402
from logcore.wire.api_keys import (DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP,  # noqa: E402
                                   LIST_GROUPS, METADATA, OFFSET_COMMIT, OFFSET_FETCH)
from logcore.wire.client import KafkaConnection  # noqa: E402
from logcore.wire.error_codes import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,  # noqa: E402
                                      NONE, NOT_COORDINATOR, REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION)

OFFSETS_PARTITIONS = 3          # offsets.topic.num.partitions in seglog_cluster.FAST


@pytest.fixture
def cluster(tmp_path, zk_hosts):
    with SeglogCluster.running(tmp_path, zk_hosts, size=3, props={"min.insync.replicas": "2"}) as c:
        # Each broker registers once it serves, and learns of the others through its watches.
        c.wait_for(lambda: all(len(_live_brokers(c, b)) == 3 for b in (1, 2, 3)), 30, "every broker seeing all three")
        yield c


def _ask(cluster, broker_id: int, api_key: int, body: dict):
    with KafkaConnection("127.0.0.1", cluster.brokers[broker_id].port, timeout_s=10) as conn:
        return conn.request(api_key, body)


def _live_brokers(cluster, broker_id: int) -> dict:
    with KafkaConnection("127.0.0.1", cluster.brokers[broker_id].port, timeout_s=10) as conn:
        return conn.metadata_brokers()[0]


def _find(cluster, broker_id: int, group: str) -> tuple[int, int]:
    """(error code, coordinator node id) of FindCoordinator asked of one broker."""
    with KafkaConnection("127.0.0.1", cluster.brokers[broker_id].port, timeout_s=10) as conn:
        r = conn.request(FIND_COORDINATOR, {"key": group, "key_type": 0}, version=2)
    return int(r.error_code), int(r.node_id)


def _coordinator(cluster, group: str, timeout: float = 30.0) -> int:
    def found():
        for b in cluster.brokers.values():
            if b.alive():
                code, node = _find(cluster, b.id, group)
                return node if code == NONE else None
        return None
    return cluster.wait_for(found, timeout, f"a coordinator for group {group!r}", interval=0.2)


def _commit(cluster, broker_id: int, group: str, topic: str, offsets: dict[int, int]) -> list[int]:
    """A simple (assign()-style) OffsetCommit: the error code of each partition."""
    r = _ask(cluster, broker_id, OFFSET_COMMIT, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_metadata": ""} for p, o in offsets.items()]}]})
    return [int(p.error_code) for t in r.topics for p in t.partitions]


def _fetch(cluster, broker_id: int, group: str, topic: str, partitions) -> tuple[int, dict[int, int]]:
    """OffsetFetch (v8+: per group): the group's error code and {partition: committed offset}."""
    r = _ask(cluster, broker_id, OFFSET_FETCH, {"groups": [
        {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(partitions)}]}]})
    g = r.groups[0]
    return int(g.error_code), {int(p.partition_index): int(p.committed_offset)
                               for t in g.topics for p in t.partitions}


def test_offsets_topic_created_at_first_find_coordinator_once_enough_brokers_live(cluster, zk_client):
    cluster.create_topic("data", partitions=2, rf=3)
    # One broker down: offsets.topic.replication.factor=3 cannot be met (Kafka's rule).
    cluster.brokers[3].kill()
    cluster.wait_for(lambda: len(_live_brokers(cluster, 1)) == 2, 20, "broker 3's registration gone")
    assert _find(cluster, 1, "g1") == (COORDINATOR_NOT_AVAILABLE, -1)
    assert zk_client.exists(f"/brokers/topics/{OT.TOPIC}") is None
    md = _ask(cluster, 1, METADATA, {"topics": [{"name": OT.TOPIC}], "allow_auto_topic_creation": False})
    assert int(md.topics[0].error_code) == UNKNOWN_TOPIC_OR_PARTITION
    assert "__consumer_offsets not created: offsets.topic.replication.factor=3 but only 2 live brokers" \
        in cluster.brokers[1].log_text()

    cluster.brokers[3].start()
    coordinator = _coordinator(cluster, "g1")
    # Created through ZooKeeper: 3 partitions of 3 replicas, compacted.
    assignment = json.loads(zk_client.get(f"/brokers/topics/{OT.TOPIC}")[0])["partitions"]
    assert sorted(assignment) == ["0", "1", "2"] and all(sorted(r) == [1, 2, 3] for r in assignment.values())
    config = json.loads(zk_client.get(f"/config/topics/{OT.TOPIC}")[0])["config"]
    assert config["cleanup.policy"] == "compact"
    # The coordinator is the leader of the group's partition, and every broker says so.
    p = OT.partition_for("g1", OFFSETS_PARTITIONS)
    cluster.wait_for(lambda: all(len(isr) == 3 for _l, _r, isr in cluster.metadata(OT.TOPIC).values()), 30,
                     "full ISRs of __consumer_offsets")
    assert cluster.metadata(OT.TOPIC)[p][0] == coordinator
    # (each broker answers from its own view of ZooKeeper: the restarted one may lag a moment)
    cluster.wait_for(lambda: all(_find(cluster, b, "g1") == (NONE, coordinator) for b in (1, 2, 3)), 20,
                     "every broker naming the coordinator")
    others = [b for b in (1, 2, 3) if b != coordinator]

    # Only the coordinator takes the group's requests.
    cluster.wait_for(lambda: _commit(cluster, coordinator, "g1", "data", {0: 42, 1: 7}) == [NONE, NONE], 20,
                     "the commit at the coordinator (its load done)")
    for b in others:
        assert _commit(cluster, b, "g1", "data", {0: 1}) == [NOT_COORDINATOR]
        assert _fetch(cluster, b, "g1", "data", [0, 1])[0] == NOT_COORDINATOR
        r = _ask(cluster, b, JOIN_GROUP, {"group_id": "g1", "session_timeout": 10000, "rebalance_timeout": 10000,
                                          "member_id": "", "protocol_type": "consumer",
                                          "protocols": [{"name": "range", "metadata": b""}]})
        assert int(r.error_code) == NOT_COORDINATOR
        r = _ask(cluster, b, HEARTBEAT, {"group_id": "g1", "generation_id": 1, "member_id": "m"})
        assert int(r.error_code) == NOT_COORDINATOR
        r = _ask(cluster, b, DESCRIBE_GROUPS, {"groups": ["g1"]})
        assert int(r.groups[0].error_code) == NOT_COORDINATOR
        r = _ask(cluster, b, LIST_GROUPS, {})
        assert "g1" not in [g.group_id for g in r.groups]
    assert _fetch(cluster, coordinator, "g1", "data", [0, 1]) == (NONE, {0: 42, 1: 7})
    r = _ask(cluster, coordinator, LIST_GROUPS, {})
    assert int(r.error_code) == NONE and "g1" in [g.group_id for g in r.groups]
    # The commit was acknowledged once replicated: every replica holds the record.
    for b in cluster.brokers.values():
        folder = b.log_dir / f"{OT.TOPIC}-{p}"
        cluster.wait_for(lambda: b"g1" in b"".join(f.read_bytes() for f in folder.glob("*.log")), 10,
                         f"the commit record on broker {b.id}")


def test_offset_commit_is_acknowledged_only_once_replicated(cluster):
    """acks=all for the coordinator's records: with both followers of the group's partition
    stopped (SIGSTOP) the commit is appended but not acknowledged (offsets.commit.timeout.ms,
    5 s) and the coordinator does not serve it; resumed, commits are acknowledged again."""
    cluster.create_topic("data", partitions=1, rf=3)
    coordinator = _coordinator(cluster, "g2")
    cluster.wait_for(lambda: all(len(isr) == 3 for _l, _r, isr in cluster.metadata(OT.TOPIC).values()), 30,
                     "full ISRs of __consumer_offsets")
    cluster.wait_for(lambda: _commit(cluster, coordinator, "g2", "data", {0: 5}) == [NONE], 20, "a first commit")
    followers = [b for b in (1, 2, 3) if b != coordinator]
    for b in followers:
        cluster.brokers[b].pause()
    try:
        t0 = time.monotonic()
        codes = _commit(cluster, coordinator, "g2", "data", {0: 9})
        waited = time.monotonic() - t0
        assert codes in ([REQUEST_TIMED_OUT], [COORDINATOR_NOT_AVAILABLE]), codes
        assert waited >= 4.5, f"answered after {waited:.2f} s, before the commit timeout"
        assert _fetch(cluster, coordinator, "g2", "data", [0]) == (NONE, {0: 5})
    finally:
        for b in followers:
            cluster.brokers[b].resume()

    def committed_again():
        node = _coordinator(cluster, "g2")
        return _commit(cluster, node, "g2", "data", {0: 11}) == [NONE] and \
            _fetch(cluster, node, "g2", "data", [0]) == (NONE, {0: 11})
    cluster.wait_for(committed_again, 60, "a commit acknowledged after the followers resumed", interval=0.5)
    print(f"commit with both followers stopped answered {codes} after {waited:.2f} s")


def test_new_coordinator_answers_load_in_progress_until_the_groups_are_loaded(cluster):
    """Tens of thousands of commit records in the group's partition: after the SIGKILL of the
    coordinator, the new leader of the partition answers COORDINATOR_LOAD_IN_PROGRESS while it
    reads them back, then the last committed offsets."""
    wide = 300
    cluster.create_topic("wide", partitions=wide, rf=1)
    coordinator = _coordinator(cluster, "load")
    cluster.wait_for(lambda: all(len(isr) == 3 for _l, _r, isr in cluster.metadata(OT.TOPIC).values()), 30,
                     "full ISRs of __consumer_offsets")
    cluster.wait_for(lambda: _commit(cluster, coordinator, "load", "wide", {0: 0}) == [NONE], 20, "a first commit")
    rounds = 150
    with KafkaConnection("127.0.0.1", cluster.brokers[coordinator].port, timeout_s=30) as conn:
        for r in range(1, rounds + 1):
            answer = conn.request(OFFSET_COMMIT, {
                "group_id": "load", "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": "wide", "partitions": [
                    {"partition_index": p, "committed_offset": r * 1000 + p, "committed_metadata": ""}
                    for p in range(wide)]}]})
            assert {int(p.error_code) for t in answer.topics for p in t.partitions} == {NONE}
    cluster.brokers[coordinator].kill()
    others = [b for b in (1, 2, 3) if b != coordinator]
    seen: dict[int, list[int]] = {b: [] for b in others}
    conns = {b: KafkaConnection("127.0.0.1", cluster.brokers[b].port, timeout_s=10).connect() for b in others}
    try:
        deadline = time.monotonic() + 60
        new = None
        while new is None and time.monotonic() < deadline:
            for b, conn in conns.items():
                g = conn.request(OFFSET_FETCH, {"groups": [{"group_id": "load", "topics": [
                    {"name": "wide", "partition_indexes": [0, wide - 1]}]}]}).groups[0]
                code = int(g.error_code)
                if not seen[b] or seen[b][-1] != code:
                    seen[b].append(code)
                if code == NONE:
                    new = b
                    assert {int(p.partition_index): int(p.committed_offset) for t in g.topics
                            for p in t.partitions} == {0: rounds * 1000, wide - 1: rounds * 1000 + wide - 1}
    finally:
        for conn in conns.values():
            conn.close()
    assert new is not None, seen
    # Not the coordinator, then loading, then serving the loaded offsets.
    assert seen[new] == [NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, NONE], seen
    loaded = [line for line in cluster.brokers[new].log_text().splitlines() if "records loaded in" in line]
    print(f"broker {new}: {loaded[-1].split(': ', 1)[-1]}")


def _members(cluster, broker_id: int, group: str) -> list[str]:
    """Member ids of a Stable group, from DescribeGroups at its coordinator."""
    g = _ask(cluster, broker_id, DESCRIBE_GROUPS, {"groups": [group]}).groups[0]
    assert int(g.error_code) == NONE and g.group_state == "Stable", (int(g.error_code), g.group_state)
    return sorted(m.member_id for m in g.members)


def _consumer(cluster, group: str, **conf):
    settings = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000}
    settings.update(conf)
    return ck.Consumer(settings)


def _produce(cluster, topic: str, values: list[bytes]) -> None:
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 1000})
    failed = []
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % 3,
                  on_delivery=lambda err, msg: failed.append(err) if err is not None else None)
        p.poll(0)
    assert p.flush(70) == 0 and not failed, failed


def _poll(consumer, want: set[bytes], timeout: float = 60.0) -> list[tuple[int, int, bytes]]:
    """Poll until every value in `want` arrived (or timeout): [(partition, offset, value)]."""
    got = []
    deadline = time.monotonic() + timeout
    while not want <= {v for _p, _o, v in got} and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset(), m.value()))
    return got


def test_group_survives_sigkill_of_its_coordinator_with_its_committed_offsets(cluster):
    cluster.create_topic("gt", partitions=3, rf=3)
    first = [b"a%04d" % i for i in range(300)]
    _produce(cluster, "gt", first)
    c1 = _consumer(cluster, "grp")
    c1.subscribe(["gt"])
    got = _poll(c1, set(first))
    assert {v for _p, _o, v in got} == set(first)
    c1.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in c1.committed([ck.TopicPartition("gt", p) for p in range(3)], 10)}
    assert committed == {0: 100, 1: 100, 2: 100}

    coordinator = _coordinator(cluster, "grp")
    members = _members(cluster, coordinator, "grp")
    assert len(members) == 1
    cluster.brokers[coordinator].kill()
    t0 = time.monotonic()
    new = cluster.wait_for(lambda: (lambda n: n if n != coordinator else None)(_coordinator(cluster, "grp")),
                           30, "a new coordinator")
    moved_s = time.monotonic() - t0
    # The new coordinator loads the group's partition (COORDINATOR_LOAD_IN_PROGRESS meanwhile,
    # which clients retry); once loaded, the offsets committed before are there.
    fetched = cluster.wait_for(
        lambda: (lambda r: r if r[0] != COORDINATOR_LOAD_IN_PROGRESS else None)(
            _fetch(cluster, new, "grp", "gt", range(3))), 30, "the new coordinator's load", interval=0.1)
    assert fetched == (NONE, committed)

    # The group goes on: records produced after the failover are consumed by the same consumer,
    # which resumed from its committed offsets (nothing committed is read again).
    second = [b"b%04d" % i for i in range(300)]
    _produce(cluster, "gt", second)
    t1 = time.monotonic()
    after = _poll(c1, set(second))
    resumed_s = time.monotonic() - t1
    assert set(second) <= {v for _p, _o, v in after}, "the group did not continue on the new coordinator"
    assert not [v for _p, _o, v in after if v in set(first)], "committed records were consumed again"
    # The new coordinator loaded the group as it was (Kafka's loadGroup): the same member goes
    # on, no rebalance, and its commit with its member id and generation is taken.
    assert _members(cluster, new, "grp") == members
    c1.commit(asynchronous=False)                  # at the new coordinator
    c1.close()

    # A new member of the group starts where the group left off.
    third = [b"c%04d" % i for i in range(30)]
    _produce(cluster, "gt", third)
    c2 = _consumer(cluster, "grp")
    c2.subscribe(["gt"])
    got = _poll(c2, set(third))
    late = _poll(c2, set(), timeout=1.0)           # nothing else arrives
    c2.close()
    assert sorted(v for _p, _o, v in got + late) == sorted(third)
    print(f"coordinator {coordinator} SIGKILLed: broker {new} coordinates after {moved_s:.2f} s;"
          f" the consumer had the new records {resumed_s:.2f} s after they were produced")


def test_kafka_python_group_consumer_across_a_coordinator_failover(cluster):
    kafka = pytest.importorskip("kafka", reason="kafka-python is not installed")
    cluster.create_topic("kt", partitions=3, rf=3)
    first = [b"k%04d" % i for i in range(90)]
    _produce(cluster, "kt", first)

    def consumer():
        return kafka.KafkaConsumer("kt", bootstrap_servers=cluster.bootstrap, group_id="kgrp",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   session_timeout_ms=6000, heartbeat_interval_ms=200,
                                   consumer_timeout_ms=1000)

    def drain(c, want: set[bytes], timeout: float = 60.0) -> list[bytes]:
        got = []
        deadline = time.monotonic() + timeout
        while not want <= set(got) and time.monotonic() < deadline:
            try:
                for m in c:                       # stops after consumer_timeout_ms without records
                    got.append(m.value)
            except kafka.errors.KafkaConnectionError:
                # kafka-python 3 lets a refused connection to the killed broker (a bootstrap
                # server still) escape poll() from its coordinator lookup. The error is retriable:
                # a user polls again, as Kafka's Java consumer does by itself.
                continue
        return got

    c1 = consumer()
    assert set(drain(c1, set(first))) == set(first)
    c1.commit()
    c1.close()
    coordinator = _coordinator(cluster, "kgrp")
    cluster.brokers[coordinator].kill()
    cluster.wait_for(lambda: _coordinator(cluster, "kgrp") != coordinator, 30, "a new coordinator")
    second = [b"m%04d" % i for i in range(60)]
    _produce(cluster, "kt", second)
    c2 = consumer()
    got = drain(c2, set(second))
    c2.close()
    assert sorted(got) == sorted(second)           # resumed from the offsets committed before the kill
