"""Fetches over TLS read the log's bytes at the positions asked for. TLS encrypts in user space,
so a fetched range of a segment is read and sent through the TLS transport instead of sendfile;
reading it must not depend on the file position the segment's descriptors share (a consumer
reading from offset 0 after another one had read the segment got 0 bytes and its connection
closed: librdkafka's 0018 over SASL_SSL)."""
from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")

TOPIC = "tls-fetch"
COUNT, SIZE = 300, 1000         # ~300 KB in one segment: several fetches per consumer


def _read_all(conf: dict, group: str) -> list[bytes]:
    consumer = ck.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "fetch.max.bytes": 1_000_000, "message.max.bytes": 100_000,
                            "max.partition.fetch.bytes": 100_000})
    values: list[bytes] = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while len(values) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_consumers_over_tls_read_a_segment_from_its_start_one_after_another(secure_broker, pki):
    plain = {"bootstrap.servers": secure_broker.bootstrap("PLAINTEXT")}
    producer = ck.Producer(plain)
    expected = [f"{i:06d}".encode() + b"x" * (SIZE - 6) for i in range(COUNT)]
    for value in expected:
        producer.produce(TOPIC, value)
    assert producer.flush(30) == 0
    tls = {"bootstrap.servers": secure_broker.bootstrap("SSL"), "security.protocol": "SSL",
           "ssl.ca.location": str(pki.ca_pem)}
    for group in ("first", "second", "third"):
        assert _read_all(tls, group) == expected, group
    assert "closing the connection" not in secure_broker.log_text()
