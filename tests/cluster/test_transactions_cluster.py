"""Transactions on a three-broker seglog cluster: the coordinator of a transactional id is the
leader of its `__transaction_state` partition (created through ZooKeeper at the first
FindCoordinator), markers reach partitions led by other brokers through WriteTxnMarkers, and a
coordinator SIGKILLed after writing PrepareCommit is replaced by the partition's new leader,
which loads the state and completes the commit (librdkafka's transactional producer)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from seglog_cluster import SeglogCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
from confluent_kafka.admin import NewTopic  # noqa: E402

from java_transactions import JavaTransactions, check_java_rows  # noqa: E402
from transactional_reads import read_values  # noqa: E402

from logcore.coordinator import transaction_log as TL  # noqa: E402
from logcore.records.batch import build_batch  # noqa: E402
from logcore.wire.api_keys import DESCRIBE_TRANSACTIONS, FIND_COORDINATOR, PRODUCE  # noqa: E402
from logcore.wire.client import KafkaConnection  # noqa: E402
from logcore.wire.error_codes import INVALID_TXN_STATE, NONE, NOT_COORDINATOR  # noqa: E402

TXN_PROPS = {"min.insync.replicas": "2", "transaction.state.log.num.partitions": "3"}


def _ask(cluster, broker_id: int, api_key: int, body: dict, version: int | None = None):
    with KafkaConnection("127.0.0.1", cluster.brokers[broker_id].port, timeout_s=10) as conn:
        return conn.request(api_key, body, version)


def _coordinator(cluster, tid: str, timeout: float = 40.0) -> int:
    def found():
        for b in cluster.brokers.values():
            if b.alive():
                r = _ask(cluster, b.id, FIND_COORDINATOR, {"key": tid, "key_type": 1}, 2)
                return int(r.node_id) if int(r.error_code) == NONE else None
        return None
    return cluster.wait_for(found, timeout, f"a coordinator for {tid!r}", interval=0.2)


def _state(cluster, broker_id: int, tid: str) -> tuple[int, str]:
    r = _ask(cluster, broker_id, DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})
    s = r.transaction_states[0]
    return int(s.error_code), s.transaction_state


def _read(cluster, topic: str, partitions: int, isolation: str = "read_committed", timeout: float = 30.0,
          expect: list | None = None) -> list:
    return read_values(cluster.bootstrap, topic, partitions, isolation, expect=expect, timeout=timeout)


def _producer(cluster, tid: str) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 1})
    p.init_transactions(40)
    return p


def test_commit_and_abort_across_leaders(tmp_path, zk_hosts):
    with SeglogCluster.running(tmp_path, zk_hosts, size=3, props=TXN_PROPS) as c:
        c.create_topic("xt", 3, rf=2)
        leaders = {p: c.leader_of("xt", p) for p in range(3)}
        tid = "cluster-tx"
        p = _producer(c, tid)
        coordinator = _coordinator(c, tid)
        txn_part = TL.partition_for(tid, 3)
        assert coordinator == c.leader_of(TL.TOPIC, txn_part)
        others = [b for b in c.brokers if b != coordinator]
        assert int(_ask(c, others[0], FIND_COORDINATOR, {"key": tid, "key_type": 1}, 2).node_id) == coordinator
        batched = _ask(c, others[1], FIND_COORDINATOR, {"key_type": 1, "coordinator_keys": [tid, "other"]}, 4)
        assert [(x.key, int(x.error_code)) for x in batched.coordinators] == [(tid, NONE), ("other", NONE)]
        assert batched.coordinators[0].node_id == coordinator
        assert _state(c, others[0], tid)[0] == NOT_COORDINATOR
        p.begin_transaction()
        for i in range(9):
            p.produce("xt", value=b"c%d" % i, partition=i % 3)
        p.commit_transaction(30)
        p.begin_transaction()
        for i in range(6):
            p.produce("xt", value=b"a%d" % i, partition=i % 3)
        p.flush(20)
        p.abort_transaction(30)
        c.wait_for(lambda: _state(c, coordinator, tid) == (NONE, "CompleteAbort"), 20, "the abort completed")
        assert len(set(leaders.values())) > 1 or coordinator not in leaders.values(), leaders
        want = sorted(b"c%d" % i for i in range(9))
        assert _read(c, "xt", 3, expect=want) == want
        assert len(_read(c, "xt", 3, "read_uncommitted")) == 15
        # KIP-890 part 1 across brokers: the leader of a partition not in the transaction asks
        # the coordinator and refuses the batch.
        p.begin_transaction()
        p.produce("xt", value=b"in", partition=0)
        p.flush(20)
        state = _ask(c, coordinator, DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]}).transaction_states[0]
        outside = [q for q in (1, 2) if leaders[q] != coordinator]
        assert outside, (leaders, coordinator)        # the assignment spreads the leaders
        for q in outside:
            batch = build_batch([(None, b"sneaky", (), int(time.time() * 1000))], producer_id=state.producer_id,
                                producer_epoch=state.producer_epoch, base_sequence=0, is_transactional=True)
            answer = _ask(c, leaders[q], PRODUCE, {"transactional_id": tid, "acks": -1, "timeout": 5000,
                                                   "topic_data": [{"name": "xt", "partition_data": [
                                                       {"index": q, "records": batch}]}]}, 9)
            assert int(answer.responses[0].partition_responses[0].error_code) == INVALID_TXN_STATE
        p.commit_transaction(30)
        want = sorted(want + [b"in"])
        assert _read(c, "xt", 3, expect=want) == want


def test_coordinator_killed_after_prepare_commit(tmp_path, zk_hosts):
    props = {**TXN_PROPS, "transaction.state.log.replication.factor": "2", "transaction.state.log.min.isr": "1"}
    with SeglogCluster.running(tmp_path, zk_hosts, size=3, props=props) as c:
        tid = "failover-tx"
        p = _producer(c, tid)
        coordinator = _coordinator(c, tid)
        txn_part = TL.partition_for(tid, 3)
        _, replicas, _ = c.metadata(TL.TOPIC)[txn_part]
        successor = next(b for b in replicas if b != coordinator)
        lone = next(b for b in c.brokers if b not in replicas)
        # p0 lives on `lone` only, p1 on the successor only: the commit's markers go to both.
        fs = c.admin().create_topics([NewTopic("ft", num_partitions=2, replica_assignment=[[lone], [successor]])])
        fs["ft"].result(30)
        c.wait_for(lambda: all(leader >= 0 for leader, _r, _i in c.metadata("ft").values()), 30, "leaders of ft")
        p.begin_transaction()
        for i in range(6):
            p.produce("ft", value=b"v%d" % i, partition=i % 2)
        p.flush(20)
        c.brokers[lone].kill()             # p0's marker cannot be written: the commit stays prepared
        p.commit_transaction(30)           # answered once PrepareCommit is acknowledged
        assert _state(c, coordinator, tid) == (NONE, "PrepareCommit")
        c.brokers[coordinator].kill()
        c.wait_for(lambda: _state(c, successor, tid)[0] == NONE, 40, f"broker {successor} coordinating {tid}")
        assert _state(c, successor, tid) == (NONE, "PrepareCommit")
        c.brokers[lone].restart()
        c.wait_for(lambda: _state(c, successor, tid) == (NONE, "CompleteCommit"), 60, "the commit completed")
        want = sorted(b"v%d" % i for i in range(6))
        assert _read(c, "ft", 2, expect=want) == want


def test_java_transactional_producer_on_the_cluster(tmp_path, zk_hosts):
    """Kafka's Java producer and consumers (the program of tests/java_transactions.py)
    against three brokers: commit, abort, sendOffsetsToTransaction, fencing."""
    program = JavaTransactions(tmp_path)
    jars = program.jars
    with SeglogCluster.running(tmp_path / "cluster", zk_hosts, size=3, props=TXN_PROPS) as c:
        c.create_topic("jt", 2, rf=2)
        c.create_topic("jin", 2, rf=2)
        p0 = ck.Producer({"bootstrap.servers": c.bootstrap})
        for i in range(4):
            p0.produce("jin", value=b"in%d" % i, partition=i % 2)
        p0.flush(20)
        check_java_rows(program.run(c.bootstrap, 240))
        # kafka-transactions: list asks every broker, describe finds the coordinator (FindCoordinator v4)
        tool = jars.first_class("org.apache.kafka.tools.TransactionsCommand")
        out = jars.run_tool(tool, ["--bootstrap-server", c.bootstrap, "list"], timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        listed = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
        coordinator = _coordinator(c, "java-tx")
        assert [(r[0], r[1], r[3]) for r in listed] == [("java-tx", str(coordinator), "CompleteCommit")]
        out = jars.run_tool(tool, ["--bootstrap-server", c.bootstrap, "describe", "--transactional-id", "java-tx"],
                            timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        header, row = [line.split() for line in out.stdout.splitlines() if line.strip()][:2]
        described = dict(zip(header, row))
        assert described["CoordinatorId"] == str(coordinator) and described["TransactionState"] == "CompleteCommit"


def test_pipelined_produce_waits_behind_a_verification(tmp_path, zk_hosts):
    """KIP-890 at a leader that does not coordinate the id: a request parked while the
    coordinator vouches for one of its partitions is followed, on the same connection, by
    requests for a partition whose transaction is already open here. They must append after
    it, in the order sent (as a producer with several requests in flight sends them): appended
    ahead they fail with OUT_OF_ORDER_SEQUENCE_NUMBER, which Kafka's producer cannot retry once
    the parked one is acknowledged (ProducerPerformance with transactions on three brokers)."""
    from logcore.wire.api_keys import ADD_PARTITIONS_TO_TXN, END_TXN, INIT_PRODUCER_ID
    from logcore.wire.error_codes import COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS
    with SeglogCluster.running(tmp_path, zk_hosts, size=3, props=TXN_PROPS) as c:
        tid = "pipelined-tx"
        coordinator = _coordinator(c, tid)
        leader, follower = [b for b in sorted(c.brokers) if b != coordinator][:2]
        fs = c.admin().create_topics([NewTopic("pt", num_partitions=2,
                                                        replica_assignment=[[leader, follower]] * 2)])
        fs["pt"].result(30)
        c.wait_for(lambda: all(v[0] == leader for v in c.metadata("pt").values()), 30, f"broker {leader} leading pt")

        def coordinated(api_key: int, body: dict, version: int):
            def answered():
                r = _ask(c, coordinator, api_key, body, version)
                code = int(getattr(r, "error_code", NONE))
                return None if code in (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS) else r
            return c.wait_for(answered, 30, f"API {api_key} of {tid!r} answered", interval=0.1)

        init = coordinated(INIT_PRODUCER_ID, {"transactional_id": tid, "transaction_timeout": 60000,
                                              "producer_id": -1, "producer_epoch": -1}, 4)
        assert int(init.error_code) == NONE
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        added = coordinated(ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "pt", "partitions": [0, 1]}]}, 3)
        assert [int(r.partition_error_code) for t in added.results_by_topic_v3_and_below
                for r in t.results_by_partition] == [NONE, NONE]

        def produce(*batches):
            """batches: (partition, first sequence, values)"""
            data = [{"index": q, "records": build_batch(
                [(None, v, (), int(time.time() * 1000)) for v in values], producer_id=pid, producer_epoch=epoch,
                base_sequence=seq, is_transactional=True)} for q, seq, values in batches]
            return {"transactional_id": tid, "acks": -1, "timeout": 10000,
                    "topic_data": [{"name": "pt", "partition_data": data}]}

        with KafkaConnection("127.0.0.1", c.brokers[leader].port, timeout_s=30) as conn:
            first = conn.request(PRODUCE, produce((0, 0, [b"a0", b"a1"])), 9)
            assert int(first.responses[0].partition_responses[0].error_code) == NONE
            # p0's transaction is open at the leader now; p1's first batch needs the coordinator
            conn.send(PRODUCE, produce((0, 2, [b"a2"]), (1, 0, [b"b0", b"b1"])), 9)
            for seq in range(3, 8):
                conn.send(PRODUCE, produce((0, seq, [b"a%d" % seq])), 9)
            codes = [[(int(p.index), int(p.error_code)) for t in conn.receive().responses
                      for p in t.partition_responses] for _ in range(6)]
        assert codes == [[(0, NONE), (1, NONE)]] + [[(0, NONE)]] * 5, codes
        ended = coordinated(END_TXN, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                      "committed": True}, 3)
        assert int(ended.error_code) == NONE
        want = sorted([b"a%d" % i for i in range(8)] + [b"b0", b"b1"])
        assert _read(c, "pt", 2, expect=want) == want
