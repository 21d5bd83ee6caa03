"""The transaction APIs of the broker: FindCoordinator(TRANSACTION), InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers,
TxnOffsetCommit, DescribeTransactions and ListTransactions, and the produce-side check of
transactional batches (KIP-890 part 1).

A handler object composed by the Broker with what it needs: the transaction coordinator (and
its marker writer, for WriteTxnMarkers from other coordinators), the group coordinator
(TxnOffsetCommit), the broker's settings and address, its partitions, and the membership that
says whether it serves alone or in a cluster (then the replica manager and the ZooKeeper
catalog, to find and create `__transaction_state` and to reach other brokers).
"""
from __future__ import annotations

import asyncio
import logging

from logcore.broker.cluster_handlers import create_internal_topic, find_internal_coordinator
from logcore.broker.group_handlers import commit_answer, offsets_to_commit
from logcore.coordinator import offsets_topic as OT
from logcore.coordinator.transaction_coordinator import TransactionCoordinator
from logcore.coordinator.transaction_log import TOPIC, TOPIC_CONFIG, TxnState, partition_for
from logcore.wire import error_codes as E
from logcore.wire.api_keys import ADD_PARTITIONS_TO_TXN
from logcore.wire.protocol import Request

logger = logging.getLogger(__name__)

# The version from which each API answers PRODUCER_FENCED (older ones: INVALID_PRODUCER_EPOCH)
_FENCED_FROM = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}


def _fenced(code: int, req: Request) -> int:
    if code == E.PRODUCER_FENCED and req.api_version < _FENCED_FROM.get(req.api_key, 0):
        return E.INVALID_PRODUCER_EPOCH
    return code


def txn_topic_config(config) -> dict[str, str]:
    return {**TOPIC_CONFIG, "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
            "min.insync.replicas": str(config["transaction.state.log.min.isr"])}


class TransactionHandlers:
    def __init__(self, coordinator: TransactionCoordinator, groups, config, advertised: tuple[str, int],
                 partitions, membership):
        """`groups`: the GroupCoordinator; `advertised`: this broker's (host, port);
        `partitions`: its PartitionManager; `membership`: read at each request (join_cluster
        changes it)."""
        self.txn = coordinator
        self.groups = groups
        self.config = config
        self.node_id = config.node_id
        self.host, self.port = advertised
        self.partitions = partitions
        self.membership = membership
        # KIP-890 in a cluster: what the coordinator of another broker answered for a
        # transactional batch's partition, (transactional id, producer id, epoch, topic,
        # partition) -> error code, taken by the produce that asked in its turn.
        self.verdicts: dict[tuple, int] = {}
        # transactional id -> the last of its produce requests waiting for their turn
        self.turns: dict[str, ProduceTurn] = {}
        self.connections: dict[int, object] = {}

    def handlers(self) -> dict:
        return {24: self.add_partitions_to_txn, 25: self.add_offsets_to_txn, 26: self.end_txn,
                27: self.write_txn_markers, 28: self.txn_offset_commit, 65: self.describe_transactions,
                66: self.list_transactions}

    # ------------------------------------------------------------------ FindCoordinator(TRANSACTION)
    async def find_coordinator(self, transactional_id: str) -> dict:
        rm = self.membership.replica_manager
        if rm is None:
            return {"throttle_time": 0, "error_code": E.NONE, "error_message": None,
                    "node_id": self.node_id, "host": self.host, "port": self.port}
        return await find_internal_coordinator(self.membership, TOPIC, transactional_id, "transactional id",
                                               partition_for, self._create_topic)

    async def _create_topic(self) -> str | None:
        """Create __transaction_state in the cluster (transaction.state.log.* settings); None
        when it exists now, else why not."""
        rf_setting = "transaction.state.log.replication.factor"
        return await create_internal_topic(self.membership, TOPIC, self.config["transaction.state.log.num.partitions"],
                                           txn_topic_config(self.config), self.config[rf_setting], rf_setting)

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, req: Request) -> dict:
        body = req.body
        timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
        code, pid, epoch = await self.txn.init_producer_id(
            body.transactional_id, timeout_ms, getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1))
        return {"throttle_time": 0, "error_code": _fenced(code, req), "producer_id": pid, "producer_epoch": epoch}

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn
    async def add_partitions_to_txn(self, req: Request) -> dict:
        b = req.body
        if req.api_version >= 4:
            return await self._add_partitions_batched(b)
        wanted = [(t.name, p) for t in b.v3_and_below_topics for p in t.partitions]
        unknown = {tp for tp in wanted if not self._partition_exists(*tp) or tp[0] == TOPIC}
        if unknown:
            # Kafka: the unknown ones are named, the others are not attempted.
            codes = {tp: (E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED)
                     for tp in wanted}
        else:
            code = await self.txn.add_partitions(b.v3_and_below_transactional_id, b.v3_and_below_producer_id,
                                                 b.v3_and_below_producer_epoch, set(wanted))
            codes = {tp: _fenced(code, req) for tp in wanted}
        by_topic: dict[str, list] = {}
        for (t, p), code in codes.items():
            by_topic.setdefault(t, []).append({"partition_index": p, "partition_error_code": code})
        return {"throttle_time": 0, "results_by_topic_v3_and_below": [
            {"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]}

    async def _add_partitions_batched(self, b) -> dict:
        """AddPartitionsToTxn v4+, the brokers' form (KIP-890): verify_only asks whether the
        partitions are in the producer's ongoing transaction, without adding them."""
        results = []
        for t in b.transactions:
            wanted = [(topic.name, p) for topic in t.topics for p in topic.partitions]
            if t.verify_only:
                codes = {}
                for tp in wanted:
                    code = self.txn.verify(t.transactional_id, t.producer_id, t.producer_epoch, *tp)
                    codes[tp] = E.NOT_COORDINATOR if code is None else code
            else:
                code = await self.txn.add_partitions(t.transactional_id, t.producer_id, t.producer_epoch, set(wanted))
                codes = {tp: code for tp in wanted}
            by_topic: dict[str, list] = {}
            for (topic, p), code in codes.items():
                by_topic.setdefault(topic, []).append({"partition_index": p, "partition_error_code": code})
            results.append({"transactional_id": t.transactional_id, "topic_results": [
                {"name": topic, "results_by_partition": ps} for topic, ps in by_topic.items()]})
        return {"throttle_time": 0, "error_code": E.NONE, "results_by_transaction": results}

    async def add_offsets_to_txn(self, req: Request) -> dict:
        b = req.body
        p = self.groups.partition_of(b.group_id)
        code = await self.txn.add_partitions(b.transactional_id, b.producer_id, b.producer_epoch, {(OT.TOPIC, p)})
        return {"throttle_time": 0, "error_code": _fenced(code, req)}

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, req: Request):
        # Answered later (the connection reads on): a driver ending a micro-batch's transactions
        # sends their EndTxn over one connection, and each Prepare record is a replicated write
        # of its own; one after another they added up. The id is claimed before the next
        # request is read, so a client's later request for it still comes after.
        b = req.body
        started = self.txn.start_end_txn(b.transactional_id, b.producer_id, b.producer_epoch, b.committed)
        if isinstance(started, int):
            return {"throttle_time": 0, "error_code": _fenced(started, req)}
        return self._end_txn_answer(started, req)

    async def _end_txn_answer(self, write: asyncio.Task, req: Request) -> dict:
        code = await asyncio.shield(write)       # a closed connection must not cancel the write
        return {"throttle_time": 0, "error_code": _fenced(code, req)}

    # ------------------------------------------------------------------ WriteTxnMarkers (from a coordinator)
    async def write_txn_markers(self, req: Request):
        # Answered later (the connection reads on): a coordinator completing several
        # transactions sends their markers to a leader over one connection, and each waits
        # for its own ISR. (Markers of one producer are never in flight twice: its next
        # transaction waits for this one's Complete record.)
        return self._write_txn_markers(req)

    async def _write_txn_markers(self, req: Request) -> dict:
        # Each producer's markers appended in one go, then each waits for its own ISR.
        markers = list(req.body.markers)
        answers = await asyncio.gather(*(
            self.txn.markers.write_locals([(t.name, p) for t in marker.topics for p in t.partition_indexes],
                                          producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                                          coordinator_epoch=marker.coordinator_epoch,
                                          committed=marker.transaction_result)
            for marker in markers))
        results = []
        for marker, codes in zip(markers, answers):
            code = iter(codes)
            topics = [{"name": t.name, "partitions": [{"partition_index": p, "error_code": next(code)}
                                                      for p in t.partition_indexes]}
                      for t in marker.topics]
            results.append({"producer_id": marker.producer_id, "topics": topics})
        return {"markers": results}

    # ------------------------------------------------------------------ TxnOffsetCommit
    async def txn_offset_commit(self, req: Request) -> dict:
        b = req.body
        code = self.groups.coordinator_error(b.group_id)
        generation = getattr(b, "generation_id", -1)
        member = getattr(b, "member_id", "") or ""
        if code == E.NONE and (generation >= 0 or member):
            code = self.groups.check_commit(b.group_id, generation, member)    # KIP-447
        if code == E.NONE:
            offsets_partition = (OT.TOPIC, self.groups.partition_of(b.group_id))
            verified = self.txn.verify(b.transactional_id, b.producer_id, b.producer_epoch, *offsets_partition)
            if verified is None and self.membership.replica_manager is not None:
                # KIP-890: the coordinator of the id is another broker's: ask it
                answers = await self._ask_coordinator(b.transactional_id, b.producer_id, b.producer_epoch,
                                                      [offsets_partition])
                verified = answers.get(offsets_partition, E.COORDINATOR_NOT_AVAILABLE)
                if verified in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS):
                    verified = E.COORDINATOR_LOAD_IN_PROGRESS      # retriable for the client
            if verified not in (None, E.NONE):
                code = E.INVALID_PRODUCER_EPOCH if verified == E.INVALID_PRODUCER_EPOCH and req.api_version < 3 \
                    else (E.PRODUCER_FENCED if verified == E.INVALID_PRODUCER_EPOCH else verified)
        offsets, results = offsets_to_commit(b.topics, code, self._partition_exists)
        stored = E.NONE
        if offsets:
            stored = await self.groups.offsets.commit_txn(b.group_id, b.producer_id, b.producer_epoch, offsets)
            if stored == E.INVALID_PRODUCER_EPOCH and req.api_version >= 3:
                stored = E.PRODUCER_FENCED
        return commit_answer(results, stored)

    # ------------------------------------------------------------------ Describe / List
    async def describe_transactions(self, req: Request) -> dict:
        return {"throttle_time": 0,
                "transaction_states": [self.txn.describe(tid) for tid in req.body.transactional_ids]}

    async def list_transactions(self, req: Request) -> dict:
        b = req.body
        unknown, states = [], set()
        for name in b.state_filters or ():
            state = TxnState.from_kafka_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        if unknown and not states:
            return {"throttle_time": 0, "error_code": E.NONE, "unknown_state_filters": unknown,
                    "transaction_states": []}
        code, found = self.txn.list(states or None, set(b.producer_id_filters or ()) or None,
                                    getattr(b, "duration_filter", -1))
        return {"throttle_time": 0, "error_code": code, "unknown_state_filters": unknown,
                "transaction_states": found}

    # ------------------------------------------------------------------ Produce (KIP-890 part 1)
    def produce_check(self, transactional_id: str | None, topic: str, p: int, records) -> tuple[int, str | None]:
        """The error for a batch of a produce request, as far as transactions are concerned:
        a transactional batch needs the request's transactional id and its partition in that
        producer's ongoing transaction (asked of the local coordinator when it coordinates the
        id; else accepted, the log's producer state still fencing older epochs)."""
        transactional = len(records) >= 61 and records[22] & 0x10
        if not transactional:
            return E.NONE, None
        if transactional_id is None:
            return E.INVALID_TXN_STATE, "a transactional batch in a produce request without a transactional id"
        if topic in (TOPIC, OT.TOPIC):
            return E.INVALID_TOPIC_EXCEPTION, f"{topic} is internal: only its coordinator writes it"
        pid = int.from_bytes(records[43:51], "big", signed=True)
        epoch = int.from_bytes(records[51:53], "big", signed=True)
        code = self.txn.verify(transactional_id, pid, epoch, topic, p)
        if code is None:      # another broker coordinates the id: what it answered, if asked
            code = self.verdicts.pop((transactional_id, pid, epoch, topic, p), E.NONE)
        if code == E.NONE:
            return E.NONE, None
        if code in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS):
            return E.NOT_ENOUGH_REPLICAS, (f"the transaction coordinator of {transactional_id!r} could not verify"
                                           f" {topic}-{p} (error {code}); retry")
        if code == E.INVALID_PRODUCER_ID_MAPPING:
            code = E.INVALID_TXN_STATE
        return code, (f"{topic}-{p} is not in the ongoing transaction of transactional id {transactional_id!r}"
                      f" (producer {pid}, epoch {epoch})")

    def produce_turn(self, body) -> "ProduceTurn | None":
        """The turn of a transactional produce request that cannot be appended at once, or None
        when it can (the produce goes on at once): its batches need the coordinator of its
        transactional id (another broker's) to vouch for a partition whose first transactional
        batch this is, or an earlier request of the same id still waits for its own turn. Taken
        in arrival order, so that a producer's pipelined requests append in the order it sent
        them, as Kafka's one-request-at-a-time connections do: a request appended ahead of an
        earlier parked one fails with OUT_OF_ORDER_SEQUENCE_NUMBER, which the producer cannot
        retry once the earlier one is acknowledged."""
        tid = body.transactional_id
        if tid is None:
            return None
        before = self.turns.get(tid)
        wanted = {}
        if self.membership.replica_manager is not None and not self.txn.coordinates(tid):
            wanted = self._unverified(body)
        if not wanted and before is None:
            return None
        turn = ProduceTurn(self, tid, wanted, before)
        self.turns[tid] = turn
        return turn

    def _unverified(self, body) -> dict[tuple[int, int], list[tuple[str, int]]]:
        """(producer id, epoch) -> the partitions of the request whose transactional batch
        finds no open transaction of that producer in the partition's producer state."""
        wanted: dict[tuple[int, int], list[tuple[str, int]]] = {}
        for t in body.topic_data:
            for pd in t.partition_data:
                records = pd.records
                if not (records and len(records) >= 61 and records[22] & 0x10):
                    continue
                pid = int.from_bytes(records[43:51], "big", signed=True)
                epoch = int.from_bytes(records[51:53], "big", signed=True)
                part = self.partitions.get(t.name, pd.index)
                log = part.log_if_open if part is not None else None
                entry = log.producer_state.last_entry(pid) if log is not None else None
                if entry is not None and entry.producer_epoch == epoch and entry.current_txn_first_offset is not None:
                    continue              # its transaction is open here: verified at its first batch
                wanted.setdefault((pid, epoch), []).append((t.name, pd.index))
        return wanted

    async def ask_verdicts(self, tid: str, pid: int, epoch: int, tps: list) -> list[tuple]:
        """Ask the coordinator of `tid` about `tps` and keep its answers for the produce check;
        their keys."""
        codes = await self._ask_coordinator(tid, pid, epoch, tps)
        keys = []
        for tp in tps:
            key = (tid, pid, epoch, *tp)
            self.verdicts[key] = codes.get(tp, E.COORDINATOR_NOT_AVAILABLE)
            keys.append(key)
        return keys

    def turn_over(self, turn: "ProduceTurn", keys: list[tuple]) -> None:
        for key in keys:
            self.verdicts.pop(key, None)      # not taken (the batch failed before its check): stale
        if self.turns.get(turn.tid) is turn:
            del self.turns[turn.tid]

    async def _ask_coordinator(self, tid: str, pid: int, epoch: int, tps) -> dict:
        rm = self.membership.replica_manager
        p = partition_for(tid, self.txn.partition_count())
        state = rm.states.get((TOPIC, p))
        if state is None or state.leader < 0:
            return {}
        node = state.leader
        by_topic: dict[str, list[int]] = {}
        for t, i in tps:
            by_topic.setdefault(t, []).append(i)
        body = {"transactions": [{"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                  "verify_only": True,
                                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
        try:
            conn = self.connections.get(node)
            if conn is None or not conn.connected:
                conn = self.connections[node] = await self.txn.markers.connect(node)
            answer = await conn.request(ADD_PARTITIONS_TO_TXN, body, version=4, timeout_s=10.0)
        except Exception as exc:   # noqa: BLE001 - the producer retries (NOT_ENOUGH_REPLICAS)
            logger.info("verifying %r at broker %d failed: %s", tid, node, exc)
            conn = self.connections.pop(node, None)
            if conn is not None:
                conn.close()
            return {}
        return {(topic.name, r.partition_index): int(r.partition_error_code)
                for result in answer.results_by_transaction for topic in result.topic_results
                for r in topic.results_by_partition}

    def _partition_exists(self, topic: str, index: int) -> bool:
        return self.membership.topic_catalog.partition_exists(topic, index)


class ProduceTurn:
    """One transactional produce request's place among the parked requests of its
    transactional id. `start(submit)` runs it as a task of its own (so that a later request's
    turn comes even when the client that sent this one goes away): it waits until every
    earlier parked request has been submitted, asks the coordinator about the partitions it
    must (the verdicts the produce check takes), then calls `submit` (which queues the
    request's batches at once) and gives what it returns."""

    def __init__(self, handlers: TransactionHandlers, tid: str, wanted: dict, before: "ProduceTurn | None"):
        self.handlers = handlers
        self.tid = tid
        self.wanted = wanted
        self.before = before
        self.task: asyncio.Task | None = None

    def start(self, submit) -> asyncio.Task:
        self.task = asyncio.get_running_loop().create_task(self._run(submit))
        return self.task

    async def _run(self, submit):
        keys = []
        try:
            if self.before is not None and self.before.task is not None:
                await asyncio.wait([self.before.task])        # its outcome is its own request's
            self.before = None
            for (pid, epoch), tps in self.wanted.items():
                keys += await self.handlers.ask_verdicts(self.tid, pid, epoch, tps)
            return submit()
        finally:
            self.handlers.turn_over(self, keys)
