"""Fixtures for the cluster tests: a real ZooKeeper (tests/zookeeper_reference.py).

  zk_server     one standalone ZooKeeper for the whole session (tests/conftest.py: every folder
                shares it)
  zk_hosts      a connect string with a fresh chroot per test ("127.0.0.1:p/t-<hex>"), so tests
                share the server but never see each other's znodes (tests/conftest.py)
  zk_client     a started KazooClient on zk_hosts, stopped after the test (tests/conftest.py)
  zk_ensemble   a 3-node ensemble of its own (function scope: tests kill its members)
  zk_standalone one server of its own (function scope: tests stop it)
  stores        `make()` starts a ZooKeeperStore on zk_hosts; all are closed after the test

A test that cannot get ZooKeeper (no java, no jars, kazoo missing, the server would not start)
is skipped with the reason.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zookeeper_reference import running_zookeeper  # noqa: E402

from logcore.cluster.zookeeper_store import ZooKeeperStore  # noqa: E402


def _need_kazoo():
    return pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo)")


@pytest.fixture
def stores(zk_hosts):
    made = []

    def make():
        s = ZooKeeperStore(zk_hosts, session_timeout_ms=2000).start()
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


@pytest.fixture
def zk_ensemble(tmp_path):
    _need_kazoo()
    with running_zookeeper(tmp_path / "ensemble", 3) as cluster:
        yield cluster


@pytest.fixture
def zk_standalone(tmp_path):
    """A standalone ZooKeeper of the test's own (function scope: the test may stop it)."""
    _need_kazoo()
    with running_zookeeper(tmp_path / "standalone", 1) as cluster:
        yield cluster
