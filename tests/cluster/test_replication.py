"""A three-broker seglog cluster on ZooKeeper, driven through real Kafka clients: replicated
topics, acks=all, byte-identical replicas, failover on SIGKILL, ISR shrink and expand, the
min.insync.replicas refusal, controlled shutdown, and leader elections through ElectLeaders."""
from __future__ import annotations

import socket
import time

import pytest

from seglog_cluster import SeglogCluster
from read_back import read_to_eof

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")


PROPS = {"min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def shared_cluster(zk_server, tmp_path_factory):
    """The cluster of the module's settings, shared by the tests that need no others: each uses
    topics of its own, and `cluster` brings back what the previous one killed, stopped or paused
    (a start of three brokers costs seconds on two loaded cores)."""
    with SeglogCluster.running(tmp_path_factory.mktemp("replication"), zk_server.connect_string + "/replication",
                               size=3, props=PROPS) as c:
        yield c


@pytest.fixture
def cluster(request):
    """A cluster of three: a fresh one for a test marked with settings of its own
    (cluster_props), else the module's, every broker serving, its logs marked at the test's start."""
    marker = request.node.get_closest_marker("cluster_props")
    if marker is None:
        shared = request.getfixturevalue("shared_cluster")
        shared.heal()
        shared.mark_logs()
        yield shared
        print(shared.logs())        # shown when the test failed, as for a cluster of its own
        return
    with SeglogCluster.running(request.getfixturevalue("tmp_path"), request.getfixturevalue("zk_hosts"),
                               size=3, props={**PROPS, **marker.args[0]}) as c:
        yield c


def _produce(cluster, topic, values, *, acks="all", extra=None, timeout=60.0):
    """Produce `values` (bytes); {value: (partition, offset)} of the acknowledged ones and
    {value: error name} of the failed ones."""
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "linger.ms": 5,
                     "enable.idempotence": acks == "all", "message.timeout.ms": int(timeout * 1000),
                     "topic.metadata.refresh.interval.ms": 1000, **(extra or {})})
    acked, failed = {}, {}

    def report(err, msg):
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            failed[msg.value()] = err.name()
    for v in values:
        p.produce(topic, key=v, value=v, on_delivery=report)     # keyed: spread over partitions
        p.poll(0)
    p.flush(timeout + 10)
    return acked, failed


def _read_all(cluster, topic, partitions, timeout=60.0):
    """Every record of every partition up to its high watermark: {partition: [(offset, value)]}."""
    out = {p: [] for p in range(partitions)}
    for p, offset, value in read_to_eof(cluster.bootstrap, topic, partitions,
                                        lambda m: (m.partition(), m.offset(), m.value()),
                                        config={"group.id": "reader", "auto.offset.reset": "error"}, timeout=timeout):
        out[p].append((offset, value))
    return out


def _segment_bytes(broker, topic, partition) -> bytes:
    folder = broker.log_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(folder.glob("*.log")))


def _replicas_identical(cluster, topic, partitions) -> bool:
    for p in range(partitions):
        copies = {b.id: _segment_bytes(b, topic, p) for b in cluster.brokers.values()}
        if len(set(copies.values())) != 1:
            return False
    return True


def test_replicated_topic_acks_all_and_identical_replicas(cluster):
    cluster.create_topic("t", partitions=3, rf=3)
    md = cluster.metadata("t")
    assert sorted(md) == [0, 1, 2]
    for leader, replicas, isr in md.values():
        assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3] and leader == replicas[0]
    # Kafka's assignment: each broker is the preferred leader of one partition.
    assert sorted(leader for leader, _r, _i in md.values()) == [1, 2, 3]
    values = [b"v%05d" % i for i in range(3000)]
    acked, failed = _produce(cluster, "t", values)
    assert not failed and len(acked) == len(values)
    read = _read_all(cluster, "t", 3)
    assert sorted(v for recs in read.values() for _o, v in recs) == sorted(values)
    for p, recs in read.items():
        assert [o for o, _v in recs] == list(range(len(recs)))     # no gaps, no duplicates
        for o, v in recs:
            assert acked[v] == (p, o)
    # Followers keep the leader's bytes: the three copies of each partition are identical.
    cluster.wait_for(lambda: _replicas_identical(cluster, "t", 3), 30, "identical replicas")
    # Every broker records each replica's HW in its replication-offset-checkpoint (Kafka's format).
    counts = {p: len(recs) for p, recs in read.items()}

    def checkpointed():
        for b in cluster.brokers.values():
            lines = (b.log_dir / "replication-offset-checkpoint").read_text().split("\n")
            entries = {(t, int(p)): int(o) for t, p, o in (line.split() for line in lines[2:] if line.strip())}
            if any(entries.get(("t", p)) != n for p, n in counts.items()):
                return False
        return True
    cluster.wait_for(checkpointed, 10, "every replica's HW in replication-offset-checkpoint")


def test_kafka_python_client_on_the_cluster(cluster):
    kafka = pytest.importorskip("kafka", reason="kafka-python is not installed")
    cluster.create_topic("kp", partitions=2, rf=3)
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    futures = [producer.send("kp", value=b"x%d" % i, partition=i % 2) for i in range(200)]
    producer.flush(30)
    assert all(f.get(10).offset >= 0 for f in futures)
    producer.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                                   consumer_timeout_ms=5000)
    consumer.assign([kafka.TopicPartition("kp", 0), kafka.TopicPartition("kp", 1)])
    consumer.seek_to_beginning()
    got = [m.value for m in consumer]
    consumer.close()
    assert sorted(got) == sorted(b"x%d" % i for i in range(200))


def test_leader_sigkill_moves_leadership_and_keeps_every_acknowledged_write(cluster):
    cluster.create_topic("f", partitions=1, rf=3)
    leader = cluster.leader_of("f")
    first, failed = _produce(cluster, "f", [b"a%d" % i for i in range(500)])
    assert not failed
    cluster.brokers[leader].kill()
    t0 = time.monotonic()
    new = cluster.wait_for(lambda: (lambda m: m if m >= 0 and m != leader else None)(cluster.leader_of("f")),
                           20, "a new leader")
    elected_s = time.monotonic() - t0
    assert new in (1, 2, 3) and new != leader
    second, failed = _produce(cluster, "f", [b"b%d" % i for i in range(500)])
    assert not failed, failed
    # The restarted broker follows the new leader and rejoins the ISR once caught up.
    cluster.brokers[leader].start()
    cluster.wait_for(lambda: sorted(cluster.metadata("f")[0][2]) == [1, 2, 3], 30, "the full ISR again")
    read = _read_all(cluster, "f", 1)[0]
    by_value = {v: o for o, v in read}
    for v, (_p, o) in {**first, **second}.items():
        assert by_value.get(v) == o, f"acknowledged {v!r} at {o} is at {by_value.get(v)} after failover"
    assert len(read) == len(first) + len(second)
    cluster.wait_for(lambda: _replicas_identical(cluster, "f", 1), 30, "identical replicas")
    print(f"new leader {new} elected {elected_s:.2f} s after SIGKILL of {leader} (session 2 s)")


def test_paused_follower_leaves_the_isr_and_rejoins(cluster):
    """A follower paused past its ZooKeeper session: the controller takes it out of the ISR
    (a new leader epoch); acks=all goes on with the other two; resumed, it catches up and the
    leader adds it back."""
    cluster.create_topic("s", partitions=1, rf=3)
    leader = cluster.leader_of("s")
    follower = next(b for b in (1, 2, 3) if b != leader)
    cluster.brokers[follower].pause()
    try:
        cluster.wait_for(lambda: follower not in cluster.metadata("s")[0][2], 20, "the ISR shrink")
        acked, failed = _produce(cluster, "s", [b"p%d" % i for i in range(100)], timeout=30)
        assert not failed and len(acked) == 100
    finally:
        cluster.brokers[follower].resume()
    # Asked of the leader: the resumed broker may still answer from what it knew before.
    cluster.wait_for(lambda: follower in cluster.metadata("s", broker=leader)[0][2], 30, "the ISR expansion")
    assert "expanding the ISR" in cluster.brokers[leader].log_since_mark()
    cluster.wait_for(lambda: _replicas_identical(cluster, "s", 1), 30, "identical replicas")


@pytest.fixture
def blackhole():
    """A port that accepts connections and never answers (a follower cut from its leader)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


def test_stalled_follower_is_shrunk_by_the_leader(tmp_path, zk_hosts, blackhole):
    """Broker 3 stays registered (its ZooKeeper session lives) but cannot reach leader 1: after
    replica.lag.time.max.ms the leader drops it from the ISR itself (a compare-and-set on the
    state znode); restarted with a working link it catches up and is added back."""
    c = SeglogCluster(tmp_path, zk_hosts, size=3, props={"min.insync.replicas": "2"},
                      per_broker={3: {"inter.broker.address.overrides": f"1=127.0.0.1:{blackhole}"}})
    try:
        c.start()
        from confluent_kafka.admin import NewTopic
        c.admin().create_topics([NewTopic("st", num_partitions=1, replica_assignment=[[1, 2, 3]])])["st"].result(30)
        c.wait_for(lambda: c.metadata("st")[0][0] == 1, 20, "leader 1")
        t0 = time.monotonic()
        c.wait_for(lambda: c.metadata("st")[0][2] == [1, 2], 20, "the ISR without broker 3")
        shrunk_s = time.monotonic() - t0
        assert "followers [3] are more than 4000 ms behind; shrinking the ISR from [1, 2, 3] to [1, 2]" \
            in c.brokers[1].log_text()
        acked, failed = _produce(c, "st", [b"q%d" % i for i in range(50)], timeout=20)
        assert not failed and len(acked) == 50
        c.per_broker = {}
        c.brokers[3].restart()
        c.wait_for(lambda: c.metadata("st")[0][2] == [1, 2, 3], 30, "broker 3 back in the ISR")
        c.wait_for(lambda: _replicas_identical(c, "st", 1), 30, "identical replicas")
        print(f"ISR shrink {shrunk_s:.2f} s after the topic was created (replica.lag.time.max.ms=4000)")
    finally:
        c.close()
        print(c.logs())


def test_acks_all_refused_below_min_insync_replicas_and_acks_1_still_works(cluster):
    cluster.create_topic("m", partitions=1, rf=3)
    leader = cluster.leader_of("m")
    others = [b for b in (1, 2, 3) if b != leader]
    for b in others:
        cluster.brokers[b].kill()
    cluster.wait_for(lambda: cluster.metadata("m")[0][2] == [leader], 20, "an ISR of the leader alone")
    _acked, failed = _produce(cluster, "m", [b"x"], acks="all", timeout=5,
                              extra={"retries": 0, "enable.idempotence": False})
    assert failed == {b"x": "NOT_ENOUGH_REPLICAS"}
    acked, failed = _produce(cluster, "m", [b"y"], acks="1", timeout=10)
    assert not failed and acked[b"y"] == (0, 0)     # x was refused before the append


def test_controlled_shutdown_moves_leadership_first(cluster):
    cluster.create_topic("c", partitions=3, rf=3)
    md = cluster.metadata("c")
    victim = md[0][0]
    led = [p for p, (leader, _r, _i) in md.items() if leader == victim]
    assert cluster.brokers[victim].stop() == 0
    log = cluster.brokers[victim].log_since_mark()
    assert "controlled shutdown: every leadership moved" in log
    after = cluster.metadata("c")
    for p in led:
        assert after[p][0] not in (victim, -1) and victim not in after[p][2]


def test_preferred_leader_election_through_elect_leaders(cluster):
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import NewTopic
    from logcore.cluster.zookeeper_store import ZooKeeperStore
    store = ZooKeeperStore(cluster.zk_hosts, session_timeout_ms=4000).start()
    try:
        # ElectLeaders goes to the controller: a follower of the partition here, so its view of
        # the ISR follows ZooKeeper's watches (the leader's own follows its writes).
        controller = cluster.wait_for(store.controller, 20, "a controller")
        preferred, leader = [b for b in sorted(cluster.brokers) if b != controller]
        admin = cluster.admin()
        made = admin.create_topics([NewTopic("e", num_partitions=1, replica_assignment=[[preferred, leader, controller]])])
        made["e"].result(30)
        cluster.wait_for(lambda: cluster.leader_of("e") == preferred, 20, "the preferred leader")
        cluster.brokers[preferred].kill()
        cluster.wait_for(lambda: cluster.leader_of("e") == leader, 20, "failover")
        cluster.brokers[preferred].start()
        # Asked as soon as ZooKeeper has the replica back in the ISR: the controller's broker
        # may not have seen it yet, and answers from ZooKeeper's state, not from its view.
        cluster.wait_for(lambda: preferred in store.partition_state("e", 0).isr, 30,
                         "the preferred replica back in the ISR", interval=0.005)
        result = admin.elect_leaders(ElectionType.PREFERRED, [ck.TopicPartition("e", 0)]).result(30)
    finally:
        store.close()
    assert all(err is None for err in result.values()), result
    cluster.wait_for(lambda: cluster.leader_of("e") == preferred, 10, "the preferred leader")
    again = admin.elect_leaders(ElectionType.PREFERRED, [ck.TopicPartition("e", 0)]).result(30)
    assert [e.name() for e in again.values()] == ["ELECTION_NOT_NEEDED"]


@pytest.mark.cluster_props({"min.insync.replicas": "1"})
def test_unclean_election_only_when_enabled(cluster):
    from confluent_kafka import ElectionType
    cluster.create_topic("u", partitions=1, rf=3)
    leader = cluster.leader_of("u")
    lagging = [b for b in (1, 2, 3) if b != leader]
    for b in lagging:
        cluster.brokers[b].kill()
    cluster.wait_for(lambda: cluster.metadata("u")[0][2] == [leader], 20, "an ISR of the leader alone")
    acked, failed = _produce(cluster, "u", [b"only-on-the-leader"], acks="1", timeout=10)
    assert not failed
    cluster.brokers[leader].kill()
    for b in lagging:
        cluster.brokers[b].start()
    # No live ISR member: the partition stays offline (unclean.leader.election.enable=false).
    time.sleep(3)
    assert cluster.leader_of("u") == -1
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})     # knows only the live brokers
    result = admin.elect_leaders(ElectionType.UNCLEAN, [ck.TopicPartition("u", 0)]).result(30)
    assert all(err is None for err in result.values()), result
    new = cluster.wait_for(lambda: (lambda m: m if m >= 0 else None)(cluster.leader_of("u")), 20,
                           "the unclean leader")
    assert new in lagging
    # The unclean election lost the record only the old leader held: it is said in the log.
    controller_logs = "".join(b.log_text() for b in cluster.brokers.values())
    assert "UNCLEAN leader election" in controller_logs
    read = _read_all(cluster, "u", 1)[0]
    assert b"only-on-the-leader" not in [v for _o, v in read]


def test_partitions_added_through_the_cli_are_replicated(cluster):
    import sys

    import broker_spawner
    cluster.create_topic("g", partitions=2, rf=3)
    out = broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", "topics", "--bootstrap-server",
                              cluster.bootstrap, "--alter", "--topic", "g", "--partitions", "4"], timeout=60)
    assert out.returncode == 0, out.stderr
    cluster.wait_for(lambda: len(cluster.metadata("g")) == 4 and all(
        leader >= 0 and len(isr) == 3 for leader, _r, isr in cluster.metadata("g").values()), 30,
        "four replicated partitions")
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    results = []
    p.produce("g", value=b"to-3", partition=3, on_delivery=lambda e, m: results.append((e, m.offset())))
    p.flush(30)
    assert results == [(None, 0)]


def test_acks_1_loss_window_and_acks_all_safety(tmp_path, zk_hosts, blackhole):
    """Followers that cannot reach leader 1: an acks=1 write is acknowledged by the leader alone
    and lost when it dies (Kafka's trade-off); an acks=all write is never acknowledged, since the
    high watermark cannot pass it."""
    cut = {"inter.broker.address.overrides": f"1=127.0.0.1:{blackhole}"}
    c = SeglogCluster(tmp_path, zk_hosts, size=3, props={"min.insync.replicas": "2"},
                      per_broker={2: cut, 3: cut})
    try:
        c.start()
        from confluent_kafka.admin import NewTopic
        c.admin().create_topics([NewTopic("w", num_partitions=1, replica_assignment=[[1, 2, 3]])])["w"].result(30)
        c.wait_for(lambda: c.metadata("w")[0][0] == 1, 20, "leader 1")
        acked, failed = _produce(c, "w", [b"acks-1"], acks="1", timeout=10)
        assert acked == {b"acks-1": (0, 0)} and not failed
        _acked, failed = _produce(c, "w", [b"acks-all"], acks="all", timeout=3,
                                  extra={"enable.idempotence": False, "retries": 0, "request.timeout.ms": 2000})
        assert set(failed) == {b"acks-all"} and failed[b"acks-all"] in ("REQUEST_TIMED_OUT", "_MSG_TIMED_OUT")
        c.brokers[1].kill()
        new = c.wait_for(lambda: (lambda m: m if m in (2, 3) else None)(c.leader_of("w")), 20, "a new leader")
        read = _read_all(c, "w", 1)[0]
        # Neither record is on the new leader: the acks=1 one was acknowledged and lost.
        assert [v for _o, v in read] == [], (new, read)
    finally:
        c.close()
        print(c.logs())


@pytest.mark.cluster_props({"replica.fetch.wait.max.ms": "2000"})
def test_acks_all_latency_does_not_wait_for_every_partition_of_a_fetch(cluster):
    """A follower fetches all partitions it follows on a leader in one request; new data in any
    one of them must end the leader's wait (not data in all of them, nor the 2 s max wait)."""
    from confluent_kafka.admin import NewTopic
    for name in ("la", "lb"):
        cluster.admin().create_topics([NewTopic(name, num_partitions=1, replica_assignment=[[1, 2, 3]])])[name].result(30)
        cluster.wait_for(lambda n=name: cluster.metadata(n)[0][0] == 1 and len(cluster.metadata(n)[0][2]) == 3,
                         20, f"{name} replicated")
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    latencies = []
    for i in range(12):
        done = []
        t0 = time.monotonic()
        p.produce("lb", value=b"x%d" % i, on_delivery=lambda e, m: done.append(e))
        p.flush(10)
        assert done == [None]
        latencies.append(time.monotonic() - t0)
    latencies.sort()
    assert latencies[len(latencies) // 2] < 0.5, latencies


@pytest.mark.cluster_props({"zookeeper.session.timeout.ms": "10000", "broker.failure.probe.enable": "false"})
def test_a_leader_restarted_inside_its_session_does_not_lead_at_its_old_epoch(cluster):
    """Item 3 of the replication review: SIGKILL the leader, cut the tail of its active segment
    (page cache lost with the machine), restart it at once, well inside its 10 s session. It must
    not lead at its old epoch with the shorter log (the followers would truncate acknowledged
    records to match it): it waits for its registration, the controller elects anew, and every
    acknowledged record stays readable."""
    cluster.create_topic("r", partitions=1, rf=3)
    values = [b"r%05d" % i for i in range(400)]
    acked, failed = _produce(cluster, "r", values)
    assert not failed and len(acked) == len(values)
    leader = cluster.leader_of("r", 0)
    broker = cluster.brokers[leader]
    broker.kill()
    seg = sorted((broker.log_dir / "r-0").glob("*.log"))[-1]
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(max(0, size - 4096))             # lost unflushed tail: a torn batch at the end
    broker.start(wait=False)
    more = [b"s%05d" % i for i in range(200)]
    acked_more, _ = _produce(cluster, "r", more, timeout=40)
    broker.wait_serving()
    cluster.wait_for(lambda: sorted(cluster.metadata("r")[0][2]) == [1, 2, 3], 60, "a full ISR again")
    read = {v: o for o, _k, v in cluster.read_partition("r", 0)}
    lost = [v for v in list(acked) + list(acked_more) if v not in read]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    # The topic's first leadership was epoch 0; the restarted process never took it up again.
    assert broker.log_text().count(f"broker {leader} leads r-0 at epoch 0 ") == 1, broker.log_tail(80)
