"""`seglog transactions`: kafka-transactions.sh through the Kafka protocol, against a seglog
broker or cluster (or Apache Kafka).

    seglog transactions --bootstrap-server H:P list
    seglog transactions --bootstrap-server H:P describe --transactional-id T
    seglog transactions --bootstrap-server H:P describe-producers --topic T --partition P [--broker-id N]
    seglog transactions --bootstrap-server H:P find-hanging (--broker-id N | --topic T [--partition P])
                                                          [--max-transaction-timeout MINUTES]
    seglog transactions --bootstrap-server H:P abort --topic T --partition P
                        (--start-offset N | --producer-id I --producer-epoch E --coordinator-epoch C)

The tables are Kafka 4.1's TransactionsCommand's (each cell padded to its column, then a tab).
`list` asks every broker (ListTransactions); `describe` the id's coordinator (FindCoordinator key
type 1, DescribeTransactions); `describe-producers` the partition's leader (DescribeProducers);
`find-hanging` lists the open transactions of the partitions' producer states older than
--max-transaction-timeout (minutes, Kafka's default 15) whose coordinator does not have them in
an ongoing transaction; `abort` writes an ABORT marker for such a transaction with
WriteTxnMarkers to the partition's leader, as Kafka's Admin.abortTransaction does.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.wire.api_keys import (DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, FIND_COORDINATOR, LIST_TRANSACTIONS,
                                   METADATA, WRITE_TXN_MARKERS)
from logcore.wire.client import KafkaConnection, KafkaError, bootstrap, error_name
from logcore.wire.error_codes import NONE

# FindCoordinator v1-3 (one key each), the others at any version both sides know.
WINDOWS = {FIND_COORDINATOR: (1, 3), METADATA: (1, 12), WRITE_TXN_MARKERS: (1, 1)}
TRANSACTION_KEY = 1
DEFAULT_MAX_TIMEOUT_MIN = 15

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCER_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")


def add_transactions_parser(sub) -> None:
    """The `transactions` subcommand and its own subcommands (Kafka's names and flags)."""
    parser = sub.add_parser("transactions", help="list, describe and abort transactions through a broker",
                            description="Analyze the transactional state of producers (like kafka-transactions):"
                                        " detect and recover from hanging transactions.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]")
    parser.set_defaults(func=cmd_transactions, transactions_command=None)
    commands = parser.add_subparsers(dest="transactions_command", metavar="COMMAND")

    def command(name: str, help_text: str):
        p = commands.add_parser(name, help=help_text)
        p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]", default=argparse.SUPPRESS)
        return p

    command("list", "list transactions")
    p = command("describe", "describe the state of an active transactional-id")
    p.add_argument("--transactional-id", required=True)
    p = command("describe-producers", "describe the states of active producers for a topic partition")
    p.add_argument("--broker-id", type=int, help="describe the producer state on this replica (default: the leader)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p = command("find-hanging", "find hanging transactions")
    p.add_argument("--broker-id", type=int, help="the broker whose partitions are searched")
    p.add_argument("--max-transaction-timeout", type=int, default=DEFAULT_MAX_TIMEOUT_MIN, metavar="MINUTES",
                   help="only transactions open longer than this (default 15)")
    p.add_argument("--topic", help="the topic to search")
    p.add_argument("--partition", type=int, help="the partition of --topic")
    p = command("abort", "abort a hanging transaction (requires administrative privileges)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    p.add_argument("--producer-id", type=int)
    p.add_argument("--producer-epoch", type=int)
    p.add_argument("--coordinator-epoch", type=int)


def cmd_transactions(args, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if not args.bootstrap_server:
        raise InvalidConfigError("transactions: --bootstrap-server is required")
    if args.transactions_command is None:
        raise InvalidConfigError("transactions: give a command: list, describe, describe-producers,"
                                 " find-hanging or abort")
    with TransactionsAdmin(args.bootstrap_server) as admin:
        run = {"list": _list, "describe": _describe, "describe-producers": _describe_producers,
               "find-hanging": _find_hanging, "abort": _abort}[args.transactions_command]
        run(admin, args, out)
    return 0


def pretty_table(headers, rows, out: TextIO) -> None:
    """Kafka's table: each cell padded with spaces to its column's width, then a tab."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
    for row in [headers, *rows]:
        out.write("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths)) + "\n")


class TransactionsAdmin:
    """The connections of one command: the bootstrap broker and the others it reaches by node id."""

    def __init__(self, servers: str):
        self.conn = bootstrap(servers, client_id="seglog-transactions", windows=WINDOWS,
                              option="--bootstrap-server")
        self.others: dict[int, KafkaConnection] = {}
        self.brokers, _ = self.conn.metadata_brokers()

    def __enter__(self) -> "TransactionsAdmin":
        return self

    def __exit__(self, *exc) -> None:
        for conn in [self.conn, *self.others.values()]:
            conn.close()

    def to(self, node: int) -> KafkaConnection:
        """A connection to broker `node` (the bootstrap one when it is that broker)."""
        if node in self.others:
            return self.others[node]
        address = self.brokers.get(node)
        if address is None:
            raise KafkaError(f"broker {node} is not in the cluster's metadata (brokers:"
                             f" {', '.join(map(str, sorted(self.brokers))) or 'none'})")
        if (address.host, address.port) == (self.conn.host, self.conn.port):
            return self.conn
        self.others[node] = self.conn.connection_to(node)
        return self.others[node]

    def partitions(self, topics: list[str] | None) -> dict[tuple[str, int], tuple[int, tuple[int, ...]]]:
        """(topic, partition) -> (leader, replicas) of `topics` (None: every topic)."""
        body = self.conn.request(METADATA, {"topics": None if topics is None else [{"name": t} for t in topics],
                                            "allow_auto_topic_creation": False})
        found = {}
        for t in body.topics:
            if t.error_code != NONE:
                raise KafkaError(f"topic {t.name!r}: {error_name(t.error_code)}", int(t.error_code))
            for p in t.partitions:
                found[(t.name, int(p.partition_index))] = (int(p.leader_id), tuple(int(r) for r in p.replica_nodes))
        return found

    def leader(self, topic: str, partition: int) -> int:
        found = self.partitions([topic]).get((topic, partition))
        if found is None:
            raise KafkaError(f"{topic}-{partition} does not exist")
        if found[0] < 0:
            raise KafkaError(f"{topic}-{partition} has no leader")
        return found[0]

    def list_transactions(self, producer_ids=()) -> list[tuple[int, object]]:
        """(broker id, listing) from every broker."""
        out = []
        for node in sorted(self.brokers):
            body = self.to(node).request(LIST_TRANSACTIONS, {"state_filters": [],
                                                            "producer_id_filters": list(producer_ids)})
            if body.error_code != NONE:
                raise KafkaError(f"ListTransactions at broker {node}: {error_name(body.error_code)}",
                                 int(body.error_code))
            out += [(node, s) for s in sorted(body.transaction_states, key=lambda s: s.transactional_id)]
        return out

    def describe_transaction(self, tid: str):
        """(coordinator id, the DescribeTransactions state of `tid`)."""
        found = self.conn.request(FIND_COORDINATOR, {"key": tid, "key_type": TRANSACTION_KEY})
        if found.error_code != NONE:
            raise KafkaError(f"{error_name(found.error_code)}: {found.error_message or ''}".rstrip(": "),
                             int(found.error_code))
        node = int(found.node_id)
        body = self.to(node).request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})
        return node, body.transaction_states[0]

    def describe_producers(self, node: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], object]:
        """(topic, partition) -> DescribeProducers' partition answer, from broker `node`."""
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = self.to(node).request(DESCRIBE_PRODUCERS, {"topics": [{"name": t, "partition_indexes": ps}
                                                                      for t, ps in by_topic.items()]})
        return {(t.name, int(p.partition_index)): p for t in body.topics for p in t.partitions}


def _failure(what: str, code: int, message: str | None) -> KafkaError:
    return KafkaError(f"{what}: {error_name(code)}{': ' + message if message else ''}", int(code))


def _list(admin: TransactionsAdmin, args, out: TextIO) -> None:
    rows = [(s.transactional_id, str(node), str(s.producer_id), s.transaction_state)
            for node, s in admin.list_transactions()]
    pretty_table(LIST_HEADERS, rows, out)


def _describe(admin: TransactionsAdmin, args, out: TextIO) -> None:
    tid = args.transactional_id
    node, s = admin.describe_transaction(tid)
    if s.error_code != NONE:
        raise _failure(f"Failed to describe transaction state of transactional-id `{tid}`", s.error_code, None)
    start = _epoch_ms(s.transaction_start_time)
    started, duration = (str(start), str(int(time.time() * 1000) - start)) if start > 0 else ("None", "None")
    partitions = ",".join(f"{t.topic}-{p}" for t in s.topics for p in sorted(t.partitions))
    pretty_table(DESCRIBE_HEADERS, [(str(node), tid, str(s.producer_id), str(s.producer_epoch), s.transaction_state,
                                     str(_ms(s.transaction_timeout)), started, duration, partitions)], out)


def _epoch_ms(value) -> int:
    """A datetime_i64 field in ms since the epoch; -1 for none (kio reads Kafka's -1 as None or
    as the epoch itself, which no transaction starts at)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _ms(value) -> int:
    return round(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def _producer_states(admin: TransactionsAdmin, topic: str, partition: int, broker: int | None):
    node = broker if broker is not None else admin.leader(topic, partition)
    answer = admin.describe_producers(node, [(topic, partition)])[(topic, partition)]
    if answer.error_code != NONE:
        where = f"broker {broker}" if broker is not None else "leader"
        raise _failure(f"Failed to describe producers for partition {topic}-{partition} on {where}",
                       answer.error_code, answer.error_message)
    return answer.active_producers


def _describe_producers(admin: TransactionsAdmin, args, out: TextIO) -> None:
    rows = [(str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.last_sequence),
             str(s.last_timestamp), str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None")
            for s in _producer_states(admin, args.topic, args.partition, args.broker_id)]
    pretty_table(PRODUCER_HEADERS, rows, out)


def _find_hanging(admin: TransactionsAdmin, args, out: TextIO) -> None:
    if args.topic is None and args.broker_id is None:
        raise InvalidConfigError("The `find-hanging` command requires either --topic or --broker-id to limit"
                                 " the scope of the search")
    if args.partition is not None and args.topic is None:
        raise InvalidConfigError("The --partition argument requires --topic to be provided")
    found = admin.partitions([args.topic] if args.topic is not None else None)
    if args.partition is not None:
        found = {tp: v for tp, v in found.items() if tp == (args.topic, args.partition)}
        if not found:
            raise KafkaError(f"{args.topic}-{args.partition} does not exist")
    by_node: dict[int, list[tuple[str, int]]] = {}
    for tp, (leader, replicas) in sorted(found.items()):
        if args.broker_id is not None:
            if args.broker_id in replicas or args.partition is not None:
                by_node.setdefault(args.broker_id, []).append(tp)
        elif leader >= 0:
            by_node.setdefault(leader, []).append(tp)
    now = int(time.time() * 1000)
    max_ms = args.max_transaction_timeout * 60_000
    candidates = []                  # (topic, partition, producer state)
    for node, tps in by_node.items():
        for tp, answer in sorted(admin.describe_producers(node, tps).items()):
            if answer.error_code != NONE:
                raise _failure(f"Failed to describe producers for {len(tps)} partitions on broker {node}",
                               answer.error_code, answer.error_message)
            candidates += [(*tp, s) for s in answer.active_producers
                           if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_ms]
    hanging = []
    if candidates:
        ids = {int(s.producer_id) for _, _, s in candidates}
        tids = {int(listing.producer_id): listing.transactional_id
                for _, listing in admin.list_transactions(sorted(ids)) if int(listing.producer_id) in ids}
        described = {}
        for tid in set(tids.values()):
            _, state = admin.describe_transaction(tid)
            described[tid] = state if state.error_code == NONE else None
        for topic, partition, s in candidates:
            state = described.get(tids.get(int(s.producer_id)))
            if state is None or (topic, partition) not in {(t.topic, p) for t in state.topics for p in t.partitions}:
                hanging.append((topic, partition, s))
    rows = [(topic, str(partition), str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
             str(s.current_txn_start_offset), str(s.last_timestamp), str((now - s.last_timestamp) // 60_000))
            for topic, partition, s in hanging]
    pretty_table(HANGING_HEADERS, rows, out)


def _abort(admin: TransactionsAdmin, args, out: TextIO) -> None:
    topic, partition = args.topic, args.partition
    if args.start_offset is None and args.producer_id is None:
        raise InvalidConfigError("The transaction to abort must be identified either with --start-offset or with"
                                 " --producer-id, --producer-epoch, and --coordinator-epoch")
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise InvalidConfigError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise InvalidConfigError("Missing required argument --coordinator-epoch")
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0)
    else:
        open_ = [s for s in _producer_states(admin, topic, partition, None)
                 if s.current_txn_start_offset == args.start_offset]
        if not open_:
            raise KafkaError(f"Could not find any open transactions starting at offset {args.start_offset}"
                             f" on partition {topic}-{partition}")
        s = open_[0]
        # A producer id whose transaction never ended has coordinator epoch -1: 0 is at or
        # below any coordinator's epoch, as Kafka's tool takes.
        pid, epoch, coordinator_epoch = int(s.producer_id), int(s.producer_epoch), max(int(s.coordinator_epoch), 0)
    leader = admin.leader(topic, partition)
    body = admin.to(leader).request(WRITE_TXN_MARKERS, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
        "coordinator_epoch": coordinator_epoch, "topics": [{"name": topic, "partition_indexes": [partition]}]}]})
    for marker in body.markers:
        for t in marker.topics:
            for p in t.partitions:
                if p.error_code != NONE:
                    raise _failure(f"Failed to abort transaction of producer {pid} (epoch {epoch}) on"
                                   f" {topic}-{partition}", p.error_code, None)
