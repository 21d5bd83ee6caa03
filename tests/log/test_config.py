"""Topic config declarations: Kafka defaults, parsing, validation, root defaults, names, docs."""
from __future__ import annotations

from pathlib import Path

import pytest

from logcore.errors import InvalidConfigError, InvalidTopicError
from logcore.log import config as cfgmod
from logcore.log.config import (
    CONFIG_KEYS,
    LogConfig,
    config_markdown,
    resolve_root_defaults,
    validate_topic_overrides,
)
from logcore.log.properties_file import load_properties
from logcore.log.topic_name import colliding_topic, topic_collision_warning, validate_topic_name

REPO = Path(__file__).resolve().parents[2]
LONG_MAX = 2**63 - 1

# Kafka's defaults (LogConfig / ServerLogConfigs), by Kafka name, as typed values.
KAFKA_DEFAULTS = {
    "cleanup.policy": ("delete",),
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
    "segment.jitter.ms": 0,
    "segment.index.bytes": 10485760,
    "index.interval.bytes": 4096,
    "preallocate": False,
    "retention.ms": 604800000,
    "retention.bytes": -1,
    "file.delete.delay.ms": 60000,
    "delete.retention.ms": 86400000,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": LONG_MAX,
    "min.cleanable.dirty.ratio": 0.5,
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "max.message.bytes": 1048588,
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.after.max.ms": LONG_MAX,
    "compression.type": "producer",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    "leader.replication.throttled.replicas": (),
    "follower.replication.throttled.replicas": (),
    "remote.storage.enable": False,
    "local.retention.ms": -2,
    "local.retention.bytes": -2,
    "remote.log.copy.disable": False,
    "remote.log.delete.on.disable": False,
}


def test_every_declared_config_has_kafkas_default():
    assert set(CONFIG_KEYS) == set(KAFKA_DEFAULTS)
    cfg = LogConfig.from_props()
    for name, expected in KAFKA_DEFAULTS.items():
        assert cfg.get(name) == expected, name
        attr = CONFIG_KEYS[name].attr
        assert attr == name.replace(".", "_")
        assert getattr(cfg, attr) == expected


def test_typed_attributes_and_derived_views():
    cfg = LogConfig.from_props({"cleanup.policy": "compact,delete", "segment.bytes": "2048",
                                "preallocate": "TRUE", "min.cleanable.dirty.ratio": "0.25",
                                "message.timestamp.type": "LogAppendTime"})
    assert cfg.cleanup_policy == ("compact", "delete")
    assert cfg.compact and cfg.delete
    assert cfg.segment_bytes == 2048 and isinstance(cfg.segment_bytes, int)
    assert cfg.preallocate is True
    assert cfg.min_cleanable_dirty_ratio == 0.25
    assert cfg.log_append_time
    assert LogConfig.from_props({"cleanup.policy": "compact"}).delete is False
    assert cfg.overrides == {"cleanup.policy": "compact,delete", "segment.bytes": "2048",
                             "preallocate": "true", "min.cleanable.dirty.ratio": "0.25",
                             "message.timestamp.type": "LogAppendTime"}


def test_to_properties_round_trips():
    cfg = LogConfig.from_props({"retention.ms": "-1", "cleanup.policy": "compact"})
    props = cfg.to_properties()
    assert set(props) == set(CONFIG_KEYS)
    assert props["retention.ms"] == "-1"
    assert props["max.compaction.lag.ms"] == str(LONG_MAX)
    assert props["preallocate"] == "false"
    assert LogConfig.from_props(props) == cfg


@pytest.mark.parametrize("name,value,fragment", [
    ("segment.bytes", "13", "must be at least 14"),
    ("segment.bytes", "2147483648", "out of range for a int"),
    ("segment.bytes", "1g", "expected a whole number"),
    ("segment.index.bytes", "3", "at least 4"),
    ("segment.ms", "0", "at least 1"),
    ("retention.ms", "-2", "at least -1"),
    ("cleanup.policy", "delete,foo", "delete, compact"),
    ("cleanup.policy", "", "delete, compact"),
    ("cleanup.policy", "delete,delete", "no repeats"),
    ("compression.type", "brotli", "one of uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("message.timestamp.type", "createtime", "one of CreateTime, LogAppendTime"),
    ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
    ("min.cleanable.dirty.ratio", "half", "expected a number"),
    ("preallocate", "yes", "expected true or false"),
    ("flush.messages", "0", "at least 1"),
    ("compression.gzip.level", "0", "-1 or between 1 and 9"),
    ("compression.zstd.level", "23", "between -131072 and 22"),
    ("min.insync.replicas", "0", "at least 1"),
    ("local.retention.ms", "-3", "at least -2"),
    ("max.message.bytes", "-1", "at least 0"),
])
def test_bad_values_name_config_value_and_allowed(name, value, fragment):
    with pytest.raises(InvalidConfigError) as err:
        validate_topic_overrides({name: value})
    message = str(err.value)
    assert name in message and fragment in message
    assert repr(value) in message or value in message


def test_unknown_config_suggests_closest():
    with pytest.raises(InvalidConfigError, match=r"Unknown topic config 'retention\.mss'; did you mean 'retention\.ms'\?"):
        validate_topic_overrides({"retention.mss": "1"})
    with pytest.raises(InvalidConfigError) as err:
        validate_topic_overrides({"zzzz": "1"})
    assert "did you mean" not in str(err.value)


def test_validate_returns_canonical_overrides():
    assert validate_topic_overrides({"cleanup.policy": " compact , delete ", "preallocate": "True"}) == {
        "cleanup.policy": "compact,delete", "preallocate": "true"}


def test_cross_field_compaction_lags():
    with pytest.raises(InvalidConfigError) as err:
        validate_topic_overrides({"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "99"})
    assert "min.compaction.lag.ms (100)" in str(err.value)
    assert "max.compaction.lag.ms (99)" in str(err.value)
    validate_topic_overrides({"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "100"})


def test_cross_field_remote_storage_with_compaction():
    with pytest.raises(InvalidConfigError, match=r"remote\.storage\.enable.*cleanup\.policy=delete,compact"):
        validate_topic_overrides({"remote.storage.enable": "true", "cleanup.policy": "delete,compact"})
    # the rule also sees root defaults
    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        validate_topic_overrides({"remote.storage.enable": "true"}, {"log.cleanup.policy": "compact"})
    validate_topic_overrides({"remote.storage.enable": "true"})


def test_cross_field_local_retention():
    with pytest.raises(InvalidConfigError) as err:
        validate_topic_overrides({"remote.storage.enable": "true", "retention.ms": "1000",
                                  "local.retention.ms": "2000"})
    assert "local.retention.ms (2000)" in str(err.value) and "retention.ms (1000)" in str(err.value)
    with pytest.raises(InvalidConfigError, match=r"local\.retention\.bytes \(20\).*retention\.bytes \(10\)"):
        validate_topic_overrides({"remote.storage.enable": "true", "retention.bytes": "10",
                                  "local.retention.bytes": "20"})
    with pytest.raises(InvalidConfigError, match=r"local\.retention\.ms=-1.*retention\.ms=1000"):
        validate_topic_overrides({"remote.storage.enable": "true", "retention.ms": "1000",
                                  "local.retention.ms": "-1"})
    # allowed: equal, -2, infinite total, and no remote storage (Kafka checks tiered topics only)
    validate_topic_overrides({"remote.storage.enable": "true", "retention.ms": "1000",
                              "local.retention.ms": "1000"})
    validate_topic_overrides({"remote.storage.enable": "true", "retention.ms": "-1",
                              "local.retention.ms": "5"})
    validate_topic_overrides({"retention.ms": "1000", "local.retention.ms": "2000"})


def test_cross_field_copy_disabled_needs_equal_retention():
    with pytest.raises(InvalidConfigError, match="remote.log.copy.disable"):
        validate_topic_overrides({"remote.storage.enable": "true", "remote.log.copy.disable": "true",
                                  "retention.ms": "1000", "local.retention.ms": "500"})
    validate_topic_overrides({"remote.storage.enable": "true", "remote.log.copy.disable": "true",
                              "retention.ms": "1000", "local.retention.ms": "1000"})


def test_root_defaults_with_broker_names():
    values = resolve_root_defaults({"log.retention.hours": "2", "log.segment.bytes": "4096",
                                    "log.roll.hours": "1", "log.flush.interval.messages": "10",
                                    "message.max.bytes": "2000", "log.cleanup.policy": "compact"})
    assert values == {"retention.ms": 7_200_000, "segment.bytes": 4096, "segment.ms": 3_600_000,
                      "flush.messages": 10, "max.message.bytes": 2000, "cleanup.policy": ("compact",)}
    # precedence: ms > minutes > hours, whatever the order given
    assert resolve_root_defaults({"log.retention.ms": "5", "log.retention.hours": "1",
                                  "log.retention.minutes": "3"}) == {"retention.ms": 5}
    assert resolve_root_defaults({"log.retention.hours": "1", "log.retention.minutes": "3"}) == {
        "retention.ms": 180_000}
    assert resolve_root_defaults({"log.retention.hours": "-1"}) == {"retention.ms": -1}
    # a topic name in the defaults is accepted and wins over broker names
    assert resolve_root_defaults({"log.segment.bytes": "100", "segment.bytes": "200"}) == {
        "segment.bytes": 200}
    cfg = LogConfig.from_props({"retention.ms": "10"}, {"log.retention.hours": "2",
                                                        "log.segment.bytes": "4096"})
    assert cfg.retention_ms == 10 and cfg.segment_bytes == 4096
    assert cfg.overrides == {"retention.ms": "10"}


def test_root_defaults_errors_name_the_root_setting():
    with pytest.raises(InvalidConfigError, match=r"Unknown root config 'log\.segment\.byte'; did you mean 'log\.segment\.bytes'"):
        resolve_root_defaults({"log.segment.byte": "1"})
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes.*from log\.segment\.bytes=5"):
        resolve_root_defaults({"log.segment.bytes": "5"})
    with pytest.raises(InvalidConfigError, match="log.roll.hours"):
        resolve_root_defaults({"log.roll.hours": "x"})


@pytest.mark.parametrize("name", ["a", "orders", "A.b_c-9", "x" * 249, "..a", "._"])
def test_valid_topic_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize("name,fragment", [
    ("", "can't be empty"),
    (".", '"." or ".."'),
    ("..", '"." or ".."'),
    ("x" * 250, "longer than 249"),
    ("a b", "ASCII alphanumerics"),
    ("a/b", "ASCII alphanumerics"),
    ("héllo", "ASCII alphanumerics"),
    ("a:b", "ASCII alphanumerics"),
])
def test_invalid_topic_names(name, fragment):
    with pytest.raises(InvalidTopicError, match=fragment.replace(".", r"\.")):
        validate_topic_name(name)


def test_topic_collisions():
    assert colliding_topic("a.b", ["a_b", "c"]) == "a_b"
    assert colliding_topic("a_b", ["a.b"]) == "a.b"
    assert colliding_topic("a.b", ["a.b"]) is None
    assert colliding_topic("ab", ["a_b"]) is None
    assert "collides with existing topic 'a_b'" in topic_collision_warning("a.b", ["a_b"])
    assert "period ('.') or underscore ('_')" in topic_collision_warning("a.b", [])
    assert topic_collision_warning("plain-name", ["other"]) is None


def test_load_properties_java_basics(tmp_path):
    text = (
        "# comment\n"
        "  ! another comment\n"
        "\n"
        "a=1\n"
        "b : two words \n"
        "c 3\n"
        "  d=  spaced\n"
        "e=\n"
        "f\n"
        "long=one,\\\n"
        "     two\n"
        "esc\\=key=x\\ty\\u0041\n"
        "url=s3://bucket/path?x=1\n"
    )
    expected = {"a": "1", "b": "two words ", "c": "3", "d": "spaced", "e": "", "f": "",
                "long": "one,two", "esc=key": "x\tyA", "url": "s3://bucket/path?x=1"}
    assert load_properties(text) == expected
    path = tmp_path / "x.properties"
    path.write_text(text, encoding="utf-8")
    assert load_properties(path) == expected
    assert load_properties(str(path)) == expected
    with pytest.raises(InvalidConfigError, match="not found"):
        load_properties(tmp_path / "missing.properties")
    with pytest.raises(InvalidConfigError, match=r"line 2"):
        load_properties("ok=1\nbad=\\u12G4\n")


def test_shipped_topic_defaults_are_kafkas_defaults():
    path = REPO / "conf" / "topic-defaults.properties"
    text = path.read_text(encoding="utf-8")
    assert load_properties(path) == {}          # everything commented out
    # uncommenting every example must give back exactly Kafka's defaults
    import re
    uncommented = re.sub(r"^#([\w.]+=\S+)$", r"\1", text, flags=re.M)
    defaults = load_properties(uncommented)
    assert len(defaults) >= 20
    assert LogConfig.from_props({}, defaults) == LogConfig.from_props()


def test_generated_doc_is_up_to_date():
    doc = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert doc == config_markdown(), (
        "docs/configuration.md is stale: run python -m logcore.log.config --markdown > docs/configuration.md")
    for name in CONFIG_KEYS:
        assert f"`{name}`" in doc


def test_markdown_cli_entry(capsys):
    assert cfgmod.main(["--markdown"]) == 0
    assert capsys.readouterr().out == config_markdown()


def test_throttled_replicas_lists_as_kafka_validates_them():
    cfg = LogConfig.from_props({"leader.replication.throttled.replicas": "0:1, 1:2",
                                "follower.replication.throttled.replicas": "*"})
    assert cfg.leader_replication_throttled_replicas == ("0:1", "1:2")
    assert cfg.follower_replication_throttled_replicas == ("*",)
    for bad in ("0-1", "*,0:1", "a:1", "0:"):
        with pytest.raises(InvalidConfigError, match=r"\[partitionId\]:\[brokerId\]"):
            LogConfig.from_props({"leader.replication.throttled.replicas": bad})
