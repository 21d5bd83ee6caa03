"""Kafka's transactional Java producer (KIP-98, KIP-447) and Kafka's `kafka-transactions` tool,
against Apache Kafka (the reference) and against a `seglog broker`: the `txn_server` fixture of
conftest.py runs every test on both (the seglog side is skipped until seglog has a transaction
coordinator).

TransactionCheck.java (next to this file) is compiled once against the kafka-clients jar and run
once per step with a mode (commit, abort, fence, timeout, ctp, hold, read); what a read_committed
consumer sees is compared exactly with what the producer committed, offsets included.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from transaction_check import TransactionCheck

pytestmark = pytest.mark.timeout(300)

TXN_TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def check(transaction_check_program, txn_server) -> TransactionCheck:
    return TransactionCheck(transaction_check_program, txn_server.bootstrap)


def by_position(records: list) -> list:
    return sorted(records, key=lambda r: (r[0], r[1]))


def test_commit_is_read_exactly_by_read_committed(check):
    check("topics", "tx-commit:2")
    sent = check("commit", "tx-commit", "jt-commit", 40, "c")["sent"]
    committed = check.read("tx-commit", 2)
    assert by_position(committed["records"]) == by_position(sent)
    # after the commit marker the LSO is the end of each partition: 20 records and the marker
    assert committed["end"] == [21, 21]
    assert by_position(check.read("tx-commit", 2, "read_uncommitted")["records"]) == by_position(sent)


def test_abort_is_invisible_to_read_committed(check):
    check("topics", "tx-abort:2")
    aborted = check("abort", "tx-abort", "jt-abort", 30, "a")["sent"]
    committed = check("commit", "tx-abort", "jt-abort", 20, "c")["sent"]
    assert by_position(check.read("tx-abort", 2)["records"]) == by_position(committed)
    # a read_uncommitted reader sees the aborted records too (the markers are never returned)
    assert by_position(check.read("tx-abort", 2, "read_uncommitted")["records"]) == \
        by_position(aborted + committed)


def test_zombie_is_fenced(check):
    check("topics", "tx-fence:1")
    row = check("fence", "tx-fence", "jt-fence")
    assert row["fresh_committed"] is True
    assert row["old_commit_error"] == "ProducerFencedException", row
    assert row["old_send_error"] == "ProducerFencedException", row
    values = [r[3] for r in check.read("tx-fence", 1)["records"]]
    assert values == ["fresh-committed"]        # not the zombie's open or late records
    everything = [r[3] for r in check.read("tx-fence", 1, "read_uncommitted")["records"]]
    assert "zombie-open" in everything and "zombie-late" not in everything


def test_transaction_timeout_aborts_an_open_transaction(check):
    check("topics", "tx-timeout:1")
    row = check("timeout", "tx-timeout", "jt-timeout", TXN_TIMEOUT_MS)
    assert row["lso_while_open"] == 0                     # held at the open transaction's first record
    assert row["lso_after_expiry"] == 2, row              # the record and the coordinator's abort marker
    assert row["expired_after_ms"] < TXN_TIMEOUT_MS + 15_000, row
    assert row["commit_error"] in ("ProducerFencedException", "InvalidProducerEpochException"), row
    assert check.read("tx-timeout", 1)["records"] == []


def test_consume_transform_produce_with_group_metadata(check):
    check("topics", "tx-ctp-in:2", "tx-ctp-out:2")
    sent = check("commit", "tx-ctp-in", "jt-ctp-source", 60, "word-")["sent"]
    row = check("ctp", "tx-ctp-in", "tx-ctp-out", "jt-ctp-group", "jt-ctp", 60)
    assert row["processed"] == 60 and row["aborted_txns"] == 1, row
    # the group's offsets were committed inside the transactions: one past each partition's last record
    last = {p: max(r[1] for r in sent if r[0] == p) for p in (0, 1)}
    assert row["group_offsets"] == [[0, last[0] + 1], [1, last[1] + 1]]
    out = check.read("tx-ctp-out", 2)["records"]
    # each input record exactly once, upper-cased, in its partition (the aborted round left nothing)
    assert sorted((r[0], r[2], r[3]) for r in out) == sorted((r[0], r[2], r[3].upper()) for r in sent)


def transactions_tool(kafka_jars, bootstrap: str, *args: str) -> list[dict]:
    """Kafka's kafka-transactions (TransactionsCommand): its table as one dict per row."""
    proc = kafka_jars.run_tool("org.apache.kafka.tools.TransactionsCommand",
                               ["--bootstrap-server", bootstrap, *args], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    header = lines[0]
    return [dict(zip(header, line)) for line in lines[1:]]


def test_kafka_transactions_tool_lists_and_describes(check, kafka_jars, txn_server):
    check("topics", "tx-tool:2")
    check("commit", "tx-tool", "jt-tool-done", 4, "t")
    listed = {row["TransactionalId"]: row for row in transactions_tool(kafka_jars, txn_server.bootstrap, "list")}
    assert listed["jt-tool-done"]["TransactionState"] == "CompleteCommit"

    done = transactions_tool(kafka_jars, txn_server.bootstrap, "describe", "--transactional-id", "jt-tool-done")
    assert [(r["TransactionalId"], r["TransactionState"]) for r in done] == [("jt-tool-done", "CompleteCommit")]

    # a transaction held open: Ongoing, with the partitions it wrote to
    holder = check.program.popen([txn_server.bootstrap, "hold", "tx-tool", "jt-tool-open"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert '"open":true' in holder.stdout.readline()
        open_rows = transactions_tool(kafka_jars, txn_server.bootstrap, "describe", "--transactional-id",
                                      "jt-tool-open")
        assert len(open_rows) == 1 and open_rows[0]["TransactionState"] == "Ongoing", open_rows
        assert sorted(open_rows[0]["TopicPartitions"].split(",")) == ["tx-tool-0", "tx-tool-1"]
    finally:
        holder.stdin.close()            # the holder aborts and exits
        holder.wait(60)
        out, err = holder.stdout.read(), holder.stderr.read()
    assert '"aborted":true' in out, err[-2000:]
    after = transactions_tool(kafka_jars, txn_server.bootstrap, "describe", "--transactional-id", "jt-tool-open")
    assert after[0]["TransactionState"] == "CompleteAbort"
    # the held transaction's records were aborted: only the committed ones are read
    assert by_position(check.read("tx-tool", 2)["records"]) == [[0, 0, "k0", "t0"], [0, 1, "k2", "t2"],
                                                                [1, 0, "k1", "t1"], [1, 1, "k3", "t3"]]


@pytest.mark.soak
@pytest.mark.timeout(600)
def test_coordinator_killed_mid_transaction(transaction_check_program, three_brokers, tmp_path):
    """The transaction coordinator's broker SIGKILLed while a transaction is open: the commit
    completes on the new coordinator and read_committed reads exactly what was sent, once."""
    check = TransactionCheck(transaction_check_program, three_brokers.bootstrap)
    check("topics", "RF=3", "tx-failover:2")
    with open(tmp_path / "failover.stderr", "w") as err:     # the client's warnings while a broker is down
        proc = check.program.popen([three_brokers.bootstrap, "failover", "tx-failover", "jt-failover", "50"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    try:
        first = json.loads(proc.stdout.readline())
        coordinator = first["coordinator"]
        three_brokers.kill(coordinator)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        proc.wait(240)
        rows = [json.loads(line) for line in proc.stdout.read().splitlines() if line.startswith("{")]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert rows and rows[-1]["ok"], (rows, (tmp_path / "failover.stderr").read_text()[-3000:])
    result = rows[-1]
    assert result["coordinator_after"] != coordinator
    assert by_position(check.read("tx-failover", 2)["records"]) == by_position(result["sent"])
    three_brokers.restart(coordinator)
    assert by_position(check.read("tx-failover", 2)["records"]) == by_position(result["sent"])
