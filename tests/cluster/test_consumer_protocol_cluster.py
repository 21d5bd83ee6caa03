"""Kafka 4's consumer group protocol (KIP-848, group.protocol=consumer) on a three-broker seglog
cluster: members of one group, Kafka 4.1.1's Java consumer (kafka_clients/GroupMember.java) and
librdkafka, share a topic's partitions; a member leaves and its partitions move; the broker
coordinating the group is SIGKILLed and the members go on with the new coordinator (the leader
of the group's __consumer_offsets partition), which loaded the group and its offsets: every
record is consumed, the committed offsets never go backwards. Kafka's kafka-consumer-groups
--describe reads the group. With `-m soak`, the same Java members against Apache Kafka 4.1.1
(KRaft) get the same assignment shape."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "kafka_clients"))

from group_member import GroupMemberProcess, compile_group_member  # noqa: E402
from java_program import JavaProgram, JavaUnavailable  # noqa: E402
from kafka_reference import kafka_unavailable  # noqa: E402
from seglog_cluster import SeglogCluster  # noqa: E402

from logcore.wire.client import KafkaConnection  # noqa: E402

pytestmark = pytest.mark.timeout(420)

TOPIC, GROUP, PARTITIONS, PER_PARTITION = "cp", "cp-group", 6, 50
PROPS = {"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "6",
         "default.replication.factor": "3", "min.insync.replicas": "2",
         "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.heartbeat.interval.ms": "500",
         "group.consumer.min.session.timeout.ms": "6000", "group.consumer.session.timeout.ms": "10000"}


@pytest.fixture(scope="module")
def member_program(kafka_jars, tmp_path_factory):
    try:
        return compile_group_member(kafka_jars, tmp_path_factory.mktemp("cp-classes"))
    except JavaUnavailable as exc:
        kafka_unavailable(str(exc))


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    with SeglogCluster.running(tmp_path_factory.mktemp("cp-cluster"), zk_server.connect_string + "/cp",
                               size=3, props=PROPS) as c:
        c.create_topic(TOPIC, PARTITIONS, 3)
        yield c


class Member:
    """A member's view from its events: its assignment, the records it got, its commits."""

    def __init__(self, name: str):
        self.name = name
        self.assignment: set[int] = set()
        self.records: list[tuple[int, int]] = []
        self.commits: list[dict[int, int]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def on(self, event: dict) -> None:
        with self.lock:
            kind = event["event"]
            if kind == "assigned":
                self.assignment |= set(event["partitions"])
            elif kind == "revoked":
                self.assignment -= set(event["partitions"])
            elif kind == "records":
                self.records += [tuple(o) for o in event["offsets"]]
            elif kind == "committed":
                self.commits.append({int(p): o for p, o in event["offsets"].items()})
            elif kind == "error":
                self.errors.append(event["message"])


class JavaMember(Member):
    """GroupMember.java with the consumer protocol (KIP-848)."""

    def __init__(self, program: JavaProgram, bootstrap: str, name: str):
        super().__init__(name)
        self.process = GroupMemberProcess(program, [bootstrap, GROUP, TOPIC, "consumer"], self.on, name)

    def leave(self) -> None:
        self.process.leave()

    def kill(self) -> None:
        self.process.kill()


class LibrdkafkaMember(Member):
    """librdkafka's consumer with group.protocol=consumer, polled and committed in a thread."""

    def __init__(self, bootstrap: str, name: str):
        super().__init__(name)
        from confluent_kafka import Consumer
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "isolation.level": "read_committed", "client.id": name})
        self.consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assigned(self, _c, parts) -> None:
        self.on({"event": "assigned", "partitions": [tp.partition for tp in parts]})

    def _revoked(self, _c, parts) -> None:
        self.on({"event": "revoked", "partitions": [tp.partition for tp in parts]})

    def _run(self) -> None:
        from confluent_kafka import TopicPartition
        while not self.stop.is_set():
            msgs = self.consumer.consume(100, 0.2)
            good = [m for m in msgs if not m.error()]
            if not good:
                continue
            self.on({"event": "records", "offsets": [[m.partition(), m.offset()] for m in good]})
            nxt = {}
            for m in good:
                nxt[m.partition()] = m.offset() + 1
            try:
                self.consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in nxt.items()],
                                     asynchronous=False)
                self.on({"event": "committed", "offsets": {str(p): o for p, o in nxt.items()}})
            except Exception as exc:  # noqa: BLE001 - a commit refused while partitions move
                self.on({"event": "error", "message": str(exc)})
        self.consumer.close()

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(30)


def produce(cluster, start: int, count: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(start, start + count):
        p.produce(TOPIC, value=b"%d" % i, partition=i % PARTITIONS)
    assert p.flush(60) == 0


def coordinator_of(cluster, group: str) -> int:
    def ask():
        for b in cluster.brokers.values():
            if not b.alive():
                continue
            with KafkaConnection(b.host, b.port, timeout_s=5) as conn:
                r = conn.request(10, {"key": group, "key_type": 0}, 3)
                if int(r.error_code) == 0:
                    return r.node_id
        return None
    return cluster.wait_for(ask, 30, f"the coordinator of {group}")


def committed(cluster, group: str) -> dict[int, int]:
    node = coordinator_of(cluster, group)
    b = cluster.brokers[node]
    with KafkaConnection(b.host, b.port, timeout_s=10) as conn:
        r = conn.request(9, {"groups": [{"group_id": group, "topics": None}]}, 9).groups[0]
        assert int(r.error_code) == 0, r
        return {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions}


def spread(members) -> list[set[int]]:
    return [set(m.assignment) for m in members]


def assert_partitioned(members) -> None:
    parts = spread(members)
    assert set().union(*parts) == set(range(PARTITIONS)), parts
    assert sum(len(p) for p in parts) == PARTITIONS, parts
    assert max(map(len, parts)) - min(map(len, parts)) <= 1, parts


def test_members_share_rebalance_and_survive_a_coordinator_kill(cluster, member_program):
    produce(cluster, 0, PARTITIONS * PER_PARTITION)
    java = [JavaMember(member_program, cluster.bootstrap, f"java-{i}") for i in (1, 2)]
    rdk = LibrdkafkaMember(cluster.bootstrap, "librdkafka")
    members = [*java, rdk]
    try:
        def balanced(ms):         # the target reached (on the way, a member may hold more)
            parts = spread(ms)
            return (set().union(*parts) == set(range(PARTITIONS)) and sum(map(len, parts)) == PARTITIONS
                    and max(map(len, parts)) - min(map(len, parts)) <= 1)
        cluster.wait_for(lambda: balanced(members), 60, f"3 members sharing {PARTITIONS} partitions: {spread(members)}")
        assert_partitioned(members)
        # librdkafka leaves: its partitions move to the Java members
        rdk.leave()
        cluster.wait_for(lambda: balanced(java), 60, f"2 members after one left: {spread(java)}")
        assert_partitioned(java)
        cluster.wait_for(lambda: sum(committed(cluster, GROUP).values()) == PARTITIONS * PER_PARTITION, 60,
                         "the first records committed")
        before = committed(cluster, GROUP)
        # SIGKILL the coordinator; the members find the new one and go on
        node = coordinator_of(cluster, GROUP)
        cluster.brokers[node].kill()
        produce(cluster, PARTITIONS * PER_PARTITION, PARTITIONS * PER_PARTITION)
        total = 2 * PARTITIONS * PER_PARTITION
        cluster.wait_for(lambda: sum(committed(cluster, GROUP).values()) == total, 120,
                         "every record committed through the new coordinator")
        assert coordinator_of(cluster, GROUP) != node
        after = committed(cluster, GROUP)
        assert all(after[p] >= before[p] for p in before), (before, after)       # never backwards
        assert_partitioned(java)
        # at least once: every record was consumed by some member
        seen = set()
        for m in members:
            seen |= set(m.records)
        assert seen >= {(p, o) for p in range(PARTITIONS) for o in range(2 * PER_PARTITION)}
        for m in members:       # each member's commits of a partition only go forward
            last: dict[int, int] = {}
            for c in m.commits:
                for p, o in c.items():
                    assert o >= last.get(p, 0), (m.name, p, o, last)
                    last[p] = o
        describe_with_kafka_tool(cluster)
    finally:
        for m in java:
            m.kill()
        if not rdk.stop.is_set():
            rdk.leave()


def describe_with_kafka_tool(cluster) -> None:
    """kafka-consumer-groups --describe (Kafka 4.1.1's ConsumerGroupCommand) on the group."""
    from kafka_reference import resolve_jars
    jars = resolve_jars()
    live = ",".join(b.address for b in cluster.brokers.values() if b.alive())
    out = jars.run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                        ["--bootstrap-server", live, "--describe", "--group", GROUP, "--members", "--verbose"])
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(GROUP)]
    assert len(rows) == 2, out.stdout                          # the two Java members
    assert all(f"{TOPIC}:" in " ".join(r) for r in rows), out.stdout
    offsets = jars.run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                            ["--bootstrap-server", live, "--describe", "--group", GROUP])
    assert offsets.returncode == 0, offsets.stderr[-3000:]
    lines = [line.split() for line in offsets.stdout.splitlines() if line.startswith(GROUP)]
    assert sorted(int(r[2]) for r in lines) == list(range(PARTITIONS)), offsets.stdout
    assert all(int(r[3]) == int(r[4]) == 2 * PER_PARTITION for r in lines), offsets.stdout   # no lag


@pytest.mark.soak
def test_same_assignment_shape_on_apache_kafka(request, kafka_jars, member_program, tmp_path_factory):
    """The Java members against Apache Kafka 4.1.1 (KRaft, one node): the same shape as above."""
    if "soak" not in (request.config.option.markexpr or ""):
        pytest.skip("starts an Apache Kafka broker (~20 s): select it with `-m soak`")
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka_reference import KafkaBroker, KafkaUnavailable
    try:
        broker = KafkaBroker.create(kafka_jars, tmp_path_factory.mktemp("kafka-cp"), {}).start()
    except KafkaUnavailable as exc:
        kafka_unavailable(str(exc))
    members = []
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        members = [JavaMember(member_program, broker.bootstrap, f"java-{i}") for i in (1, 2, 3)]
        deadline = time.monotonic() + 60
        while sorted(map(len, spread(members))) != [2, 2, 2]:
            assert time.monotonic() < deadline, spread(members)
            time.sleep(0.2)
        assert_partitioned(members)
        members[2].leave()
        while sorted(map(len, spread(members[:2]))) != [3, 3]:
            assert time.monotonic() < deadline + 30, spread(members)
            time.sleep(0.2)
    finally:
        for m in members:
            m.kill()
        broker.stop()
