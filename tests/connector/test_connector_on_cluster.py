"""Spark on a seglog cluster: three `seglog broker` processes on ZooKeeper (tests/cluster's
harness), Spark local[2] writing through the brokers and reading each broker's log.dirs.

- the sink's broker path produces to each partition's leader (leaders spread over the three
  brokers), batch and streaming, and a streaming write survives a SIGKILL of a broker between
  two micro-batches: every row is read back exactly once by librdkafka; its transactions
  (exactly-once) commit through a new coordinator when the coordinator of a task's
  transactional id is SIGKILLed before the driver's commit;
- the source as a sidecar: an RF=3 topic read from each broker's log.dirs gives the same rows,
  with and without kafka.bootstrap.servers; a follower whose HW lags is read up to its own HW
  (no wait, no "data loss"); an RF=1 topic's partitions held by other brokers fail with an
  error naming the partition and the log dir;
- a broker's log dir has folders only for the partitions it holds and records which ones:
  read from a stopped broker's log dir (no broker to ask), a partition held elsewhere fails
  naming it, the log dir and the broker;
- the source over all three log dirs (`path` a comma-separated list) returns every committed
  record exactly once, and each task reads the replica on its own host: brokers 2 and 3 listen
  on 127.0.0.2 / 127.0.0.3 (other "hosts"), Spark runs on 127.0.0.1 like broker 1, and the
  copies of brokers 2 and 3 are damaged, so only a read of broker 1's copy succeeds.

Skipped when ZooKeeper (java and Debian's zookeeper jars), kazoo or confluent-kafka is missing.
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo)")

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS, TESTS / "cluster"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from seglog_cluster import SeglogCluster  # noqa: E402
from read_back import read_to_eof  # noqa: E402
from zookeeper_reference import running_zookeeper  # noqa: E402

from pyspark_seglog.broker_client import BrokerClient  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("spark-cluster")
    with running_zookeeper(base / "zk") as zk, \
            SeglogCluster.running(base, zk.connect_string, size=3, props={"min.insync.replicas": "2"},
                                  hosts={2: "127.0.0.2", 3: "127.0.0.3"} if _other_loopbacks() else None) as c:
        yield c


def _other_loopbacks() -> bool:
    """127.0.0.2 and .3 can be listened on (Linux: the whole 127/8 is the loopback)."""
    import socket
    for host in ("127.0.0.2", "127.0.0.3"):
        try:
            with socket.socket() as s:
                s.bind((host, 0))
        except OSError:
            return False
    return True


def _all_back(cluster):
    """Restart any broker a test stopped; a fresh admin client (the cached one may be stuck on
    the connection to a killed broker)."""
    for b in cluster.brokers.values():
        if b.paused:
            b.resume()
        if not b.alive():
            b.start()
    cluster._admin = None

    def registered():                   # as every broker sees it
        for b in cluster.brokers.values():
            with BrokerClient(b.address) as client:
                client.metadata([])
                if sorted(client.brokers) != sorted(cluster.brokers):
                    return False
        return True
    cluster.wait_for(registered, 60, "every broker registered again")


def consume_all(cluster, topic: str, partitions: int, timeout: float = 60.0) -> list:
    """Every record of the topic up to each partition's end: [(partition, offset, key, value)]."""
    return read_to_eof(cluster.bootstrap, topic, partitions,
                       lambda m: (m.partition(), m.offset(), m.key(), m.value()),
                       config={"group.id": f"check-{topic}", "auto.offset.reset": "error"}, timeout=timeout)


def produce(cluster, topic: str, values: list[bytes]) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for v in values:
        p.produce(topic, key=v, value=v, on_delivery=lambda err, _m: err and errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors


def leaders(cluster, topic: str) -> dict[int, int]:
    return {p: leader for p, (leader, _r, _i) in cluster.metadata(topic).items()}


# ------------------------------------------------------------------------------ the client

def test_client_sends_list_offsets_to_each_leader(cluster):
    cluster.create_topic("cl-offsets", partitions=3, rf=3)
    produce(cluster, "cl-offsets", [b"x%03d" % i for i in range(300)])
    ends = {}
    for p, _o, _k, _v in consume_all(cluster, "cl-offsets", 3):
        ends[p] = ends.get(p, 0) + 1
    assert sorted(set(leaders(cluster, "cl-offsets").values())) == [1, 2, 3]
    # Bootstrapped from one broker only: the other two leaders are found through Metadata.
    for b in cluster.brokers.values():
        with BrokerClient(b.address) as client:
            got = client.list_offsets([("cl-offsets", p) for p in range(3)], isolation="read_uncommitted")
        assert got == {("cl-offsets", p): ends.get(p, 0) for p in range(3)}


# ------------------------------------------------------------------------------ the sink

def test_batch_write_produces_to_every_leader(spark, cluster):
    topic = "cl-batch"
    cluster.create_topic(topic, partitions=6, rf=3)
    assert sorted(set(leaders(cluster, topic).values())) == [1, 2, 3]
    n = 6000
    df = spark.range(n).selectExpr("CAST(id AS STRING) AS key", "CAST(concat('v', id) AS BINARY) AS value")
    (df.write.format("seglog").option("kafka.bootstrap.servers", cluster.bootstrap)
     .option("topic", topic).mode("append").save())
    # The write's transactions are committed when save() returns; their markers (which move the
    # LSO a read_committed consumer stops at) follow in the background, as in Kafka.
    deadline = time.monotonic() + 30
    got = consume_all(cluster, topic, 6)
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.2)
        got = consume_all(cluster, topic, 6)
    values = [v for _p, _o, _k, v in got]
    assert len(values) == n and set(values) == {b"v%d" % i for i in range(n)}
    assert {p for p, _o, _k, _v in got} == set(range(6))        # keyed rows reach every partition


def test_streaming_write_survives_sigkill_between_micro_batches(spark, cluster, tmp_path):
    topic = "cl-stream"
    cluster.create_topic(topic, partitions=4, rf=3)
    inbox = tmp_path / "inbox"
    inbox.mkdir()

    def drop(name: str, ids: range) -> None:
        tmp = tmp_path / f"{name}.tmp"
        tmp.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
        tmp.rename(inbox / f"{name}.json")

    drop("a", range(0, 2000))
    query = (spark.readStream.format("json").schema("id LONG").load(str(inbox))
             .selectExpr("CAST(id AS STRING) AS key", "CAST(concat('s', id) AS BINARY) AS value")
             .writeStream.format("seglog").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("topic", topic).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        query.processAllAvailable()
        # SIGKILL broker 1 (the first bootstrap server, a leader of some partitions) between
        # the micro-batches: the next one meets a dead leader and a dead bootstrap server.
        killed = cluster.brokers[1]
        led = [p for p, leader in leaders(cluster, topic).items() if leader == killed.id]
        assert led, "broker 1 leads none of the partitions"
        killed.kill()
        drop("b", range(2000, 4000))
        started = time.monotonic()
        query.processAllAvailable()
        print(f"the micro-batch after the SIGKILL took {time.monotonic() - started:.1f} s")
        assert query.exception() is None
    finally:
        query.stop()
    try:
        got = consume_all(cluster, topic, 4)
        values = sorted(v for _p, _o, _k, v in got)
        assert values == sorted(b"s%d" % i for i in range(4000))     # each row exactly once
        moved = leaders(cluster, topic)
        assert all(moved[p] != 1 for p in led)
    finally:
        _all_back(cluster)


def test_exactly_once_commit_survives_the_transaction_coordinator_sigkill(cluster):
    """Tasks produce in transactions to leaders on all three brokers and leave them open; the
    coordinator of a task's transactional id is SIGKILLed; a retried task attempt fences its
    dead attempt through the new coordinator, and the driver's commit ends every transaction
    there: read_committed reads each row once."""
    import test_broker_sink_exactly_once as eos
    from pyspark_seglog.broker_sink import commit_batch, produce_task
    from pyspark_seglog.broker_transaction import transactional_id
    from pyspark_seglog.sink_options import parse_sink_options

    topic = "cl-eos"
    cluster.create_topic(topic, partitions=3, rf=3)
    opts = parse_sink_options(eos.options(cluster.bootstrap, topic, **{"kafka.delivery.timeout.ms": "60000"}))
    try:
        txn0, dead = eos.open_attempt(opts, "q-cluster", 1, 0)
        for batch in eos.rows(3000, 1000):
            dead.add(batch)
        dead.flush()
        dead.close()
        txn0.close()
        first = [produce_task(opts, eos.COLUMNS, eos.rows(t * 3000, 3000), t, 0, "q-cluster", 0, streaming=True)
                 for t in range(2)]
        with BrokerClient(cluster.bootstrap) as client:
            body = client.request(10, {"key": transactional_id("q-cluster", 0), "key_type": 1})
        coordinator = cluster.brokers[int(body.node_id)]
        coordinator.kill()
        retried = produce_task(opts, eos.COLUMNS, eos.rows(3000, 3000), 1, 1, "q-cluster", 0, streaming=True)
        commit_batch(opts, [first[0], retried], 0)
        values = [v for _p, _o, _k, v in consume_all(cluster, topic, 3)]
        assert sorted(values) == sorted(b"v%d" % i for i in range(6000))
    finally:
        _all_back(cluster)


def test_sink_rides_a_leader_change_mid_pipeline(cluster, caplog):
    """A task's pipelined batches meet leaders that moved while it produced (each partition's
    replica list rotated, the new preferred leaders elected): the old leaders refuse a window
    of in-flight batches NOT_LEADER_OR_FOLLOWER; the task resends them to the new leaders, in
    order and one at a time until one is acknowledged, and commits. read_committed reads each
    row once, each partition's rows in the task's order."""
    import logging

    import test_broker_sink_exactly_once as eos
    from logcore.tools.kafka_admin import KafkaAdmin
    from pyspark_seglog.broker_sink import commit_batch
    from pyspark_seglog.sink_options import parse_sink_options

    topic = "cl-move"
    cluster.create_topic(topic, partitions=3, rf=3)
    opts = parse_sink_options(eos.options(cluster.bootstrap, topic, **{"kafka.delivery.timeout.ms": "60000"}))
    txn, producer = eos.open_attempt(opts, "q-move", 0, 0)
    try:
        for batch in eos.rows(0, 3000):
            producer.add(batch)
        producer.flush()                         # every partition acknowledged: pipelines open
        before = cluster.metadata(topic)
        with KafkaAdmin(cluster.bootstrap) as admin:
            rotated = {(topic, p): replicas[1:] + replicas[:1] for p, (_l, replicas, _i) in before.items()}
            assert all(code == 0 for code, _m in admin.alter_partition_reassignments(rotated).values())
            cluster.wait_for(lambda: not admin.list_partition_reassignments(list(rotated)), 30, "reassignments")
            admin.elect_leaders("preferred", list(rotated))
        cluster.wait_for(lambda: all(leader == rotated[(topic, p)][0]
                                     for p, (leader, _r, _i) in cluster.metadata(topic).items()), 30,
                         "the preferred leaders elected")
        with caplog.at_level(logging.WARNING, logger="pyspark_seglog.broker_sink"):
            for batch in eos.rows(3000, 9000):
                producer.add(batch)
            producer.flush()                     # sent first to the old leaders (Metadata cached)
        assert "NOT_LEADER_OR_FOLLOWER" in caplog.text
        message = producer.message()
        message.transaction = txn.open()
    finally:
        producer.close()
        txn.close()
    assert sum(message.records.values()) == 12000
    commit_batch(opts, [message], 0)
    got = sorted(consume_all(cluster, topic, 3))
    values = [v for _p, _o, _k, v in got]
    assert sorted(values) == sorted(b"v%d" % i for i in range(12000))           # each row once
    for p in range(3):
        ids = [int(v[1:]) for q, _o, _k, v in got if q == p]
        assert ids == sorted(ids), f"partition {p}: rows out of the task's order"


# ------------------------------------------------------------------------------ the source as a sidecar

def _checkpointed(broker, topic: str, ends: dict[int, int]) -> bool:
    """The broker's replication-offset-checkpoint has reached each partition's end."""
    try:
        lines = (broker.log_dir / "replication-offset-checkpoint").read_text().split("\n")
    except FileNotFoundError:
        return False
    entries = {(t, int(p)): int(o) for t, p, o in (line.split() for line in lines[2:] if line.strip())}
    return all(entries.get((topic, p)) == end for p, end in ends.items())


def spark_rows(spark, root, topic: str | None = None, bootstrap: str | None = None, assign: str | None = None):
    reader = spark.read.format("seglog")
    reader = reader.option("assign", assign) if assign else reader.option("subscribe", topic)
    if bootstrap:
        reader = reader.option("kafka.bootstrap.servers", bootstrap)
    return sorted((r.partition, r.offset, bytes(r.key), bytes(r.value))
                  for r in reader.load(str(root)).select("partition", "offset", "key", "value").collect())


def test_rf3_topic_reads_the_same_from_every_broker_log_dir(spark, cluster):
    topic = "cl-rf3"
    cluster.create_topic(topic, partitions=3, rf=3)
    produce(cluster, topic, [b"r%04d" % i for i in range(1500)])
    expected = sorted(consume_all(cluster, topic, 3))
    ends = {p: 0 for p in range(3)}
    for p, o, _k, _v in expected:
        ends[p] = max(ends[p], o + 1)
    for b in cluster.brokers.values():
        cluster.wait_for(lambda: _checkpointed(b, topic, ends), 30, f"broker {b.id}'s HW checkpoint")
    for b in cluster.brokers.values():
        assert spark_rows(spark, b.log_dir, topic) == expected, f"broker {b.id}, files only"
        assert spark_rows(spark, b.log_dir, topic, cluster.bootstrap) == expected, f"broker {b.id}, bootstrap"


def test_lagging_follower_is_read_up_to_its_own_high_watermark(spark, cluster):
    topic = "cl-lag"
    cluster.create_topic(topic, partitions=1, rf=3)
    produce(cluster, topic, [b"a%04d" % i for i in range(500)])
    cluster.wait_for(lambda: all(_checkpointed(b, topic, {0: 500}) for b in cluster.brokers.values()),
                     30, "every replica's HW checkpoint at 500")
    leader = leaders(cluster, topic)[0]
    follower = cluster.brokers[next(i for i in cluster.brokers if i != leader)]
    follower.pause()                # its HW (and log) stop at 500
    try:
        produce(cluster, topic, [b"b%04d" % i for i in range(300)])    # min.insync=2: still acked
        with BrokerClient(cluster.brokers[leader].address) as client:
            assert client.list_offsets([(topic, 0)])[(topic, 0)] == 800
        # The follower's files are read up to its own HW: the leader's 800 would name records
        # this replica does not have (or does not know committed) yet.
        # The bootstrap list names the live brokers: a paused one accepts connections and
        # answers nothing, and a client that starts there waits for its whole timeout.
        live = ",".join(b.address for b in cluster.brokers.values() if b.id != follower.id)
        rows = spark_rows(spark, follower.log_dir, topic, live)
        assert [o for _p, o, _k, _v in rows] == list(range(500))
        assert all(v.startswith(b"a") for _p, _o, _k, v in rows)
        # The leader's log dir, asked through the brokers, reads all 800.
        assert len(spark_rows(spark, cluster.brokers[leader].log_dir, topic, live)) == 800
    finally:
        _all_back(cluster)          # its ZooKeeper session may have ended: registered again


def test_partitions_on_other_brokers_fail_with_a_clear_error(spark, cluster):
    topic = "cl-rf1"
    from confluent_kafka.admin import NewTopic
    # RF=1, one partition on each broker (a manual assignment: the harness's brokers may have
    # just re-registered after the tests above, which a random one would not wait for)
    futures = cluster.admin().create_topics([NewTopic(topic, num_partitions=3,
                                                      replica_assignment=[[1], [2], [3]])])
    futures[topic].result(30)
    cluster.wait_for(lambda: all(leader >= 0 for leader in leaders(cluster, topic).values()), 30,
                     f"leaders of {topic}")
    produce(cluster, topic, [b"o%03d" % i for i in range(300)])
    where = leaders(cluster, topic)                  # RF=1: the leader is the only replica
    assert sorted(where.values()) == [1, 2, 3]
    expected = sorted(consume_all(cluster, topic, 3))
    # every broker's dir, read without and with the brokers (the first in both ways)
    modes = {b.id: ((cluster.bootstrap, None) if i == 0 else ((cluster.bootstrap,) if i % 2 else (None,)))
             for i, b in enumerate(cluster.brokers.values())}
    for b in cluster.brokers.values():
        mine = next(p for p, node in where.items() if node == b.id)
        other = next(p for p, node in where.items() if node != b.id)
        for bootstrap in modes[b.id]:
            # The whole topic: a partition held by another broker fails, naming it and the dir.
            with pytest.raises(Exception, match=rf"ReplicaNotAvailableError: {topic}-\d has no replica"
                                                rf" in {re.escape(str(b.log_dir))}: that log dir is broker {b.id}'s"):
                spark_rows(spark, b.log_dir, topic, bootstrap)
            with pytest.raises(Exception, match=rf"ReplicaNotAvailableError: {topic}-{other} has no replica"):
                spark_rows(spark, b.log_dir, bootstrap=bootstrap, assign=json.dumps({topic: [other]}))
            # Its own partition reads as the consumer sees it.
            cluster.wait_for(lambda: _checkpointed(b, topic, {mine: sum(1 for r in expected if r[0] == mine)}),
                             30, f"broker {b.id}'s HW checkpoint")
            got = spark_rows(spark, b.log_dir, bootstrap=bootstrap, assign=json.dumps({topic: [mine]}))
            assert got == [r for r in expected if r[0] == mine]


# ------------------------------------------------------------------------------ replicas on their hosts

def _spread_topic(cluster) -> tuple[str, list]:
    """cl-spread: p0 on brokers [2, 1], p1 on [2, 3], p2 on [3, 1]; 900 committed records, every
    replica's HW checkpoint at the end. Returns (topic, the records as a consumer reads them)."""
    topic = "cl-spread"
    if getattr(cluster, "_spread", None) is None:
        from confluent_kafka.admin import NewTopic
        futures = cluster.admin().create_topics([NewTopic(topic, num_partitions=3,
                                                          replica_assignment=[[2, 1], [2, 3], [3, 1]])])
        futures[topic].result(30)
        cluster.wait_for(lambda: all(leader >= 0 and len(isr) == 2
                                     for leader, _r, isr in cluster.metadata(topic).values()), 30,
                         f"leaders and full ISRs of {topic}")
        produce(cluster, topic, [b"s%04d" % i for i in range(900)])
        expected = sorted(consume_all(cluster, topic, 3))
        ends = {p: 1 + max(o for q, o, _k, _v in expected if q == p) for p in range(3)}
        held = {1: (0, 2), 2: (0, 1), 3: (1, 2)}
        for b in cluster.brokers.values():
            cluster.wait_for(lambda: _checkpointed(b, topic, {p: ends[p] for p in held[b.id]}), 30,
                             f"broker {b.id}'s HW checkpoint")
        cluster._spread = expected
    return topic, cluster._spread


def _alter(log_dir: Path, topic: str, partition: int) -> None:
    """Rewrite the replica's first batch with other values (s0123 -> x0123) and a valid CRC: its
    log still holds the range, and a read of it returns records no consumer sees."""
    import struct

    from logcore.records import crc32c
    segment = log_dir / f"{topic}-{partition}" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    size = 12 + struct.unpack_from(">i", data, 8)[0]
    batch = re.sub(rb"s(\d{4})", rb"x\1", bytes(data[:size]))
    data[:size] = batch
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:size])))
    with open(segment, "r+b") as f:
        f.write(data[:size])


def test_log_dirs_of_all_brokers_read_each_record_once_from_the_local_replica(spark, cluster):
    if cluster.brokers[2].host == "127.0.0.1":
        pytest.skip("127.0.0.2 cannot be listened on here: no second 'host' for broker 2")
    topic, expected = _spread_topic(cluster)
    b1, b2, b3 = (cluster.brokers[i] for i in (1, 2, 3))
    # Only the partitions a broker holds have a folder in its log dir.
    assert sorted(d.name for d in b1.log_dir.glob(f"{topic}-*")) == [f"{topic}-0", f"{topic}-2"]
    assert sorted(d.name for d in b3.log_dir.glob(f"{topic}-*")) == [f"{topic}-1", f"{topic}-2"]
    paths = ",".join(str(b.log_dir) for b in (b2, b3, b1))     # broker 1's last: order is no help
    assert spark_rows(spark, paths, topic) == expected
    # Alter the copies of p0 and p2 on brokers 2 and 3 (p0's leader is broker 2): read alone,
    # broker 2's copy gives the altered values; read with every log dir, the tasks take broker
    # 1's copies (its host's) and p1 from broker 2 or 3 (no copy on this host), each record once.
    _alter(b2.log_dir, topic, 0)
    _alter(b3.log_dir, topic, 2)
    alone = spark_rows(spark, b2.log_dir, assign=json.dumps({topic: [0]}))
    assert alone[0][3].startswith(b"x") and alone != [r for r in expected if r[0] == 0]
    assert spark_rows(spark, paths, topic) == expected
    assert spark_rows(spark, paths, topic, cluster.bootstrap) == expected


def test_a_stopped_brokers_log_dir_names_the_partitions_it_does_not_hold(spark, cluster):
    topic, expected = _spread_topic(cluster)
    b3 = cluster.brokers[3]
    b3.stop()                           # SIGTERM: its claim on the log dir goes; nobody to ask
    try:
        assert not (b3.log_dir / f"{topic}-0").exists()
        with pytest.raises(Exception, match=rf"ReplicaNotAvailableError: {topic}-0 has no replica in"
                                            rf" {re.escape(str(b3.log_dir))}: that log dir is broker 3's,"
                                            rf" which holds replicas of partitions \[1, 2\] of {topic}"):
            spark_rows(spark, b3.log_dir, topic)
        got = spark_rows(spark, b3.log_dir, assign=json.dumps({topic: [1]}))
        assert got == [r for r in expected if r[0] == 1]
    finally:
        _all_back(cluster)
