"""The sink's broker path (`kafka.bootstrap.servers`): a task produces its rows through the brokers.

Each task attempt is one producer: with `deliveryGuarantee=exactly-once` (the default) a
transactional one (`broker_transaction.TaskTransaction`: a transactional id per task, stable
across its attempts, one for even and one for odd micro-batches), else an idempotent one with a fresh producer id. It routes
and encodes its rows as the log-dir sink does (`RowRouter`, `logcore.records.encode`), stamps
each RecordBatch with the producer id, epoch and per-partition sequence numbers (and the
transactional attribute), and sends Produce requests with acks=all to each partition's leader
(from Metadata: on a cluster, partitions are led by different brokers): one batch per partition
per request, up to `MAX_IN_FLIGHT` requests in flight on each leader's connection. A partition's
batches are in flight to one broker at a time, so its sequences reach a leader in order.

A partition's pipeline opens only once the leader has acknowledged one of its batches: before
that, its first batch flies alone. A broker takes any sequence as the first of a producer it does
not know (Kafka's rule, which seglog follows), so with several batches in flight a refused first
one (NOT_LEADER_OR_FOLLOWER right after CreateTopics, before the broker has taken the
leadership) could let a later one in ahead of it: its rows out of order, and the retried first
batch refused OUT_OF_ORDER_SEQUENCE_NUMBER. A request that fails with a retriable error (a stale
leader: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...) or a broken connection is sent again,
with the same bytes and sequences, after every request in flight is drained and Metadata
refreshed (the leader may have moved: the new one has the producer's state with the replicated
batches), in sequence order and again one batch at a time per partition until one is
acknowledged; a broker answers a batch it already has with its original offset instead of
appending it twice. `flush()` returns once every batch is acknowledged.

Exactly-once (docs/sink-protocol.md): the task leaves its transaction open and reports it; the
driver's commit ends every task's transaction (`commit_batch`). At-least-once: rows are visible
once acknowledged; a retried attempt or a replayed batch writes them again.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from logcore.errors import TopicNotFoundError
from logcore.records.compression import CODEC_BY_NAME, LEVEL_CONFIGS, Compression
from logcore.records.encode import encode_batches

from logcore.wire.api_keys import PRODUCE
from logcore.wire.client import KafkaConnectionError, KafkaError, error_name
from logcore.wire.error_codes import DUPLICATE_SEQUENCE_NUMBER, MESSAGE_TOO_LARGE, NONE, OUT_OF_ORDER_SEQUENCE_NUMBER
from logcore.wire.api_keys import ADD_PARTITIONS_TO_TXN, END_TXN
from logcore.wire.error_codes import INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, PRODUCER_FENCED
from pyspark_seglog.broker_client import RETRIABLE, BrokerClient, ClientPool
from pyspark_seglog.broker_transaction import (GUARANTEE_OPTION, OpenTransaction, TaskTransaction,
                                               end_task_transactions, mark_transactional, refused_error,
                                               transactional_id)
from pyspark_seglog.row_router import RowRouter
from pyspark_seglog.sink_options import DeliveryGuarantee, SinkOptions

logger = logging.getLogger(__name__)

# The broker de-duplicates the last 5 batches of each producer and partition (as Kafka), and a
# request holds at most one batch per partition: 5 requests in flight keep every retry in reach.
MAX_IN_FLIGHT = 5
MAX_REQUEST_BYTES = 16 << 20          # under the broker's socket.request.max.bytes (100 MiB)
MAX_QUEUED_BYTES = 64 << 20           # encoded but unsent: bounds a task's memory
# Encoded bytes held before the first sends: a small task (a streaming micro-batch) sends all its
# partitions at flush, in one AddPartitionsToTxn and one Produce per leader, instead of a round
# trip of each per partition as the router hands them over; a large one still sends while it
# encodes.
SEND_AHEAD_BYTES = 1 << 20
ACKS_ALL = -1
REQUEST_TIMEOUT_MS = 30_000
RETRY_BACKOFF_S = (0.1, 0.2, 0.5, 1.0)
TOPIC_LISTED_TIMEOUT_S = 30.0
SEQUENCE_WRAP = 1 << 31
# The producers' connections, kept for the worker's next task (broker_client.ClientPool).
_CLIENTS = ClientPool("seglog-spark-sink")


@dataclass
class BrokerWriteMessage(WriterCommitMessage):
    """What one task attempt produced: with exactly-once, in `transaction`, which the driver
    commits (None: nothing to commit, e.g. a replayed batch the task had committed before);
    with at-least-once already visible."""
    task: int
    attempt: int
    producer_id: int
    records: dict[str, int] = field(default_factory=dict)     # "topic-partition" -> rows
    transaction: OpenTransaction | None = None
    skipped: bool = False          # a replay: this task's rows of the batch were committed before


FENCED_PRODUCE = frozenset({PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE})


def check_guarantee(client: BrokerClient, opts: SinkOptions) -> None:
    """When the write is planned: exactly-once needs a broker that serves transactions."""
    if opts.delivery is not DeliveryGuarantee.EXACTLY_ONCE:
        return
    conn = client.connect()
    missing = [name for key, name in ((ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn"), (END_TXN, "EndTxn"))
               if key not in conn.served]
    if missing:
        raise KafkaError(
            f"{conn.where()} does not serve {' and '.join(missing)} (Kafka transactions), which the"
            f" sink's default deliveryGuarantee=exactly-once needs: use a broker with transactions, or"
            f" set {GUARANTEE_OPTION}=at-least-once (each task attempt's rows visible once produced,"
            " as Spark's Kafka sink)")


def produce_task(opts: SinkOptions, columns: dict[str, str], iterator, task: int, attempt: int,
                 owner: str, batch_id: int, streaming: bool) -> BrokerWriteMessage:
    """One task attempt of the broker path: its rows produced, in a transaction left open for the
    driver (exactly-once), or visible at once (at-least-once)."""
    if opts.delivery is DeliveryGuarantee.AT_LEAST_ONCE:
        producer = TaskProducer(opts, columns, task, attempt)
        try:
            for batch in iterator:
                producer.add(batch)
            producer.flush()
        finally:
            producer.close()
        return producer.message()
    clock = [time.perf_counter()]          # when each step ended, for the DEBUG line below
    txn = TaskTransaction(opts.bootstrap_servers, transactional_id(owner, task, batch_id if streaming else 0),
                          opts.transaction_timeout_ms,
                          deadline_s=opts.delivery_timeout_ms / 1000, security=opts.security.client())
    try:
        try:
            txn.begin()          # fences earlier attempts of this task; aborts what they left open
        except KafkaError as exc:
            raise refused_error(exc, opts.bootstrap_servers) from None
        clock.append(time.perf_counter())
        group = txn.txn_id      # the task's record of its committed batches (a group of its own)
        if streaming:
            done = txn.committed_batch(group)
            if batch_id % 2:
                # A run of a version before the ids alternated recorded odd batches in the even
                # id's group, where this version records only even ones: a value there >= this
                # batch is such a run's commit of it. (Not a stable read: the even id's
                # transaction of the previous batch may still be completing.)
                done = max(done, txn.committed_batch(transactional_id(owner, task), stable=False))
            if done >= batch_id:
                logger.info("seglog sink: task %d of batch %d: its rows were committed before (batch %d"
                            " recorded); nothing to write", task, batch_id, done)
                return BrokerWriteMessage(task, attempt, txn.producer_id, skipped=True)
        clock.append(time.perf_counter())
        producer = TaskProducer(opts, columns, task, attempt, transaction=txn)
        try:
            for batch in iterator:
                producer.add(batch)
            clock.append(time.perf_counter())
            record = None
            if streaming and producer.sequences:
                # The batch id goes into the same transaction as the rows, so it can be written
                # while they fly (AddOffsetsToTxn, TxnOffsetCommit: two replicated writes off the
                # task's critical path); an attempt that fails after it aborts both.
                topic = min(t for t, _p in producer.sequences)
                record = lambda: txn.record_batch(group, topic, batch_id)   # noqa: E731
            producer.flush(alongside=record)
            clock.append(time.perf_counter())
        except BaseException:
            txn.abort_quietly()
            raise
        finally:
            producer.close()
        if logger.isEnabledFor(logging.DEBUG):
            steps = [f"{(b - a) * 1000:.1f}" for a, b in zip(clock, clock[1:])]
            logger.debug("seglog sink task %d attempt %d batch %d: InitProducerId %s ms, OffsetFetch %s ms,"
                         " rows routed and encoded %s ms, produced and recorded %s ms", task, attempt, batch_id,
                         *steps)
        message = producer.message()
        if txn.started:
            message.transaction = txn.open()
        return message
    finally:
        txn.close()


def commit_batch(opts: SinkOptions, messages, batch_id: int) -> None:
    """The driver's commit: exactly-once ends every task's transaction with EndTxn(commit)
    (idempotent: a replayed commit of a committed transaction answers NONE)."""
    txns = [m.transaction for m in messages if m is not None and m.transaction is not None]
    started = time.perf_counter()
    if opts.delivery is DeliveryGuarantee.EXACTLY_ONCE:
        end_task_transactions(opts.bootstrap_servers, txns, commit=True,
                              deadline_s=opts.delivery_timeout_ms / 1000, security=opts.security.client())
    logger.debug("seglog sink: batch %s: EndTxn of %d transactions took %.1f ms", batch_id, len(txns),
                 (time.perf_counter() - started) * 1000)
    _log_produced(messages, batch_id, "committed", len(txns))


def abort_batch(opts: SinkOptions, messages, batch_id: int) -> None:
    """The driver's abort: EndTxn(abort) for the transactions the tasks reported (those of failed
    attempts were aborted by the attempt, by the retry's InitProducerId or by the timeout)."""
    txns = [m.transaction for m in messages if m is not None and m.transaction is not None]
    if opts.delivery is DeliveryGuarantee.EXACTLY_ONCE:
        try:
            end_task_transactions(opts.bootstrap_servers, txns, commit=False,
                                  deadline_s=opts.delivery_timeout_ms / 1000, security=opts.security.client())
        except KafkaError as exc:
            logger.warning("seglog sink: batch %s: %s (the broker aborts them at their timeout, or the"
                           " next attempt of each task does)", batch_id, exc)
        _log_produced(messages, batch_id, "aborted", len(txns))
    else:
        _log_produced(messages, batch_id, "aborted (rows already produced stay in the topic)", 0)


def _log_produced(messages, batch_id: int, outcome: str, transactions: int) -> None:
    rows = sum(sum(m.records.values()) for m in messages if m is not None)
    logger.info("seglog sink (through a broker): batch %s %s; %d rows produced by %d of %d tasks"
                " (%d transactions)", batch_id, outcome, rows, sum(m is not None for m in messages),
                len(messages), transactions)


def ensure_topic(client: BrokerClient, opts: SinkOptions, topic: str) -> int:
    """The topic's partition count on the broker, creating the topic if missing and allowed."""
    count = client.partition_counts([topic])[topic]
    if count is not None:
        return count
    if not opts.auto_create:
        raise TopicNotFoundError(
            f"topic {topic!r} does not exist on {client.where()} and autoCreateTopics=false:"
            " create it first (seglog topics --create, or any Kafka admin client) or set"
            " autoCreateTopics=true")
    client.create_topic(topic, opts.topic_partitions, opts.topic_config)
    # Apache Kafka answers CreateTopics once its controller has the topic; its broker lists it a
    # moment later (longer on a busy machine).
    started = time.monotonic()
    failures = 0
    while True:
        count = client.partition_counts([topic])[topic]
        if count is not None:
            return count
        if time.monotonic() - started > TOPIC_LISTED_TIMEOUT_S:
            raise KafkaError(f"{client.where()} created topic {topic!r} but does not list it after"
                             f" {TOPIC_LISTED_TIMEOUT_S:.0f} s")
        failures += 1
        time.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1])


@dataclass
class _Batch:
    tp: tuple[str, int]
    data: bytes
    sequence: int
    records: int
    ordinal: int          # the sequence without wrapping: sorts a partition's batches


class TaskProducer(RowRouter):
    """One task attempt's rows, produced through the broker by one idempotent producer, or by
    the transactional producer of `transaction` (begun: it has the producer id and epoch)."""

    def __init__(self, opts: SinkOptions, columns: dict[str, str], task: int, attempt: int,
                 transaction: TaskTransaction | None = None):
        super().__init__(opts, columns, task)
        self.attempt = attempt
        self.transaction = transaction
        self.client = _CLIENTS.take(opts.bootstrap_servers, security=opts.security.client())
        self.deadline_s = opts.delivery_timeout_ms / 1000
        if transaction is not None:
            self.producer_id, self.epoch = transaction.producer_id, transaction.epoch
        else:
            self.producer_id, self.epoch = self._with_retries(self.client.init_producer_id, "InitProducerId")
        self.topics: dict[str, tuple[int, Compression, int | None]] = {}
        self.policies: dict[str, str] = {}                    # topic -> cleanup.policy
        self.sequences: dict[tuple[str, int], int] = {}       # next row's ordinal per partition
        self.queues: dict[tuple[str, int], deque[_Batch]] = {}
        self.queued_bytes = 0
        # Per leader: requests in flight, oldest first, each (send number, its batches).
        self.in_flight: dict[int, deque[tuple[int, list[_Batch]]]] = {}
        self.sent = 0
        self.flying: dict[tuple[str, int], int] = {}         # partition -> the broker its batches fly to
        # Partitions whose pipeline is open: a batch acknowledged, no retriable error since.
        self.pipelined: set[tuple[str, int]] = set()
        self.acked: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        """Done with the brokers: the client serves the worker's next task unless a response is
        still awaited."""
        _CLIENTS.give_back(self.client)

    def message(self) -> BrokerWriteMessage:
        return BrokerWriteMessage(self.task, self.attempt, self.producer_id,
                                  {f"{t}-{p}": n for (t, p), n in sorted(self.acked.items())})

    # ---------------------------------------------------------------- routing and encoding
    def _topic(self, topic: str) -> tuple[int, Compression, int | None]:
        """(partition count, codec, codec level) of the sink's batches into `topic`."""
        found = self.topics.get(topic)
        if found is None:
            count = self._with_retries(lambda: ensure_topic(self.client, self.opts, topic), "Metadata")
            topic_type, level = "producer", None
            # Only without a codec of its own does the sink ask for the topic's (then at the
            # topic's level); with one it compresses as a Kafka producer does, at the
            # kafka.compression.<codec>.level option or the codec's default, asking nothing more.
            if self.opts.compression is None:
                names = ["compression.type", *LEVEL_CONFIGS.values()]
                config = self._with_retries(lambda: self.client.topic_config(topic, names), "DescribeConfigs")
                topic_type = config.get("compression.type") or "producer"
                level = config.get(LEVEL_CONFIGS.get(CODEC_BY_NAME.get(topic_type)))
            found = self.topics[topic] = (count, *self.opts.batch_codec(
                topic_type, None if level is None else int(level)))
        return found

    def _cleanup_policy(self, topic: str) -> str:
        policy = self.policies.get(topic)
        if policy is None:
            config = self._with_retries(lambda: self.client.topic_config(topic, ["cleanup.policy"]),
                                        "DescribeConfigs")
            policy = self.policies[topic] = config.get("cleanup.policy") or ""
        return policy

    def _encode(self, topic: str, partition: int, codec: Compression, keys: pa.Array, values: pa.Array,
                ts: np.ndarray, headers: pa.Array | None, rows: np.ndarray | None) -> None:
        if rows is not None:
            # Produce requests carry one batch each: take this partition's rows, then cut them.
            idx = pa.array(rows)
            keys, values, ts = keys.take(idx), values.take(idx), ts[rows]
            headers = headers.take(idx) if headers is not None else None
        tp = (topic, partition)
        ordinal = self.sequences.get(tp, 0)
        batches = encode_batches(keys, values, ts, headers=headers, compression=codec,
                                 compression_level=self.topics[topic][2], batch_bytes=self.opts.batch_size,
                                 max_records=self.opts.max_records,
                                 producer_id=self.producer_id, producer_epoch=self.epoch,
                                 base_sequence=ordinal % SEQUENCE_WRAP)
        queue = self.queues.setdefault(tp, deque())
        if self.transaction is not None:
            batches = [mark_transactional(data) for data in batches]
        for data in batches:
            records = int.from_bytes(data[57:61], "big")        # recordsCount
            queue.append(_Batch(tp, data, ordinal % SEQUENCE_WRAP, records, ordinal))
            ordinal += records
            self.queued_bytes += len(data)
        self.sequences[tp] = ordinal
        if self.queued_bytes >= SEND_AHEAD_BYTES:
            self._pump(drain=self.queued_bytes > MAX_QUEUED_BYTES)

    def flush(self, alongside=None) -> None:
        """Send everything and wait until the broker acknowledged every batch. `alongside()`
        (requests of the task's other client) is called once while the flush's first requests
        are in flight, else before it returns."""
        self._pump(drain=True, alongside=alongside)

    # ---------------------------------------------------------------- sending
    def _requests_in_flight(self) -> int:
        return sum(len(q) for q in self.in_flight.values())

    def _pump(self, drain: bool, alongside=None) -> None:
        """Fill each leader's in-flight window; with `drain`, wait until nothing is queued or in
        flight, else only while more than MAX_QUEUED_BYTES wait to be sent (the brokers work on
        their windows while the task encodes more). `alongside`: see flush."""
        started = time.monotonic()
        failures = 0
        while True:
            try:
                self._fill()
                if alongside is not None and self._requests_in_flight():
                    alongside()
                    alongside = None
                if not self._requests_in_flight() or (not drain and self.queued_bytes <= MAX_QUEUED_BYTES):
                    if self.queued_bytes and drain:
                        raise KafkaError(f"{self.queued_bytes} bytes queued but none could be sent"
                                         f" ({self.client.where()})")
                    if alongside is not None:
                        alongside()
                    return
                self._receive_next(self._oldest_node())
            except _Retry as retry:
                failures += 1
                self._recover(retry)
                waited = time.monotonic() - started
                if waited > self.deadline_s:
                    raise KafkaError(
                        f"gave up producing to {retry.where or self.client.where()} after {waited:.0f} s"
                        f" ({failures} retries; kafka.delivery.timeout.ms={self.opts.delivery_timeout_ms}):"
                        f" {retry.reason}") from None
                logger.warning("seglog sink task %d attempt %d: retrying produce (%s)", self.task,
                               self.attempt, retry.reason)
                time.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1])

    def _leader(self, tp: tuple[str, int]) -> int:
        try:
            return self.client.leader_of(tp)[0]
        except KafkaConnectionError as exc:
            raise _Retry(f"Metadata for {tp[0]}-{tp[1]}: {exc}") from None
        except KafkaError as exc:
            if exc.code in RETRIABLE:
                raise _Retry(str(exc)) from None
            raise

    def _fill(self) -> None:
        """Send requests to every leader with room in its window and batches for it."""
        ready: dict[int, list[tuple[str, int]]] = {}
        for tp, queue in self.queues.items():
            if not queue:
                continue
            node = self.flying.get(tp)
            if node is None:
                node = self._leader(tp)
            ready.setdefault(node, []).append(tp)
        if self.transaction is not None:
            # before a partition's first transactional batch (KIP-890: the leader checks it)
            self.transaction.add_partitions(tp for tps in ready.values() for tp in tps)
        for node, tps in ready.items():
            window = self.in_flight.setdefault(node, deque())
            while len(window) < MAX_IN_FLIGHT and any(self._sendable(tp) for tp in tps):
                self._send_next(node, tps)

    def _sendable(self, tp: tuple[str, int]) -> bool:
        """A batch of `tp` may go out now: one is queued, and the partition's pipeline is open or
        none of its batches is in flight (see the module docstring)."""
        return bool(self.queues[tp]) and (tp in self.pipelined or tp not in self.flying)

    def _send_next(self, node: int, tps: list[tuple[str, int]]) -> None:
        batches, size = [], 0
        for tp in tps:
            queue = self.queues[tp]
            if self._sendable(tp) and (not batches or size + len(queue[0].data) <= MAX_REQUEST_BYTES):
                batch = queue.popleft()
                batches.append(batch)
                size += len(batch.data)
                self.flying[tp] = node
        by_topic: dict[str, list] = {}
        for b in batches:
            by_topic.setdefault(b.tp[0], []).append({"index": b.tp[1], "records": b.data})
        self.queued_bytes -= size
        self.sent += 1
        self.in_flight[node].append((self.sent, batches))
        try:
            self.client.leader_connection(node).send(PRODUCE, {
                "transactional_id": self.transaction.txn_id if self.transaction is not None else None,
                "acks": ACKS_ALL, "timeout": REQUEST_TIMEOUT_MS,
                "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()]})
        except KafkaConnectionError as exc:
            raise _Retry(str(exc), where=self.client.node_where(node)) from None

    def _oldest_node(self) -> int:
        return min((q[0][0], node) for node, q in self.in_flight.items() if q)[1]

    def _landed(self, node: int, batches: list[_Batch]) -> None:
        """`batches` are no longer in flight to `node` (answered, or to be sent again)."""
        window = self.in_flight.get(node, ())
        still = {b.tp for _n, bs in window for b in bs}
        for b in batches:
            if b.tp not in still:
                self.flying.pop(b.tp, None)

    def _receive_next(self, node: int, *, retrying: set | None = None) -> list[_Batch]:
        """Handle the oldest response of `node`; returns its batches that must be sent again."""
        window = self.in_flight[node]
        batches = window[0][1]
        conn = self.client.open_connection(node)
        where = self.client.node_where(node)
        if conn is None or not conn.in_flight:
            raise _Retry(f"lost the connection to {where} before its responses came", where=where)
        try:
            body = conn.receive()
        except KafkaConnectionError as exc:
            raise _Retry(str(exc), where=where) from None
        window.popleft()
        self._landed(node, batches)
        results = {(t.name, p.index): p for t in body.responses for p in t.partition_responses}
        again, reasons = [], []
        for b in batches:
            r = results.get(b.tp)
            if r is None:
                raise KafkaError(f"{where} did not answer for {b.tp[0]}-{b.tp[1]}")
            code = int(r.error_code)
            if code in (NONE, DUPLICATE_SEQUENCE_NUMBER):       # a duplicate is already in the log
                self.acked[b.tp] = self.acked.get(b.tp, 0) + b.records
                self.pipelined.add(b.tp)
                continue
            message = f"{b.tp[0]}-{b.tp[1]}: {error_name(code)} {getattr(r, 'error_message', '') or ''}".rstrip()
            if code in RETRIABLE or (code == OUT_OF_ORDER_SEQUENCE_NUMBER and retrying is not None
                                     and b.tp in retrying):
                again.append(b)             # (out of order: an earlier batch of it is being retried)
                self.pipelined.discard(b.tp)
                reasons.append(f"{message} from {where}")
                continue
            hint = ""
            if code in FENCED_PRODUCE and self.transaction is not None:
                hint = (f" (transactional id {self.transaction.txn_id}: a newer attempt of this task"
                        " fenced this one, or the broker aborted its transaction at"
                        " kafka.transaction.timeout.ms)")
            if code == MESSAGE_TOO_LARGE:
                hint = " (lower the option batch.size, or raise the topic's max.message.bytes)"
            raise KafkaError(f"{where} refused a batch of {message}{hint}", code)
        if again and retrying is None:
            raise _Retry("; ".join(reasons), again, where=where)
        return again

    def _recover(self, retry: "_Retry") -> None:
        """After a failed request: collect every unacknowledged batch (draining the responses
        still coming from every leader) and queue them again, in sequence order, ahead of the
        unsent ones; then ask Metadata for the leaders again."""
        again = list(retry.batches)
        for node in list(self.in_flight):
            window = self.in_flight[node]
            while window:
                conn = self.client.open_connection(node)
                if conn is not None and conn.in_flight:
                    try:
                        again.extend(self._receive_next(node, retrying={b.tp for b in again}))
                        continue
                    except _Retry:
                        pass                 # the connection broke: the rest is unknown
                again.extend(b for _n, batches in window for b in batches)
                window.clear()
                self.client.drop_connection(node)
        self.flying.clear()
        self.client.invalidate()             # the leaders may have moved
        by_tp: dict[tuple[str, int], list[_Batch]] = {}
        for b in again:
            by_tp.setdefault(b.tp, []).append(b)
        for tp, batches in by_tp.items():
            self.pipelined.discard(tp)           # one at a time again until one is acknowledged
            batches.sort(key=lambda b: b.ordinal)
            queue = self.queues.setdefault(tp, deque())
            queue.extendleft(reversed(batches))
            self.queued_bytes += sum(len(b.data) for b in batches)

    def _with_retries(self, call, what: str):
        started = time.monotonic()
        failures = 0
        while True:
            try:
                return call()
            except KafkaConnectionError as exc:
                failures += 1
                self.client.close_control()
                if time.monotonic() - started > min(self.deadline_s, 30):
                    raise KafkaConnectionError(f"{what}: {exc}") from None
                time.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1])
            except KafkaError as exc:
                # Apache Kafka answers InitProducerId with COORDINATOR_LOAD_IN_PROGRESS while it
                # loads its transaction state after a start: retriable, as for Kafka's producer.
                if exc.code not in RETRIABLE or time.monotonic() - started > min(self.deadline_s, 30):
                    raise
                failures += 1
                time.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1])


class _Retry(Exception):
    """A request failed in a way that sending it again may fix."""

    def __init__(self, reason: str, batches: list[_Batch] | None = None, where: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.batches = batches or []
        self.where = where              # the broker it happened with
