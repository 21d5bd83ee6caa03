"""Apache Kafka for benchmarks: the jars, a KRaft broker and Kafka's tools from
tests/kafka_reference.py (the same code the tests use).

    from kafka_anchor import resolve_jars, KafkaBroker
    broker = KafkaBroker.create(resolve_jars(), workdir, {"log.segment.bytes": str(1 << 30)}).start()
    ...  # broker.bootstrap
    broker.stop()

Call set_broker_heap("-Xmx1G") (Kafka's default) before start() for a fair anchor.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import kafka_reference  # noqa: E402
from kafka_reference import KafkaBroker, KafkaJars, KafkaUnavailable, resolve_jars  # noqa: E402

__all__ = ["KafkaBroker", "KafkaJars", "KafkaUnavailable", "resolve_jars", "set_broker_heap"]


def set_broker_heap(heap: str) -> None:
    """JVM heap flag of brokers started afterwards, e.g. "-Xmx1G"."""
    kafka_reference.BROKER_HEAP = heap
