"""librdkafka's transactional producer (confluent-kafka) against Apache Kafka and against a
`seglog broker` (`txn_server` of conftest.py; the seglog side is skipped until seglog has a
transaction coordinator): commit, abort, zombie fencing and consume-transform-produce with the
consumer's group metadata. What was committed is read back by Kafka's Java consumer with
read_committed (TransactionCheck.java's reader) and compared exactly, offsets included.
"""
from __future__ import annotations

import pytest

from transaction_check import TransactionCheck

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(300)
T = 30          # seconds for each transactional call


@pytest.fixture(scope="module")
def check(transaction_check_program, txn_server) -> TransactionCheck:
    return TransactionCheck(transaction_check_program, txn_server.bootstrap)


def producer(bootstrap: str, txid: str, **extra) -> "ck.Producer":
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txid, "linger.ms": 5, **extra})
    p.init_transactions(T)
    return p


def send(p, topic: str, n: int, prefix: str) -> list[list]:
    """n records (key k<i>, value <prefix><i>, partition i % 2) in the open transaction, flushed:
    their [partition, offset, key, value] as acknowledged."""
    acked: list[list] = []

    def delivered(err, msg):
        assert err is None, err
        acked.append([msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()])
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"{prefix}{i}".encode(), partition=i % 2,
                  on_delivery=delivered)
    p.flush(T)
    assert len(acked) == n
    return acked


def by_position(records: list) -> list:
    return sorted(records, key=lambda r: (r[0], r[1]))


def test_commit_and_abort_read_exactly(check, txn_server):
    check("topics", "rk-tx:2")
    p = producer(txn_server.bootstrap, "rk-tx")
    p.begin_transaction()
    aborted = send(p, "rk-tx", 30, "a")
    p.abort_transaction(T)
    p.begin_transaction()
    committed = send(p, "rk-tx", 20, "c")
    p.commit_transaction(T)
    assert by_position(check.read("rk-tx", 2)["records"]) == by_position(committed)
    assert by_position(check.read("rk-tx", 2, "read_uncommitted")["records"]) == by_position(aborted + committed)


def test_zombie_is_fenced(check, txn_server):
    check("topics", "rk-fence:2")
    old = producer(txn_server.bootstrap, "rk-fence")
    old.begin_transaction()
    send(old, "rk-fence", 4, "zombie-")
    fresh = producer(txn_server.bootstrap, "rk-fence")      # bumps the epoch, aborts the old transaction
    fresh.begin_transaction()
    committed = send(fresh, "rk-fence", 4, "fresh-")
    fresh.commit_transaction(T)
    with pytest.raises(ck.KafkaException) as raised:
        old.commit_transaction(T)
    err = raised.value.args[0]
    assert err.fatal(), err
    assert err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                          ck.KafkaError.INVALID_PRODUCER_EPOCH), err
    assert by_position(check.read("rk-fence", 2)["records"]) == by_position(committed)


def test_consume_transform_produce_with_group_metadata(check, txn_server):
    check("topics", "rk-in:2", "rk-out:2")
    source = producer(txn_server.bootstrap, "rk-source")
    source.begin_transaction()
    sent = send(source, "rk-in", 40, "word-")
    source.commit_transaction(T)

    consumer = ck.Consumer({"bootstrap.servers": txn_server.bootstrap, "group.id": "rk-ctp",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed"})
    p = producer(txn_server.bootstrap, "rk-ctp")
    consumer.subscribe(["rk-in"])
    processed = 0
    try:
        while processed < len(sent):
            batch = [m for m in consumer.consume(20, timeout=1) if m.error() is None]
            if not batch:
                continue
            p.begin_transaction()
            next_offsets = {}
            for m in batch:
                p.produce("rk-out", key=m.key(), value=m.value().upper(), partition=m.partition())
                next_offsets[m.partition()] = m.offset() + 1
            # the offsets of what was processed (a position may already be past a commit marker)
            processed_offsets = [ck.TopicPartition("rk-in", part, off) for part, off in next_offsets.items()]
            p.send_offsets_to_transaction(processed_offsets,
                                          consumer.consumer_group_metadata(), T)
            p.commit_transaction(T)
            processed += len(batch)
        committed = consumer.committed(consumer.assignment(), timeout=T)
    finally:
        consumer.close()
    last = {part: max(r[1] for r in sent if r[0] == part) for part in (0, 1)}
    assert sorted((tp.partition, tp.offset) for tp in committed) == [(0, last[0] + 1), (1, last[1] + 1)]
    out = check.read("rk-out", 2)["records"]
    assert sorted((r[0], r[2], r[3]) for r in out) == sorted((r[0], r[2], r[3].upper()) for r in sent)
