"""The broker path's exactly-once protocol (docs/sink-protocol.md) against a real `seglog broker`.

The task side (`broker_sink.produce_task`) and the driver side (`commit_batch` / `abort_batch`)
are called as Spark calls them, without Spark, so that each fault is placed exactly: a task
attempt that dies with its transaction open, a zombie attempt that keeps producing after its
retry started, a batch replayed after the driver's commit (Spark's commits/<id> missing), a
driver that died after committing some of the tasks. One Spark streaming query checks the
same end to end: first task attempts fail after producing part of their rows, then the last
batch is replayed. An independent read_committed reader (librdkafka) counts every row.
"""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_broker_interop import BrokerProcess, _free_port, create_topic  # noqa: E402

from logcore.errors import InvalidConfigError  # noqa: E402
from logcore.wire.client import KafkaError  # noqa: E402
from pyspark_seglog.broker_sink import TaskProducer, abort_batch, commit_batch, produce_task  # noqa: E402
from pyspark_seglog.broker_transaction import TaskTransaction, transactional_id  # noqa: E402
from pyspark_seglog.sink_options import DeliveryGuarantee, parse_sink_options  # noqa: E402
from broker_process import subprocess_env  # noqa: E402
from read_back import read_to_eof  # noqa: E402

COLUMNS = {"key": "key", "value": "value"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("eos-broker")
    b = BrokerProcess(base, base / "logs", _free_port())
    b.start()
    yield b
    b.stop()


def options(bootstrap: str, topic: str, **more) -> dict:
    return {"kafka.bootstrap.servers": bootstrap, "topic": topic, "batch.size": "4000", **more}


def rows(first: int, count: int, chunk: int = 500):
    """Arrow batches of the rows first..first+count-1 (value v<i>, key k<i>)."""
    for start in range(first, first + count, chunk):
        ids = range(start, min(start + chunk, first + count))
        yield pa.record_batch([pa.array([b"k%d" % i for i in ids]), pa.array([b"v%d" % i for i in ids])],
                              names=["key", "value"])


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed") -> list[bytes]:
    """Every value up to each partition's end, as a consumer with `isolation` reads it."""
    return read_to_eof(bootstrap, topic, partitions, lambda m: m.value(),
                       config={"group.id": f"eos-check-{time.monotonic_ns()}", "isolation.level": isolation,
                               "fetch.wait.max.ms": 50}, timeout=30, poll_s=0.2)


def exactly(values: list[bytes], ids) -> bool:
    return sorted(values) == sorted(b"v%d" % i for i in ids)


def open_attempt(opts, owner: str, task: int, attempt: int) -> tuple[TaskTransaction, TaskProducer]:
    """A task attempt that begins its transaction and produces, as produce_task does, but that the
    test can stop anywhere (an executor lost: no abort, no message)."""
    txn = TaskTransaction(opts.bootstrap_servers, transactional_id(owner, task), opts.transaction_timeout_ms,
                          deadline_s=30)
    txn.begin()
    return txn, TaskProducer(opts, COLUMNS, task, attempt, transaction=txn)


def test_options():
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t"})
    assert opts.delivery is DeliveryGuarantee.EXACTLY_ONCE and opts.transaction_timeout_ms == 900_000
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "deliveryGuarantee": "at-least-once",
                               "kafka.transaction.timeout.ms": "60000"})
    assert opts.delivery is DeliveryGuarantee.AT_LEAST_ONCE and opts.transaction_timeout_ms == 60_000
    with pytest.raises(InvalidConfigError, match="deliveryGuarantee='twice' is not one of exactly-once, at-least-once"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "deliveryGuarantee": "twice"})
    with pytest.raises(InvalidConfigError, match="always exactly-once"):
        parse_sink_options({"path": "seglog-root", "deliveryGuarantee": "at-least-once"})
    with pytest.raises(InvalidConfigError, match="kafka.transaction.timeout.ms"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.transaction.timeout.ms": "0"})


def test_failed_attempt_is_never_visible(broker):
    """Attempt 0 of a task produces part of its rows and dies with its transaction open (no
    abort); attempt 1 (same transactional id) fences it, aborting those rows, and writes all of
    them; the driver commits: read_committed sees each row once, read_uncommitted both attempts."""
    topic = "eos-failed"
    create_topic(broker, topic, 2)
    opts = parse_sink_options(options(broker.bootstrap, topic))
    txn0, dead = open_attempt(opts, "q-failed", 0, 0)
    for batch in rows(0, 1500):
        dead.add(batch)
    dead.flush()
    dead.close()
    txn0.close()                             # killed: never ends its transaction
    message = produce_task(opts, COLUMNS, rows(0, 3000), 0, 1, "q-failed", 0, streaming=True)
    assert sum(message.records.values()) == 3000 and message.transaction is not None
    assert message.transaction.producer_epoch > txn0.epoch
    assert read_values(broker.bootstrap, topic, 2) == []         # open until the driver commits
    commit_batch(opts, [message], 0)
    assert exactly(read_values(broker.bootstrap, topic, 2), range(3000))
    assert len(read_values(broker.bootstrap, topic, 2, "read_uncommitted")) == 4500   # attempt 0 aborted


def test_zombie_attempt_is_fenced(broker):
    """A zombie attempt still producing after its retry began is refused (fenced epoch); its
    rows and its commit never count; the retry's rows are committed once."""
    topic = "eos-zombie"
    create_topic(broker, topic, 2)
    opts = parse_sink_options(options(broker.bootstrap, topic))
    txn0, zombie = open_attempt(opts, "q-zombie", 3, 0)
    for batch in rows(0, 1000):
        zombie.add(batch)
    zombie.flush()
    message = produce_task(opts, COLUMNS, rows(0, 2000), 3, 1, "q-zombie", 0, streaming=True)
    with pytest.raises(KafkaError, match="fenced|PRODUCER_FENCED|INVALID_PRODUCER_EPOCH|INVALID_TXN_STATE"):
        for batch in rows(1000, 1000):
            zombie.add(batch)
        zombie.flush()
    zombie.close()
    stale = txn0.open()
    txn0.close()
    with pytest.raises(KafkaError, match="could not commit 1 task transaction"):
        commit_batch(opts, [type(message)(3, 0, stale.producer_id, {}, stale)], 0)
    commit_batch(opts, [message], 0)
    assert exactly(read_values(broker.bootstrap, topic, 2), range(2000))


def test_replayed_batch_is_not_written_twice(broker):
    """Batch 0 committed, then replayed (Spark's commits/0 missing): each task finds its batch
    recorded and writes nothing; a repeated commit and the replayed one change nothing. Batch 1's driver dies after committing task 0 only: in the replay task 0
    writes nothing and task 1 writes again (its open transaction aborted by InitProducerId)."""
    topic = "eos-replay"
    create_topic(broker, topic, 3)
    opts = parse_sink_options(options(broker.bootstrap, topic))
    first = [produce_task(opts, COLUMNS, rows(t * 1000, 1000), t, 0, "q-replay", 0, streaming=True)
             for t in range(2)]
    commit_batch(opts, first, 0)
    commit_batch(opts, first, 0)             # a retried EndTxn(commit) of a committed transaction: NONE
    replay = [produce_task(opts, COLUMNS, rows(t * 1000, 1000), t, 0, "q-replay", 0, streaming=True)
              for t in range(2)]
    assert all(m.skipped and m.transaction is None and not m.records for m in replay)
    commit_batch(opts, replay, 0)
    assert exactly(read_values(broker.bootstrap, topic, 3), range(2000))

    second = [produce_task(opts, COLUMNS, rows(2000 + t * 1000, 1000), t, 0, "q-replay", 1, streaming=True)
              for t in range(2)]
    commit_batch(opts, second[:1], 1)        # the driver dies before task 1's EndTxn
    again = [produce_task(opts, COLUMNS, rows(2000 + t * 1000, 1000), t, 0, "q-replay", 1, streaming=True)
             for t in range(2)]
    assert again[0].skipped and not again[1].skipped and sum(again[1].records.values()) == 1000
    commit_batch(opts, again, 1)
    assert exactly(read_values(broker.bootstrap, topic, 3), range(4000))


def test_micro_batch_task_adds_its_partitions_once_and_reuses_its_clients(broker, monkeypatch):
    """A micro-batch's task holds its few rows until flush: one AddPartitionsToTxn names every
    partition it writes (not one round trip per partition), and the worker's next task and the
    driver's next commit reuse the clients (connections, Metadata, the coordinators found) the
    last ones left."""
    from logcore.wire.api_keys import FIND_COORDINATOR
    import pyspark_seglog.broker_client as broker_client
    from pyspark_seglog.broker_transaction import TaskTransaction as Txn

    topic = "eos-small-batches"
    create_topic(broker, topic, 3)
    opts = parse_sink_options(options(broker.bootstrap, topic))
    added: list[list] = []
    real_add = Txn.add_partitions

    def add_partitions(self, tps):
        tps = list(tps)
        if set(tps) - self.added:            # a request goes out (else add_partitions sends none)
            added.append(sorted(set(tps)))
        return real_add(self, tps)

    monkeypatch.setattr(Txn, "add_partitions", add_partitions)
    made: list[str] = []
    asked: list[int] = []

    class CountedClient(broker_client.BrokerClient):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("client_id", ""))
            super().__init__(*args, **kwargs)

        def request(self, api_key, values):
            asked.append(api_key)
            return super().request(api_key, values)

    monkeypatch.setattr(broker_client, "BrokerClient", CountedClient)
    for batch in range(4):
        made.clear()
        asked.clear()
        messages = [produce_task(opts, COLUMNS, rows(batch * 100 + t * 50, 50), t, 0, "q-small", batch,
                                 streaming=True) for t in range(2)]
        commit_batch(opts, messages, batch)
        assert all(sorted(m.records) == [f"{topic}-{p}" for p in range(3)] for m in messages)
        if batch:
            assert made == [], f"batch {batch} opened new clients: {made}"
        if batch >= 2:          # (batch 1 finds the coordinators of the odd batches' ids)
            assert FIND_COORDINATOR not in asked, f"batch {batch} looked its coordinators up again"
    assert added == [[(topic, p) for p in range(3)]] * 8, added      # 2 tasks x 4 batches
    assert exactly(read_values(broker.bootstrap, topic, 3), range(400))


def test_micro_batches_alternate_two_transactional_ids(broker):
    """A task's micro-batches alternate between two transactional ids (even and odd batch ids),
    so that a batch's InitProducerId does not wait for the markers of the previous batch's
    commit. An odd batch that a version before the alternation committed under the even id (its
    record in the even id's group) is not written again when it is replayed."""
    from pyspark_seglog.broker_transaction import end_task_transactions

    topic = "eos-alternate"
    create_topic(broker, topic, 2)
    opts = parse_sink_options(options(broker.bootstrap, topic))
    ids = []
    for batch in range(3):
        message = produce_task(opts, COLUMNS, rows(batch * 100, 100), 0, 0, "q-alt", batch, streaming=True)
        commit_batch(opts, [message], batch)
        ids.append(message.transaction.transactional_id)
    assert ids == [transactional_id("q-alt", 0), transactional_id("q-alt", 0, 1), transactional_id("q-alt", 0)]
    assert ids[0] != ids[1]
    # An older version's run commits odd batch 3 under the even id, then dies before Spark's commits/3.
    txn, producer = open_attempt(opts, "q-alt", 0, 0)
    for batch in rows(300, 100):
        producer.add(batch)
    producer.flush(alongside=lambda: txn.record_batch(txn.txn_id, topic, 3))
    producer.close()
    txn.close()
    end_task_transactions(opts.bootstrap_servers, [txn.open()], commit=True, deadline_s=30)
    # That run died after its commit, so its markers were written before any replay: wait for
    # them (EndTxn is answered before the coordinator writes them; the replay's read of the even
    # id's group is not a stable one).
    reader = TaskTransaction(opts.bootstrap_servers, transactional_id("q-alt", 0), opts.transaction_timeout_ms,
                             deadline_s=30)
    try:
        assert reader.committed_batch(transactional_id("q-alt", 0), stable=True) == 3
    finally:
        reader.close()
    replay = produce_task(opts, COLUMNS, rows(300, 100), 0, 0, "q-alt", 3, streaming=True)
    assert replay.skipped and replay.transaction is None
    fresh = produce_task(opts, COLUMNS, rows(400, 100), 0, 0, "q-alt", 5, streaming=True)
    assert not fresh.skipped and fresh.transaction.transactional_id == transactional_id("q-alt", 0, 5)
    commit_batch(opts, [fresh], 5)
    assert exactly(read_values(broker.bootstrap, topic, 2), range(500))


def test_batch_record_flies_with_the_rows_and_aborts_with_them(broker, monkeypatch):
    """The batch record (AddOffsetsToTxn + TxnOffsetCommit) is sent while the task's Produce
    requests are in flight, not after their acknowledgment; an attempt that fails after sending it
    aborts it with the rows: the retry finds no record and writes every row again, read_committed
    sees each once, and a replay of the committed batch finds the record and writes nothing."""
    topic = "eos-record-in-flight"
    create_topic(broker, topic, 2)
    opts = parse_sink_options(options(broker.bootstrap, topic))
    events: list[str] = []
    lost = [True]
    real_record, real_receive = TaskTransaction.record_batch, TaskProducer._receive_next

    def record_batch(self, *args):
        events.append("record")
        return real_record(self, *args)

    def receive_next(self, node, **kwargs):
        events.append("produce answered")
        if lost[0]:
            raise KafkaError("the executor was lost")
        return real_receive(self, node, **kwargs)

    monkeypatch.setattr(TaskTransaction, "record_batch", record_batch)
    monkeypatch.setattr(TaskProducer, "_receive_next", receive_next)
    with pytest.raises(KafkaError, match="executor was lost"):
        produce_task(opts, COLUMNS, rows(0, 1000), 0, 0, "q-record", 0, streaming=True)
    assert events[:2] == ["record", "produce answered"], events
    lost[0] = False
    events.clear()
    message = produce_task(opts, COLUMNS, rows(0, 1000), 0, 1, "q-record", 0, streaming=True)
    assert not message.skipped and sum(message.records.values()) == 1000     # no record of attempt 0
    assert events[0] == "record", events
    commit_batch(opts, [message], 0)
    assert exactly(read_values(broker.bootstrap, topic, 2), range(1000))
    replay = produce_task(opts, COLUMNS, rows(0, 1000), 0, 0, "q-record", 0, streaming=True)
    assert replay.skipped and replay.transaction is None


def test_abort_hides_the_batch(broker):
    topic = "eos-abort"
    create_topic(broker, topic, 1)
    opts = parse_sink_options(options(broker.bootstrap, topic))
    messages = [produce_task(opts, COLUMNS, rows(0, 800), t, 0, "job-abort", 0, streaming=False)
                for t in range(2)]
    abort_batch(opts, messages, 0)
    assert read_values(broker.bootstrap, topic, 1) == []
    assert len(read_values(broker.bootstrap, topic, 1, "read_uncommitted")) == 1600


def test_transaction_timeout_fails_the_commit_and_the_replay_writes_again(broker):
    """A task's transaction open past kafka.transaction.timeout.ms is aborted by the broker (it
    checks every 10 s by default); the driver's commit then fails naming the option, and the
    replayed batch writes the task's rows again: read_committed sees them once."""
    from logcore.wire.api_keys import DESCRIBE_TRANSACTIONS
    from pyspark_seglog.broker_client import BrokerClient

    topic = "eos-timeout"
    create_topic(broker, topic, 1)
    opts = parse_sink_options(options(broker.bootstrap, topic, **{"kafka.transaction.timeout.ms": "1000"}))
    message = produce_task(opts, COLUMNS, rows(0, 500), 0, 0, "q-timeout", 0, streaming=True)
    deadline = time.monotonic() + 30
    with BrokerClient(broker.bootstrap) as client:
        while time.monotonic() < deadline:
            state = client.request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [message.transaction.transactional_id]})
            if state.transaction_states[0].transaction_state == "CompleteAbort":
                break
            time.sleep(0.5)
    with pytest.raises(KafkaError, match="kafka.transaction.timeout.ms"):
        commit_batch(opts, [message], 0)
    again = produce_task(opts, COLUMNS, rows(0, 500), 0, 0, "q-timeout", 0, streaming=True)
    assert not again.skipped
    commit_batch(opts, [again], 0)
    assert exactly(read_values(broker.bootstrap, topic, 1), range(500))


# ------------------------------------------------------------------------------ with Spark

def _run_available_now(spark, src: Path, bootstrap: str, topic: str, checkpoint: Path, flag: Path):
    """One AvailableNow run of parquet files -> the sink through the broker, two files a batch;
    while `flag` exists, the first task to read row 950 of a file after batch 0 removes it and fails (after
    the writer produced part of its rows in its transaction)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    flag_path = str(flag)

    @F.udf(BinaryType())
    def fail_once(value, i):
        import os
        if i % 1000 == 950 and i > 4000 and os.path.exists(flag_path):
            try:
                os.remove(flag_path)
            except FileNotFoundError:
                return value
            raise RuntimeError(f"injected failure at row {i}")
        return value

    schema = spark.read.parquet(str(src)).schema
    df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 2).parquet(str(src))
          .withColumn("value", fail_once(F.col("value"), F.col("id"))).select("key", "value"))
    q = (df.writeStream.format("seglog").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .option("batch.size", "4000").option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    try:
        try:
            assert q.awaitTermination(180), "the query did not end"
        except AssertionError:
            raise
        except Exception as exc:          # noqa: BLE001 - the query failed: the caller checks
            return exc
        return q.exception()
    finally:
        q.stop()


def test_streaming_query_fails_restarts_and_replays(spark, broker, tmp_path):
    """A micro-batch fails after its tasks produced part of their rows (the query stops), the
    query restarts and writes that batch again; then the last batch is replayed as after a
    driver crash between the sink's commit and Spark's commits/<id>: read_committed sees each
    row once."""
    import pyarrow.parquet as pq

    topic = "eos-stream"
    create_topic(broker, topic, 3)
    src = tmp_path / "in"
    src.mkdir()
    files, per_file = 6, 2000
    for f in range(files):
        ids = list(range(f * per_file, (f + 1) * per_file))
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "key": pa.array([b"k%d" % i for i in ids]),
                                 "value": pa.array([b"v%d" % i for i in ids])}), str(src / f"part-{f}.parquet"))
    ckpt, flag = tmp_path / "ckpt", tmp_path / "fail"
    flag.touch()
    assert _run_available_now(spark, src, broker.bootstrap, topic, ckpt, flag) is not None   # failed
    assert not flag.exists()
    seen = read_values(broker.bootstrap, topic, 3)
    assert exactly(seen, range(2 * per_file))                # batch 0 only
    assert _run_available_now(spark, src, broker.bootstrap, topic, ckpt, flag) is None
    assert exactly(read_values(broker.bootstrap, topic, 3), range(files * per_file))
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()                  # the sink committed, Spark did not
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)
    written = len(read_values(broker.bootstrap, topic, 3, "read_uncommitted"))
    assert _run_available_now(spark, src, broker.bootstrap, topic, ckpt, flag) is None
    assert (ckpt / "commits" / str(last)).exists()          # replayed
    assert len(read_values(broker.bootstrap, topic, 3, "read_uncommitted")) == written   # by writing nothing
    assert exactly(read_values(broker.bootstrap, topic, 3), range(files * per_file))


# ------------------------------------------------------------------------------ the fault job (soak)

JOB = Path(__file__).resolve().parent / "broker_sink_fault_job.py"


def _start_job(env, src, bootstrap, ckpt, mode):
    import subprocess
    return subprocess.Popen([sys.executable, str(JOB), str(src), bootstrap, str(ckpt), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def _zombie(bootstrap: str, query_id: str, task: int, rng) -> None:
    """An attempt of `task` that wakes up: it takes the task's transactional id (fencing the
    live attempt, which Spark retries), produces rows no reader may ever see, sleeps while the
    retry fences it in turn, then produces again with its stale epoch; it never commits."""
    opts = parse_sink_options(options(bootstrap, "events", **{"kafka.delivery.timeout.ms": "10000"}))
    txn, producer = open_attempt(opts, query_id, task, 99)
    try:
        producer.add(pa.record_batch([pa.array([b"z"] * 50), pa.array([b"zombie-%d" % i for i in range(50)])],
                                     names=["key", "value"]))
        producer.flush()
        time.sleep(rng.uniform(1, 4))
        producer.add(pa.record_batch([pa.array([b"z"]), pa.array([b"zombie-late"])], names=["key", "value"]))
        producer.flush()
    except KafkaError:
        pass                                # fenced: what a zombie should meet
    finally:
        producer.close()
        txn.close()


TESTS = Path(__file__).resolve().parents[1]


class _OneBroker:
    """The fault job's target: one `seglog broker`, SIGKILLed and restarted."""

    def __init__(self, tmp_path):
        self.broker = BrokerProcess(tmp_path, tmp_path / "logs", _free_port())
        self.broker.start()
        self.bootstrap = self.broker.bootstrap

    def kill_and_restart(self, rng) -> str:
        self.broker.stop(signal.SIGKILL)             # under the running stream
        time.sleep(rng.uniform(0.2, 1.0))
        self.broker.start()
        return "broker 0"

    def close(self):
        self.broker.stop()


class _ThreeBrokers:
    """The fault job's target: a 3-broker cluster on ZooKeeper, `events` at RF=3 with
    min.insync.replicas=2; a kill takes the leader of the transactional ids' coordinator
    partition or of an `events` partition (whichever the seed picks), then restarts it."""

    def __init__(self, tmp_path):
        for folder in (TESTS, TESTS / "cluster"):
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
        from seglog_cluster import SeglogCluster
        from zookeeper_reference import ZooKeeperCluster, ZooKeeperUnavailable, find_zookeeper
        try:
            find_zookeeper()
        except ZooKeeperUnavailable as exc:
            pytest.skip(str(exc))
        self.zk = ZooKeeperCluster(tmp_path / "zk", size=1)
        self.zk.start()
        self.cluster = SeglogCluster(tmp_path / "cluster", self.zk.connect_string, size=3,
                                     props={"min.insync.replicas": "2"}).start()
        self.cluster.create_topic("events", partitions=3, rf=3)
        self.bootstrap = self.cluster.bootstrap

    def kill_and_restart(self, rng) -> str:
        c = self.cluster
        topic = "__transaction_state" if rng.random() < 0.5 else "events"
        leaders = [leader for leader, _replicas, _isr in c.metadata(topic).values() if leader in c.brokers]
        victim = rng.choice(leaders) if leaders else rng.choice(sorted(c.brokers))
        c.brokers[victim].kill()
        time.sleep(rng.uniform(0.5, 3.0))
        c.brokers[victim].start()
        return f"broker {victim} (a leader of {topic})"

    def close(self):
        try:
            self.cluster.close()
        finally:
            self.zk.stop()


@pytest.mark.soak
@pytest.mark.parametrize("target", [_OneBroker, _ThreeBrokers], ids=["one-broker", "three-brokers"])
def test_fault_job_400k_rows(request, tmp_path, target):
    """400k rows through seglog brokers under every fault at once: each task's first attempt
    fails mid-write, zombie attempts take tasks' transactional ids and produce, the driver's
    process group is SIGKILLed at random moments and restarted on its checkpoint, a broker is
    SIGKILLed and restarted (one broker alone, or a leader in a 3-broker cluster); then the
    stream runs to its end. A read_committed reader (librdkafka) finds every row exactly once
    and no zombie row. A few minutes each: `-m soak`."""
    import os
    import random
    import threading

    import pyarrow.parquet as pq

    if "soak" not in (request.config.option.markexpr or ""):
        pytest.skip("a soak run (a few minutes): select it with `-m soak`")
    pytest.importorskip("pyspark")
    seed = int(os.environ.get("SEGLOG_FAULT_SEED", time.time()))
    print(f"SEGLOG_FAULT_SEED={seed}")
    rng = random.Random(seed)
    b = target(tmp_path)
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    src.mkdir()
    files, per_file = 40, 10_000
    for f in range(files):
        ids = list(range(f * per_file, (f + 1) * per_file))
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "key": pa.array([None if i % 11 == 0 else b"k%d" % i for i in ids], pa.binary()),
                                 "value": pa.array([b"v%d" % i for i in ids])}), str(src / f"part-{f:04d}.parquet"))
    env = dict(subprocess_env(), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    counts = {"driver kills": 0, "broker kills": 0, "zombies": 0, "batches": 0}
    try:
        for round_ in range(3):
            proc = _start_job(env, src, b.bootstrap, ckpt, "long")
            progressed, started = threading.Event(), {}

            def watch(p=proc, ev=progressed, st=started):
                for line in p.stdout:
                    if line.startswith("STARTED"):
                        st["query"] = line.split()[1]
                    if line.startswith("BATCH"):
                        counts["batches"] += 1
                        ev.set()
            threading.Thread(target=watch, daemon=True).start()
            assert progressed.wait(180), f"round {round_}: the job made no progress"
            faults = []
            if round_ != 1:
                faults.append(threading.Thread(target=_zombie, args=(b.bootstrap, started["query"],
                                                                     rng.randrange(2), rng)))
                counts["zombies"] += 1
            for t in faults:
                t.start()
            time.sleep(rng.uniform(2.0, 8.0))     # a few micro-batches: the kill lands anywhere in one
            if round_ == 1:
                print("killed", b.kill_and_restart(rng))
                counts["broker kills"] += 1
                time.sleep(rng.uniform(1.0, 4.0))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                counts["driver kills"] += 1
            proc.wait()
            for t in faults:
                t.join()
        partial = read_values(b.bootstrap, "events", 3)
        print(counts, f"{len(partial)} rows visible before the run to the end")
        assert counts["driver kills"] >= 2
        assert 0 < len(partial) < files * per_file and len(partial) == len(set(partial))
        proc = _start_job(env, src, b.bootstrap, ckpt, "finish")
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0 and "DONE" in out, f"exit {proc.returncode}\n{out}\n{err[-5000:]}"
        assert "injected failure of task" in err            # first attempts did fail mid-write
        values = read_values(b.bootstrap, "events", 3)
        assert not [v for v in values if v.startswith(b"zombie")]
        ids = sorted(int(v[1:]) for v in values)
        assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicates"
        assert ids == list(range(files * per_file)), f"missing {sorted(set(range(files * per_file)) - set(ids))[:20]}"
    finally:
        b.close()
