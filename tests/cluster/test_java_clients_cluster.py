"""Apache Kafka's Java clients (kafka-clients: KafkaProducer, KafkaConsumer, Admin) against a
three-broker seglog cluster: the same JavaClientCheck as against one broker
(tests/kafka_clients), its topics spread over the brokers' leaders (replication factor 1 as it
asks), consumer groups coordinated by the leaders of __consumer_offsets."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka_clients"))

from java_check import run_java_client_check  # noqa: E402
from seglog_cluster import SeglogCluster  # noqa: E402

pytestmark = [pytest.mark.soak, pytest.mark.timeout(420)]   # a cluster and a JVM, ~35 s: -m soak (one broker: tests/kafka_clients/test_java_clients.py)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def results(kafka_jars, zk_server, tmp_path_factory):
    with SeglogCluster.running(tmp_path_factory.mktemp("java-cluster"), zk_server.connect_string + "/java-clients",
                               size=3, props={"offsets.topic.replication.factor": "3"}) as c:
        yield run_java_client_check(kafka_jars, c.bootstrap, tmp_path_factory), c


def _ok(results, scenario):
    row = results[scenario]
    assert row["ok"], f"{scenario}: {row.get('error')}: {row.get('message')}"
    return row


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(results, codec):
    row = _ok(results[0], f"produce_consume_{codec}")
    assert len(row["consumed"]) == 120


@pytest.mark.parametrize("scenario", ["create_topics", "offsets_for_times", "seek", "read_committed",
                                      "group_commit", "describe_topics", "list_offsets", "group_offsets",
                                      "create_partitions", "delete_topics"])
def test_scenarios(results, scenario):
    _ok(results[0], scenario)


def test_topics_are_led_by_several_brokers(results):
    cluster = results[1]
    leaders = {cluster.metadata(f"jc-{codec}")[p][0] for codec in CODECS for p in (0, 1)}
    assert len(leaders) > 1, leaders
