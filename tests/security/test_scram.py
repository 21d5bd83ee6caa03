"""SCRAM (RFC 5802/7677) and PLAIN exchanges, Kafka's credential strings, JAAS configs and the
security settings' checks: no broker needed."""
from __future__ import annotations

import base64

import pytest

from logcore.broker.config import BrokerConfig
from logcore.errors import InvalidConfigError
from logcore.security.authenticator import SaslAuthenticator
from logcore.wire.error_codes import SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM
from logcore.security.jaas import parse_jaas
from logcore.security.plain import PlainServer, plain_token
from logcore.security.scram import SaslFailure, ScramClient, ScramServer
from logcore.security.scram_credential import ScramCredential, salted_password


def test_rfc7677_test_vector_both_sides():
    # RFC 7677 section 3: user "user", password "pencil"
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pencil", 4096, salt)
    server = ScramServer("SCRAM-SHA-256", lambda user: cred if user == "user" else None,
                         nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.step(client.first())
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final(server_first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = server.step(final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify(server_final)
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_fail(mechanism):
    cred = ScramCredential.from_password(mechanism, "right")
    lookup = {"bob": cred}.get
    client = ScramClient(mechanism, "bob", "wrong")
    server = ScramServer(mechanism, lookup)
    with pytest.raises(SaslFailure, match="invalid credentials"):
        server.step(client.final(server.step(client.first())))
    with pytest.raises(SaslFailure, match="invalid credentials"):
        ScramServer(mechanism, lookup).step(ScramClient(mechanism, "nobody", "x").first())
    # names with , and = are escaped on the wire (RFC 5802 saslname)
    odd = ScramClient(mechanism, "a,b=c", "pw")
    assert odd.first().endswith(b"n=a=2Cb=3Dc," + odd.first().split(b",")[-1])
    server = ScramServer(mechanism, {"a,b=c": ScramCredential.from_password(mechanism, "pw")}.get)
    odd.verify(server.step(odd.final(server.step(odd.first()))))
    assert server.username == "a,b=c"


def test_credential_string_is_kafkas():
    cred = ScramCredential.from_password("SCRAM-SHA-512", "secret", 8192, b"0123456789abcdef")
    text = cred.to_config()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_config("SCRAM-SHA-512", text) == cred
    assert ScramCredential.from_salted("SCRAM-SHA-512", cred.salt, salted_password("secret", cred.salt, 8192,
                                                                                   "SCRAM-SHA-512"), 8192) == cred
    with pytest.raises(ValueError):
        ScramCredential.from_config("SCRAM-SHA-512", "salt=xx,iterations=1")


def test_plain_exchange():
    server = PlainServer({"alice": "pw"})
    assert server.step(plain_token("alice", "pw")) == b"" and server.username == "alice"
    for token, reason in ((plain_token("alice", "bad"), "Invalid username or password"),
                          (plain_token("eve", "pw"), "Invalid username or password"),
                          (b"bob\x00alice\x00pw", "authorization id"), (b"nonsense", "3 tokens")):
        with pytest.raises(SaslFailure, match=reason):
            PlainServer({"alice": "pw"}).step(token)


def test_authenticator_states():
    auth = SaslAuthenticator(("PLAIN",), {"alice": "pw"}, lambda m, u: None, reauth_ms=60_000)
    answer, close = auth.handshake(1, "SCRAM-SHA-256")
    assert close and answer["error_code"] == UNSUPPORTED_SASL_MECHANISM and answer["mechanisms"] == ["PLAIN"]
    auth = SaslAuthenticator(("PLAIN",), {"alice": "pw"}, lambda m, u: None, reauth_ms=60_000)
    assert auth.handshake(1, "PLAIN") == ({"error_code": 0, "mechanisms": ["PLAIN"]}, False)
    answer, close = auth.authenticate_response(plain_token("alice", "pw"))
    assert not close and answer["session_lifetime"] == 60_000 and str(auth.principal) == "User:alice"
    # KIP-368: a re-authentication as somebody else is refused
    auth = SaslAuthenticator(("PLAIN",), {"alice": "pw", "bob": "pw"}, lambda m, u: None)
    auth.handshake(1, "PLAIN")
    auth.authenticate_response(plain_token("alice", "pw"))
    auth.handshake(1, "PLAIN")
    answer, close = auth.authenticate_response(plain_token("bob", "pw"))
    assert close and answer["error_code"] == SASL_AUTHENTICATION_FAILED and "principals" in answer["error_message"]


def test_jaas_config():
    login = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"'
                       ' password="a\\"b" user_admin="x" user_bob=y;')
    assert login.username == "admin" and login.password == 'a"b'
    assert login.plain_users() == {"admin": "x", "bob": "y"}
    for bad in ('x required a=;', 'x maybe a="b";', 'x required a="b"'):
        with pytest.raises(InvalidConfigError):
            parse_jaas(bad)


def _config(**props):
    base = {"listeners": "PLAINTEXT://127.0.0.1:0"}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return BrokerConfig.from_props(base, source="test")


@pytest.mark.parametrize("props, message", [
    ({"listeners": "FOO://127.0.0.1:1"}, "listener FOO has no security protocol"),
    ({"listeners": "SSL://127.0.0.1:1"}, "needs a keystore"),
    ({"listeners": "SSL://127.0.0.1:1", "ssl.keystore.location": "/k", "ssl.enabled.protocols": "TLSv1.1,TLSv1.2"},
     "TLSv1.1 is not allowed"),
    ({"listeners": "SSL://127.0.0.1:1", "ssl.keystore.location": "/k", "ssl.client.auth": "sometimes"},
     "must be none, requested or required"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "OAUTHBEARER"},
     "OAUTHBEARER needs listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "GSSAPI"}, "Kerberos"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1", "listener.name.ssl.ssl.client.auth": "required"},
     "ssl is not one of the listeners"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1", "listener.name.plaintext.ssl.keystore.locatoin": "x"},
     "did you mean 'ssl.keystore.location'"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"}, "names listener PLAINTEXT twice"),
    ({"listeners": "SSL://127.0.0.1:1", "ssl.keystore.location": "/k", "zookeeper.connect": "127.0.0.1:2181"},
     "inter-broker listener PLAINTEXT is not one of the listeners"),
    ({"listeners": "SASL_SSL://127.0.0.1:1", "ssl.keystore.location": "/k", "zookeeper.connect": "127.0.0.1:2181",
      "inter.broker.listener.name": "SASL_SSL"}, "needs this broker's"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1", "advertised.listeners": "SSL://h:1"}, "not one of the listeners"),
])
def test_bad_settings_are_refused(props, message):
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_props(props, source="test")


def test_jks_and_wrong_store_password_are_refused(tmp_path):
    from logcore.security.tls_context import server_context
    with pytest.raises(InvalidConfigError, match="JKS is not supported"):
        server_context({"ssl.keystore.location": str(tmp_path / "x.jks"), "ssl.keystore.type": "JKS"}, "test")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from pki import Pki
    pki = Pki(tmp_path / "pki")
    with pytest.raises(InvalidConfigError, match="wrong ssl.keystore.password"):
        server_context({"ssl.keystore.location": str(pki.broker_p12), "ssl.keystore.password": "nope"}, "test")
    ctx = server_context({"ssl.keystore.location": str(pki.broker_p12), "ssl.keystore.password": "store-secret",
                          "ssl.client.auth": "required", "ssl.truststore.location": str(pki.truststore_p12),
                          "ssl.truststore.password": "store-secret"}, "test")
    assert ctx.verify_mode.name == "CERT_REQUIRED" and ctx.get_ca_certs()[0]["subject"]


def test_listener_prefix_wins_and_inter_broker_defaults():
    config = BrokerConfig.from_props({
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://0.0.0.0:0",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="p" user_b="p";',
    }, source="test")
    assert config.inter_broker_listener == "INTERNAL"
    assert config.security.listener("INTERNAL").mechanisms == ("PLAIN",)
    assert config.security.listener("EXTERNAL").mechanisms == ("SCRAM-SHA-512",)
    assert config.security.listener("INTERNAL").plain_users() == {"b": "p"}
    assert config.listener_warning() is None          # every interface, but SASL: authenticated
