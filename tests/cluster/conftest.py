"""Fixtures for the cluster tests: a real ZooKeeper (tests/zookeeper_reference.py).

  zk_server     one standalone ZooKeeper for the whole session (started on first use)
  zk_hosts      a connect string with a fresh chroot per test ("127.0.0.1:p/t-<hex>"), so tests
                share the server but never see each other's znodes
  zk_client     a started KazooClient on zk_hosts, stopped after the test
  zk_ensemble   a 3-node ensemble of its own (function scope: tests kill its members)
  zk_standalone one server of its own (function scope: tests stop it)

A test that cannot get ZooKeeper (no java, no jars, kazoo missing, the server would not start)
is skipped with the reason.
"""
from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zookeeper_reference import running_zookeeper  # noqa: E402

SESSION_TIMEOUT = 2.0     # seconds; the servers run with tickTime 500 ms (1 s .. 10 s allowed)


def _need_kazoo():
    return pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo)")


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory):
    _need_kazoo()
    with running_zookeeper(tmp_path_factory.mktemp("zk")) as cluster:
        yield cluster


@pytest.fixture
def zk_hosts(zk_server):
    from kazoo.client import KazooClient
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    c = KazooClient(hosts=zk_server.connect_string, timeout=SESSION_TIMEOUT)
    c.start(timeout=15)
    c.ensure_path(chroot)
    c.stop()
    c.close()
    return zk_server.connect_string + chroot


@pytest.fixture
def zk_client(zk_hosts):
    from kazoo.client import KazooClient
    c = KazooClient(hosts=zk_hosts, timeout=SESSION_TIMEOUT)
    c.start(timeout=15)
    yield c
    c.stop()
    c.close()


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
