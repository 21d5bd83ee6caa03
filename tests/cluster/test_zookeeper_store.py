"""The ZooKeeper metadata store against a real ZooKeeper: Kafka's znodes and JSON, ephemeral
registrations, conditional updates, controller election and epoch fencing."""
from __future__ import annotations

import json
import threading

import pytest
from kazoo.client import KazooClient

from logcore.cluster.znode_json import LeaderAndIsr
from logcore.cluster.znode_paths import partition_state_path
from logcore.cluster.zookeeper_store import ZooKeeperStore
from harness import wait_until
from logcore.errors import (BrokerIdInUseError, ControllerMovedError, TopicExistsError,
                            TopicNotFoundError, ZkVersionConflictError)


def wait_for(cond, timeout=15.0, what="condition"):
    return wait_until(cond, timeout, what, interval=0.05)


def expire(store: ZooKeeperStore, hosts: str) -> None:
    """End the store's session from the server side: a second client with the same session id
    and password connects and closes it."""
    sid, pw = store.client.client_id
    other = KazooClient(hosts=hosts, client_id=(sid, pw), timeout=2.0)
    other.start(timeout=10)
    other.stop()
    other.close()


def test_broker_registration_is_kafka_json_and_ephemeral(stores, zk_client):
    a = stores()
    epoch = a.register_broker(1, "127.0.0.1", 9092, rack="r1")
    raw, stat = zk_client.get("/brokers/ids/1")
    doc = json.loads(raw)
    assert doc["version"] == 4 and doc["host"] == "127.0.0.1" and doc["port"] == 9092
    assert doc["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"] and doc["rack"] == "r1"
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert isinstance(doc["timestamp"], str) and doc["jmx_port"] == -1
    assert epoch == stat.czxid and stat.ephemeralOwner == a.session_id
    b = stores()
    assert b.brokers()[1].epoch == epoch
    # a second broker with the same id is refused while the first lives
    with pytest.raises(BrokerIdInUseError, match="broker.id=1"):
        b.register_broker(1, "127.0.0.1", 9093, wait_s=0.3)
    seen = []
    b.watch_brokers(lambda brokers: seen.append(sorted(brokers)))
    a.close()
    wait_for(lambda: seen and seen[-1] == [], what="registration gone after session close")
    assert zk_client.exists("/brokers/ids/1") is None
    # now the id is free
    assert b.register_broker(1, "127.0.0.1", 9093) > epoch


def test_session_expiry_removes_registration_then_reregisters_with_new_epoch(stores, zk_hosts, zk_client):
    a = stores()
    observer = stores()
    renewed = threading.Event()
    a.on_new_session(renewed.set)
    old_epoch = a.register_broker(2, "127.0.0.1", 9092)
    old_session = a.session_id
    history = []
    observer.watch_brokers(lambda brokers: history.append({i: r.epoch for i, r in brokers.items()}))
    expire(a, zk_hosts)
    assert renewed.wait(20), "no new session after expiry"
    assert a.session_id != old_session
    new = wait_for(lambda: observer.brokers().get(2), what="re-registration")
    assert new.epoch > old_epoch                      # a bounced broker: new broker epoch
    assert a.registration.epoch == new.epoch
    _, stat = zk_client.get("/brokers/ids/2")
    assert stat.ephemeralOwner == a.session_id
    # the observer saw the registration vanish (or at least a changed epoch)
    assert any(2 not in h for h in history) or history[-1][2] > old_epoch


def test_topic_znodes_have_kafka_layout(stores, zk_client):
    s = stores()
    s.create_topic("orders", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2], 1: [2, 1]}, {"min.insync.replicas": "2"})
    doc = json.loads(zk_client.get("/brokers/topics/orders")[0])
    assert doc == {"version": 3, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": {"0": [1, 2], "1": [2, 1]},
                   "adding_replicas": {}, "removing_replicas": {}}
    assert json.loads(zk_client.get("/config/topics/orders")[0]) == \
        {"version": 1, "config": {"min.insync.replicas": "2"}}
    with pytest.raises(TopicExistsError):
        s.create_topic("orders", "AAAAAAAAAAAAAAAAAAAAAg", {0: [1]})
    assert s.topic("orders").partitions == {0: (1, 2), 1: (2, 1)}
    cfg, version = s.topic_config("orders")
    s.set_topic_config("orders", {**cfg, "retention.ms": "1000"}, version)
    changes = zk_client.get_children("/config/changes")
    assert len(changes) == 1 and changes[0].startswith("config_change_")
    assert json.loads(zk_client.get("/config/changes/" + changes[0])[0]) == \
        {"version": 2, "entity_path": "topics/orders"}
    with pytest.raises(ZkVersionConflictError):
        s.set_topic_config("orders", {}, version)     # stale version
    name = s.notify_isr_change([("orders", 1)])
    assert name.startswith("/isr_change_notification/isr_change_")
    assert list(s.isr_change_notifications().values()) == [[("orders", 1)]]
    s.delete_isr_change_notifications(s.isr_change_notifications())
    assert s.isr_change_notifications() == {}
    s.request_topic_deletion("orders")
    assert zk_client.exists("/admin/delete_topics/orders")
    with pytest.raises(TopicNotFoundError):
        s.request_topic_deletion("nope")


def test_conditional_isr_update_losing_a_race(stores, zk_client):
    ctl, leader, other = stores(), stores(), stores()
    fence = ctl.try_become_controller(1)
    ctl.create_topic("t", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2, 3]})
    ctl.create_partition_states("t", {0: LeaderAndIsr(1, 0, (1, 2, 3), fence.epoch)}, fence)
    assert json.loads(zk_client.get(partition_state_path("t", 0))[0]) == \
        {"version": 1, "leader": 1, "leader_epoch": 0, "isr": [1, 2, 3], "controller_epoch": fence.epoch}
    mine = leader.partition_state("t", 0)
    theirs = other.partition_state("t", 0, sync=True)
    assert mine.zk_version == theirs.zk_version == 0
    shrunk = leader.update_partition_state("t", 0, LeaderAndIsr(1, 0, (1, 2), mine.controller_epoch),
                                           mine.zk_version)
    assert shrunk.zk_version == 1
    with pytest.raises(ZkVersionConflictError, match="version 0"):
        other.update_partition_state("t", 0, LeaderAndIsr(1, 0, (1, 3), theirs.controller_epoch),
                                     theirs.zk_version)
    again = other.partition_state("t", 0)
    assert again.isr == (1, 2) and again.zk_version == 1


def test_controller_election_failover_and_fencing(stores, zk_client, zk_hosts):
    a, b = stores(), stores()
    fa = a.try_become_controller(1)
    assert fa is not None and fa.epoch == 1 and zk_client.get("/controller_epoch")[0] == b"1"
    ctl = json.loads(zk_client.get("/controller")[0])
    assert ctl["version"] == 1 and ctl["brokerid"] == 1 and isinstance(ctl["timestamp"], str)
    assert b.try_become_controller(2) is None        # /controller exists
    assert b.controller() == 1
    a.create_topic("t", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2]})
    st = a.create_partition_states("t", {0: LeaderAndIsr(1, 0, (1, 2), fa.epoch)}, fa)[0]
    seen = []
    b.watch_controller(seen.append)
    renewed = threading.Event()
    a.on_new_session(renewed.set)
    # a zombie: a's session expires (as a paused or partitioned controller's would); it comes
    # back with a new session but still holds its old fence
    expire(a, zk_hosts)
    assert renewed.wait(20)
    wait_for(lambda: seen and seen[-1] is None, what="/controller gone after expiry")
    fb = b.try_become_controller(2)
    assert fb is not None and fb.epoch == 2 and b.controller() == 2
    # the zombie's fenced writes fail, whatever their target version
    with pytest.raises(ControllerMovedError, match="controller epoch 1"):
        a.update_partition_state("t", 0, LeaderAndIsr(1, 1, (1,), fa.epoch), st.zk_version, fence=fa)
    with pytest.raises(ControllerMovedError):
        a.remove_topic("t", fa)
    assert b.partition_state("t", 0).isr == (1, 2)
    # the new controller's write goes through, and a lost CAS is reported as a conflict
    moved = b.update_partition_state("t", 0, LeaderAndIsr(2, 1, (2,), fb.epoch), st.zk_version, fence=fb)
    assert moved.zk_version == st.zk_version + 1
    with pytest.raises(ZkVersionConflictError):
        b.update_partition_state("t", 0, LeaderAndIsr(2, 2, (2,), fb.epoch), st.zk_version, fence=fb)
    # deletion completes under the live controller
    b.request_topic_deletion("t")
    b.remove_topic("t", fb)
    assert zk_client.exists("/brokers/topics/t") is None
    assert zk_client.exists("/admin/delete_topics/t") is None and zk_client.exists("/config/topics/t") is None


def test_controller_resigns_and_session_close_frees_office(stores):
    a, b = stores(), stores()
    assert a.try_become_controller(1).epoch == 1
    a.resign_controller(1)
    assert b.controller() is None
    assert b.try_become_controller(2).epoch == 2
    b.close()
    wait_for(lambda: a.controller() is None, 5, "/controller gone after the session closed")
    assert a.try_become_controller(1).epoch == 3


def test_unreachable_zookeeper_is_a_coordinator_error(stores, zk_server):
    from logcore.errors import CoordinatorUnavailableError
    from zookeeper_reference import free_ports
    s = stores()
    s.close()
    with pytest.raises(CoordinatorUnavailableError, match="brokers failed"):
        s.brokers()
    dead = ZooKeeperStore(f"127.0.0.1:{free_ports(1)[0]}", connect_timeout_s=1.0)
    with pytest.raises(CoordinatorUnavailableError, match="no ZooKeeper answered"):
        dead.start()


def test_partition_state_watch_survives_session_expiry(stores, zk_hosts):
    ctl, broker = stores(), stores()
    fence = ctl.try_become_controller(1)
    ctl.create_topic("w", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2]})
    seen = []
    broker.watch_partition_state("w", 0, seen.append)
    assert seen == [None]                                    # called at once; absent yet
    st = ctl.create_partition_states("w", {0: LeaderAndIsr(1, 0, (1, 2), fence.epoch)}, fence)[0]
    wait_for(lambda: seen[-1] is not None, what="state seen")
    assert seen[-1] == st
    renewed = threading.Event()
    broker.on_new_session(renewed.set)
    expire(broker, zk_hosts)
    assert renewed.wait(20)
    st = ctl.update_partition_state("w", 0, LeaderAndIsr(2, 1, (2,), fence.epoch), st.zk_version, fence=fence)
    # the watch was re-armed on the new session: the change still arrives, with its version
    wait_for(lambda: seen[-1] is not None and seen[-1].leader_epoch == 1, what="change after expiry")
    assert seen[-1] == st and seen[-1].zk_version == 1
