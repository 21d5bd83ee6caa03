"""A KIP-848 member that leaves (member epoch -1) and rejoins with epoch 0 under the same member id,
as librdkafka does on unsubscribe() then subscribe(): the same raw ConsumerGroupHeartbeats against
a `seglog broker` and Apache Kafka 4.1.1 get the same answers (error, member id, epoch, assignment).
Among them a rejoin with an empty list of topic names, which Kafka accepts (subscribed to
nothing) and seglog refused with INVALID_REQUEST, a fatal error for librdkafka (its 0045
subscribe_many_updates on three brokers)."""
from __future__ import annotations

import sys
import time
from pathlib import Path


from logcore.wire.client import KafkaConnection

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from in_process_broker import InProcessBroker  # noqa: E402

HB, CREATE_TOPICS = 68, 19
LOADING = {14, 15, 16}       # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def heartbeat(conn, member: str, epoch: int, topics=None, owned=None, rebalance_ms: int = -1):
    body = {"group_id": "rejoin", "member_id": member, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout": rebalance_ms, "subscribed_topic_names": topics,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": None if owned is None else [{"topic_id": t, "partitions": ps} for t, ps in owned]}
    r = conn.request(HB, body, 1)
    parts = None if r.assignment is None else sorted(p for t in r.assignment.topic_partitions for p in t.partitions)
    return r.error_code, r.member_id, r.member_epoch, parts


def conversation(host: str, port: int) -> list:
    """Every answer of one member's join, leave and rejoins (raw ConsumerGroupHeartbeat v1)."""
    with KafkaConnection(host, port, client_id="rejoin") as conn:
        made = conn.request(CREATE_TOPICS, {"topics": [{"name": "t", "num_partitions": 2, "replication_factor": 1,
                                                       "assignments": [], "configs": []}],
                                            "timeout": 10000, "validate_only": False}, 5)
        assert made.topics[0].error_code == 0, made
        md = conn.request(3, {"topics": [{"name": "t"}], "allow_auto_topic_creation": False}, 12)
        tid = md.topics[0].topic_id
        out = []

        def step(*args, **kw):
            out.append(heartbeat(conn, *args, **kw))
            return out[-1]
        deadline = time.monotonic() + 60                # FindCoordinator makes Kafka create __consumer_offsets
        while time.monotonic() < deadline and (
                conn.request(10, {"key_type": 0, "coordinator_keys": ["rejoin"]}, 4).coordinators[0].error_code
                or heartbeat(conn, "first", 0, ["t"], [], 30000)[0] in LOADING):
            time.sleep(0.2)
        heartbeat(conn, "first", -1)
        _, _, epoch, parts = step("m", 0, topics=["t"], owned=[], rebalance_ms=30000)
        step("m", epoch, owned=[(tid, parts)])
        step("m", -1)                                   # leaves
        step("m", -1)                                   # leaves again: no longer a member
        step("m", 3, owned=[])                          # a heartbeat of the member that left
        _, _, epoch, _ = step("m", 0, topics=[], owned=[], rebalance_ms=30000)   # back, subscribed to nothing
        _, _, epoch, parts = step("m", epoch, topics=["t"], owned=[])
        step("m", epoch, owned=[(tid, parts or [])])
        step("m", 0, topics=["t"], owned=[], rebalance_ms=30000)   # epoch 0 while still a member
        return out


def test_leave_and_rejoin_as_kafka_answers(tmp_path, kafka_shared):
    seglog = InProcessBroker({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"),
                              "offsets.topic.num.partitions": "1"})
    try:
        ours = conversation(seglog.host, seglog.port)
    finally:
        seglog.stop()
    kafka = kafka_shared
    theirs = conversation("127.0.0.1", kafka.port)
    assert ours == theirs
    assert ours[5][0] == 0 and ours[5][3] == [], ours      # the empty rejoin is accepted, nothing assigned
