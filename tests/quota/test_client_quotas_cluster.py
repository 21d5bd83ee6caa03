"""Client quotas on a 3-broker seglog cluster: kept in ZooKeeper as Kafka keeps them
(/config/clients/<id>, /config/users/<user>/clients/<default>, {"version":1,"config":{..}}, and a
/config/changes notification naming the entity), the other keys of a user's znode (its SCRAM
credentials) left as they are, every broker enforcing a quota written through another one or
straight into ZooKeeper, and Kafka's kafka-configs answering as Apache Kafka does.

One cluster for the module (its start dominates the time)."""
from __future__ import annotations

import json

import pytest

from logcore.wire.client import KafkaConnection
from quota_tool_session import KAFKA_ANSWERS, session
from seglog_cluster import SeglogCluster
from zookeeper_reference import fresh_chroot, started_client


pytestmark = pytest.mark.soak   # a 3-broker cluster, ~30 s: -m soak (one broker: test_client_quotas_broker.py)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zk_server):
    with SeglogCluster.running(tmp_path_factory.mktemp("quotacluster"), fresh_chroot(zk_server.connect_string),
                               size=3) as running:
        yield running


@pytest.fixture(scope="module")
def zk(cluster):
    with started_client(cluster.zk_hosts, timeout=10.0) as c:
        yield c


def _connect(broker, client_id="admin") -> KafkaConnection:
    host, _, port = broker.address.rpartition(":")
    return KafkaConnection(host, int(port), client_id=client_id)


def _alter(broker, entity, ops) -> None:
    with _connect(broker) as conn:
        body = {"entries": [{"entity": [{"entity_type": k, "entity_name": n} for k, n in entity],
                             "ops": [{"key": k, "value": float(v or 0), "remove": v is None} for k, v in ops]}],
                "validate_only": False}
        entry = conn.request(49, body).entries[0]
        assert int(entry.error_code) == 0, entry.error_message


def _throttled(broker, client_id: str) -> bool:
    """Whether `broker` throttles a burst of Metadata requests of `client_id`."""
    with _connect(broker, client_id) as conn:
        for _ in range(3):
            if conn.request(3, {"topics": []}).throttle_time.total_seconds() > 0:
                return True
    return False


def _notices(zk) -> list[dict]:
    return [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in zk.get_children("/config/changes")]


def test_zookeeper_layout_and_scram_keys_kept(cluster, zk):
    first = cluster.brokers[1]
    _alter(first, [("client-id", "slow")], [("producer_byte_rate", 1024)])
    assert json.loads(zk.get("/config/clients/slow")[0]) == {"version": 1, "config": {"producer_byte_rate": "1024"}}
    assert {"version": 2, "entity_path": "clients/slow"} in _notices(zk)
    # the SCRAM credentials of a user live in the same znode: a quota change keeps them
    scram = "salt=c2FsdA==,stored_key=c3Q=,server_key=c2U=,iterations=4096"
    zk.ensure_path("/config/users")
    zk.create("/config/users/alice", json.dumps({"version": 1, "config": {"SCRAM-SHA-256": scram}}).encode())
    _alter(first, [("user", "alice")], [("consumer_byte_rate", 2048)])
    assert json.loads(zk.get("/config/users/alice")[0])["config"] == {"SCRAM-SHA-256": scram,
                                                                       "consumer_byte_rate": "2048"}
    _alter(first, [("user", "alice")], [("consumer_byte_rate", None)])
    assert json.loads(zk.get("/config/users/alice")[0])["config"] == {"SCRAM-SHA-256": scram}
    _alter(first, [("user", "alice"), ("client-id", None)], [("request_percentage", 150)])
    assert json.loads(zk.get("/config/users/alice/clients/<default>")[0])["config"] == {"request_percentage": "150.0"}
    assert {"version": 2, "entity_path": "users/alice/clients/<default>"} in _notices(zk)


def test_every_broker_enforces_a_quota_written_through_another(cluster, zk):
    _alter(cluster.brokers[2], [("client-id", "busy")], [("request_percentage", 0.01)])
    for broker in cluster.brokers.values():
        cluster.wait_for(lambda b=broker: _throttled(b, "busy"), 10, f"broker {broker.id} throttling 'busy'")
        assert not _throttled(broker, "idle")
    # written straight into ZooKeeper with its notification, as Kafka's own tools did in ZooKeeper mode
    zk.create("/config/clients/zk-written", b'{"version":1,"config":{"request_percentage":"0.01"}}')
    zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"clients/zk-written"}', sequence=True)
    for broker in cluster.brokers.values():
        cluster.wait_for(lambda b=broker: _throttled(b, "zk-written"), 10, f"broker {broker.id} reading ZooKeeper")
    _alter(cluster.brokers[3], [("client-id", "busy")], [("request_percentage", None)])
    _alter(cluster.brokers[3], [("client-id", "zk-written")], [("request_percentage", None)])
    for broker in cluster.brokers.values():
        cluster.wait_for(lambda b=broker: not _throttled(b, "busy"), 10, f"broker {broker.id} lifting the quota")


def test_kafka_configs_against_the_cluster(cluster, kafka_jars):
    """The alter, delete and describe of the clients entity (each JVM costs seconds)."""
    calls = (0, 2, 3)
    assert session(kafka_jars, cluster.bootstrap, calls) == [KAFKA_ANSWERS[i] for i in calls]
