"""Per-group configs on a cluster: kept in ZooKeeper as Kafka keeps them (/config/groups/<group>
{"version":1,"config":{..}} and a /config/changes notice "groups/<group>"), followed by every
broker (two GroupConfigs on their own ZooKeeper sessions stand for two brokers: any of them may
become the group's coordinator). The brokers' side end to end is tests/coordinator/test_group_configs.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from logcore.broker.config import BrokerConfig
from logcore.broker.group_configs import GroupConfigs
from logcore.cluster.config_store import ZooKeeperConfigStore
from logcore.cluster.zookeeper_store import ZooKeeperStore
from logcore.errors import InvalidConfigError
from logcore.log.config_alteration import DELETE, SET
from logcore.storage import LocalStorage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from broker_helpers import wait_until  # noqa: E402

SESSION, INTERVAL = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    config = BrokerConfig.from_props({"log.dirs": str(tmp_path), "group.consumer.min.session.timeout.ms": "2000",
                                      "group.consumer.min.heartbeat.interval.ms": "1000"})
    stores, out = [], []
    for i in range(2):
        store = ZooKeeperStore(zk_hosts, session_timeout_ms=4000).start()
        stores.append(store)
        groups = GroupConfigs(config, LocalStorage(str(tmp_path / f"root{i}")))
        groups.attach(ZooKeeperConfigStore(store))
        out.append(groups)
    yield out
    for store in stores:
        store.close()


def test_configs_in_zookeeper_followed_by_every_broker(brokers, zk_client):
    first, second = brokers
    first.alter("g/1", [(SESSION, SET, "6000")], replace=False, validate_only=False)
    raw, _ = zk_client.get("/config/groups/g%2F1")
    assert json.loads(raw) == {"version": 1, "config": {SESSION: "6000"}}
    notices = [json.loads(zk_client.get(f"/config/changes/{n}")[0]) for n in zk_client.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "groups/g%2F1"} in notices
    assert wait_until(lambda: second.session_timeout_ms("g/1") == 6000, timeout=10)
    assert second.names() == ["g/1"] and second.heartbeat_interval_ms("g/1") == 5000
    # validated against the broker's bounds before anything is written
    with pytest.raises(InvalidConfigError, match="group.consumer.min.session.timeout.ms"):
        second.alter("g/1", [(SESSION, SET, "1000")], replace=False, validate_only=False)
    assert first.session_timeout_ms("g/1") == 6000
    second.alter("g/1", [(SESSION, DELETE, None), (INTERVAL, SET, "4000")], replace=False, validate_only=False)
    assert wait_until(lambda: first.overrides("g/1") == {INTERVAL: "4000"}, timeout=10)
    assert first.session_timeout_ms("g/1") == 45000
    # a group created by another writer after the watch started is followed too
    zk_client.create("/config/groups/late", json.dumps({"version": 1, "config": {SESSION: "7000"}}).encode())
    assert wait_until(lambda: first.session_timeout_ms("late") == 7000 and second.names() == ["g/1", "late"],
                      timeout=10)
    # a value no broker would have accepted, written past the checks: the last good one stays
    zk_client.set("/config/groups/late", json.dumps({"version": 1, "config": {SESSION: "soon"}}).encode())
    zk_client.set("/config/groups/g%2F1", json.dumps({"version": 1, "config": {INTERVAL: "3000"}}).encode())
    assert wait_until(lambda: first.heartbeat_interval_ms("g/1") == 3000, timeout=10)     # written after "late"
    assert first.session_timeout_ms("late") == 7000
