"""min.insync.replicas does not pretend (issue 15, item 16): with one replica per partition, an
acks=all produce to a topic that wants more in-sync replicas fails with NOT_ENOUGH_REPLICAS
(error 19), as Kafka's does when the ISR is too small; acks=1 and acks=0 are unaffected."""
from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402

from broker_helpers import consume_all, create  # noqa: E402


def _send(b, topic: str, acks: str, value: bytes) -> list:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": acks, "retries": 0,
                  "enable.idempotence": False, "message.timeout.ms": 10000})
    reports = []
    p.produce(topic, value=value, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(15) == 0
    return reports


def test_acks_all_needs_min_insync_replicas(broker):
    create(broker, "isr2", 1, {"min.insync.replicas": "2"})
    create(broker, "isr1", 1)
    [(err, _)] = _send(broker, "isr2", "all", b"refused")
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
    [(err, offset)] = _send(broker, "isr2", "1", b"leader only")
    assert err is None and offset == 0
    _send(broker, "isr2", "0", b"fire and forget")
    [(err, offset)] = _send(broker, "isr1", "all", b"fine")
    assert err is None and offset == 0
    got = consume_all(broker, "isr2", 1, 2)
    assert [v for _, _, _, v, _ in got] == [b"leader only", b"fire and forget"]    # nothing of the refused one


def test_broker_default_min_insync_replicas_and_kafka_python(broker_factory):
    kafka = pytest.importorskip("kafka")
    b = broker_factory(min_insync_replicas=2)
    create(b, "inherits", 1)
    [(err, _)] = _send(b, "inherits", "all", b"refused")
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
    p = kafka.KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(kafka.errors.NotEnoughReplicasError):
            p.send("inherits", b"x").get(timeout=15)
        p1 = kafka.KafkaProducer(bootstrap_servers=b.bootstrap, acks=1)
        assert p1.send("inherits", b"y").get(timeout=15).offset == 0
        p1.close()
    finally:
        p.close()
