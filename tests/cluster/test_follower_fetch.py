"""KIP-392 on a seglog cluster: consumers fetching from the closest replica.

Three brokers in racks r1, r2, r3 with replica.selector.class set to Kafka's rack-aware selector:
- a follower serves a consumer's Fetch v11+ up to its own high watermark (and refuses older
  versions, NOT_LEADER_OR_FOLLOWER, as Kafka does);
- the leader answers a consumer in another rack with the in-rack follower as the preferred read
  replica and no records; a consumer in the leader's rack, in no broker's rack or naming no rack
  is served by the leader;
- librdkafka with client.rack=r2 reads every record, nearly all of the bytes from broker 2
  (its per-broker statistics);
- broker.rack reaches clients in Metadata; replica.selector.class takes only Kafka's two values.

Skipped when ZooKeeper (java and the zookeeper jars), kazoo or confluent-kafka is missing.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo)")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seglog_cluster import SeglogCluster  # noqa: E402
from zookeeper_reference import fresh_chroot  # noqa: E402

from logcore.broker.config import RACK_AWARE_SELECTOR, BrokerConfig  # noqa: E402
from logcore.errors import InvalidConfigError  # noqa: E402
from logcore.wire.api_keys import FETCH  # noqa: E402
from logcore.wire.client import KafkaConnection  # noqa: E402

RACKS = {1: "r1", 2: "r2", 3: "r3"}
TOPIC = "ff-topic"
RECORDS = 2000


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("follower-fetch")
    with SeglogCluster.running(base, fresh_chroot(zk_server.connect_string, "ff"), size=3,
                               props={"min.insync.replicas": "2", "replica.selector.class": RACK_AWARE_SELECTOR},
                               per_broker={b: {"broker.rack": r} for b, r in RACKS.items()}) as c:
        _topic_led_by_broker_1(c)
        yield c


def _topic_led_by_broker_1(c) -> None:
    from confluent_kafka.admin import NewTopic
    fs = c.admin().create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]])], request_timeout=30)
    fs[TOPIC].result(30)
    c.wait_for(lambda: c.metadata(TOPIC)[0][0] == 1 and len(c.metadata(TOPIC)[0][2]) == 3, 30,
               "broker 1 leading with a full ISR")
    p = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(TOPIC, key=b"k%d" % i, value=b"v%05d" % i + b"." * 90)
    assert p.flush(60) == 0
    # every follower's HW reaches the end (followers learn it on their next fetch)
    c.wait_for(lambda: all(_fetch(c, b, 0, version=12)[0].high_watermark == RECORDS for b in (2, 3)),
               30, "the followers' high watermarks")


def _fetch(c, broker: int, offset: int, *, version: int = 12, rack: str = "", isolation: int = 0):
    b = c.brokers[broker]
    with KafkaConnection(b.host, b.port, timeout_s=10) as conn:
        body = conn.request(FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "current_leader_epoch": -1, "log_start_offset": -1,
                                                         "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": rack}, version=version)
    return body.responses[0].partitions


def test_selector_setting_takes_kafkas_two_values_only():
    assert BrokerConfig.from_props({"replica.selector.class": RACK_AWARE_SELECTOR})["replica.selector.class"] \
        == RACK_AWARE_SELECTOR
    assert BrokerConfig.from_props({})["replica.selector.class"] == ""
    with pytest.raises(InvalidConfigError, match="replica.selector.class.*RackAwareReplicaSelector"):
        BrokerConfig.from_props({"replica.selector.class": "com.example.NearestSelector"})


def test_metadata_gives_each_brokers_rack(cluster):
    from pyspark_seglog.broker_client import BrokerClient
    with BrokerClient(cluster.bootstrap) as client:
        client.metadata([TOPIC])
        assert {node: b.rack for node, b in client.brokers.items()} == RACKS


def test_follower_serves_consumers_from_fetch_v11(cluster):
    (p,) = _fetch(cluster, 3, 0, version=12)
    assert int(p.error_code) == 0 and p.high_watermark == RECORDS and len(p.records) > 0
    (old,) = _fetch(cluster, 3, 0, version=10)
    assert int(old.error_code) == 6          # NOT_LEADER_OR_FOLLOWER: before KIP-392 only leaders serve


def test_leader_names_the_in_rack_follower(cluster):
    (p,) = _fetch(cluster, 1, 0, rack="r3")
    assert p.preferred_read_replica == 3 and not p.records and p.high_watermark == RECORDS
    for rack in ("r1", "", "r9"):            # the leader's rack, no rack, nobody's rack
        (p,) = _fetch(cluster, 1, 0, rack=rack)
        assert p.preferred_read_replica == -1 and len(p.records) > 0, rack


def test_librdkafka_with_client_rack_reads_from_the_follower(cluster):
    stats = []
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ff-rack",
                                  "client.rack": "r2", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "enable.partition.eof": True,
                                  "statistics.interval.ms": 200, "stats_cb": stats.append})
    try:
        c.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(m.error())
            got.append(m.value())
        assert [v[:6] for v in got] == [b"v%05d" % i for i in range(RECORDS)]
        time.sleep(0.5)
        c.poll(0.3)                          # one more statistics callback
    finally:
        c.close()
    last = json.loads(stats[-1])
    rx = {b["nodeid"]: b["rxbytes"] for b in last["brokers"].values() if b["nodeid"] >= 0}
    payload = RECORDS * 100
    assert rx[2] > payload and rx[1] < payload // 4 and rx[3] < payload // 4, rx
