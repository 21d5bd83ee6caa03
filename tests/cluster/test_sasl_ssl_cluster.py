"""A 3-broker cluster whose inter-broker listener is SASL_SSL (SCRAM-SHA-512, mutual TLS,
hostname verification): the followers' fetches, the controller's and the coordinators'
connections go over it, with the brokers' SCRAM credential in ZooKeeper's /config/users as
Kafka stores it; clients use a PLAINTEXT listener, and Metadata names every broker by its
PLAINTEXT endpoint. Replicates and fails over: produce, kill the leader, produce, read all."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))

from pki import STORE_PASSWORD, Pki  # noqa: E402
from seglog_cluster import SeglogCluster  # noqa: E402

pytestmark = pytest.mark.soak   # a 3-broker cluster over SASL_SSL, ~30 s: -m soak (one broker: tests/security/test_clients.py)


SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _scram_user_in_zookeeper(zk_hosts: str, user: str, password: str) -> None:
    """As `kafka-configs --zookeeper ... --alter --add-config SCRAM-SHA-512=[password=...]` writes it."""
    from kazoo.client import KazooClient

    from logcore.cluster.config_store import user_config_path
    from logcore.cluster.znode_json import topic_config_json
    from logcore.security.scram_credential import ScramCredential
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        credential = ScramCredential.from_password("SCRAM-SHA-512", password)
        client.create(user_config_path(user), topic_config_json({"SCRAM-SHA-512": credential.to_config()}),
                      makepath=True)
    finally:
        client.stop()
        client.close()


def test_sasl_ssl_inter_broker_listener_replicates_and_fails_over(zk_hosts, tmp_path):
    import confluent_kafka as ck
    pki = Pki(tmp_path / "pki")
    _scram_user_in_zookeeper(zk_hosts, "broker", "broker-secret")
    props = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            f'{SCRAM_MODULE} required username="broker" password="broker-secret";',
        "listener.name.internal.ssl.client.auth": "required",
        "ssl.keystore.location": str(pki.broker_p12), "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.location": str(pki.truststore_p12), "ssl.truststore.password": STORE_PASSWORD,
        "default.replication.factor": "3", "min.insync.replicas": "2",
    }
    cluster = SeglogCluster(tmp_path / "cluster", zk_hosts, props=props)
    cluster.add_internal_listener()
    try:
        cluster.start()
        cluster.create_topic("secured", partitions=1, rf=3)
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(50):
            producer.produce("secured", f"before-{i}".encode())
        assert producer.flush(30) == 0
        leader = cluster.leader_of("secured")
        cluster.brokers[leader].kill()
        cluster.wait_for(lambda: cluster.leader_of("secured") not in (-1, leader), 30, "a new leader")
        for i in range(50):
            producer.produce("secured", f"after-{i}".encode())
        assert producer.flush(30) == 0
        values = [v for _o, _k, v in cluster.read_partition("secured")]
        assert values == [f"before-{i}".encode() for i in range(50)] + [f"after-{i}".encode() for i in range(50)]
        assert "(inter-broker listener INTERNAL)" in cluster.brokers[leader].log_text()
    finally:
        cluster.close()
        print(cluster.logs())
