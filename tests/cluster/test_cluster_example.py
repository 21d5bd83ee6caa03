"""examples/cluster_quickstart.py as a user runs it: ZooKeeper from Debian's jars, three brokers,
`seglog topics --bootstrap-server ... --replication-factor 3`, acks=all, a SIGKILLed leader, and
every acknowledged record read back."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from zookeeper_reference import ZooKeeperUnavailable, find_zookeeper
from broker_process import subprocess_env

REPO = Path(__file__).resolve().parents[2]


def test_cluster_quickstart_runs(zk_server):
    try:
        find_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(str(exc))
    out = subprocess.run([sys.executable, str(REPO / "examples" / "cluster_quickstart.py"),
                          "--zookeeper", zk_server.connect_string + "/example", "--records", "4000"],
                         capture_output=True, text=True, timeout=240, env=subprocess_env(), cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Partition: 0\tLeader: " in out.stdout and "Replicas: " in out.stdout
    assert "read back 4000 records; acknowledged but missing or moved: 0" in out.stdout


@pytest.mark.parametrize("broker", [1, 2, 3])
def test_cluster_config_files_load(broker):
    from logcore.broker.config import BrokerConfig
    config = BrokerConfig.load(str(REPO / "conf" / "cluster" / f"broker-{broker}.properties"))
    assert config.cluster and config.node_id == broker
    assert config["default.replication.factor"] == 3 and config.log_defaults["min.insync.replicas"] == "2"
