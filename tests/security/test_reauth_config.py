"""DescribeConfigs of a broker lists connections.max.reauth.ms as Kafka lists it (every broker
setting is listed, a listener override given in the properties too), so a client can read the
session lifetime it will be held to: librdkafka's 0142 reads it this way and skips when no broker
reports one. Read here with confluent-kafka's AdminClient, as 0142 reads it.

A lifetime may also be given for one mechanism of a listener,
`listener.name.<l>.<mechanism>.connections.max.reauth.ms` (Kafka's SaslChannelBuilder reads it so):
its sessions are told that lifetime and held to it; the listener's other mechanisms keep the
listener's."""
from __future__ import annotations

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource  # noqa: E402

import os  # noqa: E402
import time  # noqa: E402

from in_process_broker import InProcessBroker  # noqa: E402
from logcore.errors import InvalidConfigError  # noqa: E402
from logcore.security.client_security import ClientSecurity  # noqa: E402
from logcore.security.scram_credential import salted_password  # noqa: E402
from logcore.wire.client import KafkaConnection, KafkaConnectionError  # noqa: E402
from secure_broker import PLAIN_MODULE, SCRAM_MODULE, jaas  # noqa: E402

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


PLAIN_OVERRIDE = "listener.name.reauth.plain.connections.max.reauth.ms"
PLAIN_MS, LISTENER_MS = 1500, 600_000


def login(running, mechanism: str, module: str, user: str, password: str) -> KafkaConnection:
    host, port = running.server.bound["REAUTH"]
    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                               "sasl.jaas.config": jaas(module, username=user, password=password)},
                                              "test")
    return KafkaConnection(host, port, timeout_s=10, security=security).connect()


def lifetime_s(conn: KafkaConnection, before: float) -> float:
    """The session lifetime the broker told the client, from when it re-authenticates (at 0.85 of
    it, client_security.REAUTH_AT)."""
    assert conn.reauth_at is not None, "the broker gave the session no lifetime"
    return (conn.reauth_at - before) / 0.85


def test_a_mechanisms_own_session_lifetime(tmp_path):
    running = InProcessBroker(broker_props(tmp_path, **{
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "sasl.jaas.config": jaas(PLAIN_MODULE, user_alice="pw"),
        OVERRIDE: str(LISTENER_MS), PLAIN_OVERRIDE: str(PLAIN_MS)}))
    try:
        salt = os.urandom(16)
        with KafkaConnection(*running.server.bound["PLAINTEXT"]) as admin:
            assert admin.request(51, {"deletions": [], "upsertions": [
                {"name": "carol", "mechanism": 1, "iterations": 4096, "salt": salt,
                 "salted_password": salted_password("carol-pw", salt, 4096, "SCRAM-SHA-256")}]}) \
                .results[0].error_code == 0
        before = time.monotonic()
        plain = login(running, "PLAIN", PLAIN_MODULE, "alice", "pw")
        assert PLAIN_MS / 1000 - 0.1 <= lifetime_s(plain, before) <= PLAIN_MS / 1000 + 0.5
        before = time.monotonic()
        scram = login(running, "SCRAM-SHA-256", SCRAM_MODULE, "carol", "carol-pw")
        assert LISTENER_MS / 1000 - 1 <= lifetime_s(scram, before) <= LISTENER_MS / 1000 + 1
        plain.reauth_at = scram.reauth_at = None    # clients that never re-authenticate
        time.sleep(PLAIN_MS / 1000 + 0.3)
        with pytest.raises(KafkaConnectionError):      # held to its mechanism's lifetime
            plain.request(3, {"topics": [], "allow_auto_topic_creation": False})
        scram.request(3, {"topics": [], "allow_auto_topic_creation": False})   # the listener's: not yet
        scram.close()
        entries = described(running.bootstrap)
        over_synonyms = synonyms(running, PLAIN_OVERRIDE)
    finally:
        running.stop()
    over = entries[PLAIN_OVERRIDE]
    assert (over.value, ConfigSource(over.source), over.is_read_only) == \
        (str(PLAIN_MS), ConfigSource.STATIC_BROKER_CONFIG, True)
    # Kafka's synonyms of a listener's mechanism setting: itself, then the unprefixed name
    assert over_synonyms == [(PLAIN_OVERRIDE, str(PLAIN_MS), ConfigSource.STATIC_BROKER_CONFIG),
                              (REAUTH, "0", ConfigSource.DEFAULT_CONFIG)]


@pytest.mark.parametrize("name, value, message", [
    ("listener.name.reauth.scram-sha-512.connections.max.reauth.ms", "1000",
     "SCRAM-SHA-512 is not enabled on listener REAUTH"),
    ("listener.name.plaintext.plain.connections.max.reauth.ms", "1000", "PLAINTEXT, not SASL"),
    (PLAIN_OVERRIDE, "-5", PLAIN_OVERRIDE),
    ("listener.name.reauth.gssapi.connections.max.reauth.ms", "1000", "Kerberos is not supported"),
])
def test_a_mechanism_override_that_cannot_apply_is_refused(tmp_path, name, value, message):
    with pytest.raises(InvalidConfigError, match=message):
        InProcessBroker(broker_props(tmp_path, **{"sasl.enabled.mechanisms": "PLAIN", name: value})).stop()
