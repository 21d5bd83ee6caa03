"""Apache Kafka as the reference: the jar and broker fixtures of tests/kafka_reference.py."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kafka_reference import kafka_broker_factory, kafka_jars  # noqa: E402,F401  (pytest fixtures)
