"""A broker in this process with PLAINTEXT, SSL (client certificates required), SASL_SSL and a
SASL listener with re-authentication, reached with seglog's own client (logcore.wire.client with
logcore.security.client_security): the principal each request carries, the SASL rules before a
login, KIP-368 re-authentication, certificate reload, the listener's endpoints in Metadata, and
Describe/AlterUserScramCredentials."""
from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import time

import pytest

from secure_broker import PLAIN_MODULE, SCRAM_MODULE, jaas
from pki import issue
from in_process_broker import InProcessBroker
from logcore.security.client_security import ClientSecurity
from logcore.security.scram_credential import salted_password
from logcore.wire.client import KafkaConnection, KafkaConnectionError, KafkaError
from logcore.wire.protocol import encode_request

REAUTH_MS = 1500


@pytest.fixture(scope="module")
def served(tmp_path_factory, pki):
    base = tmp_path_factory.mktemp("session")
    keystore = base / "mtls-keystore.pem"          # rewritten by the reload test
    keystore.write_bytes(pki.broker_pem.read_bytes())
    running = InProcessBroker({
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,SASL_SSL://127.0.0.1:0,REAUTH://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT",
        "advertised.listeners": "SASL_SSL://localhost:0",
        "log.dirs": str(base / "logs"), "num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
        "ssl.keystore.location": str(pki.broker_p12), "ssl.keystore.password": "store-secret",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
        "listener.name.mtls.ssl.client.auth": "required", "listener.name.mtls.ssl.keystore.type": "PEM",
        "listener.name.mtls.ssl.keystore.location": str(keystore),
        "sasl.jaas.config": jaas(PLAIN_MODULE, user_alice="alice-secret", user_bob="bob-secret"),
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
    })
    server = running.server
    seen: list[tuple[str, str, str]] = []
    metadata = server.broker.handlers[3]

    async def recording(request):             # what the authorizer will read, per request
        seen.append((request.principal, request.client_host, request.listener))
        return await metadata(request)
    server.broker.handlers[3] = recording
    try:
        yield server, seen, keystore
    finally:
        running.stop()


def connect(server, listener: str, **props) -> KafkaConnection:
    host, port = server.bound[listener]
    security = ClientSecurity.from_properties(props, "test") if props else None
    return KafkaConnection(host, port, timeout_s=10, security=security).connect()


def tls_props(pki, **more) -> dict:
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem), **more}


def metadata(conn):
    return conn.request(3, {"topics": [], "allow_auto_topic_creation": False})


def scram_user(conn, user: str, password: str, mechanism: int = 1, iterations: int = 4096):
    salt = os.urandom(16)
    name = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}[mechanism]
    return conn.request(51, {"deletions": [], "upsertions": [
        {"name": user, "mechanism": mechanism, "iterations": iterations, "salt": salt,
         "salted_password": salted_password(password, salt, iterations, name)}]})


def test_each_request_carries_its_connections_principal(served, pki):
    server, seen, _ = served
    with connect(server, "PLAINTEXT") as conn:
        metadata(conn)
        assert scram_user(conn, "carol", "carol-secret").results[0].error_code == 0
    assert seen[-1] == ("User:ANONYMOUS", "127.0.0.1", "PLAINTEXT")
    with connect(server, "MTLS", **tls_props(pki, **{"security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                                                      "ssl.keystore.location": str(pki.client_p12),
                                                      "ssl.keystore.password": "store-secret"})) as conn:
        metadata(conn)
    assert seen[-1] == ("User:CN=alice,O=seglog tests", "127.0.0.1", "MTLS")
    scram = tls_props(pki, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                              "sasl.jaas.config": jaas(SCRAM_MODULE, username="carol", password="carol-secret")})
    with connect(server, "SASL_SSL", **scram) as conn:
        metadata(conn)
    assert seen[-1] == ("User:carol", "127.0.0.1", "SASL_SSL")


def test_metadata_gives_the_endpoints_of_the_clients_listener(served, pki):
    server, _, _ = served
    plain = tls_props(pki, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                              "sasl.jaas.config": jaas(PLAIN_MODULE, username="alice", password="alice-secret")})
    with connect(server, "SASL_SSL", **plain) as conn:
        brokers = metadata(conn).brokers
        coordinator = conn.request(10, {"key": "g", "key_type": 0, "coordinator_keys": ["g"]}, window=(0, 3))
    assert [(b.host, b.port) for b in brokers] == [("localhost", server.bound["SASL_SSL"][1])]
    assert (coordinator.host, coordinator.port) == ("localhost", server.bound["SASL_SSL"][1])
    with connect(server, "PLAINTEXT") as conn:
        assert [(b.host, b.port) for b in metadata(conn).brokers] == [server.bound["PLAINTEXT"]]


def test_nothing_but_the_login_before_it(served):
    server, _, _ = served
    conn = connect(server, "REAUTH")                   # ApiVersions is allowed
    with pytest.raises(KafkaConnectionError):
        metadata(conn)
    conn = connect(server, "REAUTH")
    answer = conn.request(17, {"mechanism": "SCRAM-SHA-1"})
    assert answer.error_code == 33 and list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    with pytest.raises(KafkaConnectionError):          # closed after that answer
        metadata(conn)
    with connect(server, "PLAINTEXT") as conn:         # SASL APIs on a listener without SASL
        assert conn.request(17, {"mechanism": "PLAIN"}).error_code == 34
    wrong = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.jaas.config": jaas(PLAIN_MODULE, username="alice", password="nope")}
    with pytest.raises(KafkaError, match="Invalid username or password") as failed:
        connect(server, "REAUTH", **wrong)
    assert failed.value.code == 58


def _frame_exchange(sock, payload: bytes) -> bytes:
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", sock.recv(4))[0]
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    return data


def test_handshake_v0_then_bare_tokens(served):
    server, seen, _ = served
    with socket.create_connection(server.bound["REAUTH"], timeout=10) as sock:
        answer = _frame_exchange(sock, encode_request(17, 0, 1, "raw", {"mechanism": "PLAIN"})[4:])
        assert answer[4:6] == b"\x00\x00"                          # correlation id, then error 0
        assert _frame_exchange(sock, b"\x00bob\x00bob-secret") == b""   # a bare token, answered bare
        reply = _frame_exchange(sock, encode_request(3, 1, 2, "raw", {"topics": []})[4:])
        assert struct.unpack(">i", reply[:4])[0] == 2
    assert seen[-1][0] == "User:bob"


def test_a_failed_login_is_answered_and_closed_after_the_delay(served):
    """KIP-306: connection.failed.authentication.delay.ms (Kafka's default, 100 ms, here) holds
    back a failed login's answer and the close, on both framings (SaslAuthenticate, bare tokens)."""
    server, _, _ = served
    with socket.create_connection(server.bound["REAUTH"], timeout=10) as sock:
        assert _frame_exchange(sock, encode_request(17, 1, 1, "raw", {"mechanism": "PLAIN"})[4:])[4:6] == b"\0\0"
        started = time.monotonic()
        answer = _frame_exchange(sock, encode_request(36, 1, 2, "raw", {"auth_bytes": b"\0alice\0nope"})[4:])
        assert time.monotonic() - started >= 0.1
        assert struct.unpack(">h", answer[4:6])[0] == 58            # SASL_AUTHENTICATION_FAILED
        assert sock.recv(1) == b""                                   # then closed
    with socket.create_connection(server.bound["REAUTH"], timeout=10) as sock:
        assert _frame_exchange(sock, encode_request(17, 0, 1, "raw", {"mechanism": "PLAIN"})[4:])[4:6] == b"\0\0"
        started = time.monotonic()
        sock.sendall(struct.pack(">i", 11) + b"\0alice\0nope")       # a bare token: no answer, a close
        assert sock.recv(1) == b""
        assert time.monotonic() - started >= 0.1


def test_reauthentication(served):
    server, seen, _ = served
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.jaas.config": jaas(PLAIN_MODULE, username="alice", password="alice-secret")}
    conn = connect(server, "REAUTH", **props)
    assert conn.reauth_at is not None                  # the broker said the session ends
    time.sleep(REAUTH_MS / 1000 + 0.3)
    metadata(conn)                                      # logged in again first, on this connection
    assert conn.connected and seen[-1][0] == "User:alice"
    conn.close()
    lazy = connect(server, "REAUTH", **props)
    lazy.reauth_at = None                               # a client that never re-authenticates
    time.sleep(REAUTH_MS / 1000 + 0.3)
    with pytest.raises(KafkaConnectionError):
        metadata(lazy)


def test_certificate_reload_without_restart(served, pki, tmp_path):
    server, _, keystore = served
    host, port = server.bound["MTLS"]
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    context.load_cert_chain(str(pki.client_cert), str(pki.client_key))

    def served_cn() -> str:
        with context.wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname=host) as s:
            return s.getpeercert()["subject"][-1][0][1]
    assert served_cn() == "broker"
    renewed = issue(pki.ca, "broker-renewed")
    fresh = tmp_path / "new.pem"
    fresh.write_bytes(renewed.key_pem() + renewed.cert_pem())
    os.replace(fresh, keystore)
    time.sleep(1.1)                                     # stores are looked at once a second at most
    assert served_cn() == "broker-renewed"
    keystore.write_bytes(b"not a certificate")          # a broken store: the last good one stays
    time.sleep(1.1)
    assert served_cn() == "broker-renewed"


def test_tls_failures_leave_the_broker_serving(served, pki):
    server, _, _ = served
    rogue = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.other_ca_pem),
             "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.client_p12),
             "ssl.keystore.password": "store-secret"}
    with pytest.raises(KafkaError, match="certificate verify failed"):
        connect(server, "MTLS", **rogue)
    with pytest.raises(KafkaError):                     # no client certificate: refused
        connect(server, "MTLS", **tls_props(pki, **{"security.protocol": "SSL"}))
    with pytest.raises(KafkaConnectionError):           # a plaintext client on a TLS port
        connect(server, "MTLS")
    with connect(server, "PLAINTEXT") as conn:
        metadata(conn)


def test_user_scram_credentials(served, pki):
    server, _, _ = served
    with connect(server, "PLAINTEXT") as conn:
        assert scram_user(conn, "dave", "dave-secret", 2, 8192).results[0].error_code == 0
        described = conn.request(50, {"users": [{"name": "dave"}, {"name": "nobody"}]})
        (dave, nobody) = described.results
        assert [(i.mechanism, i.iterations) for i in dave.credential_infos] == [(2, 8192)]
        assert nobody.error_code == 91
        assert "dave" in [r.user for r in conn.request(50, {"users": None}).results]
        errors = conn.request(51, {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": [
            {"name": "eve", "mechanism": 1, "iterations": 100, "salt": b"s", "salted_password": b"p"},
            {"name": "frank", "mechanism": 9, "iterations": 4096, "salt": b"s", "salted_password": b"p"}]})
        assert [(r.user, r.error_code) for r in errors.results] == [("nobody", 91), ("eve", 93), ("frank", 33)]
        with open(os.path.join(server.config.log_dir, "seglog-broker-configs.json")) as f:
            stored = json.load(f)["users"]["dave"]
        assert stored["SCRAM-SHA-512"].startswith("salt=") and "iterations=8192" in stored["SCRAM-SHA-512"]
        login = tls_props(pki, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                  "sasl.jaas.config": jaas(SCRAM_MODULE, username="dave", password="dave-secret")})
        connect(server, "SASL_SSL", **login).close()
        assert conn.request(51, {"deletions": [{"name": "dave", "mechanism": 2}], "upsertions": []}) \
            .results[0].error_code == 0
    with pytest.raises(KafkaError, match="invalid credentials"):
        connect(server, "SASL_SSL", **login)


def test_a_failed_login_delay_at_or_above_the_idle_timeout_is_refused(tmp_path):
    from logcore.broker.config import BrokerConfig
    from logcore.errors import InvalidConfigError
    base = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    assert BrokerConfig.from_props(base)["connection.failed.authentication.delay.ms"] == 100   # Kafka's default
    with pytest.raises(InvalidConfigError, match="connection.failed.authentication.delay.ms=600000 must be below"):
        BrokerConfig.from_props({**base, "connection.failed.authentication.delay.ms": "600000"})
