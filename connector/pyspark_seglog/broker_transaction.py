"""One sink task's Kafka transaction (`deliveryGuarantee=exactly-once` through a broker), and the
driver's end of it.

A task attempt owns a `TaskTransaction`: a transactional id stable across the attempts of a
task in a micro-batch (`seglog-sink-<query or job id>-<task partition id>`, with `-odd` for odd
batch ids), so that InitProducerId fences every earlier attempt of the same task and aborts what
it left open. The task adds each
partition before its first batch there (AddPartitionsToTxn), produces transactional batches,
and, in a streaming query, records the batch id in the same transaction (AddOffsetsToTxn +
TxnOffsetCommit, offset = batch id, in a group of its own, named as the transactional id). It
does not end the transaction: its commit message carries (transactional id, producer id,
epoch), and the driver's commit sends EndTxn(commit) for each (`end_transactions`), abort
EndTxn(abort). A replayed batch asks the group first (`committed_batch`, after InitProducerId
has settled the earlier attempt's transaction): a batch id already recorded means its rows are
committed, and the task writes nothing. docs/sink-protocol.md has the argument.

The coordinator requests go over connections of their own (a second `BrokerClient`), never over
the ones the task's Produce requests are pipelined on.
"""
from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass

from logcore.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, TRANSACTIONAL_MASK
from logcore.records.crc import crc32c
from logcore.security.client_security import ClientSecurity
from logcore.wire.api_keys import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, END_TXN, FIND_COORDINATOR,
                                   INIT_PRODUCER_ID, OFFSET_FETCH, TXN_OFFSET_COMMIT)
from logcore.wire.client import BrokerAddress, KafkaConnectionError, KafkaError, error_name
from logcore.wire.error_codes import (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS,
                                      COORDINATOR_NOT_AVAILABLE, INVALID_PRODUCER_EPOCH, INVALID_TRANSACTION_TIMEOUT,
                                      INVALID_TXN_STATE, NONE, NOT_COORDINATOR, PRODUCER_FENCED,
                                      REQUEST_TIMED_OUT, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      UNSTABLE_OFFSET_COMMIT)

from pyspark_seglog.broker_client import BrokerClient, ClientPool
from pyspark_seglog.sink_options import TRANSACTION_TIMEOUT_OPTION as TIMEOUT_OPTION

logger = logging.getLogger(__name__)

KEY_GROUP, KEY_TRANSACTION = 0, 1
# Coordinator errors after which the request goes to a coordinator found again.
MOVED = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE})
# ... and those after which the same coordinator is asked again after a pause.
BUSY = frozenset({COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT,
                  UNSTABLE_OFFSET_COMMIT})
FENCED = frozenset({PRODUCER_FENCED, INVALID_PRODUCER_EPOCH})
BACKOFF_S = (0.02, 0.05, 0.1, 0.2, 0.5)
GUARANTEE_OPTION = "deliveryGuarantee"          # as users write it (Spark lower-cases it)
# Coordinator connections, kept for the worker's next task and the driver's next commit
# (broker_client.ClientPool); never those of the task's Produce requests.
_CLIENTS = ClientPool("seglog-spark-sink-txn")
_COMMIT_CLIENTS = ClientPool("seglog-spark-sink-commit", keep=1)
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


def transactional_id(owner: str, task: int, batch_id: int = 0) -> str:
    """The id of a task's transactions: the same for every attempt of the task in a batch. A
    streaming task alternates between two ids, one for even batch ids and one for odd ones, so
    that its InitProducerId does not wait for the commit of the task's previous batch, whose
    markers are still being written when the next batch starts; the even id is the one versions
    before the alternation used for every batch."""
    base = f"seglog-sink-{owner}-{task}"
    return base if batch_id % 2 == 0 else f"{base}-odd"


def mark_transactional(batch: bytes) -> bytes:
    """The batch with its transactional attribute set (the CRC covers the attributes: recomputed)."""
    out = bytearray(batch)
    (attributes,) = _I16.unpack_from(out, ATTRIBUTES_OFFSET)
    _I16.pack_into(out, ATTRIBUTES_OFFSET, attributes | TRANSACTIONAL_MASK)
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


@dataclass(frozen=True)
class OpenTransaction:
    """What the driver needs to end a task's transaction."""
    transactional_id: str
    producer_id: int
    producer_epoch: int


class _Coordinators:
    """Finding and asking the coordinator of a key (a transactional id or a group), over the
    connections of its own client; retried while the coordinator moves or is busy."""

    def __init__(self, client: BrokerClient, deadline_s: float):
        self.client = client
        self.deadline_s = deadline_s
        self.nodes = client.coordinator_nodes      # the pooled client's: found once per id

    def find(self, key_type: int, key: str) -> int:
        node = self.nodes.get((key_type, key))
        if node is None:
            body = self.client.request(FIND_COORDINATOR, {"key": key, "key_type": key_type})
            code = int(body.error_code)
            if code != NONE:
                raise KafkaError(f"{self.client.where()}: FindCoordinator for {key!r}: {error_name(code)}"
                                 f" {getattr(body, 'error_message', '') or ''}".rstrip(), code)
            node = self.nodes[(key_type, key)] = int(body.node_id)
            address = BrokerAddress(node, body.host, int(body.port))
            old = self.client.brokers.get(node)
            if old is not None and (old.host, old.port) != (address.host, address.port):
                self.client.drop_connection(node)          # the broker moved
            self.client.brokers[node] = address
        return node

    def ask(self, key_type: int, key: str, api_key: int, values: dict, error_of, what: str):
        """Send `values` to the key's coordinator until `error_of(response)` is not a retriable
        coordinator error; returns the response, or raises KafkaError with the error code."""
        started = time.monotonic()
        failures = 0
        while True:
            code, reason = -1, ""
            try:
                node = self.find(key_type, key)
                body = self.client.leader_connection(node).request(api_key, values)
                code = error_of(body)
                if code == NONE:
                    return body
                reason = f"{self.client.node_where(node)} answered {error_name(code)}"
                if code in MOVED:
                    self.nodes.pop((key_type, key), None)
                elif code not in BUSY:
                    raise KafkaError(f"{what}: {reason}", code)
            except KafkaConnectionError as exc:
                self.nodes.pop((key_type, key), None)
                self.client.close()
                reason = str(exc)
            except KafkaError as exc:
                if exc.code not in MOVED and exc.code not in BUSY:
                    raise
                self.nodes.pop((key_type, key), None)
                code, reason = exc.code, str(exc)
            failures += 1
            waited = time.monotonic() - started
            if waited > self.deadline_s:
                raise KafkaError(f"{what}: gave up after {waited:.0f} s ({failures} attempts): {reason}", code)
            time.sleep(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])


class TaskTransaction:
    """One task attempt's transaction on the brokers (see the module docstring)."""

    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int, *, deadline_s: float,
                 security: ClientSecurity | None = None):
        self.txn_id = txn_id
        self.timeout_ms = timeout_ms
        self.client = _CLIENTS.take(bootstrap, security=security)
        self.coordinators = _Coordinators(self.client, deadline_s)
        self.producer_id = -1
        self.epoch = -1
        self.added: set[tuple[str, int]] = set()
        self.offsets_added: set[str] = set()

    def close(self) -> None:
        _CLIENTS.give_back(self.client)

    def open(self) -> OpenTransaction:
        return OpenTransaction(self.txn_id, self.producer_id, self.epoch)

    @property
    def started(self) -> bool:
        return bool(self.added or self.offsets_added)

    def begin(self) -> None:
        """InitProducerId: fences every earlier attempt of this id, aborting what it left open
        (answered CONCURRENT_TRANSACTIONS while that abort, or an earlier commit, completes)."""
        body = self.coordinators.ask(
            KEY_TRANSACTION, self.txn_id, INIT_PRODUCER_ID,
            {"transactional_id": self.txn_id, "transaction_timeout": self.timeout_ms,
             "producer_id": -1, "producer_epoch": -1},
            lambda b: int(b.error_code), f"InitProducerId of transactional id {self.txn_id!r}")
        self.producer_id, self.epoch = int(body.producer_id), int(body.producer_epoch)

    def add_partitions(self, tps) -> None:
        new = sorted(set(tps) - self.added)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for t, p in new:
            by_topic.setdefault(t, []).append(p)

        def error_of(body) -> int:
            codes = {int(p.partition_error_code) for r in body.results_by_topic_v3_and_below
                     for p in r.results_by_partition}
            bad = codes - {NONE}
            return min(bad, key=lambda c: c not in MOVED | BUSY) if bad else NONE

        self.coordinators.ask(
            KEY_TRANSACTION, self.txn_id, ADD_PARTITIONS_TO_TXN,
            {"v3_and_below_transactional_id": self.txn_id, "v3_and_below_producer_id": self.producer_id,
             "v3_and_below_producer_epoch": self.epoch,
             "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            error_of, f"AddPartitionsToTxn of transactional id {self.txn_id!r}")
        self.added.update(new)

    def committed_batch(self, group: str, *, stable: bool = True) -> int:
        """The last batch id this task recorded in `group` (-1: none), as a read_committed consumer
        sees it (pending offsets of an open transaction: UNSTABLE_OFFSET_COMMIT, asked again);
        with `stable=False`, the last one committed, whatever a transaction has pending."""
        def error_of(body) -> int:
            if int(body.error_code) != NONE:
                return int(body.error_code)
            codes = {int(p.error_code) for t in body.topics for p in t.partitions} - {NONE}
            return min(codes) if codes else NONE

        body = self.coordinators.ask(KEY_GROUP, group, OFFSET_FETCH,
                                     {"group_id": group, "topics": None, "require_stable": stable},
                                     error_of, f"OffsetFetch of group {group!r}")
        offsets = [int(p.committed_offset) for t in body.topics for p in t.partitions]
        return max(offsets, default=-1)

    def record_batch(self, group: str, topic: str, batch_id: int) -> None:
        """Commit offset `batch_id` for (topic, 0) in `group` inside this transaction."""
        if group not in self.offsets_added:
            self.coordinators.ask(
                KEY_TRANSACTION, self.txn_id, ADD_OFFSETS_TO_TXN,
                {"transactional_id": self.txn_id, "producer_id": self.producer_id,
                 "producer_epoch": self.epoch, "group_id": group},
                lambda b: int(b.error_code), f"AddOffsetsToTxn of transactional id {self.txn_id!r}")
            self.offsets_added.add(group)
        self.coordinators.ask(
            KEY_GROUP, group, TXN_OFFSET_COMMIT,
            {"transactional_id": self.txn_id, "group_id": group, "producer_id": self.producer_id,
             "producer_epoch": self.epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
             "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": batch_id,
                                                        "committed_leader_epoch": -1,
                                                        "committed_metadata": ""}]}]},
            lambda b: max((int(p.error_code) for t in b.topics for p in t.partitions), default=NONE),
            f"TxnOffsetCommit of group {group!r}")

    def abort_quietly(self) -> None:
        """EndTxn(abort) on the way out of a failed attempt, so that readers need not wait for
        the retry's InitProducerId or the timeout; failures are only logged (either of those
        aborts it anyway)."""
        if not self.started:
            return
        try:
            end_transactions(self.coordinators, [self.open()], commit=False)
        except KafkaError as exc:
            logger.warning("seglog sink: could not abort transaction %s: %s", self.txn_id, exc)


def end_transactions(coordinators: _Coordinators, txns: list[OpenTransaction], *, commit: bool) -> None:
    """EndTxn for each transaction, pipelined per coordinator. A retried EndTxn(commit) of a
    transaction already committed answers NONE, so a replayed commit does nothing twice. Raises
    KafkaError naming every transaction that could not be ended."""
    client = coordinators.client
    what = "commit" if commit else "abort"
    pending = list(txns)
    started = time.monotonic()
    failures = 0
    while pending:
        by_node: dict[int, list[OpenTransaction]] = {}
        errors: dict[str, tuple[int, str]] = {}
        for t in pending:
            try:
                by_node.setdefault(coordinators.find(KEY_TRANSACTION, t.transactional_id), []).append(t)
            except KafkaConnectionError as exc:
                client.close()
                errors[t.transactional_id] = (-1, str(exc))
            except KafkaError as exc:
                if exc.code not in MOVED and exc.code not in BUSY:
                    raise
                errors[t.transactional_id] = (exc.code, str(exc))
        # Every coordinator's requests go out before any answer is awaited: each EndTxn is a
        # replicated write at its coordinator, and the coordinators (and a coordinator's
        # requests on one connection) work on them at once.
        sent: dict[int, object] = {}
        for node, group in by_node.items():
            try:
                conn = client.leader_connection(node)
                for t in group:
                    conn.send(END_TXN, {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                        "producer_epoch": t.producer_epoch, "committed": commit})
                sent[node] = conn
            except KafkaConnectionError as exc:
                _lost(coordinators, node, group, exc, errors)
        for node, conn in sent.items():
            group = by_node[node]
            try:
                answers = [int(conn.receive().error_code) for _t in group]
            except KafkaConnectionError as exc:
                _lost(coordinators, node, group, exc, errors)
                continue
            for t, code in zip(group, answers):
                if code == NONE:
                    continue
                if code in MOVED:
                    coordinators.nodes.pop((KEY_TRANSACTION, t.transactional_id), None)
                errors[t.transactional_id] = (code, f"{client.node_where(node)} answered {error_name(code)}")
        final = {i: e for i, e in errors.items() if e[0] != -1 and e[0] not in MOVED and e[0] not in BUSY}
        if final:
            raise KafkaError(_end_failure(what, final, coordinators.client.bootstrap), next(iter(final.values()))[0])
        pending = [t for t in pending if t.transactional_id in errors]
        if not pending:
            return
        failures += 1
        waited = time.monotonic() - started
        if waited > coordinators.deadline_s:
            raise KafkaError(_end_failure(what, errors, coordinators.client.bootstrap) +
                             f" (gave up after {waited:.0f} s)", next(iter(errors.values()))[0])
        time.sleep(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])


def _lost(coordinators: _Coordinators, node: int, group: list[OpenTransaction], exc: Exception,
          errors: dict[str, tuple[int, str]]) -> None:
    """A coordinator's connection broke with `group`'s EndTxn unanswered: found again, retried."""
    client = coordinators.client
    client.drop_connection(node)
    for t in group:
        coordinators.nodes.pop((KEY_TRANSACTION, t.transactional_id), None)
        errors[t.transactional_id] = (-1, f"{client.node_where(node)}: {exc}")


def _end_failure(what: str, errors: dict[str, tuple[int, str]], bootstrap: str) -> str:
    shown = "; ".join(f"{i}: {why}" for i, (_c, why) in sorted(errors.items())[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    codes = {c for c, _w in errors.values()}
    hint = ""
    if codes & FENCED or INVALID_TXN_STATE in codes:
        hint = (f" A fenced or already-ended transaction was aborted by the broker: its transaction"
                f" timeout ({TIMEOUT_OPTION}) passed before the commit, or a newer attempt of the task"
                " replaced it. Nothing of it is visible to read_committed readers; the batch is"
                " written again when the query restarts (raise the option up to the broker's"
                " transaction.max.timeout.ms for long batches).")
    return f"could not {what} {len(errors)} task transaction(s) through {bootstrap}: {shown}{more}.{hint}"


def end_task_transactions(bootstrap: str, txns: list[OpenTransaction], *, commit: bool,
                          deadline_s: float, security: ClientSecurity | None = None) -> None:
    """The driver's commit (or abort): EndTxn for every task transaction of the batch."""
    if not txns:
        return
    client = _COMMIT_CLIENTS.take(bootstrap, security=security)
    try:
        end_transactions(_Coordinators(client, deadline_s), txns, commit=commit)
    finally:
        _COMMIT_CLIENTS.give_back(client)


def refused_error(exc: KafkaError, bootstrap: str) -> KafkaError:
    """A clearer error for a broker that does not allow transactions to the sink."""
    if exc.code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return KafkaError(
            f"the broker at kafka.bootstrap.servers={bootstrap} refuses the sink's transactional ids"
            f" (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: allow Write on transactional ids seglog-sink-*),"
            f" which exactly-once delivery needs; or set {GUARANTEE_OPTION}=at-least-once", exc.code)
    if exc.code == INVALID_TRANSACTION_TIMEOUT:
        return KafkaError(
            f"the broker at kafka.bootstrap.servers={bootstrap} refuses the transaction timeout"
            f" (INVALID_TRANSACTION_TIMEOUT): lower {TIMEOUT_OPTION} to at most its"
            " transaction.max.timeout.ms", exc.code)
    return exc
