"""The transaction coordinator's state machine over a real log root (one broker's
PartitionManager): InitProducerId epochs and fencing, AddPartitions, EndTxn with its markers in
the data partitions, the Prepare -> Complete records, restarts that finish a prepared
transaction, timeout aborts with an epoch bump, id expiry, and the produce-side verification."""
from __future__ import annotations

import asyncio


from logcore.broker.partitions import PartitionManager
from logcore.coordinator import transaction_log as TL
from logcore.coordinator.transaction_coordinator import TransactionCoordinator, TxnSettings
from logcore.coordinator.transaction_log import TxnState
from logcore.coordinator.transaction_offsets import replay
from logcore.log.log_root import LogRoot
from logcore.records.batch import build_batch
from logcore.wire import error_codes as E


class Ids:
    def __init__(self):
        self.next = 100

    def allocate(self) -> int:
        self.next += 1
        return self.next


def _open(path, settings=None, ids=None):
    root = LogRoot.open(str(path), create=True)
    if "data" not in root.list_topics():
        root.create_topic("data", 2)
    pm = PartitionManager(root)
    pm.open_all()

    def ensure():
        if TL.TOPIC not in pm.topics:
            root.create_topic(TL.TOPIC, 3, {"cleanup.policy": "compact"})
            pm.open_topic(root.describe_topic(TL.TOPIC))
    ended = []
    txn = TransactionCoordinator(pm, ensure, (ids or Ids()).allocate,
                                 settings or TxnSettings(num_partitions=3, abort_interval_ms=50),
                                 on_offsets_marker=lambda p, pid, committed: ended.append((p, pid, committed)))
    return pm, txn


def _produce(pm, p, pid, epoch, seq, values):
    log = pm.get("data", p).log
    info = log.append_batch(build_batch([(None, v, (), 1000) for v in values], producer_id=pid,
                                        producer_epoch=epoch, base_sequence=seq, is_transactional=True))
    log.commit()
    return info


async def _settled(txn, tid, state, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while txn.txns[tid].state != state or txn.txns[tid].pending:
        assert loop.time() < deadline, (txn.txns[tid].state, state)
        await asyncio.sleep(0.01)


def _markers(pm, p):
    part = pm.get("data", p)
    return [(e.producer_id, e.marker) for e in replay(part.log, 0, "log_end") if e.marker is not None]


def test_commit_and_abort_write_markers_and_records(tmp_path):
    async def run():
        pm, txn = _open(tmp_path / "root")
        await txn.start()
        code, pid, epoch = await txn.init_producer_id("t1", 60000)
        assert (code, pid, epoch) == (E.NONE, 101, 0)
        assert await txn.add_partitions("t1", pid, epoch, {("data", 0), ("data", 1)}) == E.NONE
        assert txn.verify("t1", pid, epoch, "data", 0) == E.NONE
        _produce(pm, 0, pid, epoch, 0, [b"a", b"b"])
        assert pm.get("data", 0).log.last_stable_offset == 0       # the open transaction holds the LSO
        assert await txn.end_txn("t1", pid, epoch, True) == E.NONE
        await _settled(txn, "t1", TxnState.COMPLETE_COMMIT)
        assert _markers(pm, 0) == [(pid, True)] and _markers(pm, 1) == [(pid, True)]
        assert pm.get("data", 0).log.last_stable_offset == 3
        assert txn.verify("t1", pid, epoch, "data", 0) == E.INVALID_TXN_STATE    # no transaction now
        assert await txn.end_txn("t1", pid, epoch, True) == E.NONE               # a retry
        assert await txn.end_txn("t1", pid, epoch, False) == E.INVALID_TXN_STATE
        assert await txn.add_partitions("t1", pid, epoch, {("data", 1)}) == E.NONE
        assert await txn.end_txn("t1", pid, epoch, False) == E.NONE
        await _settled(txn, "t1", TxnState.COMPLETE_ABORT)
        assert _markers(pm, 1) == [(pid, True), (pid, False)]
        states = [TL.parse_value(r.value).state for r in pm.get(TL.TOPIC, txn.partition_of("t1")).log.read_records(0)]
        assert states == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT,
                          TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]
        await txn.stop()
        pm.close()
    asyncio.run(run())


def test_fencing_a_second_producer_aborts_the_open_transaction(tmp_path):
    async def run():
        pm, txn = _open(tmp_path / "root")
        await txn.start()
        _, pid, e0 = await txn.init_producer_id("t1", 60000)
        assert await txn.add_partitions("t1", pid, e0, {("data", 0)}) == E.NONE
        _produce(pm, 0, pid, e0, 0, [b"zombie"])
        # The old epoch's transaction is aborted (epoch + 1) before the answer comes (epoch + 2).
        code, pid2, e2 = await txn.init_producer_id("t1", 60000)
        assert (code, pid2, e2) == (E.NONE, pid, e0 + 2)
        assert txn.txns["t1"].state == TxnState.EMPTY and _markers(pm, 0) == [(pid, False)]
        # the zombie is fenced everywhere
        assert await txn.add_partitions("t1", pid, e0, {("data", 1)}) == E.PRODUCER_FENCED
        assert await txn.end_txn("t1", pid, e0, True) == E.PRODUCER_FENCED
        assert txn.verify("t1", pid, e0, "data", 1) == E.INVALID_PRODUCER_EPOCH
        code, _, _ = await txn.init_producer_id("t1", 60000, pid, e0)              # KIP-360 from the zombie
        assert code == E.PRODUCER_FENCED
        code, _, e3 = await txn.init_producer_id("t1", 60000, pid, e2)             # KIP-360 from the owner
        assert (code, e3) == (E.NONE, e2 + 1)
        assert await txn.init_producer_id("t1", 60000, pid, e2) == (E.NONE, pid, e3)   # its retry
        await txn.stop()
        pm.close()
    asyncio.run(run())


def test_a_busy_id_is_waited_for_or_answered_concurrent_transactions(tmp_path):
    """A request that finds its id busy (markers of the last EndTxn being written, an old
    epoch's transaction being aborted) waits for it to settle (settle_wait_s) instead of
    sending the client to its backoff; with settle_wait_s=0 it gets Kafka's
    CONCURRENT_TRANSACTIONS at once, and the zombie stays fenced either way."""
    async def run():
        pm, txn = _open(tmp_path / "root")
        await txn.start()
        _, pid, epoch = await txn.init_producer_id("t1", 60000)
        assert await txn.add_partitions("t1", pid, epoch, {("data", 0), ("data", 1)}) == E.NONE
        _produce(pm, 0, pid, epoch, 0, [b"a"])
        assert await txn.end_txn("t1", pid, epoch, True) == E.NONE
        assert txn.txns["t1"].state == TxnState.PREPARE_COMMIT       # its markers follow
        # The next transaction's first add, at once: answered once the markers are written.
        assert await txn.add_partitions("t1", pid, epoch, {("data", 1)}) == E.NONE
        assert _markers(pm, 0) == [(pid, True)] and txn.txns["t1"].state == TxnState.ONGOING
        await txn.stop()
        pm.close()

        pm, txn = _open(tmp_path / "root2", TxnSettings(num_partitions=3, abort_interval_ms=50, settle_wait_s=0))
        await txn.start()
        _, pid, e0 = await txn.init_producer_id("t1", 60000)
        assert await txn.add_partitions("t1", pid, e0, {("data", 0)}) == E.NONE
        _produce(pm, 0, pid, e0, 0, [b"zombie"])
        code, _, _ = await txn.init_producer_id("t1", 60000)
        assert code == E.CONCURRENT_TRANSACTIONS          # aborting the old epoch's transaction
        await _settled(txn, "t1", TxnState.COMPLETE_ABORT)
        assert await txn.init_producer_id("t1", 60000) == (E.NONE, pid, e0 + 2)
        assert await txn.add_partitions("t1", pid, e0, {("data", 1)}) == E.PRODUCER_FENCED
        await txn.stop()
        pm.close()
    asyncio.run(run())


def test_timeout_and_limits(tmp_path):
    async def run():
        pm, txn = _open(tmp_path / "root", TxnSettings(num_partitions=3, max_timeout_ms=5000, abort_interval_ms=20))
        await txn.start()
        assert (await txn.init_producer_id("t1", 6000))[0] == E.INVALID_TRANSACTION_TIMEOUT
        _, pid, epoch = await txn.init_producer_id("t1", 100)
        assert await txn.add_partitions("t1", pid, epoch, {("data", 0)}) == E.NONE
        _produce(pm, 0, pid, epoch, 0, [b"x"])
        await asyncio.sleep(0.2)
        await _settled(txn, "t1", TxnState.COMPLETE_ABORT)
        assert txn.txns["t1"].producer_epoch == epoch + 1
        assert _markers(pm, 0) == [(pid, False)]
        assert await txn.end_txn("t1", pid, epoch, True) == E.PRODUCER_FENCED
        assert await txn.add_partitions("t1", 999, 0, {("data", 0)}) == E.INVALID_PRODUCER_ID_MAPPING
        assert await txn.add_partitions("nobody", 1, 0, {("data", 0)}) == E.INVALID_PRODUCER_ID_MAPPING
        txn.settings = TxnSettings(num_partitions=3, id_expiration_ms=1)
        await asyncio.sleep(0.01)
        assert await txn.remove_expired(10**13) == 1
        assert "t1" not in txn.txns
        await txn.stop()
        pm.close()
        # the tombstone keeps it removed after a restart
        pm, txn = _open(tmp_path / "root")
        txn.load()
        assert "t1" not in txn.txns
        pm.close()
    asyncio.run(run())


def test_restart_completes_a_prepared_commit(tmp_path):
    async def run():
        pm, txn = _open(tmp_path / "root")
        _, pid, epoch = await txn.init_producer_id("t1", 60000)
        assert await txn.add_partitions("t1", pid, epoch, {("data", 0), ("data", 1)}) == E.NONE
        _produce(pm, 1, pid, epoch, 0, [b"v"])
        # EndTxn writes PrepareCommit and answers; the broker stops before any marker is written.
        assert await txn.end_txn("t1", pid, epoch, True) == E.NONE
        await txn.stop()
        pm.close()
        pm, txn = _open(tmp_path / "root")
        txn.load()
        assert txn.txns["t1"].state == TxnState.PREPARE_COMMIT
        await txn.start()
        await _settled(txn, "t1", TxnState.COMPLETE_COMMIT)
        assert _markers(pm, 0) == [(pid, True)] and _markers(pm, 1) == [(pid, True)]
        assert [r.value for r in pm.get("data", 1).log.read_records(0, isolation="read_committed")] == [b"v"]
        await txn.stop()
        pm.close()
    asyncio.run(run())


def test_marker_of_an_older_coordinator_epoch_is_fenced(tmp_path):
    async def run():
        pm, txn = _open(tmp_path / "root")
        _produce(pm, 0, 42, 0, 0, [b"x"])
        w = txn.markers
        assert await w.write_local("data", 0, producer_id=42, producer_epoch=0, coordinator_epoch=5,
                                   committed=True) == E.NONE
        _produce(pm, 0, 42, 0, 1, [b"y"])
        assert await w.write_local("data", 0, producer_id=42, producer_epoch=0, coordinator_epoch=4,
                                   committed=False) == E.TRANSACTION_COORDINATOR_FENCED
        assert await w.write_local("data", 0, producer_id=42, producer_epoch=0, coordinator_epoch=5,
                                   committed=False) == E.NONE
        assert await w.write_local("nothere", 0, producer_id=42, producer_epoch=0, coordinator_epoch=5,
                                   committed=False) == E.UNKNOWN_TOPIC_OR_PARTITION
        assert _markers(pm, 0) == [(42, True), (42, False)]
        pm.close()
    asyncio.run(run())


def test_end_txn_claims_the_id_at_once_and_several_ids_end_together(tmp_path):
    """EndTxn's checks run when it is handled and claim the id before its Prepare record is
    written (a broker answers EndTxn later, reading the connection on): a request for the id
    handled next finds it busy; the ends of several ids are written at the same time."""
    async def run():
        pm, txn = _open(tmp_path / "root", TxnSettings(num_partitions=3, abort_interval_ms=50, settle_wait_s=0))
        await txn.start()
        ids = {}
        for tid in ("t1", "t2", "t3"):
            _code, pid, epoch = await txn.init_producer_id(tid, 60000)
            assert await txn.add_partitions(tid, pid, epoch, {("data", 0)}) == E.NONE
            ids[tid] = (pid, epoch)
        writes = [txn.start_end_txn(tid, *ids[tid], True) for tid in ids]
        assert all(isinstance(w, asyncio.Task) and not w.done() for w in writes)
        assert all(txn.txns[tid].pending for tid in ids)         # claimed before any write ran
        assert txn.start_end_txn("t1", *ids["t1"], True) == E.CONCURRENT_TRANSACTIONS
        assert await txn.add_partitions("t1", *ids["t1"], {("data", 1)}) == E.CONCURRENT_TRANSACTIONS
        assert await asyncio.gather(*writes) == [E.NONE] * 3
        for tid in ids:
            await _settled(txn, tid, TxnState.COMPLETE_COMMIT)
        assert sorted(pid for pid, committed in _markers(pm, 0) if committed) == sorted(p for p, _e in ids.values())
        assert txn.start_end_txn("t1", *ids["t1"], True) == E.NONE          # a retry of the complete end
        await txn.stop()
        pm.close()
    asyncio.run(run())
