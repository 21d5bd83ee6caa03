"""`seglog consume --bootstrap-server`: kafka-console-consumer through the brokers.

Without --group the topic's partitions (or --partition) are read directly from their leaders,
from --offset, --from-beginning, --timestamp or (by default) the end. With --group this process
is a member of the consumer group (console_group: the classic protocol): the group assigns the
partitions, each starts at the group's committed offset (or, with none, at the beginning for
--from-beginning and at the end otherwise: Kafka's auto.offset.reset), and the offsets of the
records printed are committed every auto.commit.interval.ms, before a rebalance and at the end,
so kafka-consumer-groups shows the group's position and lag.

As Kafka's tool it runs until --max-messages records, --timeout-ms without a record, or Ctrl-C,
then prints `Processed a total of N messages` on stderr.
"""
from __future__ import annotations

import sys
import time

from logcore.errors import InvalidConfigError
from logcore.records import TimestampType
from logcore.tools.arguments import _stdout_bytes, offset_option
from logcore.tools.client_properties import client_properties, client_security, int_property, timeout_s

# Consumer properties --bootstrap-server applies (--command-config, --consumer-property).
CONSUMER_KEYS = ("group.id", "isolation.level", "auto.offset.reset", "session.timeout.ms", "heartbeat.interval.ms",
                 "auto.commit.interval.ms", "enable.auto.commit")
_TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}
POLL_WAIT_MS = 500


def consume_from_brokers(args, formatter) -> int:
    from logcore.tools.partition_leaders import PartitionLeaders
    from logcore.tools.topic_fetcher import EARLIEST, LATEST, WINDOWS, TopicFetcher

    props = client_properties(args.command_config, args.consumer_property, CONSUMER_KEYS,
                              command="seglog consume --bootstrap-server", item_option="--consumer-property")
    if args.storage_option:
        raise InvalidConfigError("--storage-option applies to --root only, not --bootstrap-server")
    if args.follow:
        raise InvalidConfigError("--follow applies to --root: with --bootstrap-server seglog consume keeps"
                                 " waiting for records, as kafka-console-consumer (stop it with --max-messages"
                                 " or --timeout-ms)")
    group_id = args.group or props.get("group.id")
    if args.offset is not None and args.partition is None:
        raise InvalidConfigError("The partition is required when offset is specified.")
    if group_id and args.partition is not None:
        raise InvalidConfigError("--partition cannot be used with --group: the group assigns the partitions")
    if group_id and (args.offset is not None or args.timestamp is not None):
        raise InvalidConfigError("--offset and --timestamp cannot be used with --group: a group member starts"
                                 " at the group's committed offsets (or --from-beginning when it has none)")
    if sum(x for x in (args.from_beginning, args.offset is not None, args.timestamp is not None)) > 1:
        raise InvalidConfigError("give at most one of --from-beginning, --offset, --timestamp")
    if args.max_messages is not None and args.max_messages < 0:
        raise InvalidConfigError(f"--max-messages must be >= 0, got {args.max_messages}")
    isolation = args.isolation_level or props.get("isolation.level", "read_uncommitted")
    if isolation not in ("read_committed", "read_uncommitted"):
        raise InvalidConfigError(f"isolation.level must be read_committed or read_uncommitted, got {isolation!r}")
    reset_name = "earliest" if args.from_beginning else props.get("auto.offset.reset", "latest")
    reset = {"earliest": EARLIEST, "latest": LATEST}.get(reset_name)
    if reset is None:
        raise InvalidConfigError(f"auto.offset.reset must be earliest or latest, got {reset_name!r}")
    auto_commit = props.get("enable.auto.commit", "true").strip().lower()
    if auto_commit not in ("true", "false"):
        raise InvalidConfigError(f"enable.auto.commit must be true or false, got {auto_commit!r}")
    commit_every_s = int_property(props, "auto.commit.interval.ms", 5000) / 1000

    out = _stdout_bytes()
    leaders = PartitionLeaders(args.bootstrap_server, args.topic, client_id=props.get("client.id", "console-consumer"),
                               timeout_s=timeout_s(props), windows=WINDOWS, security=client_security(props))
    fetcher = TopicFetcher(leaders, isolation_level=isolation, reset=reset)
    group = None
    consumed: dict[int, int] = {}            # the next offset of each partition after what was printed
    total = 0
    try:
        if group_id:
            from logcore.tools.console_group import ConsoleGroup
            group = ConsoleGroup(args.bootstrap_server, group_id, args.topic,
                                 client_id=props.get("client.id", "console-consumer"), timeout_s=timeout_s(props),
                                 session_timeout_ms=int_property(props, "session.timeout.ms", 45_000, minimum=1),
                                 heartbeat_interval_ms=int_property(props, "heartbeat.interval.ms", 3_000, minimum=1),
                                 security=leaders.conn.security)
            _take_assignment(group, fetcher, reset, consumed)
        else:
            if args.partition is not None:
                leaders.check_partition(args.partition)
            partitions = [args.partition] if args.partition is not None else list(range(leaders.partitions))
            _start(args, fetcher, partitions)
        last_commit = last_record = time.monotonic()
        while args.max_messages is None or total < args.max_messages:
            wait = POLL_WAIT_MS
            if args.timeout_ms is not None:
                left_ms = args.timeout_ms - (time.monotonic() - last_record) * 1000
                if left_ms <= 0:
                    break
                wait = max(1, min(wait, int(left_ms)))
            fetched = fetcher.fetch(wait) if fetcher.positions else _idle(wait)
            for item in fetched:
                if args.max_messages is not None and total >= args.max_messages:
                    break
                out.write(formatter.format(item.partition, item.record, _TIMESTAMP_TYPE_NAMES[item.timestamp_type]))
                consumed[item.partition] = item.record.offset + 1
                total += 1
            if fetched:
                out.flush()
                last_record = time.monotonic()
            if group is not None:
                from logcore.tools.console_group import Rebalance
                try:
                    if auto_commit == "true" and time.monotonic() - last_commit >= commit_every_s:
                        group.commit(consumed)
                        last_commit = time.monotonic()
                    if group.heartbeat_due():
                        group.heartbeat()
                except Rebalance:
                    _rejoin(group, fetcher, reset, consumed, auto_commit == "true")
    finally:
        try:
            if group is not None:
                if auto_commit == "true" and group.member_id:
                    from logcore.tools.console_group import Rebalance
                    try:
                        group.commit(consumed)
                    except Rebalance:
                        sys.stderr.write("seglog: the group rebalanced before the last offsets were committed\n")
                group.close()
        finally:
            leaders.close()
            out.flush()
            sys.stderr.write(f"Processed a total of {total} messages\n")
    return 0


def _idle(wait_ms: int) -> list:
    """No partition assigned (more members than partitions): wait as a fetch would."""
    time.sleep(wait_ms / 1000)
    return []


def _start(args, fetcher, partitions: list[int]) -> None:
    from logcore.tools.topic_fetcher import EARLIEST, LATEST

    if args.offset is not None:
        if args.offset in ("earliest", "latest"):
            fetcher.seek_to(partitions, EARLIEST if args.offset == "earliest" else LATEST)
            return
        offset = offset_option(args.offset)
        fetcher.positions = {p: offset for p in partitions}
    elif args.timestamp is not None:
        fetcher.seek_to(partitions, args.timestamp)
    else:
        fetcher.seek_to(partitions, EARLIEST if args.from_beginning else LATEST)


def _take_assignment(group, fetcher, reset: int, consumed: dict[int, int]) -> None:
    """Join, then read each assigned partition from the group's committed offset (or `reset`)."""
    assigned = group.join()
    committed = group.committed(assigned)
    fetcher.positions = {p: o for p, o in committed.items()}
    missing = [p for p in assigned if p not in committed]
    if missing:
        fetcher.seek_to(missing, reset)
    for p in list(consumed):
        if p not in assigned:
            del consumed[p]


def _rejoin(group, fetcher, reset: int, consumed: dict[int, int], auto_commit: bool) -> None:
    from logcore.tools.console_group import Rebalance

    if auto_commit:
        try:
            group.commit(consumed)          # still this generation's member while it rebalances
        except Rebalance:
            pass                            # the generation is gone: the next owner starts at the last commit
    _take_assignment(group, fetcher, reset, consumed)
