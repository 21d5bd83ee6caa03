"""The describe APIs on a three-broker seglog cluster, read by Kafka 4.1's own tools
(kafka-cluster cluster-id, kafka-log-dirs --describe, kafka-broker-api-versions) and by
confluent-kafka, and the same tools against Apache Kafka for the shape of their answers.

A cluster member advertises exactly api_versions.SERVED plus CLUSTER_SERVED; DescribeCluster
names the ZooKeeper controller; DescribeLogDirs reports each broker's replicas with the same size
on every replica; DescribeProducers is answered by the leader only."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from logcore.broker.api_versions import advertised, cluster_served  # noqa: E402
from logcore.wire.api_keys import DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS  # noqa: E402
from logcore.wire.client import KafkaConnection  # noqa: E402
from logcore.wire.error_codes import NONE, NOT_LEADER_OR_FOLLOWER  # noqa: E402

pytestmark = [pytest.mark.soak, pytest.mark.timeout(300)]   # a cluster and a Kafka broker, ~45 s: -m soak (one broker: tests/broker/test_describe_apis.py)

CLUSTER_TOOL = "org.apache.kafka.tools.ClusterTool"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"


def produce(bootstrap: str, topic: str, count: int) -> None:
    """`count` records, one batch per partition: the sizes compared with Kafka's depend on it.
    The partitions' leaders are looked up first (records produced before librdkafka knows them
    wait in its unassigned queue and may be sent as batches of their own once moved out of it),
    and a linger longer than flush's timeout leaves the sending to flush(), after every record is
    queued (a stall of this process between two produce() calls cannot send the first alone)."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 60_000})
    p.list_topics(topic, timeout=10)
    for i in range(count):
        p.produce(topic, key=b"k%d" % i, value=b"v" * 50, partition=i % 2, timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0


def tools(jars, bootstrap: str, topic: str, brokers: str) -> dict:
    """What the three tools print against `bootstrap`: the cluster id, the log dirs (JSON) and the
    API lines of each broker."""
    out = {}
    cluster_id, log_dirs, proc = jars.run_tools([      # one JVM
        (CLUSTER_TOOL, ["cluster-id", "--bootstrap-server", bootstrap]),
        (LOG_DIRS, ["--describe", "--bootstrap-server", bootstrap, "--broker-list", brokers, "--topic-list", topic]),
        (API_VERSIONS, ["--bootstrap-server", bootstrap])])
    for done in (cluster_id, log_dirs, proc):
        assert done.returncode == 0, done.stderr[-2000:]
    out["cluster_id"] = cluster_id.stdout.strip().removeprefix("Cluster ID: ")
    out["log_dirs"] = json.loads(log_dirs.stdout.strip().splitlines()[-1])
    out["apis"] = {}
    node = None
    for line in proc.stdout.splitlines():
        m = re.match(r"\S+ \(id: (\d+) rack", line)
        if m:
            node = int(m.group(1))
            out["apis"][node] = {}
        m = re.match(r"\s*(\w+)\((\d+)\): (.*?),?$", line)
        if m and node is not None:
            out["apis"][node][int(m.group(2))] = m.group(3)
    return out


def partitions(log_dirs: dict) -> dict[int, dict[str, tuple]]:
    """broker -> partition name -> (size, offsetLag, isFuture) of kafka-log-dirs' JSON."""
    return {b["broker"]: {p["partition"]: (p["size"], p["offsetLag"], p["isFuture"])
                          for d in b["logDirs"] for p in d["partitions"]}
            for b in log_dirs["brokers"]}


@pytest.fixture(scope="module")
def kafka_answers(kafka_shared, kafka_jars):
    kafka = kafka_shared
    kafka.create_topic("described", 2)
    produce(kafka.bootstrap, "described", 10)
    return tools(kafka_jars, kafka.bootstrap, "described", "1")


def test_describe_apis_on_a_cluster(tmp_path, zk_hosts, kafka_jars, kafka_answers):
    with SeglogCluster.running(tmp_path, zk_hosts, size=3, props={"min.insync.replicas": "2"}) as c:
        c.create_topic("described", partitions=2, rf=3)
        produce(c.bootstrap, "described", 10)
        leaders = {p: c.leader_of("described", p) for p in (0, 1)}
        c.wait_for(lambda: len({replica_sizes(b.port) for b in c.brokers.values()}) == 1, 30,
                   "every replica at the same size")
        seen = tools(kafka_jars, c.bootstrap, "described", "1,2,3")

        with KafkaConnection("127.0.0.1", c.brokers[1].port, timeout_s=10) as conn:
            assert sorted((k, lo, hi) for k, (lo, hi) in conn.served.items()) == advertised(cluster_served())
            described = conn.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False}, 1)
        _, controller = KafkaConnection("127.0.0.1", c.brokers[2].port, timeout_s=10).connect().metadata_brokers()
        assert described.controller_id == controller in (1, 2, 3)
        assert sorted((b.broker_id, b.port) for b in described.brokers) == \
            sorted((i, b.port) for i, b in c.brokers.items())
        assert seen["cluster_id"] == described.cluster_id

        admin = ck.admin.AdminClient({"bootstrap.servers": c.bootstrap})
        cluster = admin.describe_cluster(request_timeout=10).result(15)
        assert sorted(n.id for n in cluster.nodes) == [1, 2, 3] and cluster.controller.id == controller
        topic = admin.describe_topics(ck.TopicCollection(["described"]), request_timeout=10)["described"].result(15)
        assert {p.id: p.leader.id for p in topic.partitions} == leaders

        for p, leader in leaders.items():
            for broker_id, b in c.brokers.items():
                with KafkaConnection("127.0.0.1", b.port, timeout_s=10) as conn:
                    answer = conn.request(DESCRIBE_PRODUCERS, {"topics": [
                        {"name": "described", "partition_indexes": [p]}]}).topics[0].partitions[0]
                if broker_id == leader:
                    assert answer.error_code == NONE and len(answer.active_producers) == 1
                    assert answer.active_producers[0].last_sequence == 4        # 5 records, one per batch or one batch
                else:
                    assert answer.error_code == NOT_LEADER_OR_FOLLOWER

    # kafka-log-dirs: every broker holds both partitions, the same bytes on each replica, no lag
    ours = partitions(seen["log_dirs"])
    assert sorted(ours) == [1, 2, 3]
    assert all(set(v) == {"described-0", "described-1"} for v in ours.values())
    assert all(lag == 0 and future is False for v in ours.values() for _, lag, future in v.values())
    theirs = partitions(kafka_answers["log_dirs"])
    assert set(theirs[1]) == {"described-0", "described-1"}
    # the same records from the same client give the same batch bytes, so the same sizes as Kafka
    assert ours[1] == theirs[1], (ours, theirs)
    # kafka-broker-api-versions: the describe APIs listed as on Kafka; ElectLeaders only on a cluster
    for node in (1, 2, 3):
        apis = seen["apis"][node]
        for key in (35, 60, 61, 43):
            assert not apis[key].startswith("UNSUPPORTED"), (key, apis[key])
            assert not kafka_answers["apis"][1][key].startswith("UNSUPPORTED")
    assert re.match(r"0 to 1 \[usable: 1\]", seen["apis"][1][60])


def replica_sizes(port: int) -> tuple:
    """((partition, size), ...) of `described` in one broker's DescribeLogDirs."""
    with KafkaConnection("127.0.0.1", port, timeout_s=10) as conn:
        body = conn.request(DESCRIBE_LOG_DIRS, {"topics": [{"topic": "described", "partitions": [0, 1]}]})
    return tuple(sorted((p.partition_index, p.partition_size) for r in body.results for t in r.topics
                        for p in t.partitions))
