"""The reference set-up itself: Kafka's jars resolve, a KRaft broker starts on loopback, Kafka's
console tools talk to it, and SIGTERM by pid is a clean shutdown."""
from __future__ import annotations

import signal

import pytest

pytestmark = pytest.mark.timeout(300)


def test_broker_serves_console_tools_and_stops_cleanly(kafka_jars, kafka_broker_factory):
    broker = kafka_broker_factory()
    assert (broker.log_dirs / "meta.properties").read_text().count(f"cluster.id={broker.cluster_id}") == 1
    broker.create_topic("setup", 1)
    lines = [f"key-{i}\tvalue {i}" for i in range(50)]
    produced = kafka_jars.run_tool(kafka_jars.console_producer, [
        "--bootstrap-server", broker.bootstrap, "--topic", "setup",
        "--property", "parse.key=true", "--property", "key.separator=\t"],
        input=("\n".join(lines) + "\n").encode())
    assert produced.returncode == 0, produced.stderr
    consumed = broker.console_consume("setup", 50, "--property", "print.key=true",
                                      "--property", "key.separator=\t")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines
    assert broker.stop(signal.SIGTERM) == 143                # the JVM's exit status after SIGTERM
    assert (broker.log_dirs / ".kafka_cleanshutdown").exists()
    assert "Kafka Server started" in broker.log_path.read_text()
