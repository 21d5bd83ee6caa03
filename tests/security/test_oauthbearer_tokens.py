"""OAUTHBEARER's parts, quickly and without an issuer process: the token checks (access_token.py)
and the key-set cache (jwks.py) against a JWKS served over HTTP on 127.0.0.1 by the test, with
keys made here (key rotation, refresh, an unreachable issuer: what Keycloak in
test_oauthbearer.py cannot be made to do quickly); RFC 7628's client message; the settings'
refusals; the session lifetime of KIP-368; kafka-python on a broker with tokens minted here."""
from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from logcore.errors import InvalidConfigError
from logcore.security.access_token import InvalidToken, OAuthBearerSettings, TokenValidator, VALIDATOR_CLASSES
from logcore.security.authenticator import SaslAuthenticator
from logcore.security.client_security import ClientSecurity
from logcore.security.jwks import UNKNOWN_KID_INTERVAL_S, JwksCache
from logcore.security.oauthbearer import client_message, parse_client_message
from logcore.security.scram import SaslFailure
from logcore.security.security_config import SecurityConfig

from kafka_python_round_trip import kafka_python_round_trip

ISSUER = "https://issuer.test/realm"


class Issuer:
    """A key set served at http://127.0.0.1:<port>/certs; `keys` may be replaced (rotation)."""

    def __init__(self):
        self.keys: dict[str, object] = {}
        self.requests = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                issuer.requests += 1
                body = json.dumps({"keys": [issuer.jwk(kid, key) for kid, key in issuer.keys.items()]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/certs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def jwk(kid: str, key) -> dict:
        alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
        algorithm = jwt.algorithms.RSAAlgorithm if alg == "RS256" else jwt.algorithms.ECAlgorithm
        return {**json.loads(algorithm.to_jwk(key.public_key())), "kid": kid, "use": "sig", "alg": alg}

    def sign(self, kid: str, key=None, **claims) -> str:
        key = key or self.keys[kid]
        now = int(time.time())
        body = {"iss": ISSUER, "aud": ["kafka"], "sub": "alice", "iat": now, "exp": now + 300,
                "scope": "read write", **claims}
        alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=alg, headers={"kid": kid})


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def issuer():
    i = Issuer()
    yield i
    i.server.shutdown()
    i.server.server_close()


def settings(url: str, **more) -> OAuthBearerSettings:
    return OAuthBearerSettings.parse({"sasl.server.callback.handler.class": VALIDATOR_CLASSES[0],
                                      "sasl.oauthbearer.jwks.endpoint.url": url,
                                      "sasl.oauthbearer.expected.audience": "kafka",
                                      "sasl.oauthbearer.expected.issuer": ISSUER,
                                      "sasl.oauthbearer.clock.skew.seconds": "0", **more}, "test")


def test_tokens_checked_against_the_issuers_keys(issuer):
    issuer.keys = {"r1": RSA_KEY, "e1": EC_KEY}
    v = TokenValidator(settings(issuer.url))
    token = v.validate(issuer.sign("r1"))
    assert (token.principal_name, token.scopes) == ("alice", ("read", "write"))
    assert v.validate(issuer.sign("e1", scope=["a", "b"])).scopes == ("a", "b")          # ES256, scope list
    refusals = {
        "does not verify": issuer.sign("r1", key=OTHER_RSA),                             # forged with kid r1
        "has expired": issuer.sign("r1", exp=int(time.time()) - 5, iat=int(time.time()) - 60),
        "not valid yet": issuer.sign("r1", nbf=int(time.time()) + 60),
        "audience": issuer.sign("r1", aud="someone-else"),
        "issuer (iss)": issuer.sign("r1", iss="https://elsewhere.test"),
        '"exp"': issuer.sign("r1", exp=None),
        "'sub' claim": issuer.sign("r1", sub=None),
        "scope": issuer.sign("r1", scope=7),
        "algorithm 'HS256'": jwt.encode({"sub": "x"}, "a-shared-secret-of-32-bytes-or-more!", algorithm="HS256"),
        "algorithm 'none'": jwt.encode({"sub": "x"}, None, algorithm="none"),
        "not a signed JWT": "garbage",
    }
    for reason, bad in refusals.items():
        with pytest.raises(InvalidToken, match=reason.replace("(", r"\(").replace(")", r"\)")):
            v.validate(bad)
    assert issuer.requests == 1                         # one fetch served every check


def test_jwks_rotation_refresh_and_an_unreachable_issuer(issuer):
    issuer.keys, issuer.requests = {"r1": RSA_KEY}, 0
    now = [1000.0]
    cache = JwksCache(issuer.url, refresh_ms=60_000, clock=lambda: now[0])
    v = TokenValidator(settings(issuer.url), cache)
    v.validate(issuer.sign("r1"))
    issuer.keys = {"r1": RSA_KEY, "r2": OTHER_RSA}              # the issuer rotates in a new key
    assert v.validate(issuer.sign("r2")).principal_name == "alice"   # unknown kid: fetched at once
    assert issuer.requests == 2
    now[0] += UNKNOWN_KID_INTERVAL_S
    with pytest.raises(InvalidToken, match="no key with id 'made-up'"):
        v.validate(issuer.sign("made-up", key=OTHER_RSA))
    with pytest.raises(InvalidToken, match="no key with id 'made-up-too'"):
        v.validate(issuer.sign("made-up-too", key=OTHER_RSA))
    assert issuer.requests == 3                                  # made-up kids: one fetch per interval
    issuer.keys = {"r2": OTHER_RSA}                              # r1 retired
    v.validate(issuer.sign("r1", key=RSA_KEY))                   # still cached
    now[0] += 61                                                 # refresh.ms passed
    with pytest.raises(InvalidToken, match="no key with id 'r1'"):
        v.validate(issuer.sign("r1", key=RSA_KEY))
    later = [0.0]                                                # retries' sleeps pass on this clock
    unreachable = JwksCache("http://127.0.0.1:9/certs", 60_000, 100, 1000, clock=lambda: later[0],
                            sleep=lambda s: later.__setitem__(0, later[0] + s))
    gone = TokenValidator(settings("http://127.0.0.1:9/certs"), unreachable)
    with pytest.raises(InvalidToken, match="keys are unavailable"):
        gone.validate(issuer.sign("r2", key=OTHER_RSA))
    assert unreachable.fetches == 4                              # after 0, 0.1, 0.3, 0.7 s; then 1 s is over
    with pytest.raises(InvalidToken, match="keys are unavailable"):        # at once, no new try yet
        gone.validate(issuer.sign("r2", key=OTHER_RSA))
    assert unreachable.fetches == 4
    later[0] += 1
    with pytest.raises(InvalidToken, match="keys are unavailable"):
        gone.validate(issuer.sign("r2", key=OTHER_RSA))
    assert unreachable.fetches == 8


def test_client_first_message():
    assert parse_client_message(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01") == ("", "abc.def.ghi")
    assert parse_client_message(client_message("t.o.k", "bob", {"traceId": "123"})) == ("bob", "t.o.k")
    for bad, why in ((b"auth=Bearer x\x01\x01", "GS2 header"), (b"n,,\x01\x01", "auth=Bearer"),
                     (b"n,,\x01auth=Basic x\x01\x01", "auth=Bearer"), (b"n,,\x01auth=Bearer x\x01", "end with"),
                     (b"p=tls,,\x01auth=Bearer x\x01\x01", "channel binding"), (b"\xff", "UTF-8"),
                     (b"n,,\x01auth=Bearer x\x01a=1\x01a=2\x01\x01", "twice")):
        with pytest.raises(SaslFailure, match=why):
            parse_client_message(bad)


def test_authenticator_session_lifetime_and_rfc7628_failure(issuer):
    issuer.keys = {"r1": RSA_KEY}
    v = TokenValidator(settings(issuer.url))
    exp = int(time.time()) + 100

    def login(reauth_ms: int, token: str) -> SaslAuthenticator:
        auth = SaslAuthenticator(("OAUTHBEARER",), {}, lambda m, u: None, reauth_ms, oauthbearer=v)
        assert auth.handshake(1, "OAUTHBEARER")[0]["error_code"] == 0
        answer, close = auth.authenticate_response(client_message(token))
        assert answer["error_code"] == 0 and not close
        return auth
    token = issuer.sign("r1", exp=exp)
    assert 95_000 < login(0, token).session_lifetime_ms() <= 100_000       # the token's life alone
    assert login(5_000, token).session_lifetime_ms() == 5_000              # connections.max.reauth.ms first
    assert 95_000 < login(900_000, token).session_lifetime_ms() <= 100_000
    assert str(login(0, token).principal) == "User:alice"
    auth = SaslAuthenticator(("OAUTHBEARER",), {}, lambda m, u: None, 0, oauthbearer=v)
    auth.handshake(1, "OAUTHBEARER")
    challenge, close = auth.authenticate_response(client_message(issuer.sign("r1", aud="x")))
    assert challenge["auth_bytes"] == b'{"status":"invalid_token"}' and not close
    failed, close = auth.authenticate_response(b"\x01")
    assert failed["error_code"] == 58 and close and "audience" in failed["error_message"]
    auth = SaslAuthenticator(("OAUTHBEARER",), {}, lambda m, u: None, 0, oauthbearer=v)
    auth.handshake(1, "OAUTHBEARER")
    failed, close = auth.authenticate_response(client_message(issuer.sign("r1"), authzid="mallory"))
    assert failed["error_code"] == 58 and "authorization id" in failed["error_message"]


def _config(**props):
    base = {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT",
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN"}
    return SecurityConfig.from_props({**base, **props}, ("PLAINTEXT://127.0.0.1:0", "OAUTH://127.0.0.1:0"), (),
                                     cluster=False, where="test")


def test_settings_refused_with_reasons():
    handler = {"listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": VALIDATOR_CLASSES[0]}
    good = _config(**handler, **{"sasl.oauthbearer.jwks.endpoint.url": "https://issuer.test/certs",
                                 "listener.name.oauth.oauthbearer.sasl.oauthbearer.sub.claim.name": "azp",
                                 "sasl.oauthbearer.sub.claim.name": "client_id"})
    assert good.listener("OAUTH").oauthbearer.sub_claim == "azp"           # the listener's own wins
    assert good.listener("PLAINTEXT").oauthbearer is None
    refused = {
        "unsecured validator": {"sasl.oauthbearer.jwks.endpoint.url": "https://issuer.test/certs"},
        "'com.example.Mine' is not supported": {
            "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": "com.example.Mine",
            "sasl.oauthbearer.jwks.endpoint.url": "https://issuer.test/certs"},
        "needs sasl.oauthbearer.jwks.endpoint.url": handler,
        "clock.skew.seconds": {**handler, "sasl.oauthbearer.jwks.endpoint.url": "https://issuer.test/certs",
                               "sasl.oauthbearer.clock.skew.seconds": "-1"},
        "does not enable OAUTHBEARER": {"listener.name.oauth.sasl.enabled.mechanisms": "PLAIN",
                                        "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.issuer": "x"},
        "no listener enables OAUTHBEARER": {"listener.name.oauth.sasl.enabled.mechanisms": "PLAIN",
                                            "sasl.oauthbearer.expected.issuer": "x"},
    }
    for why, props in refused.items():
        with pytest.raises(InvalidConfigError, match=why):
            _config(**props)
    with pytest.raises(InvalidConfigError, match="do not fetch OAuth tokens"):
        _config(**handler, **{"sasl.oauthbearer.jwks.endpoint.url": "https://issuer.test/certs",
                              "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"})
    with pytest.raises(InvalidConfigError, match="do not fetch OAuth tokens"):
        ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
                                       "client.properties")


# ---------------------------------------------------------------- kafka-python on a broker
@pytest.fixture(scope="module")
def oauth_broker(issuer, pki, tmp_path_factory):
    """One broker for this module's client tests: OAUTHBEARER on SASL_PLAINTEXT and SASL_SSL,
    tokens checked against `issuer`'s key set."""
    from in_process_broker import InProcessBroker
    base = tmp_path_factory.mktemp("oauth-broker")
    running = InProcessBroker({
        "listeners": "PLAINTEXT://127.0.0.1:0,OAUTH://127.0.0.1:0,OAUTH_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT,OAUTH_SSL:SASL_SSL",
        "log.dirs": str(base / "logs"), "num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
        "ssl.keystore.location": str(pki.broker_p12), "ssl.keystore.password": "store-secret",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        **{f"listener.name.{name}.oauthbearer.sasl.server.callback.handler.class": VALIDATOR_CLASSES[0]
           for name in ("oauth", "oauth_ssl")},
        "sasl.oauthbearer.jwks.endpoint.url": issuer.url, "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": ISSUER, "sasl.oauthbearer.clock.skew.seconds": "0",
    })
    try:
        yield running
    finally:
        running.stop()


def kafka_python_login(running, pki, listener: str, token: str) -> dict:
    """kafka-python's settings for `listener`, presenting `token` (its sasl_oauth_token_provider)."""
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider
    except ImportError:                                  # kafka-python 2.x keeps it here
        from kafka.sasl.oauth import AbstractTokenProvider

    class Minted(AbstractTokenProvider):
        def token(self):
            return token
    conf = dict(bootstrap_servers=running.listener(listener), sasl_mechanism="OAUTHBEARER",
                sasl_oauth_token_provider=Minted(), security_protocol="SASL_PLAINTEXT")
    if listener == "OAUTH_SSL":
        conf.update(security_protocol="SASL_SSL", ssl_cafile=str(pki.ca_pem))
    return conf


def test_kafka_python_with_minted_tokens(oauth_broker, issuer, pki, caplog):
    """kafka-python (its sasl_oauth_token_provider) produces and consumes over SASL_PLAINTEXT and
    SASL_SSL with a token signed by the issuer; an expired one is refused."""
    kafka = pytest.importorskip("kafka")
    from kafka import KafkaProducer
    issuer.keys = {"r1": RSA_KEY}
    for listener in ("OAUTH", "OAUTH_SSL"):
        conf = kafka_python_login(oauth_broker, pki, listener, issuer.sign("r1", sub="kp-app"))
        topic = f"kp-oauth-{listener.lower()}"
        assert kafka_python_round_trip(conf, topic) == [f"{topic}-{i}".encode() for i in range(3)], listener
    # An expired token: refused with the reason (kafka-python logs the SaslAuthenticate error,
    # then gives up bootstrapping).
    now = int(time.time())
    expired = kafka_python_login(oauth_broker, pki, "OAUTH", issuer.sign("r1", exp=now - 5, iat=now - 60))
    # On a loaded machine a 2 s bootstrap can end before the first SaslAuthenticate answer
    # arrives (the client then logs only its timeout), so it is tried a few times.
    for _attempt in range(4):
        with caplog.at_level(logging.WARNING, logger="kafka"), pytest.raises(kafka.errors.KafkaTimeoutError):
            KafkaProducer(**expired, bootstrap_timeout_ms=2000)
        refusals = [r.getMessage() for r in caplog.records if r.name.startswith("kafka.")]
        if any("SaslAuthenticationFailedError" in m for m in refusals):
            break
    assert any("SaslAuthenticationFailedError" in m and "the token has expired (exp)" in m for m in refusals), refusals
