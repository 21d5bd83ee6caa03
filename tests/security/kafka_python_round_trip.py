"""kafka-python (a pure-Python client) through a secured listener: produce a few records to a
topic, then read them back from the start."""
from __future__ import annotations


def kafka_python_round_trip(conf: dict, topic: str, count: int = 3) -> list[bytes]:
    """Produce `count` records `<topic>-<i>` with kafka-python's producer under `conf` (its
    keyword arguments: bootstrap servers, security), and the values its consumer reads back
    from partition 0's start."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    producer = KafkaProducer(**conf)
    for i in range(count):
        producer.send(topic, f"{topic}-{i}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(**conf, consumer_timeout_ms=10000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = [m.value for _, m in zip(range(count), consumer)]
    consumer.close()
    return got
