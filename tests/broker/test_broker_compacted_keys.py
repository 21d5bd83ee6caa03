"""A compacted topic refuses records without a key, as Kafka's broker does (LogValidator):
the whole batch fails with INVALID_RECORD (87), every keyless record named in the Produce
response's record_errors, and nothing of it is appended. `compact,delete` counts as compacted."""
from __future__ import annotations

import datetime
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402

from broker_helpers import connect, consume_all, create, parse_response, recv_frame, request_frame  # noqa: E402
from logcore.records.batch import build_batch  # noqa: E402
from logcore.wire.error_codes import INVALID_RECORD  # noqa: E402

T0 = int(time.time() * 1000)


def send(b, topic: str, records: list[tuple[bytes | None, bytes]], *, pause: float = 0.0,
         **conf) -> list[tuple]:
    """Produce `records` (key, value) with confluent-kafka, all in one batch (one partition);
    returns (error, offset, key) per delivery report in send order. `pause`: seconds between
    the first record and the others.

    librdkafka sends a partition's queued records once the first has waited linger.ms, or
    when flush() is called: with a linger longer than flush's timeout only flush() sends, so
    a stall of this process between two produce() calls cannot send the first records alone.
    The partition's leader is looked up first: records produced before it is known wait in
    librdkafka's unassigned queue, moved to the partition one at a time once the metadata
    arrives, and under flush() its sender may take each of them as a batch of its own."""
    settings = {"bootstrap.servers": b.bootstrap, "linger.ms": 60_000, "acks": "all"}
    settings.update(conf)
    p = Producer(settings)
    p.list_topics(topic, timeout=10)
    reports: list[tuple] = []
    for i, (key, value) in enumerate(records):
        p.produce(topic, key=key, value=value, partition=0,
                  on_delivery=lambda err, msg: reports.append((err, msg.offset(), msg.key())))
        if i == 0 and pause:
            time.sleep(pause)
    assert p.flush(30) == 0
    return reports


def high_watermark(b, topic: str) -> int:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "hw", "enable.auto.commit": False})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_confluent_producer_gets_invalid_record_for_keyless_records(broker, policy, compression):
    topic = f"table-{policy.replace(',', '-')}-{compression}"
    create(broker, topic, 1, {"cleanup.policy": policy})
    conf = {"compression.type": compression}
    ok = send(broker, topic, [(b"k%d" % i, b"v%d" % i) for i in range(5)], **conf)
    assert [(e, o) for e, o, _ in ok] == [(None, i) for i in range(5)]

    # One batch with keys and two records without one: every record of it fails, none is
    # written. librdkafka reads the response's record errors (KIP-467): the keyless records get
    # INVALID_RECORD, the others _INVALID_DIFFERENT_RECORD ("an invalid record in the same batch").
    # The pause after `a` (the producer learns the partition's leader meanwhile) would send `a`
    # alone under a linger shorter than it; with send's linger they still go as one batch.
    mixed = send(broker, topic, [(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")],
                 pause=0.3, **conf)
    assert len(mixed) == 4
    for err, _offset, key in mixed:
        assert err is not None and not err.retriable(), mixed     # every report, should one pass
        if key is None:
            assert err.code() == KafkaError.INVALID_RECORD, mixed
        else:
            assert err.code() == KafkaError._INVALID_DIFFERENT_RECORD, mixed
    # A lone keyless record, in its own batch.
    alone = send(broker, topic, [(None, b"lonely")], **conf)
    assert alone[0][0] is not None and alone[0][0].code() == KafkaError.INVALID_RECORD

    assert high_watermark(broker, topic) == 5
    got = consume_all(broker, topic, 1, 5)
    assert [(o, k, v) for _p, o, k, v, _ts in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(5)]
    # Keyed records still go through afterwards (the refusal left the partition writable).
    again = send(broker, topic, [(b"z", b"after")], **conf)
    assert again[0][:2] == (None, 5)
    assert "rejected (87)" in broker.log_text() and f"cleanup.policy={policy}" in broker.log_text()


def test_delete_policy_topic_takes_keyless_records(broker):
    create(broker, "events-delete", 1, {"cleanup.policy": "delete"})
    reports = send(broker, "events-delete", [(None, b"x"), (b"k", b"y")])
    assert [(e, o) for e, o, _ in reports] == [(None, 0), (None, 1)]


def test_produce_response_names_every_keyless_record(broker):
    """The wire answer, read with an independent protocol library (kio): Kafka's record_errors
    (v8+), one per keyless record with its index in the batch, and Kafka's summary message."""
    from kio.schema.produce.v9 import request as pr

    topic = "table-raw"
    create(broker, topic, 1, {"cleanup.policy": "compact"})
    batch = build_batch([(b"a", b"1", (), T0), (None, b"2", (), T0), (b"c", b"3", (), T0),
                         (None, b"4", (), T0), (None, b"5", (), T0)])
    frame = request_frame(0, 9, pr.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
            pr.TopicProduceData(name=topic, partition_data=(pr.PartitionProduceData(index=0, records=batch),)),)),
        correlation_id=5)
    with connect(broker) as sock:
        sock.sendall(frame)
        cid, body = parse_response(0, 9, recv_frame(sock))
    assert cid == 5
    part = body.responses[0].partition_responses[0]
    assert part.error_code == INVALID_RECORD
    assert part.base_offset == -1
    kafka_message = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (1, kafka_message), (3, kafka_message), (4, kafka_message)]
    assert part.error_message.startswith("One or more records have been rejected due to 3 record errors")
    assert high_watermark(broker, topic) == 0
