"""Replication throttles (KIP-73) on a three-broker seglog cluster: a replica added by a
reassignment copies a few MB; with leader and follower throttles of 200 KB/s set as
kafka-reassign-partitions --throttle sets them (IncrementalAlterConfigs on the brokers' rates
and the topic's throttled replicas), it moves measurably fewer bytes in the same time than an
unthrottled one, and it finishes once the throttles are removed."""
from __future__ import annotations

import json
import os
import time

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
kp = pytest.importorskip("kafka", reason="kafka-python is not installed")
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, ResourceType)

pytestmark = pytest.mark.timeout(180)

REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"

RATE = 200_000                      # bytes/s, leader and follower
SIZE = 3 * 1024 * 1024              # bytes per topic
WINDOW_S = 2.5                      # the time the copy is measured over


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    # Small fetches and short quota windows, so the rates show within seconds.
    props = {"min.insync.replicas": "1", "replica.fetch.max.bytes": "65536", "metrics.listener": "http://127.0.0.1:0",
             "replication.quota.window.num": "2", "replication.quota.window.size.seconds": "1"}
    with SeglogCluster.running(tmp_path_factory.mktemp("rthrottle"), zk_server.connect_string + "/rthrottle",
                               size=3, props=props) as c:
        yield c


def _create_and_fill(cluster, topic, size=SIZE):
    from kafka.admin import NewTopic
    a = kp.KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        a.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [1]})])
    finally:
        a.close()
    cluster.wait_for(lambda: (md := cluster.metadata(topic)) and md[0][0] == 1, 30, f"{topic}'s leader")
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                     "batch.size": 16384})
    value = os.urandom(1000)
    for i in range(size // 1000):
        p.produce(topic, value, partition=0)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def _byte_rate(broker, side: str) -> float:
    """kafka_server_<side>replication_byte_rate from the broker's Prometheus endpoint."""
    import re
    import urllib.request
    url = re.search(r"metrics endpoint on (http://\S+)", broker.log_text()).group(1)
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return float(re.search(rf"^kafka_server_{side}replication_byte_rate (\S+)$", text, re.M).group(1))


def _bytes_on(broker, topic) -> int:
    folder = broker.log_dir / f"{topic}-0"
    return sum(f.stat().st_size for f in folder.glob("*.log")) if folder.exists() else 0


def _alter(admin, resources):
    for r in resources:                 # librdkafka: one broker resource per call
        for fut in admin.incremental_alter_configs([r]).values():
            fut.result(15)


def _rates(op, value=None):
    return [ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
        ConfigEntry(f"{side}.replication.throttled.rate", value, incremental_operation=op)
        for side in ("leader", "follower")]) for b in (1, 2)]


def _add_replica(admin, *topics):
    """Add broker 2 to partition 0's replicas of each topic (at once)."""
    admin.alter_partition_reassignments({kp.TopicPartition(t, 0): [1, 2] for t in topics})


def _in_sync(cluster, topic):
    return sorted(cluster.metadata(topic)[0][2]) == [1, 2]


def _replicas(topic, op, leader=None, follower=None):
    return ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(f"{side}.replication.throttled.replicas", value, incremental_operation=op)
        for side, value in (("leader", leader), ("follower", follower)) if value is not None
        or op == AlterConfigOpType.DELETE])


def test_throttled_reassignment_is_slower_and_finishes_when_lifted(cluster):
    """Three moves of 3 MB: a free one; one held by the leader's throttle only (broker 1's
    leader rate, the topic listing 0:1); one by the follower's only (broker 2's follower rate,
    0:2). Each throttle counts only its topics' bytes, so the two held moves run side by side."""
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin = kp.KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        for topic in ("free", "lead", "follow"):
            _create_and_fill(cluster, topic)
        _add_replica(admin, "free")
        time.sleep(WINDOW_S)
        free = _bytes_on(cluster.brokers[2], "free")
        cluster.wait_for(lambda: _in_sync(cluster, "free"), 30, "the unthrottled copy")

        _alter(ca, _rates(AlterConfigOpType.SET, str(RATE)) + [
            _replicas("lead", AlterConfigOpType.SET, leader="0:1"),
            _replicas("follow", AlterConfigOpType.SET, follower="0:2")])
        described = ca.describe_configs([ConfigResource(ResourceType.BROKER, "2")])
        entries = list(described.values())[0].result(15)
        assert entries["follower.replication.throttled.rate"].value == str(RATE)
        _add_replica(admin, "lead", "follow")
        time.sleep(WINDOW_S)
        lead, follow = _bytes_on(cluster.brokers[2], "lead"), _bytes_on(cluster.brokers[2], "follow")
        # the throttled traffic on the Prometheus endpoints (Kafka's LeaderReplication and
        # FollowerReplication byte-rate): broker 1 sends "lead" throttled, broker 2 fetches "follow"
        for broker, side in ((1, "leader"), (2, "follower")):
            rate = _byte_rate(cluster.brokers[broker], side)
            assert 0 < rate <= 3 * RATE, (broker, side, rate)
        assert _byte_rate(cluster.brokers[3], "leader") == 0 == _byte_rate(cluster.brokers[3], "follower")
        assert free >= SIZE * 0.9, free
        for held in (lead, follow):
            # 200 KB/s over the measured span, plus the first window's burst, against a free copy
            assert held < free / 2, (lead, follow, free)
            assert held <= RATE * (WINDOW_S + 2) + 2 * 65536, (lead, follow)
        assert not _in_sync(cluster, "lead") and not _in_sync(cluster, "follow")

        # removed as kafka-reassign-partitions --verify removes them: the copies finish
        _alter(ca, _rates(AlterConfigOpType.DELETE) + [_replicas(t, AlterConfigOpType.DELETE)
                                                       for t in ("lead", "follow")])
        for topic in ("lead", "follow"):
            cluster.wait_for(lambda: _in_sync(cluster, topic), 30, f"{topic}'s copy once the throttle is lifted")
            assert _bytes_on(cluster.brokers[2], topic) >= SIZE * 0.9
    finally:
        admin.close()


def test_throttled_replicas_are_validated(cluster):
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap})
    bad = ConfigResource(ResourceType.TOPIC, "free", incremental_configs=[
        ConfigEntry("leader.replication.throttled.replicas", "0-1",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException, match="partitionId"):
        _alter(ca, [bad])
    neg = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("leader.replication.throttled.rate", "-5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException):
        _alter(ca, [neg])


def _described(ca, kind, name) -> dict:
    entries = list(ca.describe_configs([ConfigResource(kind, name)]).values())[0].result(15)
    return {k: e.value for k, e in entries.items() if "replication.throttled" in k}


def test_kafka_reassign_tool_sets_and_clears_the_throttles(cluster, kafka_jars, tmp_path):
    """Kafka 4.1's kafka-reassign-partitions --execute --throttle sets the rates on the brokers
    of the move and the topic's throttled replicas; --verify, once the move is done, clears them."""
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap})
    _create_and_fill(cluster, "tool", 300_000)          # a small move: done in about 2 s throttled
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "tool", "partition": 0, "replicas": [1, 3]}]}))
    run = kafka_jars.run_tool(REASSIGN_TOOL, ["--bootstrap-server", cluster.bootstrap, "--reassignment-json-file",
                                              str(plan), "--execute", "--throttle", str(RATE)])
    assert run.returncode == 0, run.stderr
    assert f"The inter-broker throttle limit was set to {RATE} B/s" in run.stdout
    assert _described(ca, ResourceType.TOPIC, "tool") == {"leader.replication.throttled.replicas": "0:1",
                                                          "follower.replication.throttled.replicas": "0:3"}
    for broker in (1, 3):
        assert _described(ca, ResourceType.BROKER, str(broker)) == {
            "leader.replication.throttled.rate": str(RATE), "follower.replication.throttled.rate": str(RATE)}
    cluster.wait_for(lambda: sorted(cluster.metadata("tool")[0][2]) == [1, 3], 60, "the throttled move")
    run = kafka_jars.run_tool(REASSIGN_TOOL, ["--bootstrap-server", cluster.bootstrap, "--reassignment-json-file",
                                              str(plan), "--verify"])
    assert run.returncode == 0, run.stderr
    assert "Reassignment of partition tool-0 is completed." in run.stdout
    assert "Clearing broker-level throttles on brokers" in run.stdout
    assert set(_described(ca, ResourceType.TOPIC, "tool").values()) <= {"", None}
    unbounded = str(2 ** 63 - 1)
    assert _described(ca, ResourceType.BROKER, "1") == {"leader.replication.throttled.rate": unbounded,
                                                        "follower.replication.throttled.rate": unbounded}


def test_seglog_reassign_throttle_sets_and_verify_clears(cluster, tmp_path, capsys):
    """`seglog reassign-partitions --execute --throttle` sets what Kafka's tool sets (the rates on
    the move's brokers, the topic's throttled replicas: sources as leaders, new replicas as
    followers); `--verify` says completed and clears them, `--preserve-throttles` keeps them."""
    from logcore.tools.cli import main
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap})
    _create_and_fill(cluster, "ours", 200_000)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "ours", "partition": 0, "replicas": [1, 2]}]}))
    args = ["reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--reassignment-json-file", str(plan)]
    capsys.readouterr()
    assert main(args + ["--execute", "--throttle", str(RATE)]) == 0
    out = capsys.readouterr().out
    assert ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle"
            f" is removed.\nThe inter-broker throttle limit was set to {RATE} B/s\n") in out
    assert "Successfully started partition reassignment for ours-0" in out
    assert _described(ca, ResourceType.TOPIC, "ours") == {"leader.replication.throttled.replicas": "0:1",
                                                          "follower.replication.throttled.replicas": "0:2"}
    for broker in (1, 2):
        assert _described(ca, ResourceType.BROKER, str(broker)) == {
            "leader.replication.throttled.rate": str(RATE), "follower.replication.throttled.rate": str(RATE)}

    def completed() -> bool:
        assert main(args + ["--verify", "--preserve-throttles"]) == 0
        out = capsys.readouterr().out
        assert "Clearing" not in out
        return "Reassignment of partition ours-0 is completed." in out

    cluster.wait_for(completed, 60, "the throttled move")
    assert _described(ca, ResourceType.BROKER, "2")["follower.replication.throttled.rate"] == str(RATE)
    assert main(args + ["--verify"]) == 0
    out = capsys.readouterr().out
    assert "Clearing broker-level throttles on brokers 1,2,3\nClearing topic-level throttles on topic ours\n" in out
    assert set(_described(ca, ResourceType.TOPIC, "ours").values()) <= {"", None}
    unbounded = str(2 ** 63 - 1)
    for broker in (1, 2):
        assert _described(ca, ResourceType.BROKER, str(broker)) == {"leader.replication.throttled.rate": unbounded,
                                                                    "follower.replication.throttled.rate": unbounded}
