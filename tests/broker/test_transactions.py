"""Transactions against `seglog broker` with real clients: librdkafka's (confluent-kafka)
transactional producer (commit, abort, read_committed vs read_uncommitted consumers,
send_offsets_to_transaction and a read_committed group resuming from them, zombie fencing of
two producers sharing a transactional id, a transaction aborted by its timeout, a broker
SIGKILLed mid-transaction and restarted), kafka-python's transactional producer, and the
produce-side check (KIP-890 part 1) over the raw protocol."""
from __future__ import annotations

import datetime
import signal
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from broker_helpers import connect, create, parse_response, recv_frame  # noqa: E402
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


def _read(b, topic: str, partitions: int, isolation: str, *, quiet_s: float = 1.5, timeout: float = 15) -> list:
    """Every value of the topic a consumer of `isolation` sees (polls until quiet_s without one)."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last < quiet_s:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got.append(m.value())
            last = time.monotonic()
    c.close()
    return sorted(got)


def _send(p: Producer, topic: str, values: list[bytes], partitions: int) -> None:
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    p.poll(0)


def test_commit_abort_and_isolation_levels(broker_factory):
    b = broker_factory(**FAST)
    create(b, "tx", 3)
    p = _producer(b, "tx-basic")
    p.begin_transaction()
    _send(p, "tx", [b"c%d" % i for i in range(30)], 3)
    p.commit_transaction(15)
    p.begin_transaction()
    _send(p, "tx", [b"a%d" % i for i in range(12)], 3)
    p.flush(10)
    p.abort_transaction(15)
    p.begin_transaction()
    _send(p, "tx", [b"d%d" % i for i in range(6)], 3)
    p.commit_transaction(15)
    committed = sorted([b"c%d" % i for i in range(30)] + [b"d%d" % i for i in range(6)])
    assert _read(b, "tx", 3, "read_committed") == committed
    assert _read(b, "tx", 3, "read_uncommitted") == sorted(committed + [b"a%d" % i for i in range(12)])
    # An open transaction holds read_committed readers at its first offset (the LSO).
    p.begin_transaction()
    _send(p, "tx", [b"open%d" % i for i in range(3)], 3)
    p.flush(10)
    assert _read(b, "tx", 3, "read_committed", quiet_s=1.0) == committed
    p.commit_transaction(15)
    assert len(_read(b, "tx", 3, "read_committed")) == len(committed) + 3
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
    out = _read(b, "dst", 2, "read_committed")
    assert out == sorted(b"out-" + v for v in first + rest)


def test_zombie_producer_is_fenced(broker_factory):
    b = broker_factory(**FAST)
    create(b, "z", 2)
    old = _producer(b, "shared-id")
    old.begin_transaction()
    _send(old, "z", [b"zombie%d" % i for i in range(4)], 2)
    old.flush(10)
    new = _producer(b, "shared-id")          # aborts the old epoch's open transaction
    new.begin_transaction()
    _send(new, "z", [b"new%d" % i for i in range(4)], 2)
    new.commit_transaction(15)
    with pytest.raises(KafkaException) as info:
        old.produce("z", value=b"late", partition=0)
        old.commit_transaction(15)
    assert info.value.args[0].fatal(), info.value
    assert _read(b, "z", 2, "read_committed") == sorted(b"new%d" % i for i in range(4))


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
    assert _read(b, "slow", 1, "read_committed", quiet_s=1.0) == []
    assert _read(b, "slow", 1, "read_uncommitted", quiet_s=1.0) == [b"never"]
    # The LSO moved past the aborted transaction: a new producer of the same id commits.
    p2 = _producer(b, "slow-tx", **{"transaction.timeout.ms": 2000})
    p2.begin_transaction()
    p2.produce("slow", value=b"later")
    p2.commit_transaction(15)
    assert _read(b, "slow", 1, "read_committed") == [b"later"]


def test_broker_killed_mid_transaction_then_recovery(broker_factory):
    b = broker_factory(**FAST)
    create(b, "crash", 2)
    p = _producer(b, "crash-tx")
    p.begin_transaction()
    _send(p, "crash", [b"c%d" % i for i in range(6)], 2)
    p.commit_transaction(15)
    p.begin_transaction()
    _send(p, "crash", [b"open%d" % i for i in range(6)], 2)
    p.flush(10)
    b.stop(signal.SIGKILL)
    del p
    b2 = broker_factory(b.root, **FAST)
    # The restarted coordinator knows the id and its open transaction: a new producer's
    # init_transactions aborts it (fencing the old epoch) and goes on.
    p2 = _producer(b2, "crash-tx")
    p2.begin_transaction()
    _send(p2, "crash", [b"after%d" % i for i in range(4)], 2)
    p2.commit_transaction(15)
    expected = sorted([b"c%d" % i for i in range(6)] + [b"after%d" % i for i in range(4)])
    assert _read(b2, "crash", 2, "read_committed") == expected


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
    assert _read(b, "kp", 2, "read_committed") == sorted(b"k%d" % i for i in range(5))
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
