"""Kafka's Java clients against `seglog broker`: the Kafka jars of tests/kafka_reference.py (for
kafka-clients and its codecs) and a `seglog broker` subprocess started as tests/broker/conftest.py
starts one."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from kafka_reference import kafka_jars  # noqa: E402,F401  (pytest fixture)

# tests/broker/conftest.py is a conftest (not importable by name next to this one): load it under
# its own module name for its broker start-up.
_spec = importlib.util.spec_from_file_location("seglog_broker_fixtures", TESTS / "broker" / "conftest.py")
broker_fixtures = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = broker_fixtures
_spec.loader.exec_module(broker_fixtures)


@pytest.fixture(scope="module")
def seglog_broker(tmp_path_factory):
    """One `seglog broker` for the module, stopped by its pid afterwards."""
    started: list = []
    yield broker_fixtures._start_factory(tmp_path_factory.mktemp("seglog-broker"), started)()
    for b in started:
        b.stop()


@pytest.fixture(scope="session")
def broker_subprocess_env() -> dict:
    return broker_fixtures._env()
