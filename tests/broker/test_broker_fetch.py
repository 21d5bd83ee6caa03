"""The Fetch path: local records go out with sendfile (ranges of at least 64 KiB here), bounded
exactly as a copying read of the log is (HW, LSO, partition and response byte limits), and a
segment deleted by retention while fetches run costs nothing but OFFSET_OUT_OF_RANGE."""
from __future__ import annotations

import datetime
import random
import threading
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from kio.schema.fetch.v4.request import FetchPartition as P4, FetchRequest as R4, FetchTopic as T4  # noqa: E402
from kio.schema.fetch.v11.request import FetchPartition as P11, FetchRequest as R11, FetchTopic as T11  # noqa: E402

from broker_helpers import connect, consume_all, create, parse_response, ping, produce, recv_frame, request_frame  # noqa: E402
from logcore.wire.error_codes import OFFSET_OUT_OF_RANGE  # noqa: E402
from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.records.batch import iter_batches  # noqa: E402
from logcore.records.control import ControlType  # noqa: E402

RECORD = 1000
COUNT = 3000


def _value(i: int) -> bytes:
    return (b"%08d" % i) * (RECORD // 8)


@pytest.fixture(scope="module")
def many(broker):
    """A topic of ~3 MB in 256 KiB segments, written in ~200 KB batches (sendfile-sized ranges)."""
    create(broker, "many", 1, {"segment.bytes": str(256 << 10)})
    acked = produce(broker, "many", [_value(i) for i in range(COUNT)], acks="all",
                    **{"batch.num.messages": 200, "linger.ms": 50})
    assert all(a[0] is None for a in acked)
    assert len(list((broker.root / "many-0").glob("*.log"))) >= 8
    return "many"


def test_confluent_consumer_reads_across_segments(broker, many):
    got = consume_all(broker, many, 1, COUNT, timeout=30)
    assert [o for _, o, *_ in got] == list(range(COUNT))
    assert all(v == _value(o) for _, o, _, v, _ in got)


def test_kafka_python_consumer_reads_across_segments(broker, many):
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                   consumer_timeout_ms=1500, fetch_max_wait_ms=100)
    tp = kafka.TopicPartition(many, 0)
    consumer.assign([tp])
    consumer.seek(tp, 1234)
    got = [(m.offset, m.value) for m in consumer]
    consumer.close()
    assert [o for o, _ in got] == list(range(1234, COUNT))
    assert all(v == _value(o) for o, v in got)


def _fetch(sock, version: int, topic: str, partitions: list[tuple[int, int, int]], max_bytes: int,
           isolation: int = 0, correlation_id: int = 1):
    """Raw Fetch of [(partition, offset, partition_max_bytes)]; returns the partition responses."""
    if version == 4:
        req = R4(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=max_bytes,
                 isolation_level=isolation, topics=(T4(topic=topic, partitions=tuple(
                     P4(partition=p, fetch_offset=o, partition_max_bytes=m) for p, o, m in partitions)),))
    else:
        req = R11(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=max_bytes,
                  isolation_level=isolation, session_id=0, session_epoch=-1,
                  topics=(T11(topic=topic, partitions=tuple(
                      P11(partition=p, fetch_offset=o, partition_max_bytes=m) for p, o, m in partitions)),),
                  forgotten_topics_data=(), rack_id="")
    sock.sendall(request_frame(1, version, req, correlation_id))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    cid, body = parse_response(1, version, frame)
    assert cid == correlation_id
    return list(body.responses[0].partitions) if body.responses else []


def _copying_read(log, offset: int, budget: int, min_one_batch: bool, isolation: str) -> bytes:
    return bytes(log.read(offset, budget, isolation=isolation, min_one_batch=min_one_batch).data)


def test_fetch_is_bounded_exactly_as_a_copying_read(broker, many, tmp_path):
    """Every response holds the bytes a copying read of the log with the same budget gives:
    whole batches, below the HW, within partition_max_bytes and max_bytes (one batch past them
    only for the response's first partition)."""
    create(broker, "pair", 2, {"segment.bytes": str(300 << 10)})
    for p in (0, 1):
        produce(broker, "pair", [_value(i) for i in range(600)], partition=p, acks="all",
                **{"batch.num.messages": 90, "linger.ms": 50})
    root = LogRoot.open(str(broker.root), read_only=True)
    rng = random.Random(5)
    try:
        logs = {p: root.log("pair", p) for p in (0, 1)}
        with connect(broker) as sock:
            for i in range(60):
                version = rng.choice([4, 11])
                max_bytes = rng.choice([1, 50_000, 150_000, 400_000, 5 << 20])
                asked = [(p, rng.randrange(0, 600), rng.choice([1, 70_000, 200_000, 1 << 20])) for p in (0, 1)]
                parts = _fetch(sock, version, "pair", asked, max_bytes, correlation_id=i + 1)
                total = 0
                for (p, offset, pmb), res in zip(asked, parts):
                    assert res.error_code == 0
                    records = res.records or b""
                    budget = min(pmb, max_bytes - total)
                    expected = b"" if budget <= 0 and total > 0 else \
                        _copying_read(logs[p], offset, max(budget, 0), total == 0, "read_uncommitted")
                    assert records == expected, (version, max_bytes, asked, p)
                    batches = list(iter_batches(records))
                    assert all(h.last_offset < res.high_watermark for _, h in batches)
                    if batches and total > 0:
                        assert len(records) <= budget
                    total += len(records)
    finally:
        root.close()


def test_segment_deleted_by_retention_while_fetching(broker_factory):
    """Fetches from the oldest offsets race retention deleting those segments: each answer is
    whole data from the asked offset on or OFFSET_OUT_OF_RANGE; the broker keeps serving and a
    consumer that resets to the earliest offset reads on to the end."""
    b = broker_factory(log_retention_check_interval_ms=50, log_segment_delete_delay_ms=0)
    create(b, "churn", 1, {"segment.bytes": str(128 << 10), "retention.bytes": str(256 << 10)})
    stop = threading.Event()
    produced = [0]

    def keep_producing() -> None:
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.num.messages": 100})
        while not stop.is_set():
            for _ in range(200):
                p.produce("churn", value=_value(produced[0]))
                produced[0] += 1
            p.flush(10)
        p.flush(10)

    writer = threading.Thread(target=keep_producing)
    writer.start()
    out_of_range = ok = 0
    try:
        deadline = time.monotonic() + 3
        with connect(b) as sock:
            cid = 0
            while time.monotonic() < deadline:
                cid += 1
                (res,) = _fetch(sock, 11, "churn", [(0, 0, 1 << 20)], 1 << 20, correlation_id=cid)
                if res.error_code == OFFSET_OUT_OF_RANGE:
                    out_of_range += 1
                    start = res.log_start_offset
                    cid += 1
                    (res,) = _fetch(sock, 11, "churn", [(0, start, 1 << 20)], 1 << 20, correlation_id=cid)
                    if res.error_code == OFFSET_OUT_OF_RANGE:
                        continue            # deleted again in between: fine
                    offset = start
                else:
                    offset = 0
                assert res.error_code == 0
                batches = list(iter_batches(res.records or b""))
                if batches:
                    ok += 1
                    assert batches[0][1].base_offset <= offset <= batches[0][1].last_offset
                    assert all(h.last_offset < res.high_watermark for _, h in batches)
    finally:
        stop.set()
        writer.join(30)
    assert out_of_range > 0 and ok > 0
    assert ping(b)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "churn", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    c.assign([TopicPartition("churn", 0, 0)])       # offset 0 is long gone: reset to earliest
    last = -1
    deadline = time.monotonic() + 20
    while last < produced[0] - 1 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            assert m.offset() > last
            last = m.offset()
    c.close()
    assert last == produced[0] - 1
    assert "Traceback" not in b.log_text()


def test_read_committed_is_bounded_by_the_lso(broker_factory, tmp_path):
    """A log with a committed, an aborted and an open transaction (written before the broker
    starts): read_committed consumers stop at the LSO and skip the aborted records; read_uncommitted
    ones read to the HW."""
    root_dir = tmp_path / "txn-logs"
    root = LogRoot.open(str(root_dir), create=True)
    root.create_topic("txn", 1, {"segment.bytes": str(200 << 10)})
    log = root.log("txn", 0, writer=True)
    big = [(None, b"p" * 10_000, (), None)] * 10                  # 100 KB batches: sendfile ranges
    log.append_records(big)                                       # 0..9
    log.append_records([(None, b"committed", (), None)] * 3, producer_id=5, producer_epoch=0,
                       base_sequence=0, is_transactional=True)    # 10..12
    log.append_control(ControlType.COMMIT, producer_id=5, producer_epoch=0)   # 13
    log.append_records([(None, b"aborted", (), None)] * 3, producer_id=6, producer_epoch=0,
                       base_sequence=0, is_transactional=True)    # 14..16
    log.append_control(ControlType.ABORT, producer_id=6, producer_epoch=0)    # 17
    log.append_records(big)                                       # 18..27
    log.append_records([(None, b"open", (), None)] * 2, producer_id=7, producer_epoch=0,
                       base_sequence=0, is_transactional=True)    # 28..29, never ended
    log.append_records(big)                                       # 30..39
    log.commit()
    lso, hw = log.last_stable_offset, log.high_watermark
    log.close()
    root.close()
    assert (lso, hw) == (28, 40)
    b = broker_factory(root_dir)
    # One more than read_committed may give: the wait for it shows that nothing past the LSO comes.
    committed = consume_all(b, "txn", 1, 24, timeout=2)
    assert [o for _, o, *_ in committed] == list(range(10)) + [10, 11, 12] + list(range(18, 28))
    everything = consume_all(b, "txn", 1, 38, timeout=10, isolation="read_uncommitted")
    assert [o for _, o, *_ in everything] == [o for o in range(hw) if o not in (13, 17)]
    with connect(b) as sock:
        for offset in (0, 12, 20, 27, 28, 35):
            (res,) = _fetch(sock, 11, "txn", [(0, offset, 1 << 20)], 1 << 20, isolation=1)
            assert res.error_code == 0 and res.last_stable_offset == lso
            batches = list(iter_batches(res.records or b""))
            assert all(h.last_offset < lso for _, h in batches)
            assert bool(batches) == (offset < lso)
            if batches and batches[0][1].base_offset <= 14:
                assert [(a.producer_id, a.first_offset) for a in res.aborted_transactions] == [(6, 14)]
