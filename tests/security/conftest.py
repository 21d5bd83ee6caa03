"""The security tests: a soak-marked test (a Kafka broker and many tool JVMs) runs only when
selected with `-m soak`, as in tests/kafka_clients."""
from __future__ import annotations

import pytest


def pytest_runtest_setup(item):
    if item.get_closest_marker("soak") and "soak" not in (item.config.option.markexpr or ""):
        pytest.skip("a soak run (a minute or more): select it with `-m soak`")
