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


# -- transactions: the same checks against Apache Kafka and against seglog ------------------------

REPO = TESTS.parent
TRANSACTION_COORDINATOR = REPO / "logcore" / "coordinator" / "transaction_coordinator.py"
# What both servers run with for the transaction checks: the state log fits one broker, and a
# transaction left open past its timeout is aborted within a second (Kafka checks every 10 s by default).
TRANSACTION_SETTINGS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def transactions_landed() -> bool:
    """Whether seglog has a transaction coordinator (issue #27): until it has, the seglog side of
    the transaction checks is skipped, and the skip goes away by itself when the module lands."""
    return TRANSACTION_COORDINATOR.exists()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_transactions") and not transactions_landed():
        pytest.skip("seglog has no transaction coordinator yet (InitProducerId with transactional.id, "
                    "AddPartitionsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit: issue #27); this skip "
                    f"goes away by itself once {TRANSACTION_COORDINATOR.relative_to(REPO)} exists")


def _kafka_unavailable(reason: str):
    from kafka_reference import require_kafka
    if require_kafka():
        pytest.fail(f"Apache Kafka is required (SEGLOG_REQUIRE_KAFKA=1): {reason}")
    pytest.skip(f"Apache Kafka unavailable: {reason}")


@pytest.fixture(scope="module", params=["kafka", pytest.param("seglog", marks=pytest.mark.needs_transactions)])
def txn_server(request, kafka_jars, tmp_path_factory):
    """One server for a module's transaction checks: Apache Kafka (KRaft, single node) or a
    `seglog broker`, both with TRANSACTION_SETTINGS; `.bootstrap` is its address. Stopped by pid."""
    from kafka_reference import KafkaBroker, KafkaUnavailable
    if request.param == "kafka":
        try:
            broker = KafkaBroker.create(kafka_jars, tmp_path_factory.mktemp("kafka-txn"), TRANSACTION_SETTINGS)
        except KafkaUnavailable as exc:
            _kafka_unavailable(str(exc))
        try:
            yield broker.start()
        except KafkaUnavailable as exc:
            _kafka_unavailable(str(exc))
        finally:
            broker.stop()
        return
    started: list = []
    try:
        yield broker_fixtures._start_factory(tmp_path_factory.mktemp("seglog-txn"), started)(**TRANSACTION_SETTINGS)
    finally:
        for b in started:
            b.stop()
