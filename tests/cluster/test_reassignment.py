"""Partition reassignment on a three-broker seglog cluster (KIP-455, ZooKeeper mode), through
real clients: kafka-python's AdminClient (AlterPartitionReassignments / ListPartitionReassignments),
confluent-kafka producing with acks=all during a move and reading everything back, Apache
Kafka's own kafka-reassign-partitions tool and `seglog reassign-partitions`. One cluster serves
every case (each on its own topic)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
kp = pytest.importorskip("kafka", reason="kafka-python is not installed")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = SeglogCluster(tmp_path_factory.mktemp("reassign"), zk_server.connect_string + "/reassign", size=3,
                      props={"min.insync.replicas": "1"})
    try:
        c.start()
        yield c
    finally:
        c.close()
        print(c.logs())         # shown by pytest when a test failed


@pytest.fixture(scope="module")
def admin(cluster):
    a = kp.KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield a
    a.close()


def _create(cluster, topic, replicas):
    from kafka.admin import NewTopic
    a = kp.KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        a.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: replicas})])
    finally:
        a.close()
    cluster.wait_for(lambda: (md := cluster.metadata(topic)) and md[0][0] >= 0
                     and sorted(md[0][2]) == sorted(replicas), 30, f"{topic}'s leader and ISR")


def _settled(cluster, admin, topic, replicas):
    """Metadata shows `replicas` with all of them in the ISR and no reassignment is listed."""
    leader, reps, isr = cluster.metadata(topic)[0]
    return (reps == list(replicas) and sorted(isr) == sorted(replicas) and leader in replicas
            and not admin.list_partition_reassignments([kp.TopicPartition(topic, 0)]))


def _local_data(broker, topic, partition=0):
    """Files of the replica in the broker's log dir other than partition.metadata."""
    folder = broker.log_dir / f"{topic}-{partition}"
    return sorted(p.name for p in folder.iterdir() if p.name != "partition.metadata") if folder.exists() else []


def _read_all(cluster, topic):
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                     "auto.offset.reset": "error", "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        out, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consumer error {m.error()}")
            out.append(m.value())
        raise AssertionError(f"did not reach the end of {topic}-0")
    finally:
        c.close()


def test_move_under_acks_all_load(cluster, admin):
    """[1,2] -> [2,3] while a producer writes with acks=all: nothing acknowledged is lost, the
    replica on broker 1 is deleted, the ISR ends as [2,3]."""
    topic = "moving"
    _create(cluster, topic, [1, 2])
    acked, failed, stop = [], {}, threading.Event()

    def produce():
        p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 2, "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 500})

        def report(err, msg):
            if err is None:
                acked.append(msg.value())
            else:
                failed[msg.value()] = err.name()
        i = 0
        while not stop.is_set():
            p.produce(topic, value=b"v%06d" % i, on_delivery=report)
            i += 1
            p.poll(0.002)
        p.flush(60)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        cluster.wait_for(lambda: len(acked) > 300, 30, "records acknowledged before the move")
        assert admin.alter_partition_reassignments({kp.TopicPartition(topic, 0): [2, 3]}) == \
            {kp.TopicPartition(topic, 0): None}
        cluster.wait_for(lambda: _settled(cluster, admin, topic, [2, 3]), 40, "the move to [2,3]")
        moved_at = len(acked)
        cluster.wait_for(lambda: len(acked) > moved_at + 300, 30, "records acknowledged after the move")
    finally:
        stop.set()
        writer.join(90)
    assert not failed, f"failed sends: {dict(list(failed.items())[:5])}"
    leader, replicas, isr = cluster.metadata(topic)[0]
    assert replicas == [2, 3] and sorted(isr) == [2, 3] and leader in (2, 3)
    read = _read_all(cluster, topic)
    assert set(acked) <= set(read), f"{len(set(acked) - set(read))} acknowledged records lost"
    assert len(read) == len(set(read)), "duplicates"
    # broker 1 holds no replica of the topic any more: its files are gone
    cluster.wait_for(lambda: not (cluster.brokers[1].log_dir / f"{topic}-0").exists(), 10,
                     "broker 1's replica deleted")
    assert len(_local_data(cluster.brokers[3], topic)) > 0


def test_leader_not_in_target_moves(cluster, admin):
    """[1,2,3] -> [3,2]: the leader (1) is not in the target: the first live target replica in
    the ISR (3) leads, broker 1 drops out of the ISR and deletes its replica."""
    topic = "leaving"
    _create(cluster, topic, [1, 2, 3])
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(200):
        p.produce(topic, value=b"r%d" % i)
    assert p.flush(30) == 0
    assert cluster.leader_of(topic) == 1
    assert admin.alter_partition_reassignments({kp.TopicPartition(topic, 0): [3, 2]}) == \
        {kp.TopicPartition(topic, 0): None}
    cluster.wait_for(lambda: _settled(cluster, admin, topic, [3, 2]), 30, "the move to [3,2]")
    assert cluster.leader_of(topic) == 3
    cluster.wait_for(lambda: not (cluster.brokers[1].log_dir / f"{topic}-0").exists(), 10,
                     "broker 1's replica deleted")
    assert _read_all(cluster, topic) == [b"r%d" % i for i in range(200)]


def _codes(result) -> dict:
    """{TopicPartition: Kafka error code} of kafka-python's per-partition answer (0: accepted)."""
    return {tp: (err.errno if err is not None else 0) for tp, err in result.items()}


def test_errors_as_kafka_gives_them(cluster, admin):
    topic = "errs"
    _create(cluster, topic, [1, 2])
    tp = kp.TopicPartition(topic, 0)
    alter = admin.alter_partition_reassignments
    res = _codes(alter({kp.TopicPartition("no-such-topic", 0): [1, 2], kp.TopicPartition(topic, 5): [1, 2]}))
    assert set(res.values()) == {3}                        # UNKNOWN_TOPIC_OR_PARTITION
    assert _codes(alter({tp: [2, 2]})) == {tp: 39}         # INVALID_REPLICA_ASSIGNMENT: duplicates
    assert _codes(alter({tp: [1, 9]})) == {tp: 39}         # broker 9 does not exist
    assert _codes(alter({tp: None})) == {tp: 85}           # NO_REASSIGNMENT_IN_PROGRESS
    assert admin.list_partition_reassignments() == {}
    assert cluster.metadata(topic)[0][1] == [1, 2]
