"""Spark's Kafka security options on the connector's broker path: `kafka.security.protocol`,
`kafka.ssl.*` (PEM and PKCS12 stores, client certificates) and `kafka.sasl.*` (PLAIN, SCRAM),
on the secure broker of tests/security (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL and client-auth
SSL listeners). A Spark batch write and read over SASL_SSL with SCRAM-SHA-512, a wrong password
failing the query with the login error, and what cannot be applied refused by name."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from logcore.errors import InvalidConfigError
from logcore.wire.client import KafkaError
from pyspark_seglog.broker_client import BrokerClient
from pyspark_seglog.kafka_security import KafkaSecurity
from pyspark_seglog.sink_options import parse_sink_options
from pyspark_seglog.source_options import check_option_names, parse_source_options

SECURITY = Path(__file__).resolve().parents[1] / "security"
sys.path.insert(0, str(SECURITY))
from pki import STORE_PASSWORD, Pki  # noqa: E402
import secure_broker as secure  # noqa: E402  (tests/security's broker with every listener)

SASL_SSL_SCRAM = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    base = tmp_path_factory.mktemp("secure-broker")
    b = secure.start_broker(base, secure.broker_props(pki, base / "logs"))
    try:
        secure.add_scram_users(b.bootstrap("PLAINTEXT"))
        yield b
    finally:
        b.stop()


def scram512(password: str = "s512-secret") -> str:
    return secure.jaas(secure.SCRAM_MODULE, username="scram512", password=password)


def metadata_brokers(bootstrap: str, options: dict) -> dict:
    """Metadata through a BrokerClient secured as the options say (the connector's path)."""
    security = KafkaSecurity.from_options(options, has_bootstrap=True)
    with BrokerClient(bootstrap, security=security.client(), retry_timeout=5) as client:
        client.metadata(None)
        return client.brokers


def test_every_protocol_through_the_connectors_client(broker, pki):
    cases = {
        "SSL": {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PKCS12",
                "kafka.ssl.truststore.location": str(pki.truststore_p12),
                "kafka.ssl.truststore.password": STORE_PASSWORD},
        "SASL_PLAINTEXT": {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
                           "kafka.sasl.jaas.config": secure.jaas(secure.PLAIN_MODULE, username="alice",
                                                                 password="alice-secret")},
        "SASL_SSL": {**SASL_SSL_SCRAM, "kafka.sasl.mechanism": "SCRAM-SHA-256",
                     "kafka.sasl.jaas.config": secure.jaas(secure.SCRAM_MODULE, username="scram256",
                                                           password="s256-secret"),
                     "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(pki.ca_pem)},
        # client certificates (a PKCS12 keystore) on the listener that requires them
        "MTLS": {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PEM",
                 "kafka.ssl.truststore.location": str(pki.ca_pem), "kafka.ssl.keystore.type": "PKCS12",
                 "kafka.ssl.keystore.location": str(pki.client_p12),
                 "kafka.ssl.keystore.password": STORE_PASSWORD,
                 "kafka.ssl.endpoint.identification.algorithm": "https"},
    }
    for listener, options in cases.items():
        brokers = metadata_brokers(broker.bootstrap(listener), options)
        assert [(a.host, a.port) for a in brokers.values()] == [broker.endpoints[listener]], listener
    # without its certificate the client-auth listener refuses the handshake
    with pytest.raises(KafkaError):
        metadata_brokers(broker.bootstrap("MTLS"), {k: v for k, v in cases["MTLS"].items()
                                                    if "keystore" not in k})


def test_spark_write_and_read_over_sasl_ssl_scram_sha_512(spark, broker, pki):
    bootstrap = broker.bootstrap("SASL_SSL")
    written = [(f"k{i}", f"v{i}") for i in range(50)]
    (spark.createDataFrame(written, "key string, value string").write.format("seglog")
     .option("kafka.bootstrap.servers", bootstrap).options(**SASL_SSL_SCRAM)
     .option("kafka.sasl.jaas.config", scram512())
     .option("kafka.ssl.truststore.type", "PEM").option("kafka.ssl.truststore.location", str(pki.ca_pem))
     .option("topic", "sec-spark").mode("append").save())

    def read(bootstrap: str, **options) -> list[tuple[str, str]]:
        df = (spark.read.format("seglog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "sec-spark").option("readFrom", "brokers").options(**options).load())
        return sorted((bytes(r.key).decode(), bytes(r.value).decode()) for r in df.select("key", "value").collect())

    secured = read(bootstrap, **SASL_SSL_SCRAM, **{
        "kafka.sasl.jaas.config": scram512(), "kafka.ssl.truststore.type": "PKCS12",
        "kafka.ssl.truststore.location": str(pki.truststore_p12), "kafka.ssl.truststore.password": STORE_PASSWORD})
    assert secured == sorted(written)

    with pytest.raises(Exception, match="SASL SCRAM-SHA-512 login as scram512 failed"):
        read(bootstrap, **SASL_SSL_SCRAM, **{"kafka.sasl.jaas.config": scram512("wrong"),
                                             "kafka.ssl.truststore.type": "PEM",
                                             "kafka.ssl.truststore.location": str(pki.ca_pem)})


def test_sink_wrong_password_fails_with_the_login_error(broker, pki):
    from pyspark_seglog.broker_sink import check_guarantee
    opts = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap("SASL_SSL"), "topic": "t",
                               **SASL_SSL_SCRAM, "kafka.sasl.jaas.config": scram512("wrong"),
                               "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(pki.ca_pem)})
    with pytest.raises(KafkaError, match="SASL SCRAM-SHA-512 login as scram512 failed") as err:
        with BrokerClient(opts.bootstrap_servers, security=opts.security.client()) as client:
            check_guarantee(client, opts)
    assert err.value.code == 58          # SASL_AUTHENTICATION_FAILED: not retried


@pytest.mark.parametrize("options, message", [
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER is not supported"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI"}, "GSSAPI"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS",
      "kafka.ssl.truststore.location": "/t.jks"}, "JKS is not supported"),
    ({"kafka.sasl.kerberos.service.name": "kafka"}, "kafka.sasl.kerberos.service.name is not supported"),
    ({"kafka.ssl.keymanager.algorithm": "SunX509"}, "kafka.ssl.keymanager.algorithm is not supported"),
    ({"kafka.security.protocol": "TLS"}, "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
      "kafka.sasl.jaas.config": secure.jaas(secure.SCRAM_MODULE, username="u", password="p")},
     "PLAIN logs in with org.apache.kafka.common.security.plain.PlainLoginModule"),
    ({"kafka.security.protocol": "PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"}, "does not use SASL"),
])
def test_what_cannot_be_applied_is_refused_by_name(options, message):
    source = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t", **options}
    with pytest.raises(InvalidConfigError, match=message):
        parse_source_options(source, streaming=False)
    with pytest.raises(InvalidConfigError, match=message):
        parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t", **options})


def test_security_needs_the_bootstrap_servers_and_plaintext_is_accepted(tmp_path):
    with pytest.raises(InvalidConfigError, match="secure the connections through kafka.bootstrap.servers"):
        parse_source_options({"path": str(tmp_path), "subscribe": "t", "kafka.security.protocol": "SSL"},
                             streaming=False)
    check_option_names({"kafka.security.protocol": "plaintext", "subscribe": "t"})
    opts = parse_sink_options({"kafka.security.protocol": "PLAINTEXT", "kafka.bootstrap.servers": "127.0.0.1:9092",
                               "topic": "t"})
    assert opts.security.client() is None
    assert "secret" not in repr(parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.security.protocol": "SASL_PLAINTEXT",
         "kafka.sasl.mechanism": "PLAIN",
         "kafka.sasl.jaas.config": secure.jaas(secure.PLAIN_MODULE, username="u", password="secret")},
        streaming=False))
