"""Kafka 4.1's own kafka-configs (kafka.admin.ConfigCommand) on client quota entities
(--entity-type clients / users + clients, --alter --add-config / --delete-config, --describe)
against Apache Kafka (KRaft) and against a `seglog broker`: the same answers, and those are
quota_tool_session.KAFKA_ANSWERS (which the cluster test expects too)."""
from __future__ import annotations

import asyncio
import threading

import pytest

from logcore.broker.config import BrokerConfig
from logcore.broker.server import BrokerServer
from quota_tool_session import KAFKA_ANSWERS, session


@pytest.fixture(scope="module")
def seglog_bootstrap(tmp_path_factory):
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)
    server = BrokerServer(BrokerConfig.from_props({"listeners": "PLAINTEXT://127.0.0.1:0",
                                                   "log.dirs": str(tmp_path_factory.mktemp("quota-ref"))},
                                                  source="test"))
    host, port = run(server.start())
    try:
        yield f"{host}:{port}"
    finally:
        run(server.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_kafka_configs_on_quota_entities_answers_as_kafka(kafka_jars, kafka_broker_factory, seglog_bootstrap):
    kafka = session(kafka_jars, kafka_broker_factory().bootstrap)
    assert kafka == KAFKA_ANSWERS
    assert session(kafka_jars, seglog_bootstrap) == KAFKA_ANSWERS
