"""Dynamic configs on a 3-broker seglog cluster: a topic override set through any broker lands in
ZooKeeper as Kafka keeps it (/config/topics/<t> and a /config/changes notification), every
broker applies it to its own replica at once (a lowered retention.ms deletes the old segments on
the followers too), a cluster-wide broker default reaches every broker, and a restarted broker
keeps both. Kafka's own kafka-configs (ConfigCommand) alters and describes them too.

One cluster for the module (its start dominates the time)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource  # noqa: E402

from logcore.tools.config_admin import ConfigAdmin  # noqa: E402
from logcore.wire.config_resources import BROKER_RESOURCE, OP_SET, TOPIC_RESOURCE  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kafka_reference import KafkaUnavailable, kafka_unavailable, resolve_jars  # noqa: E402
from zookeeper_reference import fresh_chroot, started_client  # noqa: E402


pytestmark = pytest.mark.soak   # a 3-broker cluster, ~30 s: -m soak (one broker: tests/broker/test_broker_configs.py)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zk_server):
    props = {"log.retention.check.interval.ms": "200", "log.cleaner.backoff.ms": "200"}
    with SeglogCluster.running(tmp_path_factory.mktemp("cfgcluster"), fresh_chroot(zk_server.connect_string),
                               size=3, props=props) as running:
        yield running


@pytest.fixture(scope="module")
def zk(cluster):
    with started_client(cluster.zk_hosts, timeout=10.0) as c:
        yield c


def _described(broker, kind, name):
    with ConfigAdmin(broker.address) as admin:
        return {c.name: (c.value, c.source) for c in admin.describe(kind, name)}


def _segments(broker, topic):
    return sorted(p.name for p in (broker.log_dir / f"{topic}-0").glob("*.log"))


def test_topic_override_reaches_every_replica(cluster, zk):
    cluster.create_topic("retained", 1, 3, {"segment.bytes": "1024", "file.delete.delay.ms": "0"})
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                     "batch.num.messages": 10})
    for i in range(300):
        p.produce("retained", value=b"v%05d" % i, partition=0)
        p.poll(0)
    assert p.flush(30) == 0
    cluster.wait_for(lambda: all(len(_segments(b, "retained")) > 3 for b in cluster.brokers.values()), 20,
                     "segments on every replica")
    res = ConfigResource(ConfigResource.Type.TOPIC, "retained",
                         incremental_configs=[ConfigEntry("retention.ms", "1",
                                                          incremental_operation=AlterConfigOpType.SET)])
    cluster.admin().incremental_alter_configs([res])[res].result(15)
    raw, _ = zk.get("/config/topics/retained")
    assert json.loads(raw)["config"]["retention.ms"] == "1"
    changes = [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "topics/retained"} in changes
    # every broker, leader or follower, deletes the old segments of its own replica
    cluster.wait_for(lambda: all(len(_segments(b, "retained")) == 1 for b in cluster.brokers.values()), 30,
                     "retention.ms=1 applied on every replica")
    for b in cluster.brokers.values():
        assert _described(b, TOPIC_RESOURCE, "retained")["retention.ms"] == ("1", 1)


def test_broker_default_and_restart(cluster, zk):
    cluster.create_topic("defaulted", 1, 3)
    with ConfigAdmin(cluster.bootstrap) as admin:
        admin.incremental_alter(BROKER_RESOURCE, "", [("log.retention.ms", OP_SET, "7200000")])
        admin.incremental_alter(TOPIC_RESOURCE, "defaulted", [("cleanup.policy", OP_SET, "compact")])
    assert json.loads(zk.get("/config/brokers/<default>")[0])["config"] == {"log.retention.ms": "7200000"}
    for b in cluster.brokers.values():
        cluster.wait_for(lambda b=b: _described(b, TOPIC_RESOURCE, "defaulted")["retention.ms"] == ("7200000", 3),
                         10, f"the default on broker {b.id}")
    restarted = cluster.brokers[2]
    restarted.stop()
    restarted.start()
    d = _described(restarted, TOPIC_RESOURCE, "defaulted")
    assert d["retention.ms"] == ("7200000", 3)
    assert d["cleanup.policy"] == ("compact", 1)
    assert _described(restarted, BROKER_RESOURCE, "2")["log.retention.ms"] == ("7200000", 3)


def test_kafka_configs_tool_against_the_cluster(cluster):
    """Kafka 4.1's kafka-configs (ConfigCommand): --alter, --describe, --delete-config."""
    try:
        jars = resolve_jars()
    except (KafkaUnavailable, OSError) as exc:
        kafka_unavailable(str(exc))
    cluster.create_topic("tooled", 1, 3)
    base = ["--bootstrap-server", cluster.bootstrap, "--entity-type", "topics", "--entity-name", "tooled"]
    altered, described, invalid = jars.run_tools([("kafka.admin.ConfigCommand", args) for args in (   # one JVM
        [*base, "--alter", "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]"],
        [*base, "--describe"],
        [*base, "--alter", "--add-config", "retention.ms=abc"])])
    assert altered.returncode == 0, altered.stderr[-2000:]
    assert described.returncode == 0, described.stderr[-2000:]
    assert "retention.ms=1000" in described.stdout and "cleanup.policy=compact,delete" in described.stdout
    assert invalid.returncode != 0 and "InvalidConfigurationException" in invalid.stderr
    res = ConfigResource(ConfigResource.Type.TOPIC, "tooled")
    d = cluster.admin().describe_configs([res])[res].result(15)
    assert (d["retention.ms"].value, d["retention.ms"].source) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
