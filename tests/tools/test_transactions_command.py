"""`seglog transactions` (list, describe, describe-producers, find-hanging, abort) through main(),
and Kafka 4.1's own kafka-transactions (TransactionsCommand) on the same `seglog broker`: each
aborts one of the two hanging transactions of tests/hanging_transaction.py's root."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from hanging_transaction import HANGING, OPEN, PLAIN, TOPIC, write_hanging_root  # noqa: E402

from logcore.tools.cli import main  # noqa: E402
from logcore.wire.api_keys import LIST_OFFSETS  # noqa: E402
from logcore.wire.client import KafkaConnection  # noqa: E402
from logcore.wire.list_offsets import LATEST_TIMESTAMP  # noqa: E402

sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402

TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("txn-command")
    write_hanging_root(base / "logs")
    started: list = []
    b = broker_process.start_factory(base, started)(**{"transaction.state.log.num.partitions": 3,
                                                         "offsets.topic.num.partitions": 3})
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "cmd-done", "linger.ms": 1})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("committed", value=b"v", partition=0)
    p.commit_transaction(15)
    del p           # destroyed now, not after the broker's stop (it would retry its port)
    yield b
    for x in started:
        x.stop()


def run(capsys, b, *args) -> tuple[int, list[list[str]], str]:
    code = main(["transactions", "--bootstrap-server", b.bootstrap, *args])
    captured = capsys.readouterr()
    return code, [line.split("\t")[:-1] for line in captured.out.splitlines()], captured.err


def table(rows: list[list[str]]) -> list[dict]:
    header = [h.strip() for h in rows[0]]
    return [dict(zip(header, (c.strip() for c in row))) for row in rows[1:]]


def last_stable_offset(b, partition: int) -> int:
    """ListOffsets(latest, read_committed): held at an open transaction's first offset."""
    with KafkaConnection(b.host, b.port, timeout_s=10).connect() as conn:
        body = conn.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": partition, "timestamp": LATEST_TIMESTAMP}]}]})
    return int(body.topics[0].partitions[0].offset)


def test_list_and_describe(capsys, broker):
    code, rows, err = run(capsys, broker, "list")
    assert code == 0, err
    # Kafka's layout: every cell padded to its column, then a tab
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    listed = table(rows)
    assert [(r["TransactionalId"], r["Coordinator"], r["TransactionState"]) for r in listed] == \
        [("cmd-done", "0", "CompleteCommit")]
    code, rows, err = run(capsys, broker, "describe", "--transactional-id", "cmd-done")
    assert code == 0, err
    [row] = table(rows)
    assert row["CoordinatorId"] == "0" and row["ProducerId"] == listed[0]["ProducerId"]
    assert (row["TransactionState"], row["TransactionTimeoutMs"], row["TopicPartitions"]) == \
        ("CompleteCommit", "60000", "")
    code, _, err = run(capsys, broker, "describe", "--transactional-id", "nobody")
    assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in err and "`nobody`" in err


def test_describe_producers_find_hanging_and_abort(capsys, broker):
    pid, epoch = HANGING[0]
    code, rows, err = run(capsys, broker, "describe-producers", "--topic", TOPIC, "--partition", "0")
    assert code == 0, err
    [row] = table(rows)
    assert (row["ProducerId"], row["ProducerEpoch"], row["LatestCoordinatorEpoch"], row["LastSequence"],
            row["CurrentTransactionStartOffset"]) == (str(pid), str(epoch), "-1", str(OPEN - 1), str(PLAIN))
    code, rows, err = run(capsys, broker, "find-hanging", "--broker-id", "0")
    assert code == 0, err
    hanging = {(r["Topic"], r["Partition"]): r for r in table(rows)}
    assert set(hanging) == {(TOPIC, "0"), (TOPIC, "1")}
    assert hanging[(TOPIC, "0")]["StartOffset"] == str(PLAIN) and hanging[(TOPIC, "0")]["Duration(min)"] == "60"
    code, rows, err = run(capsys, broker, "find-hanging", "--topic", TOPIC, "--partition", "1",
                          "--max-transaction-timeout", "61")
    assert code == 0 and table(rows) == [], err             # younger than 61 minutes

    assert last_stable_offset(broker, 0) == PLAIN
    code, _, err = run(capsys, broker, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "1")
    assert code == 1 and "Could not find any open transactions starting at offset 1" in err
    code, rows, err = run(capsys, broker, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", str(PLAIN))
    assert code == 0 and rows == [], err
    code, rows, err = run(capsys, broker, "describe-producers", "--topic", TOPIC, "--partition", "0")
    assert table(rows)[0]["CurrentTransactionStartOffset"] == "None"
    # the LSO is the end again: past the aborted records and the ABORT marker
    assert last_stable_offset(broker, 0) == PLAIN + OPEN + 1
    code, rows, err = run(capsys, broker, "find-hanging", "--topic", TOPIC)
    assert [(r["Partition"]) for r in table(rows)] == ["1"]


def test_kafka_transactions_tool_aborts_a_hanging_transaction(capsys, broker):
    """Kafka's own kafka-transactions, run against the seglog broker: describe-producers and
    find-hanging agree with `seglog transactions`, and its abort (WriteTxnMarkers to the leader)
    ends partition 1's hanging transaction."""
    import kafka_reference
    try:
        jars = kafka_reference.resolve_jars()
    except (kafka_reference.KafkaUnavailable, OSError) as exc:
        pytest.skip(f"Apache Kafka unavailable: {exc}")

    def kafka(*args):
        proc = jars.run_tool(TRANSACTIONS, ["--bootstrap-server", broker.bootstrap, *args], timeout=120)
        return proc.returncode, [line.split("\t")[:-1] for line in proc.stdout.splitlines()], proc.stderr

    ours = run(capsys, broker, "describe-producers", "--topic", TOPIC, "--partition", "1")
    theirs = kafka("describe-producers", "--topic", TOPIC, "--partition", "1")
    assert theirs[0] == 0, theirs[2][-2000:]
    assert theirs[1] == ours[1]                              # the same table, byte for byte
    code, rows, err = kafka("find-hanging", "--topic", TOPIC, "--partition", "1")
    assert code == 0, err[-2000:]
    [row] = table(rows)
    assert (row["ProducerId"], row["StartOffset"]) == (str(HANGING[1][0]), str(PLAIN))
    assert last_stable_offset(broker, 1) == PLAIN
    code, _, err = kafka("abort", "--topic", TOPIC, "--partition", "1", "--start-offset", str(PLAIN))
    assert code == 0, err[-2000:]
    assert last_stable_offset(broker, 1) == PLAIN + OPEN + 1
