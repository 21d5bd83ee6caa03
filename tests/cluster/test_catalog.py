"""One topic-catalog contract, run against both implementations: a log root's JSON catalog
(LogRoot, unchanged) and the ZooKeeper catalog on a real ZooKeeper."""
from __future__ import annotations

import json
import random

import pytest

from logcore.cluster.catalog import TopicCatalog, ZooKeeperCatalog
from logcore.cluster.zookeeper_store import ZooKeeperStore
from logcore.errors import (InvalidConfigError, InvalidReplicationFactorError, InvalidTopicError,
                            TopicExistsError, TopicNotFoundError)
from logcore.log.log_root import LogRoot


@pytest.fixture(params=["log_root", "zookeeper"])
def catalog(request, tmp_path):
    if request.param == "log_root":
        root = LogRoot.open(str(tmp_path / "root"), create=True)
        yield root
        root.close()
    else:
        hosts = request.getfixturevalue("zk_hosts")
        store = ZooKeeperStore(hosts, session_timeout_ms=2000).start()
        brokers = [ZooKeeperStore(hosts, session_timeout_ms=2000).start() for _ in range(3)]
        for i, b in enumerate(brokers, 1):
            b.register_broker(i, "127.0.0.1", 9090 + i)
        yield ZooKeeperCatalog(store, replication_factor=2, rng=random.Random(7))
        for s in [store, *brokers]:
            s.close()


def test_catalog_contract(catalog):
    assert isinstance(catalog, TopicCatalog)
    assert catalog.list_topics() == []
    info = catalog.create_topic("b-topic", 3, {"cleanup.policy": "compact"})
    assert (info.name, info.partitions, info.config) == ("b-topic", 3, {"cleanup.policy": "compact"})
    assert len(info.topic_id) == 22
    catalog.create_topic("a-topic")
    assert catalog.list_topics() == ["a-topic", "b-topic"]
    assert catalog.describe_topic("b-topic") == info
    with pytest.raises(TopicExistsError):
        catalog.create_topic("a-topic")
    with pytest.raises(InvalidTopicError):
        catalog.create_topic("bad/name")
    with pytest.raises(InvalidConfigError):
        catalog.create_topic("c", 1, {"no.such.config": "1"})
    with pytest.raises(TopicNotFoundError):
        catalog.describe_topic("missing")
    grown = catalog.add_partitions("b-topic", 5)
    assert grown.partitions == 5 and grown.topic_id == info.topic_id
    with pytest.raises(InvalidConfigError, match="only grow"):
        catalog.add_partitions("b-topic", 2)
    altered = catalog.alter_topic_config("b-topic", {"retention.ms": "1000"})
    assert altered.config == {"cleanup.policy": "compact", "retention.ms": "1000"}
    catalog.delete_topic("a-topic")
    assert catalog.list_topics() == ["b-topic"]
    with pytest.raises(TopicNotFoundError):
        catalog.describe_topic("a-topic")
    with pytest.raises(TopicNotFoundError):
        catalog.delete_topic("missing")


def test_zookeeper_catalog_assigns_over_registered_brokers(zk_hosts, zk_client):
    store = ZooKeeperStore(zk_hosts, session_timeout_ms=2000).start()
    brokers = [ZooKeeperStore(zk_hosts, session_timeout_ms=2000).start() for _ in range(3)]
    try:
        for i, b in zip((10, 20, 30), brokers):
            b.register_broker(i, "127.0.0.1", 9000 + i)
        cat = ZooKeeperCatalog(store, replication_factor=3)
        cat.create_topic("t", 6)
        doc = json.loads(zk_client.get("/brokers/topics/t")[0])
        parts = {int(p): r for p, r in doc["partitions"].items()}
        assert sorted(parts) == list(range(6))
        assert all(sorted(r) == [10, 20, 30] for r in parts.values())
        assert sorted(r[0] for r in parts.values()) == [10, 10, 20, 20, 30, 30]
        with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 3"):
            cat.create_topic("u", 1, replication_factor=4)
        cat.create_topic("m", assignment={0: [30, 10], 1: [10, 20]})
        assert cat.assignment("m") == {0: [30, 10], 1: [10, 20]}
        with pytest.raises(InvalidConfigError, match="unknown broker"):
            cat.create_topic("n", assignment={0: [99]})
        # new partitions on the replicas named, checked as a manual assignment of a new topic
        with pytest.raises(InvalidConfigError, match="by 2 but 1 assignments"):
            cat.add_partitions("m", 4, [[20, 30]])
        with pytest.raises(InvalidReplicationFactorError):
            cat.add_partitions("m", 3, [[20]])
        with pytest.raises(InvalidConfigError, match="twice"):
            cat.add_partitions("m", 3, [[20, 20]])
        assert cat.add_partitions("m", 3, [[20, 30]], validate_only=True).partitions == 3
        assert len(cat.assignment("m")) == 2
        assert cat.add_partitions("m", 4, [[20, 30], [30, 10]]).partitions == 4
        assert cat.assignment("m") == {0: [30, 10], 1: [10, 20], 2: [20, 30], 3: [30, 10]}
        # topic deletion is a request until the controller completes it
        cat.delete_topic("t")
        assert zk_client.exists("/admin/delete_topics/t") and zk_client.exists("/brokers/topics/t")
        with pytest.raises(TopicExistsError, match="marked for deletion"):
            cat.create_topic("t", 1)
    finally:
        for s in [store, *brokers]:
            s.close()
