"""`seglog`: the command line, shaped like Kafka's console tools.

    seglog topics  --root R --create T --partitions N [--config k=v ...] | --list | --describe | ...
    seglog topics  --bootstrap-server H:P --create --topic T --partitions N --replication-factor R | ...
    seglog leader-election --bootstrap-server H:P --election-type preferred --all-topic-partitions
    seglog reassign-partitions --bootstrap-server H:P --reassignment-json-file F --execute|--verify|--cancel
    seglog produce --root R --topic T < lines          (or --bootstrap-server H:P: through the brokers)
    seglog consume --root R --topic T --from-beginning (or --bootstrap-server H:P [--group G])
    seglog dump    --files 00000000000000000000.log --print-data-log
    seglog maintain --root R [--topic T] [--once] [--config-file conf/maintenance.properties]
    seglog tiered  --root R --topic T --list
    seglog repair  --root R --topic T [--partition P]

Errors the user can fix (SegLogError) print as one line `seglog: error: <message>` and exit 1;
usage errors exit 2 as argparse does. Storage options never appear in any output.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from logcore import __version__
from logcore.errors import SegLogError
from logcore.log.properties_file import load_properties
from logcore.tools.arguments import CommandParser, parse_storage_options
from logcore.tools.broker_command import cmd_broker
from logcore.tools.consume_command import cmd_consume
from logcore.tools import acls_command, consumer_groups_command, delete_records_command
from logcore.tools.dump_command import cmd_dump
from logcore.tools.leader_election_command import cmd_leader_election
from logcore.tools.transactions_command import add_transactions_parser, cmd_transactions
from logcore.tools.reassign_partitions_command import cmd_reassign_partitions
from logcore.tools.maintain_command import cmd_maintain
from logcore.tools.produce_command import cmd_produce
from logcore.tools.repair_command import cmd_repair
from logcore.tools.tiered_command import cmd_tiered
from logcore.tools.topics_command import cmd_topics
from logcore.tools.configs_command import cmd_configs

# Imported from here by tests and callers; each command lives in its own module
# (logcore/tools/*_command.py), the shared argument helpers in logcore/tools/arguments.py.
__all__ = ["PROG", "build_parser", "main", "parse_storage_options",
           "cmd_broker", "cmd_consume", "cmd_dump", "cmd_leader_election", "cmd_transactions", "cmd_reassign_partitions", "cmd_maintain", "cmd_produce",
           "cmd_repair", "cmd_tiered", "cmd_topics"]

PROG = "seglog"

_EXAMPLES_TOPICS = """examples:
  seglog topics --root /data/logs --create clicks --partitions 8 --config cleanup.policy=compact
  seglog topics --root s3://bucket/logs --storage-option endpoint_url=http://127.0.0.1:9000 --list
  seglog topics --root /data/logs --describe --topic clicks
  seglog topics --root /data/logs --alter --topic clicks --partitions 12
  seglog topics --root /data/logs --delete --topic clicks
  seglog topics --bootstrap-server 127.0.0.1:9092 --create --topic clicks --partitions 6 --replication-factor 3
  seglog topics --bootstrap-server 127.0.0.1:9092 --create --topic orders --replica-assignment 1:2,2:3,3:1
  seglog topics --bootstrap-server 127.0.0.1:9092 --describe --topic 'clicks|orders'
  seglog topics --bootstrap-server 127.0.0.1:9092 --alter --topic clicks --partitions 12

With --bootstrap-server the topics are those of a running Kafka-protocol broker (seglog broker
or Apache Kafka), managed through the Kafka protocol with kafka-topics' flags and output.
"""
_EXAMPLES_REASSIGN = """examples:
  seglog reassign-partitions --bootstrap-server 127.0.0.1:9092 --reassignment-json-file move.json --execute
  seglog reassign-partitions --bootstrap-server 127.0.0.1:9092 --reassignment-json-file move.json --execute --throttle 10000000
  seglog reassign-partitions --bootstrap-server 127.0.0.1:9092 --reassignment-json-file move.json --verify
  seglog reassign-partitions --bootstrap-server 127.0.0.1:9092 --reassignment-json-file move.json --cancel

move.json is Kafka's reassignment JSON:
  {"version":1,"partitions":[{"topic":"clicks","partition":0,"replicas":[2,3]}]}
--execute prints the current assignment (keep it for a rollback) and starts the moves; new
replicas catch up, then the old ones leave and delete their data. --verify says per partition
whether its move is completed or still in progress. Refused partitions: exit status 1.
"""

_EXAMPLES_ELECTION = """examples:
  seglog leader-election --bootstrap-server 127.0.0.1:9092 --election-type preferred --all-topic-partitions
  seglog leader-election --bootstrap-server 127.0.0.1:9092 --election-type unclean --topic clicks --partition 3

Prints, as kafka-leader-election does, "Successfully completed leader election (PREFERRED) for
partitions clicks-0, ...", "Valid replica already elected for partitions ..." (nothing to do),
and one "Error completing leader election ..." line per failed partition (exit status 1). A
broker that does not serve ElectLeaders is reported as such (exit status 1).
"""
_EXAMPLES_PRODUCE = """examples:
  printf 'user1:click\\n' | seglog produce --bootstrap-server 127.0.0.1:9092 --topic clicks \\
      --property parse.key=true --property key.separator=: --compression-codec zstd
  printf 'hello\\nworld\\n' | seglog produce --root /data/logs --topic clicks
  printf 'user1:click\\n' | seglog produce --root /data/logs --topic clicks --key-separator :
  seglog produce --root /data/logs --topic clicks --compression-type zstd --header source=cli < events.txt
  printf 'user1:NULL\\n' | seglog produce --root /data/logs --topic clicks --key-separator : --null-marker NULL
  printf 'user1\\tNULL\\n' | seglog produce --root /data/logs --topic clicks --property parse.key=true \\
      --property null.marker=NULL
  seglog produce --root /data/logs --topic docs --value-file a.json --key-file a.key --value-file b.json

Each input line is one record (value = the line without its newline). With --key-separator (or
--property parse.key=true and key.separator, a tab by default), the text before the first
separator is the key. A key or value equal to --null-marker (--property null.marker) is null: a
null value is a tombstone, which a compacted topic uses to delete its key. --value-file FILE
produces one record whose value is the whole file (binary, newlines kept) instead of reading
stdin; --key-file gives the key of the --value-file at the same position.

Keyed records go to murmur2(key) mod partitions, like Kafka's default partitioner; records
without a key fill one partition per batch, round-robin (sticky). A batch holds up to
--batch-size bytes (Kafka's batch.size, 16384) and never more than the topic's
max.message.bytes or segment.bytes; a record larger than that alone is refused with the limit.
"""
_EXAMPLES_CONSUME = """examples:
  seglog consume --bootstrap-server 127.0.0.1:9092 --topic clicks --from-beginning --property print.key=true
  seglog consume --bootstrap-server 127.0.0.1:9092 --topic clicks --group reports --max-messages 100
  seglog consume --root /data/logs --topic clicks --from-beginning
  seglog consume --root /data/logs --topic clicks --partition 0 --offset 42 --max-messages 10
  seglog consume --root /data/logs --topic clicks --from-beginning --print-key --print-headers
  seglog consume --root /data/logs --topic clicks --follow

Output lines are like kafka-console-consumer's: [timestamp] [partition] [offset] [headers] [key]
value, separated by --key-separator (a tab by default); headers as k:v,k:v or NO_HEADERS.
Without --from-beginning, --offset or --timestamp reading starts at the end.
With --bootstrap-server it reads through the brokers as kafka-console-consumer (until
--max-messages, --timeout-ms or Ctrl-C); --group joins a consumer group and commits its offsets.
See docs/cli.md.
"""
_EXAMPLES_DUMP = """examples:
  seglog dump --files /data/logs/clicks-0/00000000000000000000.log --print-data-log
  seglog dump --files clicks-0/00000000000000000000.index clicks-0/00000000000000000000.timeindex
  seglog dump --files s3://bucket/logs/clicks-0/00000000000000000000.log --storage-option anon=true
  seglog dump --root /data/logs --topic clicks --remote --partition 0 --offset 1234 --print-data-log

Prints what Kafka's kafka-dump-log prints for .log, .index, .timeindex, .txnindex and .snapshot
files, plus seglog's reading of checkpoint files and partition.metadata. Corrupt data is reported
with its file and byte position; the exit status is then 1.

Remote segments (tiered storage): --remote dumps the topic's remote segments (of --partition, or
only the one holding --offset) with their indexes, producer snapshot and leader epochs, fetched
through the root's remote storage manager, so compressed and encrypted segments print too. A
segment copied in plain mode can also be given to --files by its URL in the remote root
(<topic>-<topic id>/<partition>/<start offset>-<segment id>/<start offset>.log).
"""
_EXAMPLES_TIERED = """examples:
  seglog tiered --root /data/logs --topic clicks --list
  seglog tiered --root /data/logs --topic clicks --partition 0 --list --all-states
  seglog tiered --root /data/logs --topic clicks --partition 0 --segment 1234
  seglog tiered --root /data/logs --topic clicks --list --config-file conf/tiered-storage.properties

Lists the topic's remote segments from its remote log metadata: partition, segment id, state,
offsets, size, largest record timestamp, when the state was recorded, and whether the remote
data is plain (Kafka's bytes) or transformed (compressed and/or encrypted). By default only
COPY_SEGMENT_FINISHED segments (the ones readers are served); --all-states shows every copy
attempt and deletion too. The root's tiered storage settings (remote.log.storage.system.enable,
rsm.config.*) come from its defaults, or from --config-file.
"""


_EXAMPLES_MAINTAIN = """examples:
  seglog maintain --root /data/logs --once
  seglog maintain --root /data/logs --topic clicks --once
  seglog maintain --root s3://bucket/logs --storage-option endpoint_url=http://127.0.0.1:9000 \\
      --config-file conf/maintenance.properties

Each pass visits every partition of the root (or of --topic): segments wholly older than the
topic's retention.ms (by their newest record) or beyond its retention.bytes are deleted, oldest
first, never at or above the high watermark, for topics whose cleanup.policy contains delete.
The log start offset moves first; the files go after file.delete.delay.ms. A partition that
another writer (producer, Spark sink, broker) holds is skipped and retried at the next pass.
Without --once the passes repeat every log.retention.check.interval.ms until Ctrl-C.

Compaction (Kafka's log cleaner), for topics whose cleanup.policy contains compact: after
retention has visited every partition, the partitions whose dirty ratio exceeds
min.cleanable.dirty.ratio, or whose oldest dirty record is older than max.compaction.lag.ms, are
cleaned, the most overdue and then the filthiest first, by log.cleaner.threads cleaner threads
(0 disables compaction). Only the latest record of each key is kept below the first uncleanable
offset (records younger than min.compaction.lag.ms, the active segment and anything at or above
the high watermark are never cleaned); tombstones go after delete.retention.ms.

Tiered storage (a root with remote.log.storage.system.enable=true and rsm.config.*, a topic with
remote.storage.enable=true): before retention, every sealed segment below the last stable offset
that is not yet remote is copied to the remote tier; retention then deletes local copies past
local.retention.ms / local.retention.bytes (only segments already copied; the log start offset
stays), and remote segments past retention.ms / retention.bytes are expired (the log start offset
moves first). A failed copy is retried at the next pass; what a killed pass left is cleaned up.
"""


# ------------------------------------------------------------------------------------ parser

def _add_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, metavar="URL",
                        help="the log root: a local folder, file:///path or s3://bucket/prefix (any fsspec URL)")
    _add_storage_option(parser)


def _add_storage_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-option", action="append", metavar="K=V",
                        help="fsspec option for the root's filesystem, e.g. endpoint_url=http://127.0.0.1:9000, "
                             "key=..., secret=..., client_kwargs.region_name=us-east-1 (repeatable; never printed)")


def _add_root_or_bootstrap(parser: argparse.ArgumentParser, broker_help: str) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--root", metavar="URL",
                       help="the log root: a local folder, file:///path or s3://bucket/prefix (any fsspec URL)")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]", help=broker_help)
    _add_storage_option(parser)


def _add_command_config(parser: argparse.ArgumentParser, keys: str) -> None:
    parser.add_argument("--command-config", metavar="FILE",
                        help=f"with --bootstrap-server: Kafka client properties ({keys};"
                             " security.protocol=PLAINTEXT); any other key is refused")


_EXAMPLES_CONFIGS = """examples:
  seglog configs /data/logs --entity-type topics --entity-name clicks --alter --add-config retention.ms=3600000
  seglog configs /data/logs --entity-type topics --entity-name clicks --describe --all
  seglog configs --bootstrap-server 127.0.0.1:9092 --entity-type topics --entity-name clicks \\
      --alter --add-config cleanup.policy=[compact,delete] --delete-config retention.ms
  seglog configs --bootstrap-server 127.0.0.1:9092 --entity-type brokers --entity-default \\
      --alter --add-config log.retention.ms=86400000
  seglog configs --bootstrap-server 127.0.0.1:9092 --entity-type brokers --entity-name 1 --describe
  seglog configs --bootstrap-server 127.0.0.1:9092 --entity-type clients --entity-name slow \\
      --alter --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
  seglog configs --bootstrap-server 127.0.0.1:9092 --entity-type users --entity-name alice \\
      --entity-type clients --entity-default --describe

A broker applies a change at once to its open logs. Dynamic broker configs are the log defaults
under Kafka's broker names (log.retention.ms, log.segment.bytes, log.cleanup.policy,
message.max.bytes, min.insync.replicas, ...); the other broker settings are static. Client
quotas (users, clients): docs/quotas.md.
"""


class _EntityPart(argparse.Action):
    """--entity-type / --entity-name / --entity-default, also kept in order (`entity_parts`):
    kafka-configs pairs each --entity-type with the name or default given after it."""

    def __call__(self, parser, namespace, values, option_string=None):
        value = True if self.nargs == 0 else values
        namespace.entity_parts = [*(getattr(namespace, "entity_parts", None) or []), (self.dest, value)]
        setattr(namespace, self.dest, value)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="seglog: a Kafka-format segmented log on local disk and S3.",
        epilog="Run `seglog COMMAND --help` for a command's options and examples.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    raw = argparse.RawDescriptionHelpFormatter

    topics = sub.add_parser("topics", help="create, list, describe, delete or grow topics",
                            description="Manage the topics of a log root (like kafka-topics).",
                            epilog=_EXAMPLES_TOPICS, formatter_class=raw)
    where = topics.add_mutually_exclusive_group(required=True)
    where.add_argument("--root", metavar="URL",
                       help="the log root: a local folder, file:///path or s3://bucket/prefix (any fsspec URL)")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                       help="manage the topics of a Kafka-protocol broker (seglog broker or Apache Kafka) instead,"
                            " with kafka-topics' flags and output")
    _add_storage_option(topics)
    topics.add_argument("--create", metavar="TOPIC", nargs="?", const=True,
                        help="create a topic: --create T, or --create --topic T (needs --partitions with --root)")
    topics.add_argument("--list", action="store_true", help="list the topics, one per line")
    topics.add_argument("--describe", action="store_true", help="describe --topic T, or every topic")
    topics.add_argument("--delete", action="store_true", help="delete --topic T and all its data")
    topics.add_argument("--alter", action="store_true",
                        help="add partitions to --topic T (--partitions N) and/or set its configs (--config k=v)")
    topics.add_argument("--topic", metavar="TOPIC",
                        help="the topic for --describe, --delete, --alter (with --bootstrap-server: a regular"
                             " expression, also for --list, as kafka-topics)")
    topics.add_argument("--partitions", type=int, metavar="N", help="partition count (create) or new count (alter)")
    topics.add_argument("--config", action="append", metavar="K=V",
                        help="topic config override for --create or --alter, Kafka names (repeatable); see docs/configuration.md")
    topics.add_argument("--if-not-exists", action="store_true", help="with --create: do nothing if the topic exists")
    topics.add_argument("--replication-factor", type=int, metavar="R",
                        help="with --bootstrap-server --create: replicas of each partition (default: the broker's)")
    topics.add_argument("--replica-assignment", metavar="B:B,B:B",
                        help="with --bootstrap-server --create/--alter: the broker ids of each partition,"
                             " e.g. 1:2:3,2:3:1")
    topics.add_argument("--if-exists", action="store_true",
                        help="with --bootstrap-server --alter/--delete/--describe: no error if --topic matches nothing")
    topics.add_argument("--exclude-internal", action="store_true",
                        help="with --bootstrap-server --list/--describe: leave out internal topics")
    topics.add_argument("--topics-with-overrides", action="store_true",
                        help="with --describe: only topics that override a config (their topic line)")
    topics.add_argument("--all-configs", action="store_true", help="with --describe: every config, not only overrides")
    topics.add_argument("--under-replicated-partitions", action="store_true",
                        help="with --bootstrap-server --describe: only the partitions with fewer in-sync"
                             " replicas than replicas")
    topics.add_argument("--unavailable-partitions", action="store_true",
                        help="with --bootstrap-server --describe: only the partitions without a leader")
    _add_command_config(topics, "client.id, request.timeout.ms")
    topics.add_argument("--defaults", metavar="FILE",
                        help="with --create on a new root: root-level defaults (.properties with Kafka's log.* names)")
    topics.set_defaults(func=cmd_topics)

    configs = sub.add_parser("configs", help="describe or alter topic and broker configs",
                             description="Describe or alter topic and broker configs (like kafka-configs), "
                                         "on a log root or through a broker.",
                             epilog=_EXAMPLES_CONFIGS, formatter_class=raw)
    configs.add_argument("root_path", nargs="?", metavar="ROOT", help="the log root (or --root)")
    configs.add_argument("--root", metavar="URL", help="the log root: a local folder or any fsspec URL")
    configs.add_argument("--bootstrap-server", metavar="H:P",
                         help="go through a Kafka-protocol broker (seglog broker or Apache Kafka) instead")
    _add_storage_option(configs)
    configs.add_argument("--entity-type", required=True, choices=sorted(["topics", "brokers", "users", "clients"]),
                         action=_EntityPart, help="users and clients (client quotas) may be given together")
    configs.add_argument("--entity-name", metavar="NAME", action=_EntityPart,
                         help="the topic, the broker id, the user or the client id")
    configs.add_argument("--entity-default", nargs=0, default=False, action=_EntityPart,
                         help="the cluster-wide default of --entity-type brokers, users or clients")
    configs.add_argument("--describe", action="store_true", help="list the dynamic configs (--all: every config)")
    configs.add_argument("--all", action="store_true", help="with --describe: every config, with its source")
    configs.add_argument("--alter", action="store_true", help="change configs (--add-config, --delete-config)")
    configs.add_argument("--add-config", action="append", metavar="K=V,K2=[A,B]",
                         help="configs to set; a list value in [..]")
    configs.add_argument("--delete-config", action="append", metavar="K,K2",
                         help="configs to remove (back to their defaults)")
    configs.set_defaults(func=cmd_configs)

    produce = sub.add_parser("produce", help="append lines from stdin as records",
                             description="Append stdin lines to a topic (like kafka-console-producer).",
                             epilog=_EXAMPLES_PRODUCE, formatter_class=raw)
    _add_root_or_bootstrap(produce, "produce through the brokers of a cluster (seglog or Apache Kafka), as"
                                    " kafka-console-producer does")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, metavar="N", help="write every record to this partition")
    produce.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    produce.add_argument("--compression-type", metavar="CODEC",
                         choices=["none", "uncompressed", "gzip", "snappy", "lz4", "zstd"],
                         help="batch codec: none, gzip, snappy, lz4, zstd (default: the topic's compression.type)")
    produce.add_argument("--compression-codec", metavar="CODEC", nargs="?", const="gzip",
                         choices=["none", "gzip", "snappy", "lz4", "zstd"],
                         help="kafka-console-producer's name of --compression-type (alone: gzip)")
    produce.add_argument("--request-required-acks", metavar="ACKS",
                         help="with --bootstrap-server: all or -1 (default: every in-sync replica) or 1 (the leader)")
    _add_command_config(produce, "acks, batch.size, compression.type, delivery.timeout.ms, client.id,"
                                 " request.timeout.ms")
    produce.add_argument("--header", action="append", metavar="K=V", help="header added to every record (repeatable)")
    produce.add_argument("--timestamp", type=int, metavar="MS", help="CreateTime of every record (default: now)")
    produce.add_argument("--batch-size", type=int, default=16384, metavar="BYTES",
                         help="bytes per batch, Kafka's batch.size (default 16384); never more than the "
                              "topic's max.message.bytes and segment.bytes")
    produce.add_argument("--batch-records", type=int, metavar="N",
                         help="also close a batch at N records (default: by bytes only)")
    produce.add_argument("--null-marker", metavar="TEXT",
                         help="a key or value equal to TEXT is written as null: a value of TEXT makes a "
                              "tombstone (Kafka's null.marker)")
    produce.add_argument("--property", action="append", metavar="K=V",
                         help="Kafka console producer reader property: parse.key=true, key.separator=SEP, "
                              "null.marker=TEXT (repeatable)")
    produce.add_argument("--producer-property", action="append", metavar="K=V",
                         help="batch.size=BYTES or compression.type=CODEC, as Kafka's console producer")
    produce.add_argument("--value-file", action="append", metavar="FILE",
                         help="produce one record whose value is FILE's bytes, newlines and all (repeatable; "
                              "stdin is then not read)")
    produce.add_argument("--key-file", action="append", metavar="FILE",
                         help="with --value-file: the key of the record of the --value-file at the same position")
    produce.add_argument("--commit-every", type=int, default=10000, metavar="N",
                         help="commit (make visible) every N lines; 0: only at the end (default 10000)")
    produce.set_defaults(func=cmd_produce)

    consume = sub.add_parser("consume", help="print records to stdout",
                             description="Print a topic's records (like kafka-console-consumer).",
                             epilog=_EXAMPLES_CONSUME, formatter_class=raw)
    _add_root_or_bootstrap(consume, "consume through the brokers of a cluster (seglog or Apache Kafka), as"
                                    " kafka-console-consumer does")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int, metavar="N", help="only this partition (default: all)")
    consume.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    consume.add_argument("--offset", metavar="N", help="start offset (needs --partition): a number, earliest or latest")
    consume.add_argument("--timestamp", type=int, metavar="MS", help="start at the first record with timestamp >= MS")
    consume.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--print-headers", action="store_true")
    consume.add_argument("--print-offset", action="store_true")
    consume.add_argument("--print-partition", action="store_true")
    consume.add_argument("--print-timestamp", action="store_true")
    consume.add_argument("--key-separator", default="\t", metavar="SEP", help="column separator (default: tab)")
    consume.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"],
                         help="read_committed hides open and aborted transactions (the default with --root);"
                              " with --bootstrap-server the default is Kafka's consumer's, read_uncommitted")
    consume.add_argument("--property", action="append", metavar="K=V",
                         help="kafka-console-consumer formatter property: print.key, print.timestamp,"
                              " print.partition, print.offset, print.headers, print.value (true/false),"
                              " key.separator, line.separator, headers.separator, null.literal (repeatable)")
    consume.add_argument("--group", metavar="GROUP",
                         help="with --bootstrap-server: consume as a member of this consumer group (Kafka's"
                              " classic group protocol): the group assigns the partitions and the consumed"
                              " offsets are committed to it")
    consume.add_argument("--consumer-property", action="append", metavar="K=V",
                         help="with --bootstrap-server: a Kafka consumer property (as in --command-config)")
    _add_command_config(consume, "group.id, isolation.level, auto.offset.reset, session.timeout.ms,"
                                 " heartbeat.interval.ms, auto.commit.interval.ms, enable.auto.commit, client.id,"
                                 " request.timeout.ms")
    consume.add_argument("--follow", action="store_true",
                         help="with --root: keep waiting for new records (--bootstrap-server always does,"
                              " as kafka-console-consumer, until --max-messages or --timeout-ms)")
    consume.add_argument("--timeout-ms", type=int, metavar="MS",
                         help="stop after MS without records (with --root: with --follow)")
    consume.add_argument("--poll-interval-ms", type=int, default=500, metavar="MS", help=argparse.SUPPRESS)
    consume.set_defaults(func=cmd_consume)

    dump = sub.add_parser("dump", help="print segment, index, snapshot and checkpoint files",
                          description="Dump log files the way Kafka's DumpLogSegments does.",
                          epilog=_EXAMPLES_DUMP, formatter_class=raw)
    dump.add_argument("--files", nargs="+", metavar="FILE",
                      help="files to dump (local paths or URLs; commas also separate)")
    dump.add_argument("--remote", action="store_true",
                      help="dump the remote (tiered) segments of --topic in --root instead of files")
    dump.add_argument("--root", metavar="URL", help="with --remote: the log root")
    dump.add_argument("--topic", help="with --remote: the topic")
    dump.add_argument("--partition", type=int, metavar="N", help="with --remote: only this partition")
    dump.add_argument("--offset", type=int, metavar="N", help="with --remote: only the segment holding offset N")
    dump.add_argument("--config-file", metavar="FILE",
                      help="with --remote: tiered storage settings (rsm.config.*) not stored in the root")
    dump.add_argument("--print-data-log", action="store_true", help="print keys and values (implies --deep-iteration)")
    dump.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    dump.add_argument("--verify-index-only", action="store_true", help="check index entries without printing them")
    dump.add_argument("--index-sanity-check", action="store_true", help="only run the index sanity check")
    dump.add_argument("--skip-record-metadata", action="store_true", help="do not print record metadata")
    dump.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, metavar="BYTES")
    dump.add_argument("--max-bytes", type=int, default=2**31 - 1, metavar="BYTES", help="read at most this much of a .log")
    _add_storage_option(dump)
    dump.set_defaults(func=cmd_dump)

    maintain = sub.add_parser("maintain", help="apply retention, compaction and tiering to a root, once or as a service",
                              description="Delete segments that retention no longer keeps, compact topics with "
                                          "cleanup.policy=compact and tier segments to remote storage "
                                          "(Kafka's retention check, log cleaner and remote log manager).",
                              epilog=_EXAMPLES_MAINTAIN, formatter_class=raw)
    _add_root(maintain)
    maintain.add_argument("--topic", action="append", metavar="TOPIC",
                          help="only this topic (repeatable; default: every topic)")
    maintain.add_argument("--once", action="store_true",
                          help="one pass, then exit (default: repeat every log.retention.check.interval.ms)")
    maintain.add_argument("--config-file", metavar="FILE",
                          help="maintenance settings (.properties, Kafka's log.retention.check.interval.ms, "
                               "log.cleaner.*; also root-level topic defaults), e.g. conf/maintenance.properties")
    maintain.set_defaults(func=cmd_maintain)

    tiered = sub.add_parser("tiered", help="list a topic's remote (tiered) segments",
                            description="Inspect the remote tier of a topic (tiered storage, KIP-405).",
                            epilog=_EXAMPLES_TIERED, formatter_class=raw)
    _add_root(tiered)
    tiered.add_argument("--topic", required=True)
    tiered.add_argument("--list", action="store_true", help="list the remote segments")
    tiered.add_argument("--segment", metavar="ID|OFFSET",
                        help="the objects one remote segment is stored as (by segment id, or an offset it holds)")
    tiered.add_argument("--partition", type=int, metavar="N", help="only this partition (default: all)")
    tiered.add_argument("--all-states", action="store_true",
                        help="every copy attempt and deletion, not only finished segments")
    tiered.add_argument("--config-file", metavar="FILE",
                        help="tiered storage settings (.properties: remote.log.storage.system.enable, "
                             "rsm.config.*) when the root's defaults do not hold them")
    tiered.set_defaults(func=cmd_tiered)

    repair = sub.add_parser("repair", help="cut a partition's log at damaged committed data",
                            description="Check every batch of a partition's segments (CRC, lengths, offsets)"
                                        " and truncate the log at the first damaged one, dropping it and"
                                        " everything after it, committed or not; print exactly what went."
                                        " Opening a log never does this on its own: a writer refuses a"
                                        " partition whose committed data is damaged until it is repaired.",
                            epilog="example:\n  seglog repair --root /data/logs --topic clicks --partition 3",
                            formatter_class=raw)
    _add_root(repair)
    repair.add_argument("--topic", required=True)
    repair.add_argument("--partition", type=int, metavar="N", help="only this partition (default: all)")
    repair.set_defaults(func=cmd_repair)

    election = sub.add_parser("leader-election", help="elect preferred (or unclean) leaders through a broker",
                              description="Ask the cluster to elect leaders (like kafka-leader-election), through"
                                          " the Kafka protocol's ElectLeaders.",
                              epilog=_EXAMPLES_ELECTION, formatter_class=raw)
    election.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]")
    election.add_argument("--election-type", required=True, type=str.lower, choices=("preferred", "unclean"),
                          help="preferred: move leadership to the first replica when it is in sync;"
                               " unclean: elect an out-of-sync replica for partitions without a leader")
    election.add_argument("--topic", metavar="TOPIC", help="the topic of --partition")
    election.add_argument("--partition", type=int, metavar="P", help="the partition of --topic")
    election.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    election.add_argument("--path-to-json-file", metavar="FILE",
                          help='{"partitions": [{"topic": "foo", "partition": 1}, ...]}')
    _add_command_config(election, "client.id, request.timeout.ms")
    election.add_argument("--admin.config", dest="command_config", metavar="FILE", help=argparse.SUPPRESS)
    election.set_defaults(func=cmd_leader_election)

    reassign = sub.add_parser("reassign-partitions", help="move partitions between brokers of a cluster",
                              description="Move partition replicas between brokers (like"
                                          " kafka-reassign-partitions), through the Kafka protocol's"
                                          " AlterPartitionReassignments and ListPartitionReassignments.",
                              epilog=_EXAMPLES_REASSIGN, formatter_class=raw)
    reassign.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]")
    reassign.add_argument("--reassignment-json-file", metavar="FILE",
                          help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}')
    reassign.add_argument("--execute", action="store_true", help="start the reassignments of the file")
    reassign.add_argument("--additional", action="store_true",
                          help="with --execute: even while other reassignments are in progress (also: change"
                               " the throttle of an ongoing reassignment by resubmitting it)")
    reassign.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_SEC",
                          help="with --execute: throttle the replication of the moving replicas to this rate"
                               " (sets the brokers' leader/follower.replication.throttled.rate and the topics'"
                               " *.replication.throttled.replicas); --verify removes them once done")
    reassign.add_argument("--preserve-throttles", action="store_true",
                          help="with --verify: leave the broker and topic throttles as they are")
    reassign.add_argument("--verify", action="store_true", help="say where the file's reassignments stand")
    reassign.add_argument("--cancel", action="store_true",
                          help="cancel the file's reassignments in progress (back to the original replicas)")
    reassign.add_argument("--list", action="store_true", help="list the reassignments in progress")
    _add_command_config(reassign, "client.id, request.timeout.ms")
    reassign.set_defaults(func=cmd_reassign_partitions)

    add_transactions_parser(sub)
    consumer_groups_command.add_parser(sub, raw)
    delete_records_command.add_parser(sub, raw)
    acls_command.add_parser(sub, raw)

    broker = sub.add_parser("broker", help="serve a log root over the Kafka protocol",
                            description="Run the sidecar broker (like kafka-server-start).",
                            epilog="example:\n  seglog broker --config conf/broker.properties "
                                   "--override listeners=PLAINTEXT://127.0.0.1:9093", formatter_class=raw)
    broker.add_argument("--config", required=True, metavar="FILE", help="broker.properties (Kafka's names)")
    broker.add_argument("--override", action="append", metavar="K=V", help="override one property (repeatable)")
    broker.set_defaults(func=cmd_broker)
    return parser


def _redacted(args, text: str) -> str:
    """`text` without the credentials the command line gave (--storage-option key=/secret=...,
    a URL's user:password@, the secrets of a --config-file or --override)."""
    from logcore.storage.secrets import redact, secret_values

    pairs = {k: v for k, _, v in (item.partition("=") for item in getattr(args, "storage_option", None) or ())}
    found = secret_values(pairs) + secret_values({"root": getattr(args, "root", None) or ""})
    for item in getattr(args, "override", None) or ():
        name, _, value = item.partition("=")
        found += secret_values({name: value})
    for attr in ("config_file", "config"):
        path = getattr(args, attr, None)
        if isinstance(path, str) and path:
            try:
                found += secret_values(load_properties(path))
            except Exception:  # noqa: BLE001 - a file we cannot read holds nothing to hide here
                pass
    return redact(text, found)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:          # --help, --version and usage errors
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except SegLogError as exc:
        sys.stdout.flush()
        sys.stderr.write(f"{PROG}: error: {_redacted(args, str(exc))}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
