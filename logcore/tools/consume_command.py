"""`seglog consume`: print a topic's records (kafka-console-consumer)."""
from __future__ import annotations

import sys
import time

from logcore.errors import InvalidConfigError
from logcore.records import TimestampType
from logcore.tools.arguments import _configs, _open_root, _stdout_bytes, _unescape_separator, offset_option


_TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}


# kafka-console-consumer's --property names (DefaultMessageFormatter) that seglog reads
FORMATTER_PROPERTIES = ("print.timestamp", "print.key", "print.offset", "print.partition", "print.headers",
                        "print.value", "key.separator", "line.separator", "headers.separator", "null.literal")


def formatter_properties(items) -> dict[str, str]:
    props = _configs(items, "--property")
    for name, value in props.items():
        if name not in FORMATTER_PROPERTIES:
            raise InvalidConfigError(f"--property {name}: unknown; seglog consume reads "
                                     + ", ".join(FORMATTER_PROPERTIES))
        if name.startswith("print.") and value.strip().lower() not in ("true", "false"):
            raise InvalidConfigError(f"--property {name}={value}: give true or false")
    return props


class _Formatter:
    """kafka-console-consumer's DefaultMessageFormatter: the --print-* flags or their --property
    print.*=true names, key.separator, line.separator, headers.separator, null.literal."""

    def __init__(self, args):
        props = formatter_properties(getattr(args, "property", None))

        def on(flag: bool, name: str, default: bool = False) -> bool:
            return flag or props.get(name, str(default)).strip().lower() == "true"

        key_separator = props.get("key.separator", args.key_separator)
        self.sep = _unescape_separator(key_separator).encode()
        self.line_sep = _unescape_separator(props.get("line.separator", "\n")).encode()
        self.headers_sep = _unescape_separator(props.get("headers.separator", ",")).encode()
        self.null = props.get("null.literal", "null").encode()
        self.columns = [("timestamp", on(args.print_timestamp, "print.timestamp")),
                        ("partition", on(args.print_partition, "print.partition")),
                        ("offset", on(args.print_offset, "print.offset")),
                        ("headers", on(args.print_headers, "print.headers")),
                        ("key", on(args.print_key, "print.key")),
                        ("value", on(False, "print.value", True))]

    def format(self, partition: int, record, timestamp_type: str) -> bytes:
        parts: list[bytes] = []
        null = self.null
        for column, wanted in self.columns:
            if not wanted:
                continue
            if column == "timestamp":
                parts.append(f"{timestamp_type}:{record.timestamp}".encode())
            elif column == "partition":
                parts.append(f"Partition:{partition}".encode())
            elif column == "offset":
                parts.append(f"Offset:{record.offset}".encode())
            elif column == "headers":
                if record.headers:
                    parts.append(self.headers_sep.join(k.encode() + b":" + (null if v is None else v)
                                                       for k, v in record.headers))
                else:
                    parts.append(b"NO_HEADERS")
            elif column == "key":
                parts.append(null if record.key is None else record.key)
            else:
                parts.append(null if record.value is None else record.value)
        return self.sep.join(parts) + self.line_sep if parts else b""


def _start_offset(args, log) -> int:
    if args.from_beginning:
        return log.log_start_offset
    if args.offset is not None:
        if args.offset == "earliest":
            return log.log_start_offset
        if args.offset == "latest":
            return log.high_watermark
        return offset_option(args.offset)
    if args.timestamp is not None:
        found = log.offset_for_timestamp(args.timestamp)
        return found[0] if found is not None else log.high_watermark
    return log.high_watermark


def _read_range(args) -> tuple[int | None, None]:
    """Where the read starts, for the range-bounded open (None: the HW; validated later)."""
    if args.from_beginning or args.timestamp is not None or args.offset == "earliest":
        return 0, None
    if args.offset is not None and args.offset != "latest":
        try:
            return max(0, int(args.offset)), None
        except ValueError:
            return 0, None      # _start_offset reports it
    return None, None


def cmd_consume(args) -> int:
    if getattr(args, "bootstrap_server", None):
        from logcore.tools.console_consumer import consume_from_brokers
        return consume_from_brokers(args, _Formatter(args))
    for name in ("group", "command_config", "consumer_property"):
        if getattr(args, name, None):
            raise InvalidConfigError(f"--{name.replace('_', '-')} applies to --bootstrap-server only, not --root")
    if args.isolation_level is None:
        args.isolation_level = "read_committed"
    if sum(x is not None and x is not False for x in (args.from_beginning or None, args.offset, args.timestamp)) > 1:
        raise InvalidConfigError("give at most one of --from-beginning, --offset, --timestamp")
    if args.offset is not None and args.partition is None:
        raise InvalidConfigError("--offset needs --partition (offsets are per partition)")
    if args.max_messages is not None and args.max_messages < 0:
        raise InvalidConfigError(f"--max-messages must be >= 0, got {args.max_messages}")
    formatter = _Formatter(args)
    out = _stdout_bytes()
    root = _open_root(args, read_only=True)
    total = 0
    try:
        info = root.describe_topic(args.topic)
        if args.partition is not None and not 0 <= args.partition < info.partitions:
            raise InvalidConfigError(f"--partition {args.partition}: topic {args.topic} has partitions "
                                     f"0..{info.partitions - 1}")
        partitions = [args.partition] if args.partition is not None else list(range(info.partitions))
        logs = {p: root.log(args.topic, p, read_range=_read_range(args)) for p in partitions}
        positions = {p: _start_offset(args, log) for p, log in logs.items()}
        deadline = None if args.timeout_ms is None else time.monotonic() + args.timeout_ms / 1000
        while True:
            progressed = False
            for p in partitions:
                remaining = None if args.max_messages is None else args.max_messages - total
                if remaining == 0:
                    break
                log = logs[p]
                # the timestamp type of each record's batch, as Kafka's consumer reports it
                for timestamp_type, record in log.read_records_with_timestamp_type(
                        positions[p], max_records=remaining, isolation=args.isolation_level):
                    out.write(formatter.format(p, record, _TIMESTAMP_TYPE_NAMES[timestamp_type]))
                    positions[p] = record.offset + 1
                    total += 1
                    progressed = True
                # skip control records and aborted data at the end of what is visible
                bound = log.last_stable_offset if args.isolation_level == "read_committed" else log.high_watermark
                if positions[p] < bound and (remaining is None or total < args.max_messages):
                    positions[p] = bound
            out.flush()
            if not args.follow or (args.max_messages is not None and total >= args.max_messages):
                break
            if progressed and args.timeout_ms is not None:
                deadline = time.monotonic() + args.timeout_ms / 1000
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(args.poll_interval_ms / 1000)
            for log in logs.values():
                log.refresh()
    finally:
        root.close()
    sys.stderr.write(f"Processed a total of {total} messages\n")
    return 0
