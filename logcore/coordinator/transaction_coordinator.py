"""The transaction coordinator: transactional producers' state (KIP-98) kept in the compacted
`__transaction_state` topic, and the end of their transactions written as markers.

Each transactional id has one TxnMetadata, in the partition abs(hashCode(id)) % partitions of
the topic; a change is appended there (in a cluster: acknowledged once the partition's high
watermark passes it) before it takes effect and before the client is answered. While a change
is being written the id refuses others with CONCURRENT_TRANSACTIONS (Kafka's pendingState).

States (Kafka's TransactionState): Empty -(AddPartitionsToTxn / AddOffsetsToTxn)-> Ongoing
-(EndTxn)-> PrepareCommit | PrepareAbort -(every marker written)-> CompleteCommit |
CompleteAbort -(AddPartitions)-> Ongoing ... The client is answered EndTxn once the Prepare
record is written; the markers and the Complete record follow in the background, and a new
coordinator that loads a Prepare record finishes the job.

InitProducerId with a transactional id gives a producer id and bumps its epoch (a new id, or
a new producer id with epoch 0 when the epoch is exhausted), which fences any older producer
of the same id (PRODUCER_FENCED). An Ongoing transaction of the old epoch is aborted first,
with the epoch bumped (Kafka's PrepareEpochFence): the caller gets CONCURRENT_TRANSACTIONS and
retries. A request that finds the id busy this way (a change being written, a transaction's
markers being written) waits for it up to `settle_wait_s` before answering
CONCURRENT_TRANSACTIONS: the next micro-batch of a sink task that asks just after the previous
commit would otherwise sleep through its client's backoff. KIP-360: a producer that gives its current producer id and epoch keeps its id with a
bumped epoch; one that gives the previous pair of a bump it missed gets the current one again.

Transactions older than their timeout are aborted with an epoch bump by a periodic check
(transaction.abort.timed.out.transaction.cleanup.interval.ms); ids idle in Empty or Complete*
longer than transactional.id.expiration.ms are removed with a tombstone.

In a cluster the coordinator of an id is the leader of its partition: state is loaded when
this broker becomes leader (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and dropped when it stops
leading (NOT_COORDINATOR), as the group coordinator does with `__consumer_offsets`; the
partition's leader epoch is the coordinator epoch stamped on the markers.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from logcore.coordinator import transaction_placement
from logcore.coordinator.transaction_log import (TOPIC, TxnRecord, TxnRecords, TxnState, encode_key, encode_value,
                                                 group_partitions, partition_for)
from logcore.coordinator.partition_tenure import PartitionTenure
from logcore.coordinator.transaction_markers import MarkerWriter
from logcore.errors import SegLogError
from logcore.forwarding import forwarded
from logcore.records.batch import build_batch
from logcore.wire import error_codes as E

logger = logging.getLogger(__name__)

MAX_EPOCH = 32767            # Short.MAX_VALUE
NO_PRODUCER_ID = -1
NO_EPOCH = -1
ENDED = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.EMPTY)
PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class TxnMetadata:
    """One transactional id's state as the coordinator holds it."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_EPOCH      # the epoch before the last bump (KIP-360 retries)
    previous_producer_id: int = NO_PRODUCER_ID
    pending: bool = False                    # a change is being written
    completing: asyncio.Task | None = None   # markers + Complete record in flight

    def record(self, **changes) -> TxnRecord:
        """The record of this state with `changes` (TxnRecord's field names)."""
        base = TxnRecord(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                         group_partitions(self.partitions), self.last_update_ms, self.start_ms)
        return dataclasses.replace(base, **changes)

    def apply(self, r: TxnRecord) -> None:
        if (r.producer_id, r.producer_epoch) != (self.producer_id, self.producer_epoch):
            if r.producer_id == self.producer_id:
                self.last_producer_epoch = self.producer_epoch
            else:
                self.previous_producer_id = self.producer_id
                self.last_producer_epoch = NO_EPOCH
        self.producer_id, self.producer_epoch, self.timeout_ms = r.producer_id, r.producer_epoch, r.timeout_ms
        self.state = r.state
        self.partitions = r.partition_set()
        self.last_update_ms, self.start_ms = r.last_update_ms, r.start_ms


@dataclass(frozen=True)
class TxnSettings:
    num_partitions: int = 50
    max_timeout_ms: int = 900_000
    abort_interval_ms: int = 10_000
    id_expiration_ms: int = 604_800_000
    remove_interval_ms: int = 3_600_000
    commit_timeout_s: float = 5.0
    # How long a request that finds its id busy waits for it to settle before answering
    # CONCURRENT_TRANSACTIONS (0: at once, as Kafka's coordinator answers).
    settle_wait_s: float = 1.0


class TransactionCoordinator:
    def __init__(self, partitions, ensure_topic: Callable[[], None], allocate_producer_id: Callable[[], int],
                 settings: TxnSettings, *, on_offsets_marker=None):
        """`partitions`: the broker's PartitionManager; `ensure_topic`: blocking, creates
        __transaction_state when missing (one broker); `allocate_producer_id`: blocking;
        `on_offsets_marker(partition, producer id, committed)`: the group coordinator's hook."""
        self.partitions = partitions
        self.ensure_topic = ensure_topic
        self.allocate_producer_id = allocate_producer_id
        self.settings = settings
        self.placement = transaction_placement.SingleNode()
        self.markers = MarkerWriter(partitions, self.placement, on_offsets_marker=on_offsets_marker,
                                    commit_timeout_s=settings.commit_timeout_s)
        self.txns: dict[str, TxnMetadata] = {}
        # Which __transaction_state partitions a cluster member coordinates (partition_tenure.py).
        self.tenure = PartitionTenure(partitions, TOPIC, "transactional ids", logger,
                                      read=lambda part: self._read_partition(part),
                                      loaded=self._loaded, lost=self._unload)
        self.tasks: set[asyncio.Task] = set()
        self.topic_ready = False
        self.topic_lock: asyncio.Lock | None = None
        self.expiry: asyncio.Task | None = None
        self.waiters: list[asyncio.Future] = []      # requests waiting for an id to settle

    # ------------------------------------------------------------------ placement
    def attach_cluster(self, replica_manager, connect) -> None:
        """Coordinate the ids of the __transaction_state partitions this broker leads; send
        markers to other leaders over `connect(node)` connections."""
        self.placement = transaction_placement.Cluster(replica_manager)
        self.markers.placement = self.placement
        self.markers.connect = connect
        self.topic_ready = True
        replica_manager.leadership_listeners.append(self.tenure.on_leadership)

    owned = forwarded("tenure.owned", "The __transaction_state partitions coordinated here (loaded).")
    loading = forwarded("tenure.loading", "The __transaction_state partitions being loaded.")

    def partition_count(self) -> int:
        return self.placement.partition_count(self.settings.num_partitions)

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partition_count())

    def coordinator_error(self, transactional_id: str) -> int:
        return self.placement.coordinator_error(self.partition_of(transactional_id), self.owned, self.loading)

    def loads_at_open(self) -> bool:
        return self.placement.loads_at_open()

    def coordinates(self, transactional_id: str) -> bool:
        return self.coordinator_error(transactional_id) == E.NONE

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.expiry = asyncio.get_running_loop().create_task(self._expire_loop(), name="txn-expiry")
        for meta in self.txns.values():      # loaded at open: finish what a crash left prepared
            if meta.state in PREPARED:
                self._complete_later(meta, self.tenure.current(self.partition_of(meta.transactional_id)))

    async def stop(self) -> None:
        if self.expiry is not None:
            self.expiry.cancel()
        for task in self.tenure.load_tasks() + list(self.tasks):
            task.cancel()
        self.markers.close()

    def load(self) -> int:
        """Read every partition of __transaction_state (blocking; one broker, at open)."""
        info = self.partitions.topics.get(TOPIC)
        if info is None:
            return 0
        self.topic_ready = True
        if info.partitions != self.settings.num_partitions:
            logger.warning("%s has %d partitions, transaction.state.log.num.partitions says %d: the topic wins",
                           TOPIC, info.partitions, self.settings.num_partitions)
            self.settings = dataclasses.replace(self.settings, num_partitions=info.partitions)
        count = 0
        for p in range(info.partitions):
            records = self._read_partition(self.partitions.get(TOPIC, p))
            count += len(records)
            self._install(p, records)
        logger.info("loaded %d transactional ids (%d records) from %s", len(self.txns), count, TOPIC)
        return count

    def _read_partition(self, part) -> list[tuple[int, bytes | None, bytes | None]]:
        try:
            log = part.log
            return [(r.offset, r.key, r.value) for r in log.read_records(log.log_start_offset, isolation="log_end")]
        finally:
            self.partitions.unpin_thread()

    def _install(self, p: int, records) -> list[TxnMetadata]:
        found = TxnRecords()
        for offset, key, value in records:
            try:
                found.apply(key, value, f"{TOPIC}-{p} offset {offset}")
            except SegLogError as exc:      # one bad record must not keep the rest from loading
                logger.warning("skipping a record of %s-%d: %s", TOPIC, p, exc)
        out = []
        for tid, r in found.latest.items():
            meta = TxnMetadata(tid, r.producer_id, r.producer_epoch, r.timeout_ms)
            meta.apply(r)
            meta.last_producer_epoch = NO_EPOCH
            self.txns[tid] = meta
            out.append(meta)
        return out

    # ------------------------------------------------------------------ leadership (cluster)
    on_leadership = forwarded("tenure.on_leadership", "The replica manager's leadership listener.")

    def _loaded(self, p: int, records, tenure: int) -> int:
        """Coordinate the ids read back from partition p (finishing the prepared ones); returns
        how many."""
        self._unload(p)                         # whatever an earlier tenure left
        loaded = self._install(p, records)
        for meta in loaded:
            if meta.state in PREPARED:
                self._complete_later(meta, tenure)
        return len(loaded)

    def _unload(self, p: int) -> None:
        for tid in [tid for tid in self.txns if self.partition_of(tid) == p]:
            meta = self.txns.pop(tid)
            if meta.completing is not None:
                meta.completing.cancel()
        self._changed()

    # ------------------------------------------------------------------ writing the state
    async def _ensure_topic(self) -> None:
        if self.topic_ready:
            return
        if self.topic_lock is None:
            self.topic_lock = asyncio.Lock()
        async with self.topic_lock:
            if not self.topic_ready:
                await asyncio.to_thread(self.ensure_topic)
                self.topic_ready = True

    def _coordinator_epoch(self, p: int) -> int:
        part = self.partitions.get(TOPIC, p)
        return max(part.leader_epoch, 0) if part is not None else 0

    async def _write(self, meta: TxnMetadata, record: TxnRecord | None) -> int:
        """Append the id's new record (None: its tombstone) and wait for its commit; the error
        code (Kafka's mapping for the coordinator). The caller holds meta.pending."""
        p = self.partition_of(meta.transactional_id)
        tenure = self.tenure.current(p)
        code, message = self.placement.write_check(p, self.owned)
        if code != E.NONE:
            if message:
                logger.warning("transactional id %r: not writing to %s-%d: %s", meta.transactional_id, TOPIC, p, message)
            return _coordinator_code(code)
        try:
            await self._ensure_topic()
            part = self.partitions.get(TOPIC, p)
            if part is None:
                raise SegLogError(f"{TOPIC}-{p} is not open")
            value = None if record is None else encode_value(record)
            batch = build_batch([(encode_key(meta.transactional_id), value, (), _now_ms())])
            info = await self.partitions.submit(part, batch)
        except Exception as exc:   # noqa: BLE001 - reported to the client, the broker goes on
            logger.error("transactional id %r: writing to %s-%d failed: %s", meta.transactional_id, TOPIC, p, exc)
            return E.COORDINATOR_NOT_AVAILABLE
        code = await self.placement.commit(p, info.last_offset + 1, self.settings.commit_timeout_s,
                                           lambda: self.tenure.lasts(p, tenure) and self.coordinates(meta.transactional_id))
        if code != E.NONE:
            logger.info("transactional id %r: record at %s-%d offset %d not acknowledged: error %d",
                        meta.transactional_id, TOPIC, p, info.last_offset, code)
        return _coordinator_code(code)

    async def _transition(self, meta: TxnMetadata, record: TxnRecord) -> int:
        """Write `record` and, once committed, make it the id's state."""
        code = await self._write_pending(meta, record)
        if code == E.NONE and self.txns.get(meta.transactional_id) is meta:
            meta.apply(record)
        self._changed()
        return code

    async def _write_pending(self, meta: TxnMetadata, record: TxnRecord | None) -> int:
        """`_write` holding meta.pending meanwhile (others asking about the id wait, then get
        CONCURRENT_TRANSACTIONS)."""
        meta.pending = True
        try:
            return await self._write(meta, record)
        finally:
            meta.pending = False
            self._changed()

    # ------------------------------------------------------------------ waiting for a busy id
    @staticmethod
    def _busy(meta: TxnMetadata | None) -> bool:
        return meta is not None and (meta.pending or meta.state in PREPARED
                                     or meta.state == TxnState.PREPARE_EPOCH_FENCE)

    def _changed(self) -> None:
        """Some id's state moved: the waiting requests look again."""
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def _settled(self, transactional_id: str, deadline: float) -> bool:
        """Wait until the id is no longer busy (True), or until `deadline` (loop time: False)."""
        loop = asyncio.get_running_loop()
        while self._busy(self.txns.get(transactional_id)):
            left = deadline - loop.time()
            if left <= 0:
                return False
            waiter = loop.create_future()
            self.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, left)
            except asyncio.TimeoutError:
                return False
        return True

    async def _patiently(self, transactional_id: str, call):
        """`call()` again each time the id it found busy settles, up to settle_wait_s; its
        last answer (the error code first, or alone)."""
        deadline = asyncio.get_running_loop().time() + self.settings.settle_wait_s
        while True:
            answer = await call()
            code = answer[0] if isinstance(answer, tuple) else answer
            if code != E.CONCURRENT_TRANSACTIONS or not await self._settled(transactional_id, deadline):
                return answer

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = NO_PRODUCER_ID,
                               producer_epoch: int = NO_EPOCH) -> tuple[int, int, int]:
        """(error code, producer id, epoch)."""
        return await self._patiently(transactional_id, lambda: self._init_producer_id(
            transactional_id, timeout_ms, producer_id, producer_epoch))

    async def _init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                                producer_epoch: int) -> tuple[int, int, int]:
        if not transactional_id:
            return E.INVALID_REQUEST, -1, -1
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return E.INVALID_TRANSACTION_TIMEOUT, -1, -1
        code = self.coordinator_error(transactional_id)
        if code != E.NONE:
            return code, -1, -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            if producer_id != NO_PRODUCER_ID:
                return E.INVALID_PRODUCER_ID_MAPPING, -1, -1
            pid = await asyncio.to_thread(self.allocate_producer_id)
            meta = self.txns.get(transactional_id)
            if meta is None:
                meta = self.txns[transactional_id] = TxnMetadata(transactional_id, pid, NO_EPOCH, timeout_ms)
        if meta.pending or meta.state in PREPARED or meta.state == TxnState.PREPARE_EPOCH_FENCE:
            return E.CONCURRENT_TRANSACTIONS, -1, -1
        if producer_id != NO_PRODUCER_ID:
            # KIP-360: the producer names the id and epoch it has.
            if (producer_id, producer_epoch) == (meta.producer_id, meta.last_producer_epoch) \
                    and meta.state in ENDED:
                return E.NONE, meta.producer_id, meta.producer_epoch     # a retry of the bump it missed
            if producer_id != meta.producer_id or producer_epoch != meta.producer_epoch:
                return E.PRODUCER_FENCED, -1, -1
        if meta.state == TxnState.ONGOING:
            # Fence the producer of the open transaction: abort it at a bumped epoch; the
            # caller retries once it is complete.
            self._abort_with_bump(meta, "a new producer initialised the transactional id")
            return E.CONCURRENT_TRANSACTIONS, -1, -1
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch >= MAX_EPOCH:
            pid, epoch = await asyncio.to_thread(self.allocate_producer_id), 0
        record = meta.record(producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms, state=TxnState.EMPTY,
                             partitions=(), last_update_ms=_now_ms(), start_ms=-1)
        code = await self._transition(meta, record)
        if code != E.NONE:
            if meta.producer_epoch == NO_EPOCH:
                self.txns.pop(transactional_id, None)   # never written
            return code, -1, -1
        return E.NONE, meta.producer_id, meta.producer_epoch

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn
    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[int, TxnMetadata | None]:
        code = self.coordinator_error(transactional_id)
        if code != E.NONE:
            return code, None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_epoch == NO_EPOCH:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if meta.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED, None
        return E.NONE, meta

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: set[tuple[str, int]]) -> int:
        """Add partitions to the id's transaction (starting it); one error code for all."""
        return await self._patiently(transactional_id, lambda: self._add_partitions(
            transactional_id, producer_id, producer_epoch, partitions))

    async def _add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: set[tuple[str, int]]) -> int:
        code, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if code != E.NONE:
            return code
        if meta.pending or meta.state in PREPARED or meta.state == TxnState.PREPARE_EPOCH_FENCE:
            return E.CONCURRENT_TRANSACTIONS
        if meta.state == TxnState.DEAD:
            return E.INVALID_TXN_STATE
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return E.NONE
        now = _now_ms()
        start = meta.start_ms if meta.state == TxnState.ONGOING else now
        record = meta.record(state=TxnState.ONGOING, partitions=group_partitions(meta.partitions | partitions),
                             last_update_ms=now, start_ms=start)
        return await self._transition(meta, record)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, p: int) -> int | None:
        """KIP-890 part 1, for a transactional batch produced to topic-p: NONE when the
        partition is in the producer's ongoing transaction; the produce error otherwise; None
        when this broker does not coordinate the id (it cannot tell)."""
        if not self.coordinates(transactional_id):
            return None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch < meta.producer_epoch:
            return E.INVALID_PRODUCER_EPOCH
        if producer_epoch > meta.producer_epoch or meta.state != TxnState.ONGOING or (topic, p) not in meta.partitions:
            return E.INVALID_TXN_STATE
        return E.NONE

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> int:
        started = self.start_end_txn(transactional_id, producer_id, producer_epoch, commit)
        return started if isinstance(started, int) else await started

    def start_end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> "int | asyncio.Task":
        """EndTxn's checks, now: an error code (or NONE for a retry of an end already complete),
        or the task that writes the Prepare record, the id claimed (busy) before this returns, so
        that a request for the id handled after this one waits for it. The task is the
        coordinator's: a client that goes away does not cancel a write half done."""
        code, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if code != E.NONE:
            return code          # a timed-out producer's epoch was bumped: it is fenced (KIP-588: it re-inits)
        if meta.pending:
            return E.CONCURRENT_TRANSACTIONS
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if meta.state == TxnState.ONGOING:
            meta.pending = True
            return self._spawn(self._prepare_end(meta, meta.record(state=target, last_update_ms=_now_ms())))
        if meta.state == done:
            return E.NONE                              # a retry of an end already complete
        if meta.state == target:
            return E.CONCURRENT_TRANSACTIONS          # its markers are being written
        return E.INVALID_TXN_STATE

    async def _prepare_end(self, meta: TxnMetadata, record: TxnRecord) -> int:
        tenure = self.tenure.current(self.partition_of(meta.transactional_id))
        code = await self._transition(meta, record)
        if code == E.NONE:
            self._complete_later(meta, tenure)
        return code

    def _abort_with_bump(self, meta: TxnMetadata, why: str) -> None:
        """Kafka's PrepareEpochFence: abort the open transaction at epoch + 1 (fencing its
        producer), in the background."""
        if meta.pending or meta.state != TxnState.ONGOING:
            return
        logger.info("transactional id %r: aborting the transaction of producer %d epoch %d: %s",
                    meta.transactional_id, meta.producer_id, meta.producer_epoch, why)
        meta.pending = True
        p = self.partition_of(meta.transactional_id)
        tenure = self.tenure.current(p)

        async def run() -> None:
            bumped = min(meta.producer_epoch + 1, MAX_EPOCH - 1)
            record = meta.record(producer_epoch=bumped, state=TxnState.PREPARE_ABORT, last_update_ms=_now_ms())
            try:
                code = await self._write(meta, record)
            finally:
                meta.pending = False
            if code != E.NONE or self.txns.get(meta.transactional_id) is not meta:
                self._changed()
                return
            meta.apply(record)
            await self._complete(meta, tenure)
        self._spawn(run())

    def _complete_later(self, meta: TxnMetadata, tenure) -> None:
        meta.completing = self._spawn(self._complete(meta, tenure))

    async def _complete(self, meta: TxnMetadata, tenure) -> None:
        """Write the markers of a prepared transaction, then its Complete record."""
        p = self.partition_of(meta.transactional_id)

        def still_valid() -> bool:
            return self.tenure.lasts(p, tenure) and self.txns.get(meta.transactional_id) is meta

        committed = meta.state == TxnState.PREPARE_COMMIT
        written = await self.markers.write(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                                           coordinator_epoch=self._coordinator_epoch(p), committed=committed,
                                           partitions=set(meta.partitions), still_valid=still_valid)
        backoff = 0.1
        while written and still_valid():
            while meta.pending:
                await asyncio.sleep(0.01)
            record = meta.record(state=TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT,
                                 partitions=(), last_update_ms=_now_ms())
            if await self._transition(meta, record) == E.NONE:
                logger.debug("transactional id %r: %s", meta.transactional_id, record.state.kafka_name)
                break
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
        meta.completing = None
        self._changed()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # ------------------------------------------------------------------ expiry
    async def _expire_loop(self) -> None:
        last_removal = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.abort_interval_ms / 1000)
            try:
                self.abort_timed_out(_now_ms())
                if time.monotonic() - last_removal >= self.settings.remove_interval_ms / 1000:
                    last_removal = time.monotonic()
                    await self.remove_expired(_now_ms())
            except Exception:   # noqa: BLE001 - the next round tries again
                logger.exception("transaction expiry failed")

    def abort_timed_out(self, now_ms: int) -> int:
        """Abort (with an epoch bump) every Ongoing transaction older than its timeout."""
        count = 0
        for meta in list(self.txns.values()):
            if meta.state == TxnState.ONGOING and not meta.pending and self.coordinates(meta.transactional_id) \
                    and meta.start_ms >= 0 and now_ms > meta.start_ms + meta.timeout_ms:
                self._abort_with_bump(meta, f"older than its timeout of {meta.timeout_ms} ms")
                count += 1
        return count

    async def remove_expired(self, now_ms: int) -> int:
        """Remove ids idle in Empty/Complete* longer than transactional.id.expiration.ms."""
        count = 0
        for meta in list(self.txns.values()):
            if meta.state in ENDED and not meta.pending and self.coordinates(meta.transactional_id) \
                    and now_ms - meta.last_update_ms > self.settings.id_expiration_ms:
                code = await self._write_pending(meta, None)
                if code == E.NONE and self.txns.get(meta.transactional_id) is meta:
                    del self.txns[meta.transactional_id]
                    count += 1
        return count

    # ------------------------------------------------------------------ describe / list
    def describe(self, transactional_id: str) -> dict:
        code = self.coordinator_error(transactional_id)
        meta = self.txns.get(transactional_id) if code == E.NONE else None
        if code == E.NONE and (meta is None or meta.producer_epoch == NO_EPOCH):
            code = E.TRANSACTIONAL_ID_NOT_FOUND
        if code != E.NONE:
            return {"error_code": code, "transactional_id": transactional_id, "transaction_state": "",
                    "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1,
                    "topics": []}
        return {"error_code": E.NONE, "transactional_id": transactional_id,
                "transaction_state": meta.state.kafka_name, "transaction_timeout": meta.timeout_ms,
                "transaction_start_time": meta.start_ms, "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": list(ps)} for t, ps in group_partitions(meta.partitions)]}

    def list(self, states: set[TxnState] | None, producer_ids: set[int] | None, min_duration_ms: int = -1
             ) -> tuple[int, list[dict]]:
        code = E.COORDINATOR_LOAD_IN_PROGRESS if self.loading else E.NONE
        now = _now_ms()
        out = []
        for tid, meta in self.txns.items():
            if meta.producer_epoch == NO_EPOCH or not self.coordinates(tid):
                continue
            if states and meta.state not in states:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (meta.state != TxnState.ONGOING or now - meta.start_ms < min_duration_ms):
                continue
            out.append({"transactional_id": tid, "producer_id": meta.producer_id,
                        "transaction_state": meta.state.kafka_name})
        return code, out


def _coordinator_code(code: int) -> int:
    """The coordinator's answer for an append's error (Kafka's TransactionStateManager)."""
    if code in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR):
        return E.NOT_COORDINATOR
    if code in (E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                E.REQUEST_TIMED_OUT):
        return E.COORDINATOR_NOT_AVAILABLE
    return code
