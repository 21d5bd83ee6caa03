"""Fixtures of the quota tests, borrowed from their home folders: ZooKeeper (tests/cluster), the
seglog cluster harness, Apache Kafka's jars and broker (tests/kafka_reference.py)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS / "cluster"))

_spec = importlib.util.spec_from_file_location("seglog_cluster_fixtures_quota", TESTS / "cluster" / "conftest.py")
_cluster_fixtures = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _cluster_fixtures
_spec.loader.exec_module(_cluster_fixtures)
zk_server = _cluster_fixtures.zk_server

from kafka_reference import kafka_broker_factory, kafka_jars  # noqa: E402,F401  (pytest fixtures)
