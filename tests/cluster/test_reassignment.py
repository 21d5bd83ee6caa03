"""Partition reassignment on a three-broker seglog cluster (KIP-455, ZooKeeper mode), through
real clients: kafka-python's AdminClient (AlterPartitionReassignments / ListPartitionReassignments),
confluent-kafka producing with acks=all during a move and reading everything back, Apache
Kafka's own kafka-reassign-partitions tool and `seglog reassign-partitions`. One cluster serves
every case (each on its own topic)."""
from __future__ import annotations

import json
import threading

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
kp = pytest.importorskip("kafka", reason="kafka-python is not installed")

pytestmark = pytest.mark.timeout(300)

REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    with SeglogCluster.running(tmp_path_factory.mktemp("reassign"), zk_server.connect_string + "/reassign",
                               size=3, props={"min.insync.replicas": "1"}) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    a = kp.KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield a
    a.close()


def _create(cluster, topic, replicas, *others):
    """Partition 0 on `replicas`, partitions 1.. on `others`."""
    from kafka.admin import NewTopic
    a = kp.KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        a.create_topics([NewTopic(topic, -1, -1, replica_assignments=dict(enumerate([replicas, *others])))])
    finally:
        a.close()
    cluster.wait_for(lambda: (md := cluster.metadata(topic)) and md[0][0] >= 0
                     and sorted(md[0][2]) == sorted(replicas), 30, f"{topic}'s leader and ISR")


def _settled(cluster, admin, topic, replicas):
    """Metadata shows `replicas` with all of them in the ISR and no reassignment is listed."""
    leader, reps, isr = cluster.metadata(topic)[0]
    return (reps == list(replicas) and sorted(isr) == sorted(replicas) and leader in replicas
            and not admin.list_partition_reassignments([kp.TopicPartition(topic, 0)]))


def _ids(ids) -> str:
    return ",".join(str(b) for b in ids)


def _local_data(broker, topic, partition=0):
    """Files of the replica in the broker's log dir other than partition.metadata."""
    folder = broker.log_dir / f"{topic}-{partition}"
    return sorted(p.name for p in folder.iterdir() if p.name != "partition.metadata") if folder.exists() else []


def _read_all(cluster, topic):
    return [v for _o, _k, v in cluster.read_partition(topic)]


def test_reassignment_file_errors(tmp_path, capsys):
    """The JSON file is checked before any broker is asked (kafka-reassign-partitions' rules)."""
    from logcore.tools.cli import main
    cases = {
        '{"version":1,"partitions":[]}': "Partition reassignment list cannot be empty",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}':
            "Duplicate replica assignment found for partition t-0",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
        '{"topic":"t","partition":0,"replicas":[2]}]}': "Duplicate reassignment partitions: t-0",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}':
            "a seglog broker has one log dir",
        '{"version":1,"partitions":[{"topic":"t","replicas":[1]}]}': "partitions[0] is not",
    }
    for i, (text, message) in enumerate(cases.items()):
        f = tmp_path / f"plan{i}.json"
        f.write_text(text)
        capsys.readouterr()
        code = main(["reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--reassignment-json-file",
                     str(f), "--execute"])
        err = capsys.readouterr().err
        assert code == 1 and message in err and str(f) in err, (text, err)


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
        cluster.wait_for(lambda: len(acked) > 200, 30, "records acknowledged before the move")
        assert admin.alter_partition_reassignments({kp.TopicPartition(topic, 0): [2, 3]}) == \
            {kp.TopicPartition(topic, 0): None}
        cluster.wait_for(lambda: _settled(cluster, admin, topic, [2, 3]), 40, "the move to [2,3]")
        moved_at = len(acked)
        cluster.wait_for(lambda: len(acked) > moved_at + 200, 30, "records acknowledged after the move")
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


def test_new_partitions_on_replicas_the_client_names(cluster):
    """CreatePartitions with manual assignments (librdkafka's 0081 asks for them): the new
    partitions get exactly those replicas; a wrong count of assignments, an unknown broker and
    another replication factor are refused with INVALID_REPLICA_ASSIGNMENT, as Kafka does."""
    from confluent_kafka.admin import AdminClient, NewPartitions
    topic = "grown"
    _create(cluster, topic, [1, 2])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def grow(total, assignment, validate_only=False):
        future = admin.create_partitions([NewPartitions(topic, total, replica_assignment=assignment)],
                                         validate_only=validate_only)[topic]
        try:
            future.result(30)
            return "ok"
        except ck.KafkaException as exc:
            return exc.args[0].name()
    assert grow(3, [[3, 1]]) == "INVALID_REPLICA_ASSIGNMENT"            # one assignment for two new partitions
    assert grow(2, [[1, 9]]) == "INVALID_REPLICA_ASSIGNMENT"            # broker 9 does not exist
    assert grow(2, [[1, 2, 3]]) == "INVALID_REPLICA_ASSIGNMENT"         # replication factor 3, not 2
    assert grow(3, [[3, 1], [2, 3]], validate_only=True) == "ok"
    assert list(cluster.metadata(topic)) == [0]
    assert grow(3, [[3, 1], [2, 3]]) == "ok"
    cluster.wait_for(lambda: {p: r for p, (leader, r, _isr) in cluster.metadata(topic).items() if leader >= 0}
                     == {0: [1, 2], 1: [3, 1], 2: [2, 3]}, 30, "the new partitions on the named replicas")


def _plan(tmp_path, name, moves) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
    return str(path)


def _seglog(capsys, *argv) -> tuple[int, str, str]:
    from logcore.tools.cli import main
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_kafka_reassign_tool_and_seglog_cli(cluster, admin, kafka_jars, tmp_path, capsys):
    """Apache Kafka's kafka-reassign-partitions --execute / --verify against seglog (its --verify
    also removes throttles: IncrementalAlterConfigs DELETE), then `seglog reassign-partitions`
    moves the partition back."""
    topic = "tool"
    _create(cluster, topic, [1, 2])
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        p.produce(topic, value=b"t%d" % i)
    assert p.flush(30) == 0
    there = _plan(tmp_path, "there.json", {(topic, 0): [2, 3]})
    run = kafka_jars.run_tool(REASSIGN_TOOL, ["--bootstrap-server", cluster.bootstrap,
                                              "--reassignment-json-file", there, "--execute"])
    assert run.returncode == 0, run.stderr
    assert run.stdout == (
        "Current partition replica assignment\n\n"
        '{"version":1,"partitions":[{"topic":"tool","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}\n\n'
        "Save this to use as the --reassignment-json-file option during rollback\n"
        "Successfully started partition reassignment for tool-0\n")
    cluster.wait_for(lambda: _settled(cluster, admin, topic, [2, 3]), 30, "the move to [2,3]")
    run = kafka_jars.run_tool(REASSIGN_TOOL, ["--bootstrap-server", cluster.bootstrap,
                                              "--reassignment-json-file", there, "--verify"])
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Status of partition reassignment:\n"
                                 "Reassignment of partition tool-0 is completed.\n")
    assert "Clearing topic-level throttles on topic tool" in run.stdout
    cluster.wait_for(lambda: not (cluster.brokers[1].log_dir / f"{topic}-0").exists(), 10, "broker 1's replica deleted")

    back = _plan(tmp_path, "back.json", {(topic, 0): [1, 2]})
    code, out, _ = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                           "--reassignment-json-file", back, "--execute")
    assert code == 0
    assert out.endswith('"replicas":[2,3],"log_dirs":["any","any"]}]}\n\n'
                        "Save this to use as the --reassignment-json-file option during rollback\n"
                        "Successfully started partition reassignment for tool-0\n")
    cluster.wait_for(lambda: _settled(cluster, admin, topic, [1, 2]), 30, "the move back to [1,2]")
    code, out, _ = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                           "--reassignment-json-file", back, "--verify")
    # done: the throttles are cleared as Kafka's tool clears them (whether or not any was set)
    assert (code, out) == (0, "Status of partition reassignment:\nReassignment of partition tool-0 is completed.\n\n"
                              "Clearing broker-level throttles on brokers 1,2,3\n"
                              "Clearing topic-level throttles on topic tool\n")
    code, out, _ = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                           "--reassignment-json-file", there, "--verify")
    assert "There is no active reassignment of partition tool-0, but replica set is 1,2 rather than 2,3." in out
    assert _read_all(cluster, topic) == [b"t%d" % i for i in range(100)]
    cluster.wait_for(lambda: not (cluster.brokers[3].log_dir / f"{topic}-0").exists(), 10, "broker 3's replica deleted")
    # refusals: exit status 1 with Kafka's error
    bad = _plan(tmp_path, "bad.json", {(topic, 0): [1, 7]})
    code, _, err = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                           "--reassignment-json-file", bad, "--execute")
    assert code == 1 and "tool-0: INVALID_REPLICA_ASSIGNMENT" in err


def test_cancel_reverts_and_describe_matches_kafka(cluster, admin, zk_server, tmp_path, capsys, request):
    """A move that cannot finish (its new replica is broker 9: registered in ZooKeeper, but no
    process behind it, its port closed) is listed, described with Adding Replicas
    byte-identically to kafka-topics, then cancelled: replicas, ISR and leader are the original
    ones again."""
    from logcore.cluster.zookeeper_store import ZooKeeperStore
    from zookeeper_reference import free_ports
    topic = "cancelled"
    origin = [1, 2]
    _create(cluster, topic, origin)
    leader = cluster.leader_of(topic)
    plan = _plan(tmp_path, "add.json", {(topic, 0): origin + [9]})
    try:
        jars = request.getfixturevalue("kafka_jars")
    except pytest.skip.Exception:
        jars = None                                 # describe is then checked against Kafka's format only
    ghost = ZooKeeperStore(zk_server.connect_string + "/reassign", session_timeout_ms=10000).start()
    try:
        ghost.register_broker(9, "127.0.0.1", free_ports(1)[0])
        cluster.wait_for(lambda: 9 in {b["broker_id"] for b in admin.describe_cluster()["brokers"]}, 10,
                         "broker 9 registered")
        code, out, _ = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                               "--reassignment-json-file", plan, "--execute")
        assert code == 0 and out.endswith(f"Successfully started partition reassignment for {topic}-0\n")
        code, out, _ = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--list")
        assert out == f"Current partition reassignments:\n{topic}-0: replicas: 1,2,9. adding: 9.\n"
        assert admin.list_partition_reassignments([kp.TopicPartition(topic, 0)]) == {
            kp.TopicPartition(topic, 0): {"replicas": [1, 2, 9], "adding_replicas": [9], "removing_replicas": []}}
        # asked of broker 3, which holds no replica of the topic (its configs come from ZooKeeper)
        code, described, _ = _seglog(capsys, "topics", "--bootstrap-server", cluster.brokers[3].address,
                                     "--describe", "--topic", topic)
        assert "\tReplicas: 1,2,9\tIsr: " in described
        assert "\tAdding Replicas: 9\tRemoving Replicas: \tElr: N/A" in described
        assert "\tReplicationFactor: 2\t" in described                # Kafka's: replicas - adding
        if jars is not None:
            kafka = jars.run_tool(jars.topic_command, ["--bootstrap-server", cluster.bootstrap, "--describe",
                                                       "--topic", topic])
            assert kafka.returncode == 0, kafka.stderr
            assert kafka.stdout == described
        code, out, _ = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                               "--reassignment-json-file", plan, "--verify")
        assert out == f"Status of partition reassignment:\nReassignment of partition {topic}-0 is still in progress.\n\n"
        code, out, _ = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                               "--reassignment-json-file", plan, "--cancel")
        assert (code, out) == (0, f"Successfully cancelled partition reassignment for: {topic}-0\n")
        cluster.wait_for(lambda: _settled(cluster, admin, topic, origin), 20, "the cancel")
        assert cluster.leader_of(topic) == leader
    finally:
        ghost.close()
    code, out, _ = _seglog(capsys, "reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                           "--reassignment-json-file", plan, "--cancel")
    assert out == "None of the specified partition reassignments are active.\n"


def test_replica_moved_while_its_broker_was_down_is_deleted_at_restart(cluster, admin):
    """Broker 1 is stopped, partition 0 moves from [1,2] to [2,3] (partition 1 stays on [1,3]);
    when broker 1 starts again it finds partition 0 gone from its assignment and deletes the data
    it still had, keeping partition 1."""
    topic = "away"
    _create(cluster, topic, [1, 2], [1, 3])
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(50):
        p.produce(topic, value=b"a%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    down = cluster.brokers[1]
    cluster.wait_for(lambda: _local_data(down, topic, 0) and _local_data(down, topic, 1), 10, "broker 1's replicas")
    assert down.stop() == 0                     # SIGTERM: a clean stop
    with kp.KafkaAdminClient(bootstrap_servers=cluster.brokers[2].address) as a:
        assert _codes(a.alter_partition_reassignments({kp.TopicPartition(topic, 0): [2, 3]})) == \
            {kp.TopicPartition(topic, 0): 0}
        cluster.wait_for(lambda: _settled(cluster, a, topic, [2, 3]), 30, "the move to [2,3]")
    assert _local_data(down, topic, 0)          # still there while the broker is down
    down.start()
    cluster.wait_for(lambda: not _local_data(down, topic, 0), 20, "broker 1's left-over replica deleted")
    assert cluster.metadata(topic, broker=1)[0][1] == [2, 3]
    assert _local_data(down, topic, 1)
    cluster.wait_for(lambda: sorted(cluster.metadata(topic)[1][2]) == [1, 3], 20, "broker 1 back in the ISR of partition 1")
