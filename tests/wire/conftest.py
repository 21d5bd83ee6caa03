"""Fixtures of the wire tests: a `seglog broker` subprocess (started as tests/broker/conftest.py
starts one) and Apache Kafka's KRaft broker of tests/kafka_reference.py (skipped without it)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS / "broker"))

sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402


@pytest.fixture(scope="module")
def kafka(kafka_shared):
    """Apache Kafka's broker (KRaft, node 1) the session shares (tests/conftest.py)."""
    return kafka_shared


@pytest.fixture
def seglog_broker_factory(tmp_path):
    """Start `seglog broker`s for one test (to stop or kill them); all stopped by pid afterwards."""
    started: list = []
    yield broker_process.start_factory(tmp_path, started)
    for b in started:
        b.stop()
