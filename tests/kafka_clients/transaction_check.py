"""TransactionCheck.java (next to this file) as the tests run it: compiled once with the shared
sources of java_check.py, then one JVM per mode against one bootstrap address; its last JSON
line is the mode's result. Its `read` mode is the independent read_committed reader of these tests."""
from __future__ import annotations

from pathlib import Path

from java_check import compile_client_check
from java_program import JavaProgram

# What the servers run with for the transaction checks: the state log fits one broker, and a
# transaction left open past its timeout is aborted within a second (Kafka checks every 10 s by default).
TRANSACTION_SETTINGS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def compile_transaction_check(kafka_jars, classes: Path) -> JavaProgram:
    return compile_client_check(kafka_jars, "TransactionCheck.java", classes)


class TransactionCheck:
    def __init__(self, program: JavaProgram, bootstrap: str):
        self.program, self.bootstrap = program, bootstrap

    def __call__(self, mode: str, *args, expect_ok: bool = True, timeout: float = 150) -> dict:
        row = self.program.json_rows([self.bootstrap, mode, *map(str, args)], timeout=timeout)[-1]
        if expect_ok:
            assert row["ok"], f"{mode} {args}: {row.get('error')}: {row.get('message')}"
        return row

    def read(self, topic: str, partitions: int, isolation: str = "read_committed") -> dict:
        """Every record up to the end offsets (the LSO under read_committed), as
        [partition, offset, key, value] lists."""
        row = self("read", topic, partitions, isolation)
        assert row["complete"], f"{topic}: the consumer did not reach the end offsets {row['end']}"
        return row
