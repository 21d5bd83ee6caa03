"""A cluster member's stop (logcore/broker/cluster_member.py): SIGTERM always ends the broker,
with every log closed cleanly, also when ZooKeeper cannot be reached (Kafka retries its
controlled shutdown controlled.shutdown.max.retries times and then shuts down anyway)."""
from __future__ import annotations

import signal
import time

import pytest

from seglog_cluster import SeglogCluster
from zookeeper_reference import ZooKeeperCluster

pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")


@pytest.mark.soak          # ~17 s: -m soak
def test_sigterm_ends_a_broker_whose_zookeeper_is_gone(tmp_path, zk_standalone: ZooKeeperCluster):
    zookeeper = zk_standalone
    props = {"controlled.shutdown.max.retries": "2", "controlled.shutdown.retry.backoff.ms": "500",
             "zookeeper.session.timeout.ms": "6000"}
    cluster = SeglogCluster(tmp_path / "brokers", zookeeper.connect_string, size=2, props=props)
    try:
        cluster.start()
        cluster.create_topic("z", partitions=2, rf=2)
        zookeeper.stop()                               # every ZooKeeper server gone at once
        time.sleep(1.0)
        started = time.monotonic()
        for b in cluster.brokers.values():
            b.proc.send_signal(signal.SIGTERM)
        codes = {}
        for b in cluster.brokers.values():
            try:
                codes[b.id] = b.proc.wait(timeout=max(1.0, 45 - (time.monotonic() - started)))
            except Exception:
                codes[b.id] = None
        took = time.monotonic() - started
        assert all(code == 0 for code in codes.values()), (codes, cluster.logs())
        assert took < 45, took
        for b in cluster.brokers.values():
            assert "every log closed cleanly" in b.log_text(), b.log_tail(40)
    finally:
        cluster.close()
