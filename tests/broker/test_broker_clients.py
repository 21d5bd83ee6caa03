"""Real clients against `seglog broker`: confluent-kafka (librdkafka) and kafka-python."""
from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import ConfigResource, NewTopic  # noqa: E402

from broker_helpers import _admin, consume_all, create, produce  # noqa: E402


def test_create_describe_delete_topics(broker):
    create(broker, "orders", 3, {"cleanup.policy": "compact"})
    admin = _admin(broker)
    md = admin.list_topics(timeout=10)
    assert sorted(md.topics["orders"].partitions) == [0, 1, 2]
    assert md.topics["orders"].partitions[0].leader == 0
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)
    assert "already exists" in str(err.value).lower() or "TOPIC_ALREADY_EXISTS" in str(err.value)
    with pytest.raises(KafkaException):
        admin.create_topics([NewTopic("bad-rf", 1, 3)])["bad-rf"].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == "1073741824"
    admin.delete_topics(["orders"])["orders"].result(10)
    assert "orders" not in admin.list_topics(timeout=10).topics
    assert not (broker.root / "orders-0").exists()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_acks_and_consume_with_assign(broker, acks):
    topic = f"acks-{acks}"
    create(broker, topic, 2)
    values = [b"value-%d" % i for i in range(500)]
    acked = produce(broker, topic, values, acks=acks)
    assert len(acked) == 500 and all(a[0] is None for a in acked)
    if acks != "0":
        offsets = {(p, o) for _, p, o, _ in acked}
        assert len(offsets) == 500
    got = consume_all(broker, topic, 2, 500)
    assert sorted(v for _, _, _, v, _ in got) == sorted(values)
    for p in (0, 1):
        offs = [o for pp, o, *_ in got if pp == p]
        assert offs == list(range(len(offs)))       # in order, no gaps, no duplicates


def test_idempotent_producer_many_batches_and_watermarks(broker):
    create(broker, "idem", 1)
    values = [b"x" * 100 + b"%d" % i for i in range(3000)]
    acked = produce(broker, "idem", values, **{"enable.idempotence": True, "acks": "all",
                                                 "batch.num.messages": 50})
    assert all(a[0] is None for a in acked)
    assert sorted(o for _, _, o, _ in acked) == list(range(3000))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w", "enable.auto.commit": False})
    assert c.get_watermark_offsets(TopicPartition("idem", 0), timeout=10) == (0, 3000)
    c.close()
    got = consume_all(broker, "idem", 1, 3000)
    assert [v for *_, v, _ in got] == values
    # The producer id block is persisted so that a restart never reuses an id.
    assert (broker.root / "seglog-producer-ids.json").exists()


def test_list_offsets_earliest_latest_and_by_timestamp(broker):
    create(broker, "ts", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    base = 1_700_000_000_000
    for i in range(20):
        p.produce("ts", value=b"%d" % i, timestamp=base + i * 1000)
        p.flush(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ts", "enable.auto.commit": False})
    tp = TopicPartition("ts", 0)
    assert c.get_watermark_offsets(tp, timeout=10) == (0, 20)
    found = c.offsets_for_times([TopicPartition("ts", 0, base + 7500)], timeout=10)[0]
    assert found.offset == 8
    found = c.offsets_for_times([TopicPartition("ts", 0, base)], timeout=10)[0]
    assert found.offset == 0
    after = c.offsets_for_times([TopicPartition("ts", 0, base + 10**6)], timeout=10)[0]
    assert after.offset == -1            # no record that late: the end (librdkafka's OFFSET_END)
    c.close()


def test_produce_to_unknown_partition_and_oversized_batch(broker_factory, tmp_path):
    b = broker_factory(message_max_bytes=2000, auto_create_topics_enable="false")
    create(b, "small", 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "message.max.bytes": 100000,
                  "message.timeout.ms": 5000})
    errors = []
    p.produce("small", value=b"z" * 5000, on_delivery=lambda e, m: errors.append(e))
    p.flush(15)
    assert errors and errors[0] is not None and "MSG_SIZE_TOO_LARGE" in errors[0].name()
    ok = produce(b, "small", [b"fits"])
    assert ok[0][0] is None


def test_auto_create_on_metadata(broker):
    acked = produce(broker, "auto-created", [b"a", b"b"], acks="all")
    assert [a[0] for a in acked] == [None, None]
    assert (broker.root / "auto-created-0").is_dir()


def test_kafka_python_producer_and_consumer(broker):
    kafka = pytest.importorskip("kafka")
    create(broker, "kp", 2)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=2)
    futures = [producer.send("kp", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2) for i in range(200)]
    metas = [f.get(timeout=15) for f in futures]
    producer.close()
    assert sorted((m.partition, m.offset) for m in metas) == sorted((p, o) for p in (0, 1) for o in range(100))
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                   consumer_timeout_ms=3000, fetch_max_wait_ms=100)
    tps = [kafka.TopicPartition("kp", p) for p in (0, 1)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    got = [(m.partition, m.offset, m.value) for m in consumer]
    assert sorted(v for *_, v in got) == sorted(b"v%d" % i for i in range(200))
    assert consumer.end_offsets(tps) == {tps[0]: 100, tps[1]: 100}
    consumer.close()
    # And librdkafka reads what kafka-python wrote.
    assert len(consume_all(broker, "kp", 2, 200)) == 200


def test_fetch_long_poll_wakes_on_new_data(broker):
    create(broker, "poll", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lp", "fetch.wait.max.ms": 5000,
                  "fetch.min.bytes": 1, "enable.auto.commit": False})
    c.assign([TopicPartition("poll", 0, 0)])
    c.poll(0.5)                         # the consumer is now parked in a long-poll fetch
    produce(broker, "poll", [b"wake"], acks="all")
    start = time.monotonic()
    m = None
    while m is None and time.monotonic() - start < 10:
        m = c.poll(0.1)
    elapsed = time.monotonic() - start
    c.close()
    assert m is not None and m.value() == b"wake"
    assert elapsed < 3.0                # woken by the commit, not by fetch.wait.max.ms


@pytest.mark.parametrize("topic_codec, produced, stored", [
    ("gzip", "none", "gzip"), ("uncompressed", "zstd", "none"), ("zstd", "zstd", "zstd"), ("producer", "lz4", "lz4")])
def test_topic_compression_type_recompresses_produced_batches(broker, topic_codec, produced, stored):
    """As Kafka's broker: a produced batch in another codec than the topic's compression.type is
    stored in the topic's codec, at its compression.<codec>.level; `producer` keeps the batch's."""
    from logcore.records.batch import HEADER_SIZE, iter_batches
    from logcore.records.compression import codec_of, compress, decompress

    topic = f"codec-{topic_codec}-{produced}"
    create(broker, topic, 1, {"compression.type": topic_codec, "compression.gzip.level": "1"})
    values = [b'{"n":%d,"page":"/p/%d"}' % (i, i % 89) for i in range(300)]
    acked = produce(broker, topic, values, **{"compression.type": produced, "enable.idempotence": True})
    assert all(a[0] is None for a in acked)
    assert [v for *_, v, _ in consume_all(broker, topic, 1, 300)] == values
    data = (broker.root / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    batches = [(h, data[pos + HEADER_SIZE:pos + h.size]) for pos, h in iter_batches(data)]
    assert batches and all(h.compression == codec_of(stored) for h, _ in batches)
    assert sum(h.records_count for h, _ in batches) == 300
    if topic_codec == "gzip":           # recompressed at the topic's level
        assert all(s == compress(h.compression, decompress(h.compression, s), 1) for h, s in batches)
