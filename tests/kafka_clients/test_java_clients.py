"""Apache Kafka's Java clients (kafka-clients: KafkaProducer, KafkaConsumer, Admin) against a real
`seglog broker` subprocess.

JavaClientCheck.java (next to this file) is compiled with `javac` against the kafka-clients jar of
tests/kafka_reference.py's Maven cache and run once per module with `java -cp`; it prints one JSON
line per scenario, and each test below asserts on one or a few of them: what was produced with
every codec (acks=all, idempotent) is consumed back exactly, committed offsets are seen by a new
member of the group, offsetsForTimes/seek/listOffsets land on the offsets the timestamps give,
describeConfigs reports topic overrides and defaults, and what seglog does not serve fails within
seconds with the error Kafka's client raises for it (UnsupportedVersionException for APIs the
broker does not advertise); a transactional producer commits.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import broker_spawner
from java_check import TS_BASE, run_java_client_check

from logcore.broker.api_versions import SERVED

pytestmark = pytest.mark.timeout(300)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 120
FAST_MS = 5000          # an unsupported call must fail within this


@pytest.fixture(scope="module")
def java_results(kafka_jars, seglog_broker, tmp_path_factory) -> dict[str, dict]:
    return run_java_client_check(kafka_jars, seglog_broker.bootstrap, tmp_path_factory)


def ok(results: dict, scenario: str) -> dict:
    row = results[scenario]
    assert row["ok"], f"{scenario}: {row.get('error')}: {row.get('message')}"
    return row


def expected_rows(codec: str) -> list[list]:
    """What JavaClientCheck sends for `codec`: record i goes to partition i % 2 at offset i // 2."""
    rows = []
    for i in range(PER_CODEC):
        key = None if i % 17 == 5 else f"key-{i}"
        value = None if i % 23 == 7 else f"{codec} value {i} " + "abcdefgh" * (i % 9)
        headers = [f"h{i % 4}=header-{i}"] if i % 3 == 0 else []
        rows.append([i % 2, i // 2, TS_BASE + i * 1000, key, value, *headers])
    return rows


def dump_batches(env: dict, root: Path, topic: str, partition: int) -> list[str]:
    seg = root / f"{topic}-{partition}" / f"{0:020d}.log"
    out = broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", "dump", "--files", str(seg)],
                             timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if line.startswith("baseOffset:")]


def test_admin_creates_topics(java_results):
    row = ok(java_results, "create_topics")
    assert {f"jc-{c}" for c in CODECS} | {"jc-group", "jc-configs", "jc-doomed"} <= set(row["topics"])
    assert row["duplicate_error"] == "TopicExistsException"


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_acks_all_producer_every_codec_consumed_back_exactly(java_results, seglog_broker,
                                                                        broker_subprocess_env, codec):
    row = ok(java_results, f"produce_consume_{codec}")
    want = expected_rows(codec)
    assert sorted(row["produced"]) == sorted(want)         # acks: the offsets of record i
    assert sorted(row["consumed"]) == sorted(want)         # read back: bytes, keys, headers, timestamps
    for partition in (0, 1):
        batches = dump_batches(broker_subprocess_env, seglog_broker.root, f"jc-{codec}", partition)
        assert batches
        for line in batches:            # stored with the producer's codec, idempotent (pid, sequences)
            fields = dict(re.findall(r"(\w+): (\S+)", line))
            assert fields["compresscodec"] == codec, line
            assert int(fields["producerId"]) >= 0 and int(fields["baseSequence"]) >= 0, line


def test_offsets_for_times_and_beginning_end(java_results):
    row = ok(java_results, "offsets_for_times")
    # partition 0 holds even i at offset i // 2 with timestamp base + i s; partition 1 the odd i
    assert row["p0"] == [11, TS_BASE + 22_000]
    assert row["p1"] == [3, TS_BASE + 7_000]
    assert row["after_end"] is None
    assert row["begin"] == [0, 0] and row["end"] == [60, 60]


def test_admin_list_offsets(java_results):
    row = ok(java_results, "list_offsets")
    assert (row["earliest"], row["latest"]) == (0, 60)
    assert row["for_timestamp"] == [15, TS_BASE + 31_000]     # partition 1: first odd i >= 30 is 31
    assert row["max_timestamp"] == [59, TS_BASE + 119_000]


def test_seek(java_results):
    row = ok(java_results, "seek")
    assert row["after_seek"] == [17, 18, 19]
    assert row["after_seek_back"] == [4]
    assert (row["position_at_end"], row["position_at_begin"]) == (60, 0)


def test_read_committed(java_results):
    row = ok(java_results, "read_committed")
    assert sorted(row["consumed"]) == sorted(expected_rows("zstd"))
    assert row["end"] == [60, 60]


def test_group_subscribe_commit_and_new_member_resumes(java_results):
    row = ok(java_results, "group_commit")
    assert row["first_consumer_read"] == 40 and row["assignment_first"] == 2
    assert row["committed_first"] == [20, 20]
    assert row["committed_seen_by_new_consumer"] == [20, 20]
    # the new member starts at the committed offsets: only the 6 records produced after the commit
    assert row["second_consumer_values"] == sorted(f"g{i}" for i in range(40, 46))
    assert ok(java_results, "group_offsets")["offsets"] == [23, 23]


def test_describe_topics_and_configs(java_results):
    row = ok(java_results, "describe_topics")
    assert row["jc-configs"] == {"partitions": 3, "internal": False, "topic_id_set": True, "leader": 0}
    assert row["jc-group"]["partitions"] == 2
    assert row["missing_error"] == "UnknownTopicOrPartitionException"
    assert row["cluster_nodes"] == 1
    cfg = ok(java_results, "describe_configs")
    assert cfg["retention.ms"] == ["3600000", "DYNAMIC_TOPIC_CONFIG"]
    assert cfg["cleanup.policy"] == ["compact", "DYNAMIC_TOPIC_CONFIG"]
    assert cfg["segment.bytes"] == ["1073741824", "DEFAULT_CONFIG"]
    assert cfg["max.message.bytes"][1] == "DEFAULT_CONFIG"


def test_delete_topics(java_results, seglog_broker):
    row = ok(java_results, "delete_topics")
    assert row["gone"] is True
    assert row["delete_again_error"] == "UnknownTopicOrPartitionException"
    assert not (seglog_broker.root / "jc-doomed-0").exists()


def fails_fast(results: dict, scenario: str, error: str) -> None:
    row = results[scenario]
    assert not row["ok"], f"{scenario} succeeded against a broker that does not serve it"
    assert row["error"] == error, row
    assert row["elapsed_ms"] < FAST_MS, row


def test_list_and_describe_groups(java_results):
    if 16 in SERVED:        # ListGroups
        assert "jc-g1" in ok(java_results, "list_groups")["groups"]
    else:
        fails_fast(java_results, "list_groups", "UnsupportedVersionException")
    if 15 in SERVED:        # DescribeGroups (Admin falls back to it without ConsumerGroupDescribe)
        row = ok(java_results, "describe_groups")
        assert row["live"] == {"state": "Stable", "assignor": row["live"]["assignor"], "members": 1,
                               "assigned": ["jc-group-0", "jc-group-1"]}
        assert row["live"]["assignor"] in ("range", "cooperative-sticky")   # Java's default assignors
        assert row["after_close"] == {"state": "Empty", "assignor": "", "members": 0, "assigned": []}
        assert row["committed_only"]["state"] == "Empty"
        assert row["unknown"]["state"] == "Dead" and row["unknown"]["members"] == 0
    else:
        fails_fast(java_results, "describe_groups", "UnsupportedVersionException")


def test_transactional_producer_commits(java_results):
    # initTransactions, beginTransaction, send, commitTransaction (docs/transactions.md)
    ok(java_results, "transactions")


def test_admin_creates_partitions(java_results, seglog_broker):
    ok(java_results, "create_partitions")           # jc-group grown to 4 partitions
    assert (seglog_broker.root / "jc-group-3").is_dir()


def test_admin_delete_records_and_alter_configs_are_served(java_results):
    # Admin.deleteRecords (before offset 1) and incrementalAlterConfigs (retention.ms) on jc-none,
    # the topic the other scenarios wrote: both served now, both succeed as on Kafka
    for scenario in ("delete_records", "incremental_alter_configs"):
        row = java_results[scenario]
        assert row["ok"], row


def test_acl_apis_without_an_authorizer_fail_fast(java_results):
    # served, but the broker has no authorizer.class.name: Kafka's SecurityDisabledException
    fails_fast(java_results, "describe_acls", "SecurityDisabledException")


def test_consumer_group_protocol(java_results):
    # group.protocol=consumer (KIP-848): ConsumerGroupHeartbeat is served
    if 68 in SERVED:
        assert ok(java_results, "consumer_group_protocol")["records"] > 0
    else:
        fails_fast(java_results, "consumer_group_protocol", "UnsupportedVersionException")

