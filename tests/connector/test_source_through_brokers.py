"""format("seglog") through the brokers: a Spark session (local[2]) that sees none of the log
dirs reads a 3-broker seglog cluster with kafka.bootstrap.servers alone (readFrom, read_path.py).

- the same rows as the files give (keys, null keys and values, headers, every compression
  codec), with and without headers, for both isolation levels;
- read_committed drops aborted transactions and stops at the LSO, read_uncommitted reads all
  up to the HW, as librdkafka's consumer of the same level reads;
- kafka.client.rack: the tasks fetch from the follower in their rack (KIP-392), and give the
  same rows;
- readFrom=auto falls back to the brokers where the files cannot be opened; the option's
  combinations with path and kafka.bootstrap.servers are checked at the start;
- every committed record once, batch and streaming, while the leader of a partition is
  SIGKILLed during the read (last: they restart the broker). The streaming one (about 25 s)
  runs with `-m soak` only.

Brokers are in racks r1..r3 with Kafka's rack-aware replica selector. Skipped when ZooKeeper
(java and the zookeeper jars), kazoo or confluent-kafka is missing.
"""
from __future__ import annotations

import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo)")

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS, TESTS / "cluster"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from seglog_cluster import SeglogCluster  # noqa: E402
from transactional_reads import read_values  # noqa: E402
from zookeeper_reference import running_zookeeper  # noqa: E402

from logcore.broker.config import RACK_AWARE_SELECTOR  # noqa: E402
from logcore.errors import InvalidConfigError  # noqa: E402

RACKS = {1: "r1", 2: "r2", 3: "r3"}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("through-brokers")
    with running_zookeeper(base / "zk") as zk, \
            SeglogCluster.running(base, zk.connect_string, size=3,
                                  props={"min.insync.replicas": "2", "replica.selector.class": RACK_AWARE_SELECTOR,
                                         "transaction.state.log.num.partitions": "3"},
                                  per_broker={b: {"broker.rack": r} for b, r in RACKS.items()}) as c:
        yield c


def brokers_read(spark, cluster, **options):
    reader = spark.read.format("seglog").option("kafka.bootstrap.servers", cluster.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def files_read(spark, cluster, **options):
    dirs = ",".join(str(b.log_dir) for b in cluster.brokers.values())
    reader = (spark.read.format("seglog").option("kafka.bootstrap.servers", cluster.bootstrap)
              .option("readFrom", "files"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(dirs)


def as_tuples(df) -> list:
    out = []
    for r in df.collect():
        row = r.asDict()
        if "headers" in row and row["headers"] is not None:
            row["headers"] = [(h.key, None if h.value is None else bytes(h.value)) for h in row["headers"]]
        for name in ("key", "value"):
            if row[name] is not None:
                row[name] = bytes(row[name])
        out.append(tuple(sorted(row.items())))
    return sorted(out, key=lambda t: (dict(t)["partition"], dict(t)["offset"]))


@pytest.fixture(scope="module")
def mixed_topic(cluster):
    """Keys, null keys and values, headers, batches of every codec, over 3 partitions."""
    topic = "tb-mixed"
    cluster.create_topic(topic, partitions=3, rf=3)
    n = 0
    for codec in CODECS:
        p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                      "compression.type": codec, "linger.ms": 20})
        for i in range(300):
            key = None if i % 7 == 0 else b"k%d" % (i % 40)
            value = None if i % 11 == 0 else (b"%s-%d-" % (codec.encode(), i)) * (1 + i % 5)
            headers = [("h", b"x%d" % i), ("empty", None)] if i % 3 == 0 else None
            p.produce(topic, key=key, value=value, headers=headers, partition=i % 3)
            n += 1
        assert p.flush(60) == 0
    return topic, n


@pytest.mark.parametrize("headers,isolation", [("true", "read_committed"), ("false", "read_uncommitted")])
def test_same_rows_through_brokers_as_from_files(spark, cluster, mixed_topic, headers, isolation):
    topic, n = mixed_topic
    options = {"subscribe": topic, "includeHeaders": headers, "kafka.isolation.level": isolation,
               "kafka.max.partition.fetch.bytes": "4096"}       # many fetches per partition
    via_brokers = as_tuples(brokers_read(spark, cluster, **options))
    via_files = as_tuples(files_read(spark, cluster, **options))
    assert len(via_brokers) == n
    assert via_brokers == via_files


def test_isolation_levels_through_brokers(spark, cluster):
    topic = "tb-txn"
    cluster.create_topic(topic, partitions=1, rf=3)
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tb-txn-1",
                                  "linger.ms": 5})
    p.init_transactions(30)
    expect_committed = []
    for round_ in range(4):
        p.begin_transaction()
        values = [b"r%d-%03d" % (round_, i) + b"." * 200 for i in range(40)]
        for v in values:
            p.produce(topic, value=v)
        if round_ % 2:
            assert p.flush(30) == 0             # sent, then aborted (abort alone drops what is queued)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            expect_committed += values
    plain = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    plain.produce(topic, value=b"plain")
    assert plain.flush(30) == 0
    expect_committed.append(b"plain")
    committed = read_values(cluster.bootstrap, topic, 1, "read_committed", expect=expect_committed, timeout=30)
    everything = read_values(cluster.bootstrap, topic, 1, "read_uncommitted", timeout=30)
    assert committed == sorted(expect_committed) and len(everything) == 161
    for isolation, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        # small fetches: an aborted transaction's data and its marker come in different responses
        got = brokers_read(spark, cluster, subscribe=topic, **{"kafka.isolation.level": isolation,
                                                                "kafka.max.partition.fetch.bytes": "2048"})
        assert sorted(bytes(r.value) for r in got.collect()) == expected, isolation


def test_client_rack_reads_from_the_follower_in_the_rack(spark, cluster):
    from confluent_kafka.admin import NewTopic

    from pyspark_seglog.broker_reader import BrokerRangeReader
    from pyspark_seglog.partition_reader import SeglogInputPartition
    topic = "tb-rack"
    fs = cluster.admin().create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]])])
    fs[topic].result(30)
    cluster.wait_for(lambda: cluster.metadata(topic)[0][0] == 1 and len(cluster.metadata(topic)[0][2]) == 3,
                     30, "broker 1 leading with a full ISR")
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(1000):
        p.produce(topic, value=b"v%04d" % i)
    assert p.flush(30) == 0
    df = brokers_read(spark, cluster, subscribe=topic, **{"kafka.client.rack": "r3"})
    assert sorted(bytes(r.value) for r in df.collect()) == [b"v%04d" % i for i in range(1000)]
    # The task's reader, run here: which broker served the records.
    cluster.wait_for(lambda: _follower_hw(cluster, topic, 3) == 1000, 30, "broker 3's high watermark")
    for rack, server in (("r3", 3), ("r2", 2), ("r1", 1), ("", 1)):
        part = SeglogInputPartition("", {}, topic, 0, 0, 1000, "read_uncommitted", False, True,
                                    read_path="brokers", bootstrap_servers=cluster.bootstrap, client_rack=rack)
        reader = BrokerRangeReader(part)
        rows = sum(b.num_rows for b in reader.batches())
        assert rows == 1000 and reader.served == {server: 1000}, (rack, reader.served)


def _follower_hw(cluster, topic: str, broker: int) -> int:
    from logcore.wire.api_keys import FETCH
    from logcore.wire.client import KafkaConnection
    b = cluster.brokers[broker]
    with KafkaConnection(b.host, b.port, timeout_s=10) as conn:
        body = conn.request(FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1024, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                                                         "current_leader_epoch": -1, "partition_max_bytes": 1024}]}],
            "forgotten_topics_data": [], "rack_id": ""}, version=12)
    return body.responses[0].partitions[0].high_watermark


def test_auto_falls_back_to_the_brokers_where_files_are_not_visible(cluster, mixed_topic, tmp_path):
    from pyspark_seglog.partition_reader import SeglogInputPartition, read_partition
    topic, _n = mixed_topic
    hidden = str(tmp_path / "not-here")           # a log dir this host does not see
    part = SeglogInputPartition(hidden, {}, topic, 1, 0, 50, "read_uncommitted", True, True,
                                read_path="auto", bootstrap_servers=cluster.bootstrap)
    batches = list(read_partition(part))
    assert sum(b.num_rows for b in batches) == 50
    assert batches[0].column("offset").to_pylist()[0] == 0
    files_only = SeglogInputPartition(hidden, {}, topic, 1, 0, 50, "read_uncommitted", True, True,
                                      read_path="files", bootstrap_servers=cluster.bootstrap)
    with pytest.raises(Exception, match="not a log root"):
        list(read_partition(files_only))


def test_read_from_option_is_checked_at_the_start():
    from pyspark_seglog.source_options import parse_source_options
    base = {"subscribe": "t"}
    assert parse_source_options({**base, "kafka.bootstrap.servers": "h:1"}, streaming=False).read_path == "auto"
    cases = [
        ({"readfrom": "nearest", "path": "/r"}, "readFrom='nearest': must be auto, files or brokers"),
        ({"readfrom": "files", "kafka.bootstrap.servers": "h:1"}, "readFrom=files needs the log root"),
        ({"readfrom": "brokers", "path": "/r"}, "readFrom=brokers needs kafka.bootstrap.servers"),
        ({"readfrom": "brokers", "path": "/r", "kafka.bootstrap.servers": "h:1"}, "leave out path"),
        ({}, "no log root and no brokers"),
    ]
    for extra, message in cases:
        with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(")):
            parse_source_options({**base, **extra}, streaming=False)


def _produce_acks_all(cluster, topic: str, values: list[bytes]) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % 3, on_delivery=lambda err, _m: err and errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors


def _restart_all(cluster) -> None:
    for b in cluster.brokers.values():
        if not b.alive():
            b.start()
    cluster._admin = None


def test_batch_read_while_the_leader_is_killed(spark, cluster):
    topic = "tb-kill-batch"
    cluster.create_topic(topic, partitions=3, rf=3)
    values = [b"b%06d" % i + b"." * 100 for i in range(12000)]
    _produce_acks_all(cluster, topic, values)
    victim = cluster.brokers[cluster.leader_of(topic, 0)]
    tracker = spark.sparkContext.statusTracker()
    killed = {}

    def kill_mid_job():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for stage in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage)
                if info is not None and info.numCompletedTasks >= 2:
                    killed["left"] = info.numTasks - info.numCompletedTasks
                    victim.kill()
                    return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_mid_job)
    try:
        killer.start()
        df = brokers_read(spark, cluster, subscribe=topic, minPartitions="24",
                          **{"kafka.max.partition.fetch.bytes": "16384"})
        got = [bytes(r.value) for r in df.select("value").collect()]
        killer.join(5)
        assert killed.get("left", 0) > 2, f"the broker was not killed while tasks were left: {killed}"
        assert sorted(got) == values            # every committed record once
    finally:
        killer.join(5)
        _restart_all(cluster)


@pytest.mark.soak
def test_streaming_read_while_the_leader_is_killed(spark, cluster, tmp_path, request):
    if "soak" not in (request.config.option.markexpr or ""):
        pytest.skip("a soak run (about 25 s): select it with `-m soak`")
    topic = "tb-kill-stream"
    cluster.create_topic(topic, partitions=3, rf=3)
    first = [b"s%06d" % i for i in range(9000)]
    _produce_acks_all(cluster, topic, first)
    name = f"tb_stream_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("seglog").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "1500")
             .load().select("value").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        cluster.wait_for(lambda: len(query.recentProgress) >= 2, 120, "two micro-batches")
        victim = cluster.brokers[cluster.leader_of(topic, 1)]
        victim.kill()
        second = [b"s%06d" % i for i in range(9000, 12000)]
        _produce_acks_all(cluster, topic, second)
        query.processAllAvailable()
        got = sorted(bytes(r.value) for r in spark.sql(f"SELECT value FROM {name}").collect())
        assert got == sorted(first + second)    # every committed record once
    finally:
        query.stop()
        _restart_all(cluster)
