"""The security tests' fixtures: the certificates (pki.py) and a broker with every kind of
listener (secure_broker.py), one per module."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "kafka_clients")]

from pki import Pki  # noqa: E402
from secure_broker import SecureBroker, add_scram_users, broker_props, start_broker  # noqa: E402


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, pki) -> SecureBroker:
    base = tmp_path_factory.mktemp("secure-broker")
    broker = start_broker(base, broker_props(pki, base / "logs"))
    try:
        add_scram_users(broker.bootstrap("PLAINTEXT"))
        yield broker
    finally:
        broker.stop()
