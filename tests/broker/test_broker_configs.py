"""Describe/Alter/IncrementalAlterConfigs against one `seglog broker`, through confluent-kafka's
AdminClient: topic overrides (SET, DELETE, APPEND, SUBTRACT, validate_only, the legacy full
replace), dynamic broker configs (per broker and the cluster default) with their sources and
synonyms, the errors Kafka gives, and the effects on open logs: a topic made compacted gets
compacted, a lowered retention deletes old segments, and the changes survive a restart."""
from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,  # noqa: E402
                                   ConfigSource)

from broker_helpers import _admin, create  # noqa: E402
from logcore.tools.config_admin import ConfigAdmin  # noqa: E402
from logcore.wire.config_resources import BROKER_RESOURCE, OP_DELETE, OP_SET  # noqa: E402

TOPIC = ConfigResource.Type.TOPIC
BROKER = ConfigResource.Type.BROKER


def _op(name, value, op=AlterConfigOpType.SET):
    return ConfigEntry(name, value, incremental_operation=op)


def _broker_default(b, changes):
    """librdkafka cannot name the default broker entity (""): seglog's own admin client does."""
    with ConfigAdmin(b.bootstrap) as admin:
        admin.incremental_alter(BROKER_RESOURCE, "", changes)


def _default_configs(b) -> dict:
    with ConfigAdmin(b.bootstrap) as admin:
        return {c.name: (c.value, c.source) for c in admin.describe(BROKER_RESOURCE, "")}


def _incremental(admin, kind, name, entries, validate_only=False):
    res = ConfigResource(kind, name, incremental_configs=entries)
    return admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(15)


def _describe(admin, kind, name):
    res = ConfigResource(kind, name)
    return admin.describe_configs([res])[res].result(15)   # librdkafka asks for synonyms


def _error(call) -> str:
    with pytest.raises(KafkaException) as err:
        call()
    return str(err.value)


@pytest.fixture
def started(broker_factory):
    """A broker with fast retention checks and cleaning (effect tests restart it)."""
    def start(root=None):
        return broker_factory(root, log_retention_check_interval_ms=200, log_cleaner_backoff_ms=200)
    return start


def test_topic_overrides_set_delete_append_subtract(broker):
    create(broker, "cfg-a", 1)
    admin = _admin(broker)
    _incremental(admin, TOPIC, "cfg-a", [_op("retention.ms", "3600000"), _op("cleanup.policy", "compact")])
    d = _describe(admin, TOPIC, "cfg-a")
    assert d["retention.ms"].value == "3600000"
    assert d["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert [(s.name, s.value, s.source) for s in d["retention.ms"].synonyms.values()][0] == \
        ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert d["cleanup.policy"].value == "compact"
    assert d["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert ("log.segment.bytes", ConfigSource.DEFAULT_CONFIG.value) in \
        [(s.name, s.source) for s in d["segment.bytes"].synonyms.values()]
    # APPEND and SUBTRACT on a list; a non-list key refuses them
    _incremental(admin, TOPIC, "cfg-a", [_op("cleanup.policy", "delete", AlterConfigOpType.APPEND)])
    assert _describe(admin, TOPIC, "cfg-a")["cleanup.policy"].value == "compact,delete"
    _incremental(admin, TOPIC, "cfg-a", [_op("cleanup.policy", "compact", AlterConfigOpType.SUBTRACT)])
    assert _describe(admin, TOPIC, "cfg-a")["cleanup.policy"].value == "delete"
    assert "INVALID_CONFIG" in _error(lambda: _incremental(
        admin, TOPIC, "cfg-a", [_op("retention.ms", "5", AlterConfigOpType.APPEND)]))
    # DELETE: back to the default
    _incremental(admin, TOPIC, "cfg-a", [_op("retention.ms", None, AlterConfigOpType.DELETE)])
    d = _describe(admin, TOPIC, "cfg-a")
    assert d["retention.ms"].value == "604800000"
    assert d["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # validate_only changes nothing
    _incremental(admin, TOPIC, "cfg-a", [_op("retention.ms", "1000")], validate_only=True)
    assert _describe(admin, TOPIC, "cfg-a")["retention.ms"].value == "604800000"


def test_topic_errors(broker):
    create(broker, "cfg-b", 1)
    admin = _admin(broker)
    message = _error(lambda: _incremental(admin, TOPIC, "cfg-b", [_op("retention.ms", "abc")]))
    assert "INVALID_CONFIG" in message and "retention.ms" in message and "abc" in message
    assert "INVALID_CONFIG" in _error(lambda: _incremental(admin, TOPIC, "cfg-b", [_op("nosuch.key", "1")]))
    message = _error(lambda: _incremental(admin, TOPIC, "cfg-b", [
        _op("min.compaction.lag.ms", "10"), _op("max.compaction.lag.ms", "5")]))
    assert "INVALID_CONFIG" in message and "max.compaction.lag.ms" in message
    assert "UNKNOWN_TOPIC" in _error(lambda: _incremental(admin, TOPIC, "cfg-none", [_op("retention.ms", "5")]))
    # nothing was changed by the refused requests
    assert _describe(admin, TOPIC, "cfg-b")["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # deleting a replication throttle (kafka-reassign-partitions --verify) is answered as done
    _incremental(admin, TOPIC, "cfg-b", [_op("leader.replication.throttled.replicas", None,
                                               AlterConfigOpType.DELETE)])


# the legacy AlterConfigs request is what this test is about; its client call is deprecated in favour of
# the incremental one, which older tools and clients still do not use
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replaces_the_set(broker):
    create(broker, "cfg-c", 1, {"retention.ms": "100000"})
    admin = _admin(broker)
    res = ConfigResource(TOPIC, "cfg-c", set_config={"segment.bytes": "1048576"})
    admin.alter_configs([res])[res].result(15)
    d = _describe(admin, TOPIC, "cfg-c")
    assert d["segment.bytes"].value == "1048576"
    assert d["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value      # not given: gone


def test_dynamic_broker_configs(broker):
    create(broker, "cfg-d", 1)
    admin = _admin(broker)
    _broker_default(broker, [("log.retention.ms", OP_SET, "7200000")])
    _incremental(admin, BROKER, "0", [_op("log.segment.bytes", "2000000")])
    try:
        d = _describe(admin, TOPIC, "cfg-d")
        assert (d["retention.ms"].value, d["retention.ms"].source) == \
            ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert [(s.name, s.source) for s in d["retention.ms"].synonyms.values()][0] == \
            ("log.retention.ms", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert (d["segment.bytes"].value, d["segment.bytes"].source) == \
            ("2000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        b = _describe(admin, BROKER, "0")
        assert (b["log.segment.bytes"].value, b["log.segment.bytes"].source) == \
            ("2000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert b["log.retention.ms"].value == "7200000"
        assert _default_configs(broker) == {"log.retention.ms": ("7200000", 3)}
        # static keys, invalid values and other brokers are refused as Kafka does
        assert "Cannot update these configs dynamically" in _error(
            lambda: _incremental(admin, BROKER, "0", [_op("log.dirs", "/elsewhere")]))
        assert "INVALID_REQUEST" in _error(lambda: _incremental(admin, BROKER, "0", [_op("log.retention.ms", "x")]))
        assert "INVALID_CONFIG" in _error(lambda: _incremental(admin, BROKER, "0", [_op("nosuch.key", "1")]))
    finally:
        _broker_default(broker, [("log.retention.ms", OP_DELETE, None)])
        _incremental(admin, BROKER, "0", [_op("log.segment.bytes", None, AlterConfigOpType.DELETE)])
    assert _describe(admin, TOPIC, "cfg-d")["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_replication_throttle_rates(broker):
    """The replication throttles' rates are dynamic broker configs: per broker over the cluster
    default over unbounded (Long.MAX_VALUE), whole numbers >= 0."""
    admin = _admin(broker)
    unbounded = str(2 ** 63 - 1)
    assert _describe(admin, BROKER, "0")["leader.replication.throttled.rate"].value == unbounded
    _broker_default(broker, [("leader.replication.throttled.rate", OP_SET, "300000")])
    _incremental(admin, BROKER, "0", [_op("follower.replication.throttled.rate", "200000")])
    try:
        b = _describe(admin, BROKER, "0")
        assert (b["leader.replication.throttled.rate"].value, b["leader.replication.throttled.rate"].source) == \
            ("300000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert (b["follower.replication.throttled.rate"].value, b["follower.replication.throttled.rate"].source) == \
            ("200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert _default_configs(broker) == {"leader.replication.throttled.rate": ("300000", 3)}
        for bad in ("-1", "1.5", "fast"):
            assert "INVALID_REQUEST" in _error(lambda: _incremental(
                admin, BROKER, "0", [_op("leader.replication.throttled.rate", bad)]))
        assert "INVALID_CONFIG" in _error(lambda: _incremental(
            admin, BROKER, "0", [_op("replica.alter.log.dirs.io.max.bytes.per.second", "1000")]))
    finally:
        _broker_default(broker, [("leader.replication.throttled.rate", OP_DELETE, None)])
        _incremental(admin, BROKER, "0", [_op("follower.replication.throttled.rate", None,
                                                AlterConfigOpType.DELETE)])
    assert _describe(admin, BROKER, "0")["follower.replication.throttled.rate"].value == unbounded


def _produce(b, topic, values, keys=None):
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=None if keys is None else keys[i], partition=0)
        p.poll(0)
    assert p.flush(30) == 0


def _segments(root, topic):
    return sorted(p.name for p in (root / f"{topic}-0").glob("*.log"))


def _wait(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_effects_on_open_logs_and_restart(started, tmp_path):
    b = started(tmp_path / "root")
    create(b, "eff-compact", 1, {"segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
                                  "file.delete.delay.ms": "0"})
    create(b, "eff-retain", 1, {"segment.bytes": "1024", "file.delete.delay.ms": "0"})
    keys = [b"k%d" % (i % 5) for i in range(300)]
    _produce(b, "eff-compact", [b"v%05d" % i for i in range(300)], keys)
    _produce(b, "eff-retain", [b"v%05d" % i for i in range(300)])
    compact_before = sum((b.root / "eff-compact-0" / n).stat().st_size for n in _segments(b.root, "eff-compact"))
    retain_before = _segments(b.root, "eff-retain")
    assert len(retain_before) > 3
    admin = _admin(b)
    _incremental(admin, TOPIC, "eff-compact", [_op("cleanup.policy", "compact")])
    _incremental(admin, TOPIC, "eff-retain", [_op("retention.ms", "1")])
    _wait(lambda: len(_segments(b.root, "eff-retain")) == 1, 30, "old segments deleted by retention.ms=1")
    _wait(lambda: sum((b.root / "eff-compact-0" / n).stat().st_size
                      for n in _segments(b.root, "eff-compact")) < compact_before / 2, 30, "eff-compact compacted")
    _broker_default(b, [("log.retention.bytes", OP_SET, "123456789")])
    b.stop()
    b = started(tmp_path / "root")              # the same root: overrides and broker configs persist
    admin = _admin(b)
    d = _describe(admin, TOPIC, "eff-compact")
    assert (d["cleanup.policy"].value, d["cleanup.policy"].source) == \
        ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    d = _describe(admin, TOPIC, "eff-retain")
    assert (d["retention.bytes"].value, d["retention.bytes"].source) == \
        ("123456789", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert d["retention.ms"].value == "1"
