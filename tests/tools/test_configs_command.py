"""`seglog configs` and `seglog topics --alter --config` / `--topics-with-overrides`, on a log
root's files and through a `seglog broker` (--bootstrap-server)."""
from __future__ import annotations

from logcore.log.log_root import LogRoot
from logcore.tools.cli import main

# seglog_broker: tests/conftest.py


def seglog(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_configs_on_a_root(capsys, tmp_path):
    root = str(tmp_path / "root")
    assert seglog(capsys, "topics", "--root", root, "--create", "t", "--partitions", "1")[0] == 0
    topic = ("--entity-type", "topics", "--entity-name", "t")
    code, out, err = seglog(capsys, "configs", root, *topic, "--alter",
                            "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert (code, out) == (0, "Completed updating config for topic t.\n"), err
    assert LogRoot.open(root).describe_topic("t").config == {"retention.ms": "1000", "cleanup.policy": "compact,delete"}
    code, out, _ = seglog(capsys, "configs", "--root", root, *topic, "--describe")
    assert out.splitlines() == [
        "Dynamic configs for topic t are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}"]
    assert seglog(capsys, "configs", root, *topic, "--alter", "--delete-config", "retention.ms")[0] == 0
    assert LogRoot.open(root).describe_topic("t").config == {"cleanup.policy": "compact,delete"}
    code, out, _ = seglog(capsys, "configs", root, *topic, "--describe", "--all")
    assert "  retention.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:retention.ms=604800000}" in out
    # an invalid value or an unknown key changes nothing and names the key
    code, _, err = seglog(capsys, "configs", root, *topic, "--alter", "--add-config", "retention.ms=abc")
    assert code != 0 and "retention.ms" in err and "abc" in err
    code, _, err = seglog(capsys, "configs", root, *topic, "--alter", "--add-config", "retentoin.ms=5")
    assert code != 0 and "retention.ms" in err
    # seglog topics --alter --config, --describe --topics-with-overrides
    assert seglog(capsys, "topics", "--root", root, "--create", "plain", "--partitions", "1")[0] == 0
    code, out, err = seglog(capsys, "topics", "--root", root, "--alter", "--topic", "t", "--config", "segment.bytes=1048576")
    assert code == 0, err
    assert LogRoot.open(root).describe_topic("t").config["segment.bytes"] == "1048576"
    code, out, _ = seglog(capsys, "topics", "--root", root, "--describe", "--topics-with-overrides")
    assert "Topic: t\t" in out and "plain" not in out
    # dynamic broker configs of a single broker's root
    code, out, err = seglog(capsys, "configs", root, "--entity-type", "brokers", "--entity-default", "--alter",
                            "--add-config", "log.retention.ms=7200000")
    assert (code, out) == (0, "Completed updating default config for brokers in the cluster.\n"), err
    code, _, err = seglog(capsys, "configs", root, "--entity-type", "brokers", "--entity-default", "--alter",
                          "--add-config", "log.dirs=/x")
    assert code != 0 and "Cannot update these configs dynamically" in err


def test_configs_through_a_broker(capsys, seglog_broker, tmp_path):
    bs = ("--bootstrap-server", seglog_broker.bootstrap)
    assert seglog(capsys, "topics", *bs, "--create", "--topic", "bt", "--partitions", "1")[0] == 0
    assert seglog(capsys, "topics", *bs, "--create", "--topic", "bplain", "--partitions", "1")[0] == 0
    topic = ("--entity-type", "topics", "--entity-name", "bt")
    code, out, err = seglog(capsys, "configs", *bs, *topic, "--alter", "--add-config", "retention.ms=1000")
    assert (code, out) == (0, "Completed updating config for topic bt.\n"), err
    code, out, _ = seglog(capsys, "configs", *bs, *topic, "--describe")
    assert out.splitlines() == ["Dynamic configs for topic bt are:",
                                "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000,"
                                " DEFAULT_CONFIG:log.retention.hours=168}"]
    code, _, err = seglog(capsys, "configs", *bs, *topic, "--alter", "--add-config", "retention.ms=abc")
    assert code != 0 and "INVALID_CONFIG" in err and "abc" in err
    code, out, err = seglog(capsys, "topics", *bs, "--alter", "--topic", "bt", "--config", "cleanup.policy=compact")
    assert code == 0, err
    code, out, _ = seglog(capsys, "topics", *bs, "--describe", "--topics-with-overrides")
    assert "Topic: bt\t" in out and "bplain" not in out and "Partition:" not in out
    broker = ("--entity-type", "brokers", "--entity-name", "0")
    code, out, err = seglog(capsys, "configs", *bs, *broker, "--alter", "--add-config", "log.segment.bytes=2000000")
    assert (code, out) == (0, "Completed updating config for broker 0.\n"), err
    code, out, _ = seglog(capsys, "configs", *bs, *broker, "--describe")
    assert "  log.segment.bytes=2000000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.segment.bytes=2000000," \
           " DEFAULT_CONFIG:log.segment.bytes=1073741824}" in out.splitlines()
    # a root a broker serves is not altered behind its back
    code, _, err = seglog(capsys, "configs", str(seglog_broker.root), *topic, "--alter", "--add-config", "retention.ms=5")
    assert code != 0 and seglog_broker.bootstrap in err
