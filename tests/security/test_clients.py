"""Real clients on a `seglog broker` with PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, client-auth
SSL (MTLS), re-authenticating SASL (REAUTH) and expired-certificate (EXPIRED) listeners:
librdkafka (confluent-kafka), kafka-python and Kafka's Java clients produce and consume with
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; wrong passwords, untrusted CAs, expired certificates
and plaintext clients on TLS ports are refused with the errors those clients expect while the
broker goes on serving; Kafka's kafka-configs creates a SCRAM user that then logs in."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kafka_python_round_trip import kafka_python_round_trip
from secure_broker import PLAIN_MODULE, SCRAM_MODULE, jaas
from pki import STORE_PASSWORD

HERE = Path(__file__).resolve().parent
TLS_ERRORS = (KafkaError._SSL, KafkaError._TRANSPORT)


def rdkafka_cases(broker, pki) -> dict[str, dict]:
    ca = {"ssl.ca.location": str(pki.ca_pem)}
    user = lambda name, password, mech: {"sasl.mechanism": mech, "sasl.username": name,  # noqa: E731
                                         "sasl.password": password}
    return {
        "plaintext": {"bootstrap.servers": broker.bootstrap("PLAINTEXT")},
        "ssl": {"bootstrap.servers": broker.bootstrap("SSL"), "security.protocol": "SSL", **ca},
        "sasl-plaintext-plain": {"bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
                                 "security.protocol": "SASL_PLAINTEXT", **user("alice", "alice-secret", "PLAIN")},
        "sasl-plaintext-scram256": {"bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
                                    "security.protocol": "SASL_PLAINTEXT",
                                    **user("scram256", "s256-secret", "SCRAM-SHA-256")},
        "sasl-ssl-scram512": {"bootstrap.servers": broker.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
                              **ca, **user("scram512", "s512-secret", "SCRAM-SHA-512")},
        "sasl-ssl-plain": {"bootstrap.servers": broker.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
                           **ca, **user("admin", "admin-secret", "PLAIN")},
        "mtls": {"bootstrap.servers": broker.bootstrap("MTLS"), "security.protocol": "SSL", **ca,
                 "ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)},
    }


def round_trip(conf: dict, topic: str, n: int = 3) -> list[bytes]:
    """Produce n records, then read them back from offset 0 (assign: no group round trips)."""
    errors = []
    producer = Producer({**conf, "message.timeout.ms": 15000})
    for i in range(n):
        producer.produce(topic, f"{topic}-{i}".encode(), callback=lambda e, m: e and errors.append(e))
    assert producer.flush(20) == 0 and not errors, errors
    consumer = Consumer({**conf, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    return got


def first_error(conf: dict, timeout: float = 15) -> KafkaError:
    """The first error librdkafka reports for a client with `conf` (it cannot connect)."""
    errors = []
    producer = Producer({**conf, "error_cb": errors.append, "reconnect.backoff.max.ms": 1000})
    deadline = time.monotonic() + timeout
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    return errors[0]


def test_librdkafka_on_every_listener(secure_broker, pki):
    for name, conf in rdkafka_cases(secure_broker, pki).items():
        assert round_trip(conf, f"rd-{name}") == [f"rd-{name}-{i}".encode() for i in range(3)], name


def test_librdkafka_refusals_leave_the_broker_serving(secure_broker, pki):
    b = secure_broker
    wrong = first_error({"bootstrap.servers": b.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(pki.ca_pem), "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": "scram256", "sasl.password": "wrong"})
    assert wrong.code() == KafkaError._AUTHENTICATION and "invalid credentials" in wrong.str(), wrong
    wrong = first_error({"bootstrap.servers": b.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "wrong"})
    assert wrong.code() == KafkaError._AUTHENTICATION and "Invalid username or password" in wrong.str(), wrong
    untrusted = first_error({"bootstrap.servers": b.bootstrap("SSL"), "security.protocol": "SSL",
                             "ssl.ca.location": str(pki.other_ca_pem)})
    # librdkafka reports a failed certificate check as _SSL or _TRANSPORT, depending on timing
    assert untrusted.code() in TLS_ERRORS and "certificate verify failed" in untrusted.str(), untrusted
    expired = first_error({"bootstrap.servers": b.bootstrap("EXPIRED"), "security.protocol": "SSL",
                           "ssl.ca.location": str(pki.ca_pem)})
    assert expired.code() in TLS_ERRORS and "certificate verify failed" in expired.str(), expired
    late_client = first_error({"bootstrap.servers": b.bootstrap("MTLS"), "security.protocol": "SSL",
                               "ssl.ca.location": str(pki.ca_pem),
                               "ssl.certificate.location": str(pki.expired_client_cert),
                               "ssl.key.location": str(pki.expired_client_key)})
    # TLS 1.3: the client's certificate is checked after the client finished its handshake, so
    # librdkafka sees the broker close the connection ("SSL connection closed by peer")
    assert late_client.code() in TLS_ERRORS + (KafkaError._ALL_BROKERS_DOWN,), late_client
    plaintext = first_error({"bootstrap.servers": b.bootstrap("SSL")})
    assert plaintext.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), plaintext
    assert round_trip(rdkafka_cases(b, pki)["sasl-ssl-scram512"], "rd-after-refusals") == \
        [f"rd-after-refusals-{i}".encode() for i in range(3)]
    assert "Traceback" not in b.log_text()


def test_kafka_python_on_tls_and_sasl(secure_broker, pki):
    b = secure_broker
    cases = {
        "ssl": dict(bootstrap_servers=b.bootstrap("SSL"), security_protocol="SSL", ssl_cafile=str(pki.ca_pem)),
        "sasl-plain": dict(bootstrap_servers=b.bootstrap("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret"),
        "sasl-ssl-scram256": dict(bootstrap_servers=b.bootstrap("SASL_SSL"), security_protocol="SASL_SSL",
                                  ssl_cafile=str(pki.ca_pem), sasl_mechanism="SCRAM-SHA-256",
                                  sasl_plain_username="scram256", sasl_plain_password="s256-secret"),
        "mtls": dict(bootstrap_servers=b.bootstrap("MTLS"), security_protocol="SSL", ssl_cafile=str(pki.ca_pem),
                     ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key)),
    }
    for name, conf in cases.items():
        topic = f"kp-{name}"
        assert kafka_python_round_trip(conf, topic) == [f"{topic}-{i}".encode() for i in range(3)], name


@pytest.mark.soak          # Kafka's Java clients and kafka-configs JVMs, ~30 s: -m soak
def test_java_clients_and_kafka_configs(secure_broker, pki, kafka_jars, tmp_path):
    from java_program import JavaProgram, JavaUnavailable
    from kafka_reference import kafka_unavailable
    b = secure_broker
    jars = [j for j in kafka_jars.jars if j.name.startswith(("kafka-clients-", "lz4-java-", "snappy-java-",
                                                             "zstd-jni-", "slf4j-api-", "log4j-"))]
    try:
        program = JavaProgram.compile([HERE / "SecureClients.java"], jars, tmp_path / "classes",
                                      kafka_jars.folder / "log4j2-tools.properties")
    except JavaUnavailable as exc:
        kafka_unavailable(str(exc))
    trust = {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki.truststore_p12),
             "ssl.truststore.password": STORE_PASSWORD}
    admin_login = {"security.protocol": "SASL_SSL", **trust, "sasl.mechanism": "PLAIN",
                   "sasl.jaas.config": jaas(PLAIN_MODULE, username="admin", password="admin-secret")}
    cases = {
        "ssl": {"bootstrap.servers": b.bootstrap("SSL"), "security.protocol": "SSL", **trust},
        "sasl-plain": {"bootstrap.servers": b.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                       "sasl.mechanism": "PLAIN",
                       "sasl.jaas.config": jaas(PLAIN_MODULE, username="alice", password="alice-secret")},
        "sasl-ssl-scram512": {"bootstrap.servers": b.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL", **trust,
                              "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.jaas.config": jaas(SCRAM_MODULE, username="scram512", password="s512-secret")},
        "mtls": {"bootstrap.servers": b.bootstrap("MTLS"), "security.protocol": "SSL", **trust,
                 "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.client_p12),
                 "ssl.keystore.password": STORE_PASSWORD},
        "wrong-password": {"bootstrap.servers": b.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL", **trust,
                           "sasl.mechanism": "SCRAM-SHA-256",
                           "sasl.jaas.config": jaas(SCRAM_MODULE, username="scram256", password="nope")},
        "untrusted": {"bootstrap.servers": b.bootstrap("SSL"), "security.protocol": "SSL",
                      "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.other_ca_pem)},
        # the user kafka-configs creates below, over SASL_SSL as admin
        "new-user": {"bootstrap.servers": b.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL", **trust,
                     "sasl.mechanism": "SCRAM-SHA-256",
                     "sasl.jaas.config": jaas(SCRAM_MODULE, username="newbie", password="newbie-secret")},
    }
    command_config = tmp_path / "admin.properties"
    command_config.write_text("".join(f"{k}={v}\n" for k, v in admin_login.items()))
    altered = kafka_jars.run_tool(kafka_jars.first_class("org.apache.kafka.tools.ConfigCommand",
                                                         "kafka.admin.ConfigCommand"),
                                  ["--bootstrap-server", b.bootstrap("SASL_SSL"), "--command-config",
                                   str(command_config), "--alter", "--add-config", "SCRAM-SHA-256=[password=newbie-secret]",
                                   "--entity-type", "users", "--entity-name", "newbie"])
    assert altered.returncode == 0 and "Completed updating config for user newbie" in altered.stdout, \
        altered.stdout + altered.stderr
    args = []
    for name, props in cases.items():
        path = tmp_path / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        args.append(f"{name}={path}")
    run = program.run(args, timeout=240)
    rows = {r["case"]: r for r in (json.loads(line) for line in run.stdout.splitlines() if line.startswith("{"))}
    assert set(rows) == set(cases), run.stderr[-4000:]
    for name in ("ssl", "sasl-plain", "sasl-ssl-scram512", "mtls", "new-user"):
        assert rows[name]["ok"], rows[name]
        assert rows[name]["records"] == [f"{name}-{i}" for i in range(3)]
    assert rows["wrong-password"]["error"].startswith(
        "org.apache.kafka.common.errors.SaslAuthenticationException"), rows["wrong-password"]
    assert rows["untrusted"]["error"].startswith(
        "org.apache.kafka.common.errors.SslAuthenticationException"), rows["untrusted"]


def test_seglog_cli_with_command_config(secure_broker, pki, tmp_path):
    """`seglog topics/produce/consume --command-config` over SASL_SSL (SCRAM-SHA-512) and SSL."""
    import subprocess
    import sys

    import broker_spawner
    from broker_process import subprocess_env
    scram = tmp_path / "scram.properties"
    scram.write_text(f"security.protocol=SASL_SSL\nssl.truststore.type=PEM\nssl.truststore.location={pki.ca_pem}\n"
                     "sasl.mechanism=SCRAM-SHA-512\n"
                     f"sasl.jaas.config={jaas(SCRAM_MODULE, username='scram512', password='s512-secret')}\n")
    tls = tmp_path / "tls.properties"
    tls.write_text(f"security.protocol=SSL\nssl.truststore.type=PKCS12\nssl.truststore.location={pki.truststore_p12}\n"
                   f"ssl.truststore.password={STORE_PASSWORD}\n")

    def seglog(*args, stdin: bytes = b"") -> subprocess.CompletedProcess:
        return broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", *args], input=stdin,
                                  env=subprocess_env(), timeout=120, text=False)
    done = seglog("topics", "--bootstrap-server", secure_broker.bootstrap("SASL_SSL"), "--command-config", str(scram),
                  "--create", "--topic", "cli-secure", "--partitions", "1")
    assert done.stdout.decode() == "Created topic cli-secure.\n", done.stderr.decode()
    done = seglog("produce", "--bootstrap-server", secure_broker.bootstrap("SASL_SSL"), "--topic", "cli-secure",
                  "--command-config", str(scram), stdin=b"one\ntwo\n")
    assert done.returncode == 0, done.stderr.decode()
    done = seglog("consume", "--bootstrap-server", secure_broker.bootstrap("SSL"), "--topic", "cli-secure",
                  "--from-beginning", "--max-messages", "2", "--command-config", str(tls))
    assert done.stdout.decode() == "one\ntwo\n", done.stderr.decode()
    scram.write_text(scram.read_text().replace("s512-secret", "wrong"))
    done = seglog("topics", "--bootstrap-server", secure_broker.bootstrap("SASL_SSL"), "--command-config", str(scram),
                  "--list")
    assert done.returncode == 1 and "invalid credentials" in done.stderr.decode(), done.stderr.decode()


def test_seglog_reassign_partitions_with_command_config(secure_broker, pki, tmp_path, capsys):
    """`seglog reassign-partitions --command-config` over SASL_SSL: --list, and --verify clearing
    the throttles with IncrementalAlterConfigs on the same secured connections."""
    from logcore.tools.cli import main
    props = tmp_path / "scram.properties"
    props.write_text(f"security.protocol=SASL_SSL\nssl.truststore.type=PEM\nssl.truststore.location={pki.ca_pem}\n"
                     "sasl.mechanism=SCRAM-SHA-256\n"
                     f"sasl.jaas.config={jaas(SCRAM_MODULE, username='scram256', password='s256-secret')}\n")
    secured = ["--bootstrap-server", secure_broker.bootstrap("SASL_SSL"), "--command-config", str(props)]
    assert main(["topics", *secured, "--create", "--topic", "reassign-secure", "--partitions", "1"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "reassign-secure", "partition": 0,
                                                              "replicas": [0]}]}))
    capsys.readouterr()
    assert main(["reassign-partitions", *secured, "--list"]) == 0
    assert capsys.readouterr().out == "No partition reassignments found.\n"
    assert main(["reassign-partitions", *secured, "--reassignment-json-file", str(plan), "--verify"]) == 0
    assert capsys.readouterr().out == ("Status of partition reassignment:\n"
                                       "Reassignment of partition reassign-secure-0 is completed.\n\n"
                                       "Clearing broker-level throttles on broker 0\n"
                                       "Clearing topic-level throttles on topic reassign-secure\n")
