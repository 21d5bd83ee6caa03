"""Certificate reload on a 3-broker cluster whose inter-broker listener is SSL (client
certificates required): each broker is moved to a new CA through dynamic broker configs, in
Kafka's two steps (the new CA trusted everywhere, then the new certificates), without a restart;
replication goes on; the settings are in ZooKeeper's /config/brokers/<id>, and a broker restarted
afterwards takes them from there and catches up over new inter-broker connections."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))

from pki import STORE_PASSWORD, Pki, issue, make_ca  # noqa: E402
from seglog_cluster import SeglogCluster  # noqa: E402

pytestmark = pytest.mark.soak   # a 3-broker TLS cluster and a restart, ~30 s: -m soak (one broker: tests/security/test_cert_reload.py)
INTERNAL = "listener.name.internal."


def _alter(cluster, broker: int, changes: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker), incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()])
    cluster.admin().incremental_alter_configs([res])[res].result(30)


def _produce(cluster, topic: str, prefix: str, n: int = 30) -> None:
    import confluent_kafka as ck
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(n):
        producer.produce(topic, f"{prefix}-{i}".encode())
    assert producer.flush(30) == 0


def test_inter_broker_ca_rotation_without_restart(zk_hosts, tmp_path):
    pytest.importorskip("confluent_kafka")
    pki = Pki(tmp_path / "pki")
    props = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.internal.ssl.client.auth": "required",
        "ssl.keystore.location": str(pki.broker_p12), "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
        "default.replication.factor": "3", "min.insync.replicas": "2",
    }
    cluster = SeglogCluster(tmp_path / "cluster", zk_hosts, props=props)
    cluster.add_internal_listener()
    new_ca = make_ca("the new CA")
    both = tmp_path / "both-cas.crt"
    both.write_bytes(pki.ca.cert_pem() + new_ca.cert_pem())
    try:
        cluster.start()
        cluster.create_topic("rotated", partitions=1, rf=3)
        _produce(cluster, "rotated", "before")
        for i in cluster.brokers:                   # step 1: the new CA trusted everywhere
            _alter(cluster, i, {INTERNAL + "ssl.truststore.location": str(both)})
        for i in cluster.brokers:                   # step 2: the new certificates
            store = issue(new_ca, "broker").write_pkcs12(tmp_path, f"broker-{i}-new")
            _alter(cluster, i, {INTERNAL + "ssl.keystore.location": str(store),
                                INTERNAL + "ssl.keystore.password": STORE_PASSWORD})
        _produce(cluster, "rotated", "rotated")
        from kazoo.client import KazooClient
        zk = KazooClient(hosts=zk_hosts)
        zk.start(timeout=15)
        try:
            stored = json.loads(zk.get("/config/brokers/1")[0])["config"]
        finally:
            zk.stop()
            zk.close()
        assert stored[INTERNAL + "ssl.keystore.location"].endswith("broker-1-new.p12")
        assert stored[INTERNAL + "ssl.truststore.location"] == str(both)
        # the leader restarted: it reads its stores from ZooKeeper and fetches over new connections
        leader = cluster.leader_of("rotated")
        cluster.brokers[leader].stop()
        cluster.wait_for(lambda: cluster.leader_of("rotated") not in (-1, leader), 30, "a new leader")
        _produce(cluster, "rotated", "after")
        cluster.brokers[leader].start()
        cluster.wait_for(lambda: sorted(cluster.metadata("rotated")[0][2]) == sorted(cluster.brokers), 60,
                         f"broker {leader} back in the ISR")
        assert "new key/trust store settings" in cluster.brokers[leader].log_text()
        values = [v for _o, _k, v in cluster.read_partition("rotated")]
        assert values == [f"{p}-{i}".encode() for p in ("before", "rotated", "after") for i in range(30)]
    finally:
        cluster.close()
        print(cluster.logs())
