"""Tiered storage's per-topic figures and SASL logins per listener on the broker's Prometheus
endpoint (logcore/metrics/remote_storage_metrics.py, authentication_metrics.py).

One broker in this process with a PLAINTEXT and a SASL_PLAINTEXT (PLAIN) listener and tiered
storage on a local folder: a topic with remote.storage.enable=true and small segments is produced
to until the remote log manager has copied segments, and the copy counters match what the remote
folder holds; a login with a wrong password and one with the right one move the failed and
successful counters of the SASL listener by one each."""
from __future__ import annotations

import socket
import struct
import time

import pytest

from logcore.security.jaas import PLAIN_MODULE
from logcore.wire.protocol import build, decode_response, encode_request, request_type

pytest.importorskip("confluent_kafka")
pytest.importorskip("prometheus_client.parser")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from in_process_broker import InProcessBroker  # noqa: E402
from test_broker_metrics import scrape, value  # noqa: E402

KAFKA = "kafka_server_brokertopicmetrics_"
AIVEN = "aiven_kafka_server_tieredstorage_remote_storage_manager_metrics_"
PASSWORD = "metrics-secret"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("remote-metrics")
    running = InProcessBroker({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required user_alice="{PASSWORD}";',
        "log.dirs": str(base / "logs"), "num.partitions": "1", "metrics.listener": "http://127.0.0.1:0",
        "remote.log.storage.system.enable": "true", "rsm.config.storage.url": str(base / "remote"),
        "remote.log.manager.task.interval.ms": "100", "log.retention.check.interval.ms": "60000"})
    try:
        yield running.server, base
    finally:
        running.stop()


def _bootstrap(server, listener: str) -> str:
    host, port = server.bound[listener]
    return f"{host}:{port}"


def _scrape_until(server, name: str, at_least: float, timeout: float = 20.0, **labels):
    """A scrape in which `name{labels}` has reached `at_least`."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(server)
        if value(samples, name, **labels) >= at_least:
            return samples
        assert time.monotonic() < deadline, f"{name}{labels} stayed below {at_least}"
        time.sleep(0.1)


def test_remote_copies_are_counted_per_topic(served):
    server, base = served
    bootstrap = _bootstrap(server, "PLAINTEXT")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic("tiered", 1, 1, config={"remote.storage.enable": "true", "segment.bytes": "4096",
                                             "local.retention.bytes": "-1"})
    admin.create_topics([topic])["tiered"].result(15)
    # batches well under segment.bytes, so that segments roll every few batches
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 1500})
    failed = []
    for i in range(200):
        producer.produce("tiered", value=b"v%04d" % i + b"x" * 100,
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
        producer.poll(0)
    assert producer.flush(15) == 0 and failed == []

    samples = _scrape_until(server, KAFKA + "remotecopyrequests_total", 2, topic="tiered")
    copies = value(samples, KAFKA + "remotecopyrequests_total", topic="tiered")
    copied = value(samples, KAFKA + "remotecopybytes_total", topic="tiered")
    # Each copy ships a whole sealed local segment: at least its batches, at most segment.bytes
    # plus a batch, and a copy takes some time.
    assert 2 * 1000 < copied <= copies * (4096 + 1200)
    assert value(samples, AIVEN + "segment_copy_time_ms_total", topic="tiered") > 0
    assert value(samples, AIVEN + "segment_copy_time_max", topic="tiered") > 0
    assert value(samples, KAFKA + "remotecopyerrors_total", topic="tiered") == 0
    assert value(samples, KAFKA + "remotefetcherrors_total", topic="tiered") == 0
    # the figures are the remote tier's own (what the broker's tier recorded)
    stats = server.broker.root.remote_tier().metrics.topic("tiered")
    assert stats.copy_segments >= copies and stats.copy_bytes >= copied
    assert any((base / "remote").rglob("*")), "nothing in the remote folder"


def _login(bootstrap: str, password: str) -> int:
    """One PLAIN login on the SASL listener, by hand (SaslHandshake v1, SaslAuthenticate v2: one
    attempt, where a client library would retry): SaslAuthenticate's error code."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        stream = sock.makefile("rwb")

        def call(key: int, version: int, body: dict):
            stream.write(encode_request(key, version, 1, "metrics-test", build(request_type(key, version), body)))
            stream.flush()
            size = struct.unpack(">i", stream.read(4))[0]
            return decode_response(key, version, stream.read(size))[1]

        assert call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        token = b"\0alice\0" + password.encode()
        return call(36, 2, {"auth_bytes": token}).error_code


def test_sasl_logins_are_counted_per_listener(served):
    server, _ = served
    bootstrap = _bootstrap(server, "SASL_PLAINTEXT")
    failed = "kafka_server_socketservermetrics_failed_authentication_total"
    succeeded = "kafka_server_socketservermetrics_successful_authentication_total"
    assert _login(bootstrap, "wrong") == 58                         # SASL_AUTHENTICATION_FAILED
    samples = scrape(server)
    assert value(samples, failed, listener="SASL_PLAINTEXT") == 1
    assert value(samples, succeeded, listener="SASL_PLAINTEXT") == 0
    assert _login(bootstrap, PASSWORD) == 0
    samples = scrape(server)
    assert value(samples, failed, listener="SASL_PLAINTEXT") == 1
    assert value(samples, succeeded, listener="SASL_PLAINTEXT") == 1
    assert value(samples, failed, listener="PLAINTEXT") == 0
