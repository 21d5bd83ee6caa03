"""Kafka 4.1's own kafka-configs (kafka.admin.ConfigCommand) against a `seglog broker` and against
Apache Kafka: the same alterations give the same described overrides (names, values, sources),
--delete-config removes one, the brokers' cluster default is set and described, a group's config
(KIP-848) is set and described, and an invalid value is refused with the same exception. Answers
are compared, not formatting."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
_LINE = re.compile(r"^  (?P<name>[^=]+)=(?P<value>\S*) sensitive=\w+ synonyms=\{(?P<first>[A-Z_]+)?")


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def _described(stdout: str) -> dict[str, tuple[str, str]]:
    out = {}
    for line in stdout.splitlines():
        m = _LINE.match(line)
        if m:
            out[m["name"]] = (m["value"], m["first"])
    return out


def _session(jars, bootstrap: str) -> dict:
    """The same kafka-configs calls against one broker; what each answered."""
    _create(bootstrap, "ref-cfg")

    topic = ("--entity-type", "topics", "--entity-name", "ref-cfg")
    default = ("--entity-type", "brokers", "--entity-default")
    group = ("--entity-type", "groups", "--entity-name", "ref-group")      # KIP-848's group configs
    calls = [(*topic, "--alter", "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete],segment.bytes=2000000"),
             (*topic, "--alter", "--delete-config", "segment.bytes", "--add-config", "max.message.bytes=2000"),
             (*topic, "--alter", "--add-config", "retention.ms=abc"),
             (*topic, "--describe"),
             (*default, "--alter", "--add-config", "log.retention.ms=7200000"),
             (*default, "--describe"),
             (*group, "--alter", "--add-config", "consumer.session.timeout.ms=50000"),
             (*group, "--describe")]
    # in order, in one JVM
    (added, deleted, invalid, described, broker_default, default_described, group_added,
     group_described) = jars.run_tools([(CONFIG_COMMAND, ["--bootstrap-server", bootstrap, *c]) for c in calls])
    for r in (added, deleted, described, broker_default, default_described, group_added, group_described):
        assert r.returncode == 0, r.stderr[-2000:]
    exception = re.search(r"Caused by: (\S+?):", invalid.stderr)
    return {"topic": _described(described.stdout),
            "default": {k: v for k, v in _described(default_described.stdout).items() if k == "log.retention.ms"},
            "group": _described(group_described.stdout),
            "invalid": (invalid.returncode != 0, exception[1] if exception else invalid.stderr[-500:])}


def test_kafka_configs_gives_the_same_answers(kafka_jars, kafka_broker_factory, seglog_broker):
    kafka = _session(kafka_jars, kafka_broker_factory().bootstrap)
    seglog = _session(kafka_jars, seglog_broker.bootstrap)
    assert kafka["topic"] == {"retention.ms": ("1000", "DYNAMIC_TOPIC_CONFIG"),
                              "cleanup.policy": ("compact,delete", "DYNAMIC_TOPIC_CONFIG"),
                              "max.message.bytes": ("2000", "DYNAMIC_TOPIC_CONFIG")}
    assert seglog["topic"] == kafka["topic"]
    assert kafka["default"] == {"log.retention.ms": ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    assert seglog["default"] == kafka["default"]
    assert kafka["group"] == {"consumer.session.timeout.ms": ("50000", "DYNAMIC_GROUP_CONFIG")}
    assert seglog["group"] == kafka["group"]
    assert kafka["invalid"] == (True, "org.apache.kafka.common.errors.InvalidConfigurationException")
    assert seglog["invalid"] == kafka["invalid"]
