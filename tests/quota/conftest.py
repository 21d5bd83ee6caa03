"""Fixtures of the quota tests: ZooKeeper comes from tests/conftest.py (the session's); the seglog
cluster harness (tests/cluster) and Apache Kafka's jars and broker (tests/kafka_reference.py)."""
from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS / "cluster"))

