"""Kafka's Java clients against `seglog broker`: the Kafka jars of tests/kafka_reference.py (for
kafka-clients and its codecs) and a `seglog broker` subprocess started as tests/broker/conftest.py
starts one."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402


@pytest.fixture(scope="session")
def broker_subprocess_env() -> dict:
    return broker_process.subprocess_env()


# -- transactions: the same checks against Apache Kafka and against seglog ------------------------

from kafka_reference import kafka_unavailable  # noqa: E402
from transaction_check import TRANSACTION_SETTINGS  # noqa: E402



@pytest.fixture(scope="session", params=["kafka", "seglog"])
def txn_server(request, kafka_jars, tmp_path_factory):
    """One server for the session's transaction checks (both test files): Apache Kafka (KRaft,
    single node) or a `seglog broker`, both with TRANSACTION_SETTINGS; `.bootstrap` is its
    address. Stopped by pid."""
    from kafka_reference import KafkaBroker, KafkaUnavailable
    if request.param == "kafka":
        try:
            broker = KafkaBroker.create(kafka_jars, tmp_path_factory.mktemp("kafka-txn"), TRANSACTION_SETTINGS)
        except KafkaUnavailable as exc:
            kafka_unavailable(str(exc))
        try:
            yield broker.start()
        except KafkaUnavailable as exc:
            kafka_unavailable(str(exc))
        finally:
            broker.stop()
        return
    started: list = []
    try:
        yield broker_process.start_factory(tmp_path_factory.mktemp("seglog-txn"), started)(**TRANSACTION_SETTINGS)
    finally:
        for b in started:
            b.stop()


@pytest.fixture(scope="session")
def transaction_check_program(kafka_jars, tmp_path_factory):
    """TransactionCheck.java compiled once per session (transaction_check.py runs it)."""
    from java_program import JavaUnavailable
    from transaction_check import compile_transaction_check
    try:
        return compile_transaction_check(kafka_jars, tmp_path_factory.mktemp("txn-classes"))
    except JavaUnavailable as exc:
        kafka_unavailable(str(exc))


@pytest.fixture(params=["kafka", "seglog"])
def three_brokers(request, kafka_jars, tmp_path_factory):
    """Three brokers for one test (three_brokers.py): Apache Kafka's KRaft cluster or a seglog
    cluster over ZooKeeper; every process stopped by pid afterwards."""
    from kafka_reference import KafkaUnavailable
    from three_brokers import KafkaThree, SeglogThree
    from zookeeper_reference import ZooKeeperUnavailable
    workdir = tmp_path_factory.mktemp(f"three-{request.param}")
    try:
        cluster = KafkaThree(kafka_jars, workdir) if request.param == "kafka" else SeglogThree(workdir)
    except KafkaUnavailable as exc:
        kafka_unavailable(str(exc))
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper did not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.close()
