"""Transactions against `seglog broker` with real clients: librdkafka's (confluent-kafka)
transactional producer (commit, abort, read_committed vs read_uncommitted consumers,
send_offsets_to_transaction and a read_committed group resuming from them, zombie fencing of
two producers sharing a transactional id, a transaction aborted by its timeout, a broker
SIGKILLed mid-transaction and restarted), kafka-python's transactional producer, and the
produce-side check (KIP-890 part 1) over the raw protocol."""
from __future__ import annotations

import datetime
import signal
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402

from broker_helpers import connect, create, parse_response, recv_frame  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from java_transactions import JavaTransactions, check_java_rows  # noqa: E402
from transactional_reads import read_values  # noqa: E402

from logcore.coordinator import transaction_log as TL  # noqa: E402
from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.records.batch import build_batch  # noqa: E402
from logcore.wire.protocol import encode_request  # noqa: E402

FAST = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
        "group.min.session.timeout.ms": 100}


def _producer(b, tid: str, **conf) -> Producer:
    settings = {"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 1}
    settings.update(conf)
    p = Producer(settings)
    p.init_transactions(15)
    return p


def _read(b, topic: str, partitions: int, isolation: str, *, expect: list | None = None, timeout: float = 20) -> list:
    return read_values(b.bootstrap, topic, partitions, isolation, expect=expect, timeout=timeout)


def _send(p: Producer, topic: str, values: list[bytes], partitions: int) -> None:
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    p.poll(0)


def _commit(p: Producer, topic: str, values: list[bytes], partitions: int) -> None:
    """One transaction of `values` (round robin over the partitions), committed."""
    p.begin_transaction()
    _send(p, topic, values, partitions)
    p.commit_transaction(15)


def _leave_open(p: Producer, topic: str, values: list[bytes], partitions: int) -> None:
    """A transaction of `values` sent (flushed) and left open."""
    p.begin_transaction()
    _send(p, topic, values, partitions)
    p.flush(10)


def test_commit_abort_and_isolation_levels(broker_factory):
    b = broker_factory(**FAST)
    create(b, "tx", 3)
    p = _producer(b, "tx-basic")
    _commit(p, "tx", [b"c%d" % i for i in range(30)], 3)
    _leave_open(p, "tx", [b"a%d" % i for i in range(12)], 3)
    p.abort_transaction(15)
    _commit(p, "tx", [b"d%d" % i for i in range(6)], 3)
    committed = sorted([b"c%d" % i for i in range(30)] + [b"d%d" % i for i in range(6)])
    assert _read(b, "tx", 3, "read_committed", expect=committed) == committed
    assert _read(b, "tx", 3, "read_uncommitted") == sorted(committed + [b"a%d" % i for i in range(12)])
    # An open transaction holds read_committed readers at its first offset (the LSO).
    _leave_open(p, "tx", [b"open%d" % i for i in range(3)], 3)
    assert _read(b, "tx", 3, "read_committed") == committed
    p.commit_transaction(15)
    final = sorted(committed + [b"open%d" % i for i in range(3)])
    assert _read(b, "tx", 3, "read_committed", expect=final) == final
    b.stop()
    # The markers and state are Kafka's records in the root.
    with LogRoot.open(str(b.root)) as root:
        part = TL.partition_for("tx-basic", 3)
        log = root.log(TL.TOPIC, part)
        states = [TL.parse_value(r.value).state.kafka_name for r in log.read_records(0)]
    assert states[:4] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert states[-1] == "CompleteCommit"


def test_send_offsets_then_group_resumes_read_committed(broker_factory):
    b = broker_factory(**FAST)
    create(b, "src", 2)
    create(b, "dst", 2)
    p0 = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(40):
        p0.produce("src", value=b"s%d" % i, partition=i % 2)
    p0.flush(10)

    def consumer():
        return Consumer({"bootstrap.servers": b.bootstrap, "group.id": "eos", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 3000, "heartbeat.interval.ms": 100, "fetch.wait.max.ms": 50})

    def process(c, p, count: int, commit: bool) -> list[bytes]:
        taken = []
        p.begin_transaction()
        deadline = time.monotonic() + 15
        while len(taken) < count and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                taken.append(m.value())
                p.produce("dst", value=b"out-" + m.value(), partition=m.partition())
        assert len(taken) == count
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 15)
        if commit:
            p.commit_transaction(15)
        else:
            p.abort_transaction(15)
        return taken

    c = consumer()
    c.subscribe(["src"])
    p = _producer(b, "eos-1")
    first = process(c, p, 10, commit=True)
    aborted = process(c, p, 10, commit=False)
    c.close()
    # A new member of the group resumes after what was committed, not after the aborted batch.
    c = consumer()
    c.subscribe(["src"])
    rest = process(c, p, 30, commit=True)
    c.close()
    assert sorted(first + rest) == sorted(b"s%d" % i for i in range(40))
    assert set(aborted) <= set(rest)
    want = sorted(b"out-" + v for v in first + rest)
    assert _read(b, "dst", 2, "read_committed", expect=want) == want


def test_zombie_producer_is_fenced(broker_factory):
    b = broker_factory(**FAST)
    create(b, "z", 2)
    old = _producer(b, "shared-id")
    _leave_open(old, "z", [b"zombie%d" % i for i in range(4)], 2)
    new = _producer(b, "shared-id")          # aborts the old epoch's open transaction
    _commit(new, "z", [b"new%d" % i for i in range(4)], 2)
    with pytest.raises(KafkaException) as info:
        old.produce("z", value=b"late", partition=0)
        old.commit_transaction(15)
    assert info.value.args[0].fatal(), info.value
    want = sorted(b"new%d" % i for i in range(4))
    assert _read(b, "z", 2, "read_committed", expect=want) == want


def test_transaction_timeout_aborts(broker_factory):
    b = broker_factory(**FAST, transaction_max_timeout_ms=2000,
                       transaction_abort_timed_out_transaction_cleanup_interval_ms=100)
    create(b, "slow", 1)
    with pytest.raises(KafkaException) as info:        # above transaction.max.timeout.ms
        _producer(b, "too-long", **{"transaction.timeout.ms": 5000})
    assert "timeout" in str(info.value).lower()
    p = _producer(b, "slow-tx", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce("slow", value=b"never")
    p.flush(10)
    time.sleep(2.0)                                     # the coordinator aborts it meanwhile
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert _read(b, "slow", 1, "read_committed") == []
    assert _read(b, "slow", 1, "read_uncommitted") == [b"never"]
    # The LSO moved past the aborted transaction: a new producer of the same id commits.
    p2 = _producer(b, "slow-tx", **{"transaction.timeout.ms": 2000})
    p2.begin_transaction()
    p2.produce("slow", value=b"later")
    p2.commit_transaction(15)
    assert _read(b, "slow", 1, "read_committed", expect=[b"later"]) == [b"later"]


def test_broker_killed_mid_transaction_then_recovery(broker_factory):
    b = broker_factory(**FAST)
    create(b, "crash", 2)
    p = _producer(b, "crash-tx")
    _commit(p, "crash", [b"c%d" % i for i in range(6)], 2)
    _leave_open(p, "crash", [b"open%d" % i for i in range(6)], 2)
    b.stop(signal.SIGKILL)
    del p
    b2 = broker_factory(b.root, **FAST)
    # The restarted coordinator knows the id and its open transaction: a new producer's
    # init_transactions aborts it (fencing the old epoch) and goes on.
    p2 = _producer(b2, "crash-tx")
    _commit(p2, "crash", [b"after%d" % i for i in range(4)], 2)
    expected = sorted([b"c%d" % i for i in range(6)] + [b"after%d" % i for i in range(4)])
    assert _read(b2, "crash", 2, "read_committed", expect=expected) == expected


def test_kafka_python_transactional_producer(broker_factory):
    kafka = pytest.importorskip("kafka")
    if not hasattr(kafka.KafkaProducer, "init_transactions"):
        pytest.skip("this kafka-python has no transactional producer")
    b = broker_factory(**FAST)
    create(b, "kp", 2)
    p = kafka.KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="kp-tx")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(5):
            p.send("kp", value=b"k%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(3):
            p.send("kp", value=b"x%d" % i, partition=i % 2)
        p.flush()
        p.abort_transaction()
    finally:
        p.close(timeout=5)
    want = sorted(b"k%d" % i for i in range(5))
    assert _read(b, "kp", 2, "read_committed", expect=want) == want
    kc = kafka.KafkaConsumer(bootstrap_servers=b.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    kc.assign([kafka.TopicPartition("kp", 0), kafka.TopicPartition("kp", 1)])
    seen = sorted(m.value for m in kc)
    kc.close()
    assert seen == sorted(b"k%d" % i for i in range(5))


def _produce_frame(tid: str | None, topic: str, partition: int, batch: bytes) -> bytes:
    return encode_request(0, 9, 1, "raw", {"transactional_id": tid, "acks": -1, "timeout": datetime.timedelta(seconds=5),
                                "topic_data": [{"name": topic, "partition_data": [
                                    {"index": partition, "records": batch}]}]})


def _produce_error(b, frame: bytes) -> int:
    with connect(b) as s:
        s.sendall(frame)
        _, body = parse_response(0, 9, recv_frame(s))
    return int(body.responses[0].partition_responses[0].error_code)


def test_produce_checks_the_transaction(broker_factory):
    """KIP-890 part 1: a transactional batch is accepted only for a partition added to its
    producer's ongoing transaction; a transactional batch needs the request's transactional id."""
    b = broker_factory(**FAST)
    create(b, "v", 2)
    p = _producer(b, "verify-tx")
    p.begin_transaction()
    p.produce("v", value=b"in", partition=0)
    p.flush(10)                         # partition 0 is in the transaction, partition 1 is not
    with LogRoot.open(str(b.root)) as root:
        log = root.log(TL.TOPIC, TL.partition_for("verify-tx", 3))
        latest = [TL.parse_value(r.value) for r in log.read_records(0, isolation="read_uncommitted")][-1]
    pid, epoch = latest.producer_id, latest.producer_epoch
    batch = build_batch([(None, b"sneaky", (), int(time.time() * 1000))], producer_id=pid, producer_epoch=epoch,
                        base_sequence=0, is_transactional=True)
    assert _produce_error(b, _produce_frame("verify-tx", "v", 1, batch)) == 48       # INVALID_TXN_STATE
    assert _produce_error(b, _produce_frame(None, "v", 1, batch)) == 48
    older = build_batch([(None, b"old", (), int(time.time() * 1000))], producer_id=pid, producer_epoch=epoch - 1,
                        base_sequence=0, is_transactional=True) if epoch > 0 else None
    if older is not None:
        assert _produce_error(b, _produce_frame("verify-tx", "v", 0, older)) == 47   # INVALID_PRODUCER_EPOCH
    p.commit_transaction(15)
    assert _read(b, "v", 2, "read_uncommitted") == [b"in"]


# ------------------------------------------------------------------ Kafka's Java producer

def test_java_transactional_producer(broker_factory, tmp_path):
    program = JavaTransactions(tmp_path)
    b = broker_factory(**FAST)
    create(b, "jt", 2)
    create(b, "jin", 2)
    p0 = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(4):
        p0.produce("jin", value=b"in%d" % i, partition=i % 2)
    p0.flush(10)
    check_java_rows(program.run(b.bootstrap, 180))


# ------------------------------------------------------------------ kafka-transactions.sh

def test_kafka_transactions_tool_lists_and_describes(broker_factory):
    import kafka_reference
    try:
        jars = kafka_reference.resolve_jars()
        tool = jars.first_class("org.apache.kafka.tools.TransactionsCommand")
    except (kafka_reference.KafkaUnavailable, OSError) as exc:
        pytest.skip(f"Apache Kafka unavailable: {exc}")
    b = broker_factory(**FAST)
    create(b, "tool", 2)
    done = _producer(b, "tool-done")
    done.begin_transaction()
    done.produce("tool", value=b"x", partition=0)
    done.commit_transaction(15)
    open_ = _producer(b, "tool-open")
    open_.begin_transaction()
    open_.produce("tool", value=b"y", partition=1)
    open_.flush(10)

    def run(*args):
        out = jars.run_tool(tool, ["--bootstrap-server", b.bootstrap, *args], timeout=120)
        rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
        return out.returncode, rows, out.stderr

    code, rows, err = run("list")
    assert code == 0, err[-2000:]
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert sorted((r[0], r[1], r[3]) for r in rows[1:]) == [("tool-done", "0", "CompleteCommit"),
                                                           ("tool-open", "0", "Ongoing")]
    code, rows, err = run("describe", "--transactional-id", "tool-open")
    assert code == 0, err[-2000:]
    described = dict(zip(rows[0], rows[1]))
    assert described["TransactionState"] == "Ongoing" and described["TopicPartitions"] == "tool-1"
    assert described["ProducerEpoch"] == "0" and described["TransactionTimeoutMs"] == "60000"
    code, _, err = run("describe", "--transactional-id", "nobody")
    assert code != 0 and "could not be found" in err
    open_.abort_transaction(15)


# ------------------------------------------------------------------ bad requests

def test_transaction_apis_answer_bad_requests_with_errors(broker_factory):
    from logcore.wire import error_codes as E
    from logcore.wire.client import KafkaConnection
    b = broker_factory(**FAST, transaction_max_timeout_ms=10000)
    create(b, "bad", 1)
    with KafkaConnection(b.host, b.port, timeout_s=10) as conn:
        def init(tid, timeout):
            return int(conn.request(22, {"transactional_id": tid, "transaction_timeout": timeout,
                                         "producer_id": -1, "producer_epoch": -1}, 4).error_code)
        assert init("", 1000) == E.INVALID_REQUEST
        assert init("t", 0) == E.INVALID_TRANSACTION_TIMEOUT
        assert init("t", 20000) == E.INVALID_TRANSACTION_TIMEOUT
        answer = conn.request(24, {"v3_and_below_transactional_id": "nobody", "v3_and_below_producer_id": 5,
                                   "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [
                                       {"name": "bad", "partitions": [0]}, {"name": "missing", "partitions": [0]}]}, 3)
        codes = {(t.name, r.partition_index): int(r.partition_error_code)
                 for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition}
        assert codes == {("bad", 0): E.OPERATION_NOT_ATTEMPTED, ("missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        answer = conn.request(24, {"v3_and_below_transactional_id": "nobody", "v3_and_below_producer_id": 5,
                                   "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [
                                       {"name": "bad", "partitions": [0]}]}, 3)
        assert int(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code) == \
            E.INVALID_PRODUCER_ID_MAPPING
        body = {"transactional_id": "nobody", "producer_id": 5, "producer_epoch": 0}
        assert int(conn.request(25, {**body, "group_id": "g"}, 3).error_code) == E.INVALID_PRODUCER_ID_MAPPING
        assert int(conn.request(26, {**body, "committed": True}, 3).error_code) == E.INVALID_PRODUCER_ID_MAPPING
        answer = conn.request(28, {**body, "group_id": "g", "generation_id": -1, "member_id": "",
                                   "topics": [{"name": "bad", "partitions": [
                                       {"partition_index": 0, "committed_offset": 1}]}]}, 3)
        assert int(answer.topics[0].partitions[0].error_code) == E.INVALID_PRODUCER_ID_MAPPING
        answer = conn.request(27, {"markers": [{"producer_id": 5, "producer_epoch": 0, "transaction_result": False,
                                                "coordinator_epoch": 0, "topics": [
                                                    {"name": "missing", "partition_indexes": [3]}]}]}, 1)
        assert int(answer.markers[0].topics[0].partitions[0].error_code) == E.UNKNOWN_TOPIC_OR_PARTITION
        answer = conn.request(65, {"transactional_ids": ["nobody"]}, 0)
        assert int(answer.transaction_states[0].error_code) == E.TRANSACTIONAL_ID_NOT_FOUND
        answer = conn.request(66, {"state_filters": ["Nonsense"], "producer_id_filters": []}, 0)
        assert list(answer.unknown_state_filters) == ["Nonsense"] and not answer.transaction_states
        answer = conn.request(10, {"key_type": 7, "coordinator_keys": ["x"]}, 4)
        assert int(answer.coordinators[0].error_code) == E.INVALID_REQUEST
    assert b.proc.poll() is None          # still serving


def _request(s, api_key: int, version: int, correlation: int, body: dict):
    s.sendall(encode_request(api_key, version, correlation, "raw", body))
    return parse_response(api_key, version, recv_frame(s))[1]


def test_end_txn_pipelined_on_one_connection(broker_factory):
    """EndTxn is answered later (the connection reads on while each Prepare record is written):
    several sent at once on one connection are answered in order, each for its own id, and a
    second EndTxn of an id sent right behind its first finds the end under way."""
    b = broker_factory(**FAST)
    create(b, "pe", 1)
    ids = {}
    with connect(b, timeout=15) as s:
        for n, tid in enumerate(("pe-1", "pe-2", "pe-3")):
            body = _request(s, 22, 1, 10 + n, {"transactional_id": tid, "transaction_timeout": 60000})
            assert int(body.error_code) == 0
            pid, epoch = int(body.producer_id), int(body.producer_epoch)
            body = _request(s, 24, 3, 20 + n, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                               "v3_and_below_producer_epoch": epoch,
                                               "v3_and_below_topics": [{"name": "pe", "partitions": [0]}]})
            assert int(body.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code) == 0
            batch = build_batch([(None, tid.encode(), (), int(time.time() * 1000))], producer_id=pid,
                                producer_epoch=epoch, base_sequence=0, is_transactional=True)
            s.sendall(_produce_frame(tid, "pe", 0, batch))
            assert int(parse_response(0, 9, recv_frame(s))[1].responses[0].partition_responses[0].error_code) == 0
            ids[tid] = (pid, epoch)
        ends = [(tid, *ids[tid]) for tid in ids] + [("pe-1", *ids["pe-1"])]
        s.sendall(b"".join(encode_request(26, 3, 100 + n, "raw", {"transactional_id": tid, "producer_id": pid,
                                                                   "producer_epoch": epoch, "committed": True})
                           for n, (tid, pid, epoch) in enumerate(ends)))
        answers = [parse_response(26, 3, recv_frame(s)) for _ in ends]
    assert [c for c, _b in answers] == [100, 101, 102, 103]
    assert [int(a.error_code) for _c, a in answers[:3]] == [0, 0, 0]
    assert int(answers[3][1].error_code) in (0, 51)          # NONE (complete already) or CONCURRENT_TRANSACTIONS
    expected = [b"pe-1", b"pe-2", b"pe-3"]
    assert _read(b, "pe", 1, "read_committed", expect=expected) == expected
