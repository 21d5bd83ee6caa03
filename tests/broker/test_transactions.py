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
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402

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


def _read(b, topic: str, partitions: int, isolation: str, *, expect: list | None = None, timeout: float = 20) -> list:
    """Every value of the topic a consumer of `isolation` reads up to the end of each partition
    (the LSO for read_committed, the high watermark for read_uncommitted). With `expect`: read
    again until that is what it reads (a commit's markers follow EndTxn's answer), or the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = _read_to_end(b.bootstrap, topic, partitions, isolation, timeout)
        if expect is None or got == sorted(expect) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def _read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 50, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, ended = [], set()
    deadline = time.monotonic() + timeout
    while len(ended) < partitions and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() == KafkaError._PARTITION_EOF:
                ended.add(m.partition())
            continue
        got.append(m.value())
    c.close()
    assert len(ended) == partitions, f"{topic}: reached the end of {sorted(ended)} only"
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
    assert _read(b, "tx", 3, "read_committed", expect=committed) == committed
    assert _read(b, "tx", 3, "read_uncommitted") == sorted(committed + [b"a%d" % i for i in range(12)])
    # An open transaction holds read_committed readers at its first offset (the LSO).
    p.begin_transaction()
    _send(p, "tx", [b"open%d" % i for i in range(3)], 3)
    p.flush(10)
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

# kafka-clients and what it loads at run time (codecs, slf4j and log4j2)
JAVA_CLIENT_JARS = ("kafka-clients-", "lz4-java-", "snappy-java-", "zstd-jni-", "slf4j-api-", "log4j-api-",
                    "log4j-core-", "log4j-slf4j-impl-")

JAVA_SOURCE = r"""
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.*;

public class JavaTransactions {
    static String bootstrap;

    static KafkaProducer<String, String> producer(String tid) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", tid);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> pr = new KafkaProducer<>(p);
        pr.initTransactions();
        return pr;
    }

    static KafkaConsumer<String, String> consumer(String group, String isolation) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("isolation.level", isolation);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    static List<String> readAll(String topic, String isolation) {
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer("reader-" + isolation, isolation)) {
            c.assign(Arrays.asList(new TopicPartition(topic, 0), new TopicPartition(topic, 1)));
            c.seekToBeginning(c.assignment());
            // until 1.5 s without a record once records came (a commit's markers follow its answer)
            long deadline = System.currentTimeMillis() + 30000, quiet = deadline;
            while (System.currentTimeMillis() < Math.min(deadline, quiet)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    out.add(r.value());
                    quiet = System.currentTimeMillis() + 1500;
                }
            }
        }
        Collections.sort(out);
        return out;
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        KafkaProducer<String, String> p = producer("java-tx");
        p.beginTransaction();
        for (int i = 0; i < 6; i++) p.send(new ProducerRecord<>("jt", i % 2, null, "c" + i));
        p.commitTransaction();
        p.beginTransaction();
        for (int i = 0; i < 4; i++) p.send(new ProducerRecord<>("jt", i % 2, null, "a" + i));
        p.flush();
        p.abortTransaction();
        // consume-transform-produce with the group's offsets in the transaction
        try (KafkaConsumer<String, String> c = consumer("java-eos", "read_committed")) {
            c.subscribe(Collections.singletonList("jin"));
            int seen = 0;
            long deadline = System.currentTimeMillis() + 20000;
            p.beginTransaction();
            while (seen < 4 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    p.send(new ProducerRecord<>("jt", r.partition(), null, "t-" + r.value()));
                    seen++;
                }
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (TopicPartition tp : c.assignment()) offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
            p.sendOffsetsToTransaction(offsets, c.groupMetadata());
            p.commitTransaction();
            System.out.println("{\"scenario\":\"eos\",\"seen\":" + seen + "}");
        }
        try (KafkaConsumer<String, String> c = consumer("java-eos", "read_committed")) {
            Map<TopicPartition, OffsetAndMetadata> got = c.committed(
                new HashSet<>(Arrays.asList(new TopicPartition("jin", 0), new TopicPartition("jin", 1))));
            long total = 0;
            for (OffsetAndMetadata o : got.values()) total += o == null ? 0 : o.offset();
            System.out.println("{\"scenario\":\"committed\",\"total\":" + total + "}");
        }
        // a second producer of the same id fences the first
        KafkaProducer<String, String> p2 = producer("java-tx");
        String fenced = "none";
        try {
            p.beginTransaction();
            p.send(new ProducerRecord<>("jt", 0, null, "zombie")).get();
            p.commitTransaction();
        } catch (Exception e) {
            Throwable t = e;
            while (t.getCause() != null && !(t instanceof ProducerFencedException)) t = t.getCause();
            fenced = t.getClass().getSimpleName();
        }
        p.close(Duration.ofSeconds(2));
        p2.beginTransaction();
        p2.send(new ProducerRecord<>("jt", 1, null, "p2"));
        p2.commitTransaction();
        p2.close();
        System.out.println("{\"scenario\":\"fenced\",\"error\":\"" + fenced + "\"}");
        System.out.println("{\"scenario\":\"read_committed\",\"values\":\"" + String.join(",", readAll("jt", "read_committed")) + "\"}");
        System.out.println("{\"scenario\":\"read_uncommitted\",\"count\":" + readAll("jt", "read_uncommitted").size() + "}");
    }
}
"""


def test_java_transactional_producer(broker_factory, tmp_path):
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import kafka_reference
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.skip("no javac/java on PATH")
    try:
        jars = kafka_reference.resolve_jars()
    except (kafka_reference.KafkaUnavailable, OSError) as exc:
        pytest.skip(f"Apache Kafka unavailable: {exc}")
    classpath = ":".join(str(j) for j in jars.jars if j.name.startswith(JAVA_CLIENT_JARS))
    (tmp_path / "JavaTransactions.java").write_text(JAVA_SOURCE)
    built = subprocess.run([javac, "-d", str(tmp_path), "-cp", classpath, str(tmp_path / "JavaTransactions.java")],
                           capture_output=True, text=True, timeout=180)
    assert built.returncode == 0, built.stderr
    b = broker_factory(**FAST)
    create(b, "jt", 2)
    create(b, "jin", 2)
    p0 = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(4):
        p0.produce("jin", value=b"in%d" % i, partition=i % 2)
    p0.flush(10)
    run = subprocess.run([java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                          f"-Dlog4j2.configurationFile={jars.folder / 'log4j2-tools.properties'}",
                          "-cp", f"{tmp_path}:{classpath}", "JavaTransactions", b.bootstrap],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    check_java_rows({r["scenario"]: r for r in map(json.loads, run.stdout.splitlines())})


def check_java_rows(rows: dict) -> None:
    """What JavaTransactions reports when every step did what Kafka does (one broker or a cluster)."""
    assert rows["eos"]["seen"] == 4
    assert rows["committed"]["total"] == 4
    assert rows["fenced"]["error"] == "ProducerFencedException", rows
    expected = sorted([f"c{i}" for i in range(6)] + [f"t-in{i}" for i in range(4)] + ["p2"])
    assert rows["read_committed"]["values"].split(",") == expected
    assert rows["read_uncommitted"]["count"] == len(expected) + 4


# ------------------------------------------------------------------ kafka-transactions.sh

def test_kafka_transactions_tool_lists_and_describes(broker_factory):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
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
