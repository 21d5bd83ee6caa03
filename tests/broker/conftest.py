"""Broker fixtures: a `seglog broker` subprocess on a free loopback port, over a tmp log root
(tests/broker_process.py starts it).

`broker_factory(root)` starts one and returns a RunningBroker; every broker a test started is
stopped (SIGTERM to the process id it started, SIGKILL if it does not exit) when the test ends.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from broker_process import RunningBroker, start_factory, subprocess_env  # noqa: E402


@pytest.fixture
def broker_env() -> dict:
    """The environment a `seglog` subprocess of a test runs with (this checkout first)."""
    return subprocess_env()


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers for one test (restarts, kills, special settings)."""
    started: list[RunningBroker] = []
    yield start_factory(tmp_path, started)
    for b in started:
        b.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> RunningBroker:
    """One broker shared by a module's tests (each test uses its own topics)."""
    started: list[RunningBroker] = []
    yield start_factory(tmp_path_factory.mktemp("broker"), started)()
    for b in started:
        b.stop()
