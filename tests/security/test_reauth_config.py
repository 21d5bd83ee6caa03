"""DescribeConfigs of a broker lists connections.max.reauth.ms as Kafka lists it (every broker
setting is listed, a listener override given in the properties too), so a client can read the
session lifetime it will be held to: librdkafka's 0142 reads it this way and skips when no broker
reports one. Read here with confluent-kafka's AdminClient, as 0142 reads it."""
from __future__ import annotations

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource  # noqa: E402

from in_process_broker import InProcessBroker  # noqa: E402
from logcore.wire.client import KafkaConnection  # noqa: E402
from secure_broker import PLAIN_MODULE, jaas  # noqa: E402

REAUTH = "connections.max.reauth.ms"
OVERRIDE = "listener.name.reauth.connections.max.reauth.ms"


def broker_props(base, **extra) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,REAUTH://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REAUTH:SASL_PLAINTEXT",
            "log.dirs": str(base), "sasl.jaas.config": jaas(PLAIN_MODULE, user_alice="alice-secret"), **extra}


def described(bootstrap: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    return admin.describe_configs([res], request_timeout=15)[res].result(15)


def synonyms(running, name: str) -> list[tuple[str, str | None, ConfigSource]]:
    """The entry's synonyms in order (confluent-kafka keys them by name, so one name's sources
    would fold into one)."""
    with KafkaConnection(running.host, running.port) as conn:
        body = conn.request(32, {"resources": [{"resource_type": 4, "resource_name": "0",
                                                "configuration_keys": [name]}],
                                 "include_synonyms": True, "include_documentation": False}, 4)
    (entry,) = body.results[0].configs
    return [(s.name, s.value, ConfigSource(s.source)) for s in entry.synonyms]


def test_reauth_listed_with_its_listener_override(tmp_path):
    running = InProcessBroker(broker_props(tmp_path, **{REAUTH: "10000", OVERRIDE: "1500"}))
    try:
        entries = described(running.bootstrap)
        base_synonyms, over_synonyms = synonyms(running, REAUTH), synonyms(running, OVERRIDE)
    finally:
        running.stop()
    base = entries[REAUTH]
    assert (base.value, ConfigSource(base.source), base.is_read_only, base.is_sensitive) == \
        ("10000", ConfigSource.STATIC_BROKER_CONFIG, True, False)
    assert base_synonyms == [(REAUTH, "10000", ConfigSource.STATIC_BROKER_CONFIG),
                              (REAUTH, "0", ConfigSource.DEFAULT_CONFIG)]
    over = entries[OVERRIDE]
    assert (over.value, ConfigSource(over.source)) == ("1500", ConfigSource.STATIC_BROKER_CONFIG)
    assert over_synonyms == [(OVERRIDE, "1500", ConfigSource.STATIC_BROKER_CONFIG),
                              (REAUTH, "10000", ConfigSource.STATIC_BROKER_CONFIG),
                              (REAUTH, "0", ConfigSource.DEFAULT_CONFIG)]


def test_reauth_unset_is_listed_as_kafkas_default(tmp_path):
    running = InProcessBroker(broker_props(tmp_path))
    try:
        entries = described(running.bootstrap)
    finally:
        running.stop()
    entry = entries[REAUTH]
    assert (entry.value, ConfigSource(entry.source), entry.is_default) == ("0", ConfigSource.DEFAULT_CONFIG, True)
    assert not [name for name in entries if name.startswith("listener.name.")]
