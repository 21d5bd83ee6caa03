"""Kafka 4.1's own kafka-configs (kafka.admin.ConfigCommand) on client quota entities
(--entity-type clients / users + clients, --alter --add-config / --delete-config, --describe)
against Apache Kafka (KRaft) and against a `seglog broker`: the same answers, and those are
quota_tool_session.KAFKA_ANSWERS (which the cluster test expects too)."""
from __future__ import annotations

import pytest

from in_process_broker import InProcessBroker
from quota_tool_session import KAFKA_ANSWERS, session


@pytest.fixture(scope="module")
def seglog_bootstrap(tmp_path_factory):
    running = InProcessBroker({"listeners": "PLAINTEXT://127.0.0.1:0",
                               "log.dirs": str(tmp_path_factory.mktemp("quota-ref"))})
    try:
        yield running.bootstrap
    finally:
        running.stop()


def test_kafka_configs_on_quota_entities_answers_as_kafka(kafka_jars, kafka_broker_factory, seglog_bootstrap):
    kafka = session(kafka_jars, kafka_broker_factory().bootstrap)
    assert kafka == KAFKA_ANSWERS
    assert session(kafka_jars, seglog_bootstrap) == KAFKA_ANSWERS


def test_seglog_configs_answers_as_kafka_configs(capsys, seglog_bootstrap):
    """`seglog configs` with kafka-configs' flags: the same lines; the refused value fails naming
    Kafka's reason."""
    from types import SimpleNamespace

    from logcore.tools.cli import main
    from quota_tool_session import CALLS, answer
    for call, expected in zip(CALLS, KAFKA_ANSWERS):
        code = main(["configs", "--bootstrap-server", seglog_bootstrap, *call])
        out, err = capsys.readouterr()
        code, lines, _ = answer(SimpleNamespace(returncode=code, stdout=out, stderr=err))
        assert (code != 0, lines) == (expected[0] != 0, expected[1]), (call, out, err)
        if expected[2] is not None:
            assert "cannot be a fractional value" in err


def test_seglog_configs_on_a_root(capsys, tmp_path):
    import json

    from logcore.log.log_root import LogRoot
    from logcore.tools.cli import main
    LogRoot.open(str(tmp_path), create=True).close()
    assert main(["configs", str(tmp_path), "--entity-type", "clients", "--entity-default", "--alter",
                 "--add-config", "consumer_byte_rate=2048"]) == 0
    assert main(["configs", str(tmp_path), "--entity-type", "users", "--entity-name", "bob", "--alter",
                 "--add-config", "request_percentage=25"]) == 0
    capsys.readouterr()
    assert main(["configs", str(tmp_path), "--entity-type", "clients", "--describe"]) == 0
    assert capsys.readouterr().out == "Quota configs for the default client-id are consumer_byte_rate=2048.0\n"
    assert main(["configs", str(tmp_path), "--entity-type", "users", "--describe"]) == 0
    assert capsys.readouterr().out == "Quota configs for user-principal 'bob' are request_percentage=25.0\n"
    stored = json.loads((tmp_path / "seglog-client-quotas.json").read_text())["entities"]
    assert stored == {"clients/<default>": {"consumer_byte_rate": "2048"}, "users/bob": {"request_percentage": "25.0"}}
    assert main(["configs", str(tmp_path), "--entity-type", "clients", "--entity-name", "x", "--alter",
                 "--add-config", "producer_byte_rate=abc"]) != 0
    assert "a quota is a number" in capsys.readouterr().err
