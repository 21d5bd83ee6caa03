"""DescribeCluster, DescribeLogDirs and DescribeProducers against one `seglog broker`, over a root
written before it starts with transactions that never ended (tests/hanging_transaction.py)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from broker_helpers import create, produce
from logcore.log.log_root import LogRoot
from logcore.wire import error_codes as E
from logcore.wire.api_keys import DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS
from logcore.wire.client import KafkaConnection

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hanging_transaction import AGE_MS, HANGING, write_hanging_root  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import broker_process  # noqa: E402

HANGING_PID, HANGING_EPOCH = HANGING[0]


@pytest.fixture(scope="module")
def hanging_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("describe")
    write_hanging_root(base / "logs")
    started: list = []
    yield broker_process.start_factory(base, started)(**{"transaction.state.log.num.partitions": 3})
    for b in started:
        b.stop()


def conn(b) -> KafkaConnection:
    return KafkaConnection(b.host, b.port, timeout_s=10).connect()


def test_describe_cluster(hanging_broker):
    b = hanging_broker
    with conn(b) as c:
        for version in (0, 1):
            body = c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False}, version)
            assert body.error_code == E.NONE
            assert [(x.broker_id, x.host, x.port, x.rack) for x in body.brokers] == [(0, b.host, b.port, None)]
            assert body.controller_id == 0 and body.cluster_authorized_operations == -(2 ** 31)
            root = LogRoot.open(str(b.root), read_only=True)
            try:
                assert body.cluster_id == root.cluster_id()
            finally:
                root.close()
        asked = c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True}, 1)
        assert asked.cluster_authorized_operations > 0
        controllers = c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                   "endpoint_type": 2}, 1)
        assert controllers.error_code == 119 and list(controllers.brokers) == []   # UNSUPPORTED_ENDPOINT_TYPE
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    described = admin.describe_cluster(request_timeout=10).result(15)       # librdkafka sends Metadata
    assert [(n.id, n.host, n.port) for n in described.nodes] == [(0, b.host, b.port)]
    assert described.controller.id == 0 and described.cluster_id == body.cluster_id


def test_metadata_authorized_operations_when_asked(hanging_broker):
    """librdkafka's DescribeCluster and DescribeTopics ask Metadata for the authorized operations:
    with no authorizer, every operation of the resource, as Kafka answers (its 0081 checks the
    sets); not asked, none."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation
    admin = AdminClient({"bootstrap.servers": hanging_broker.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=10).result(15)
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}
    assert not admin.describe_cluster(request_timeout=10).result(15).authorized_operations
    topic = sorted(t for t in admin.list_topics(timeout=10).topics if not t.startswith("__"))[0]
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(15)
    assert set(described.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    assert not admin.describe_topics(TopicCollection([topic]))[topic].result(15).authorized_operations


def test_describe_log_dirs(hanging_broker):
    b = hanging_broker
    create(b, "dirs", 2)
    produce(b, "dirs", [b"x" * 100] * 10, partition=1)
    with conn(b) as c:
        every = c.request(DESCRIBE_LOG_DIRS, {"topics": None}, 4)
        assert every.error_code == E.NONE and len(every.results) == 1
        result = every.results[0]
        assert result.error_code == E.NONE and result.log_dir == os.path.abspath(b.root)
        st = os.statvfs(b.root)
        assert result.total_bytes == st.f_blocks * st.f_frsize and 0 < result.usable_bytes <= result.total_bytes
        sizes = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
                 for t in result.topics for p in t.partitions}
        on_disk = {tp: sum(f.stat().st_size for f in (b.root / f"{tp[0]}-{tp[1]}").glob("*.log")) for tp in sizes}
        assert {("dirs", 0), ("dirs", 1), ("hang", 0)} <= set(sizes)
        assert sizes[("dirs", 1)][0] > 1000 and sizes[("dirs", 0)][0] == 0
        assert {tp: s for tp, (s, _, _) in sizes.items()} == on_disk
        assert all(lag == 0 and not future for _, lag, future in sizes.values())
        asked = c.request(DESCRIBE_LOG_DIRS, {"topics": [{"topic": "dirs", "partitions": [1]},
                                                         {"topic": "nope", "partitions": [0]}]}, 1)
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in asked.results[0].topics] == [("dirs", [1])]


def test_describe_producers(hanging_broker):
    b = hanging_broker
    create(b, "idem", 1)
    produce(b, "idem", [b"a", b"b", b"c"], partition=0, **{"enable.idempotence": True})
    with conn(b) as c:
        body = c.request(DESCRIBE_PRODUCERS, {"topics": [{"name": "hang", "partition_indexes": [0, 5]},
                                                         {"name": "idem", "partition_indexes": [0]}]})
        answers = {(t.name, p.partition_index): p for t in body.topics for p in t.partitions}
    hang = answers[("hang", 0)]
    assert hang.error_code == E.NONE
    [state] = hang.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.coordinator_epoch,
            state.current_txn_start_offset) == (HANGING_PID, HANGING_EPOCH, 2, -1, 2)
    assert abs(state.last_timestamp - (time.time() * 1000 - AGE_MS)) < 120_000
    assert answers[("hang", 5)].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    [idem] = answers[("idem", 0)].active_producers
    assert idem.producer_id >= 0 and idem.last_sequence == 2 and idem.current_txn_start_offset == -1
