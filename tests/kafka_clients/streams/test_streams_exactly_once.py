"""Kafka Streams with processing.guarantee=exactly_once_v2, from Maven, as a user runs it: a
stateful word count (WordCountApp.java: groupBy, a repartition topic, a counting store with its
changelog topic, an output topic), its input produced by librdkafka's idempotent producer, its
output read with read_committed by TransactionCheck.java's reader and compared with the exact
expected counts: each word's committed output is 1, 2, ..., n.

- one broker, in the normal suite (about 10 s on Kafka, Streams reaching RUNNING in about 4 s):
  Apache Kafka (KRaft) and seglog (`txn_server` of conftest.py; the seglog side is skipped until
  seglog has a transaction coordinator);
- three brokers under faults, behind the `soak` marker (about 55 s on Kafka): one broker
  SIGKILLed and restarted and the application instance SIGKILLed and restarted while input
  arrives, on Apache Kafka's KRaft cluster and on a seglog cluster over ZooKeeper
  (`three_brokers` of conftest.py).
"""
from __future__ import annotations

import signal
import time

import pytest

from kafka_reference import kafka_unavailable
from transaction_check import TransactionCheck
from word_count import (WordCountInstance, compile_word_count, counts_by_word, expected_counts, input_lines,
                        produce_lines, wait_for_counts)

PARTITIONS = 3


@pytest.fixture(scope="session")
def word_count_program(kafka_jars, tmp_path_factory):
    from java_program import JavaUnavailable
    from kafka_reference import KafkaUnavailable, resolve_streams_jars
    try:
        jars = resolve_streams_jars(kafka_jars.version)
        return compile_word_count(jars, tmp_path_factory.mktemp("streams-classes"),
                                  kafka_jars.folder / "log4j2-tools.properties")
    except (KafkaUnavailable, JavaUnavailable) as exc:
        kafka_unavailable(str(exc))


def exact(expected: dict[str, int]) -> dict[str, list[int]]:
    return {word: list(range(1, n + 1)) for word, n in expected.items()}


@pytest.mark.timeout(300)
def test_word_count_exactly_once_one_broker(word_count_program, transaction_check_program, txn_server, tmp_path):
    reader = TransactionCheck(transaction_check_program, txn_server.bootstrap)
    reader("topics", f"wc-in:{PARTITIONS}", f"wc-out:{PARTITIONS}")
    lines = input_lines(0, 3000)
    expected = expected_counts(lines)
    produce_lines(txn_server.bootstrap, "wc-in", lines[:1500])
    app = WordCountInstance(word_count_program, txn_server.bootstrap, "wc-one", "wc-in", "wc-out", tmp_path)
    try:
        startup = app.start()
        print(f"Kafka Streams reached RUNNING in {startup:.1f} s")
        produce_lines(txn_server.bootstrap, "wc-in", lines[1500:])     # input arriving while it runs
        t0 = time.monotonic()
        wait_for_counts(reader, "wc-out", PARTITIONS, expected)
        print(f"all input counted {time.monotonic() - t0:.1f} s after the last line was produced")
    finally:
        app.stop(signal.SIGTERM)
    got = counts_by_word(reader.read("wc-out", PARTITIONS)["records"])
    assert got == exact(expected), app.log_tail()


# -- the fault version: 3 brokers (the three_brokers fixture of conftest.py) -----------------------

@pytest.mark.soak
@pytest.mark.timeout(900)
def test_word_count_exactly_once_through_broker_and_instance_kills(word_count_program, transaction_check_program,
                                                                  three_brokers, tmp_path):
    bootstrap = three_brokers.bootstrap
    reader = TransactionCheck(transaction_check_program, bootstrap)
    reader("topics", "RF=3", f"wc-in:{PARTITIONS}", f"wc-out:{PARTITIONS}")
    lines = input_lines(0, 8000)
    chunks = [lines[i:i + 2000] for i in range(0, len(lines), 2000)]
    expected = expected_counts(lines)
    app = WordCountInstance(word_count_program, bootstrap, "wc-three", "wc-in", "wc-out", tmp_path, 3)
    timings = {}
    try:
        t0 = time.monotonic()
        timings["startup"] = app.start()
        produce_lines(bootstrap, "wc-in", chunks[0])
        time.sleep(2)                                   # mid-processing
        three_brokers.kill(2)
        produce_lines(bootstrap, "wc-in", chunks[1])    # retried to the new leaders by the idempotent producer
        time.sleep(2)
        three_brokers.restart(2)
        app.stop(signal.SIGKILL)                        # the instance dies with transactions open
        produce_lines(bootstrap, "wc-in", chunks[2])
        timings["restart"] = app.start()                # same state folder: fences its old self, restores
        produce_lines(bootstrap, "wc-in", chunks[3])
        wait_for_counts(reader, "wc-out", PARTITIONS, expected, timeout=300)
        timings["total"] = time.monotonic() - t0
    finally:
        app.stop(signal.SIGTERM)
    print("timings (s):", {k: round(v, 1) for k, v in timings.items()})
    got = counts_by_word(reader.read("wc-out", PARTITIONS)["records"])
    assert got == exact(expected), app.log_tail()
