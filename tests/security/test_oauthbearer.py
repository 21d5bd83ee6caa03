"""SASL/OAUTHBEARER (KIP-768) against a real token issuer: Keycloak (keycloak.py) issues tokens
with the client-credentials grant, a `seglog broker` checks them against Keycloak's JWKS.

librdkafka (sasl.oauthbearer.method=oidc) and Kafka's Java client (OAuthBearerLoginCallbackHandler)
fetch their own tokens and produce and consume as User:<client id> (sasl.oauthbearer.sub.claim.name
=azp), within the ACLs of that principal; a token of another issuer, one without the expected
audience, an expired one and a non-JWT are each refused with SASL_AUTHENTICATION_FAILED while the
broker goes on serving; the session lifetime the broker gives is the token's remaining life, and
librdkafka re-authenticates with fresh tokens before it ends (KIP-368).

Keycloak takes minutes to start on a loaded 2-core machine (measured 2026-11-29, load ~25: 88 s,
and 108 s more on the first run for its one-time build; the module's setup ~125 s), so the module
runs only with `-m soak`."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from keycloak import ADMIN, ADMIN_PASSWORD, AUDIENCE, Keycloak, KeycloakUnavailable, client
from secure_broker import start_broker
from test_clients import first_error, round_trip

pytestmark = pytest.mark.soak
HERE = Path(__file__).resolve().parent
REALM = "seglog"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
ALLOWED_PREFIXES = ("oauth-", "java-oauth")


@pytest.fixture(scope="module")
def keycloak(tmp_path_factory):
    from zookeeper_reference import free_ports
    try:
        kc = Keycloak.start(tmp_path_factory.mktemp("keycloak"), free_ports(1)[0])
    except KeycloakUnavailable as exc:
        pytest.skip(f"Keycloak unavailable: {exc}")
    try:
        kc.import_realm({"realm": REALM, "enabled": True, "clients": [
            client("producer-app"), client("no-audience", audience=False),
            client("short-lived", **{"access.token.lifespan": "3"}),
            client("rotating", **{"access.token.lifespan": "8"})]})
        yield kc
    finally:
        kc.stop()


@pytest.fixture(scope="module")
def broker(keycloak, tmp_path_factory):
    base = tmp_path_factory.mktemp("oauth-broker")
    b = start_broker(base, {
        "listeners": "PLAINTEXT://127.0.0.1:0,OAUTH://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT",
        "log.dirs": str(base / "logs"), "node.id": "0", "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "listener.name.oauth.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required ;",
        "sasl.oauthbearer.jwks.endpoint.url": keycloak.jwks_endpoint(REALM),
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": keycloak.issuer(REALM),
        "sasl.oauthbearer.sub.claim.name": "azp",          # Keycloak's `sub` is the service account's uuid
        "sasl.oauthbearer.clock.skew.seconds": "1",
        # ACLs: only the clients' topics; the PLAINTEXT listener (ANONYMOUS) administers them
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "false",
    })
    try:
        from logcore.wire.client import bootstrap as connect
        creations = []
        for principal in ("User:producer-app", "User:rotating"):
            creations += [{"resource_type": 2, "resource_name": prefix, "resource_pattern_type": 4,
                           "principal": principal, "host": "*", "operation": 2, "permission_type": 3}
                          for prefix in ALLOWED_PREFIXES]
            creations.append({"resource_type": 3, "resource_name": "*", "resource_pattern_type": 3,
                              "principal": principal, "host": "*", "operation": 2, "permission_type": 3})
        with connect(b.bootstrap("PLAINTEXT")) as conn:
            answer = conn.request(30, {"creations": creations})
        assert all(r.error_code == 0 for r in answer.results), answer
        yield b
    finally:
        b.stop()


def oidc(broker, keycloak, client_id: str) -> dict:
    """librdkafka fetching its own tokens from Keycloak (client-credentials grant)."""
    return {"bootstrap.servers": broker.bootstrap("OAUTH"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": client_id, "sasl.oauthbearer.client.secret": f"{client_id}-secret",
            "sasl.oauthbearer.token.endpoint.url": keycloak.token_endpoint(REALM)}


def with_token(broker, token: str) -> dict:
    """A librdkafka client presenting `token` as is (its oauth_cb hands it over)."""
    return {"bootstrap.servers": broker.bootstrap("OAUTH"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token, time.time() + 60, "whoever")}


def test_librdkafka_oidc_produces_and_consumes(broker, keycloak):
    conf = oidc(broker, keycloak, "producer-app")
    assert round_trip(conf, "oauth-rd") == [f"oauth-rd-{i}".encode() for i in range(3)]
    # the principal is User:producer-app, and its ACLs apply: no topic outside its prefixes
    errors = []
    producer = Producer({**conf, "message.timeout.ms": 15000})
    producer.produce("elsewhere", b"x", callback=lambda e, m: errors.append(e))
    producer.flush(20)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors


def test_refused_tokens_leave_the_broker_serving(broker, keycloak):
    cases = {
        "other issuer": keycloak.token("master", "admin-cli", password=(ADMIN, ADMIN_PASSWORD)),
        "no audience": keycloak.token(REALM, "no-audience"),
        "not a JWT": "not-a-jwt",
    }
    expiring = keycloak.token(REALM, "short-lived")
    time.sleep(3 + 1 + 1)                                   # its lifespan, the broker's skew, a margin
    cases["expired"] = expiring
    for name, token in cases.items():
        error = first_error(with_token(broker, token))
        assert error.code() == KafkaError._AUTHENTICATION and "invalid_token" in error.str(), (name, error)
    log = broker.log_text()
    for reason in ("no key with id", "audience (aud) is not one of", "not a signed JWT", "has expired"):
        assert reason in log, reason
    conf = oidc(broker, keycloak, "producer-app")
    assert round_trip(conf, "oauth-after") == [f"oauth-after-{i}".encode() for i in range(3)]
    assert "Traceback" not in broker.log_text()


def lifetime_ms(answer) -> int:
    return int(answer.session_lifetime.total_seconds() * 1000)      # kio gives a timedelta


def test_session_lasts_as_long_as_the_token(broker, keycloak):
    """SaslAuthenticate's session_lifetime_ms is the token's remaining life (KIP-368); once it
    is over, a connection that did not re-authenticate is closed."""
    from logcore.security.oauthbearer import client_message
    from logcore.wire.client import KafkaConnection, KafkaConnectionError
    host, port = broker.endpoints["OAUTH"]
    token = keycloak.token(REALM, "producer-app")
    conn = KafkaConnection(host, port, timeout_s=10).connect()
    assert conn.request(17, {"mechanism": "OAUTHBEARER"}).error_code == 0
    answer = conn.request(36, {"auth_bytes": client_message(token)})
    assert answer.error_code == 0
    assert 250_000 < lifetime_ms(answer) <= 300_000, answer      # Keycloak's tokens live 300 s
    conn.close()
    conn = KafkaConnection(host, port, timeout_s=10).connect()
    conn.request(17, {"mechanism": "OAUTHBEARER"})
    answer = conn.request(36, {"auth_bytes": client_message(keycloak.token(REALM, "short-lived"))})
    assert answer.error_code == 0 and 0 < lifetime_ms(answer) <= 3000, answer
    conn.request(3, {"topics": [], "allow_auto_topic_creation": False})
    time.sleep(lifetime_ms(answer) / 1000 + 0.3)
    with pytest.raises(KafkaConnectionError):
        conn.request(3, {"topics": [], "allow_auto_topic_creation": False})
    # RFC 7628: a refused token is answered with a JSON status, then the failure
    conn = KafkaConnection(host, port, timeout_s=10).connect()
    conn.request(17, {"mechanism": "OAUTHBEARER"})
    challenge = conn.request(36, {"auth_bytes": client_message(keycloak.token(REALM, "no-audience"))})
    assert challenge.error_code == 0 and json.loads(challenge.auth_bytes) == {"status": "invalid_token"}
    failed = conn.request(36, {"auth_bytes": b"\x01"})
    assert failed.error_code == 58 and "audience" in failed.error_message, failed


def test_librdkafka_reauthenticates_with_fresh_tokens(broker, keycloak):
    """KIP-368 with tokens that live 8 s: the broker bounds each session by its token; librdkafka
    fetches new tokens and re-authenticates before the session ends, so over 20 s of produce the
    broker never has to close an expired session and every record is delivered."""
    expired = "its SASL session expired"
    before = broker.log_text().count(expired)
    producer = Producer({**oidc(broker, keycloak, "rotating"), "message.timeout.ms": 15000})
    delivered, errors = [], []
    end, sent = time.monotonic() + 20, 0
    while time.monotonic() < end:
        producer.produce("oauth-rotating", str(sent).encode(),
                         callback=lambda e, m: errors.append(e) if e else delivered.append(m.offset()))
        sent += 1
        producer.flush(15)
        time.sleep(1)
    assert not errors and len(delivered) == sent, errors
    assert broker.log_text().count(expired) == before


def test_java_client_with_kafkas_login_handler(broker, keycloak, kafka_jars, tmp_path):
    from java_program import JVM, JavaProgram, JavaUnavailable
    from kafka_reference import kafka_unavailable
    jars = [j for j in kafka_jars.jars if j.name.startswith(("kafka-clients-", "lz4-java-", "snappy-java-",
                                                             "zstd-jni-", "slf4j-api-", "log4j-", "jose4j-",
                                                             "jackson-"))]
    try:
        program = JavaProgram.compile([HERE / "SecureClients.java"], jars, tmp_path / "classes",
                                      kafka_jars.folder / "log4j2-tools.properties")
    except JavaUnavailable as exc:
        kafka_unavailable(str(exc))
    endpoint = keycloak.token_endpoint(REALM)

    def login(client_id: str) -> dict:
        return {"bootstrap.servers": broker.bootstrap("OAUTH"), "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER", "sasl.login.callback.handler.class": LOGIN_HANDLER,
                "sasl.oauthbearer.token.endpoint.url": endpoint,
                "sasl.jaas.config": f'{OAUTH_MODULE} required clientId="{client_id}"'
                                    f' clientSecret="{client_id}-secret";'}
    cases = {"oauth": login("producer-app"), "oauth-no-audience": login("no-audience")}
    args = []
    for name, props in cases.items():
        path = tmp_path / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        args.append(f"{name}={path}")
    # Kafka 4 fetches tokens only from URLs this JVM property allows
    command = program.command(args, [*JVM, f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={endpoint}"])
    run = subprocess.run(command, capture_output=True, text=True, timeout=240)
    rows = {r["case"]: r for r in (json.loads(line) for line in run.stdout.splitlines() if line.startswith("{"))}
    assert set(rows) == set(cases), run.stderr[-4000:]
    assert rows["oauth"]["ok"] and rows["oauth"]["records"] == [f"oauth-{i}" for i in range(3)], rows["oauth"]
    refused = rows["oauth-no-audience"]["error"]
    assert refused.startswith("org.apache.kafka.common.errors.SaslAuthenticationException") \
        and "invalid_token" in refused, refused
