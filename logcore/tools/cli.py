# Over 600 lines: the parsers and handlers of every seglog subcommand, in one command table.
"""`seglog`: the command line, shaped like Kafka's console tools.

    seglog topics  --root R --create T --partitions N [--config k=v ...] | --list | --describe | ...
    seglog produce --root R --topic T < lines
    seglog consume --root R --topic T --from-beginning
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
import time
from typing import BinaryIO, Sequence, TextIO

from logcore import __version__
from logcore.storage.options import nested_storage_options
from logcore.errors import InvalidConfigError, NotALogRootError, SegLogError
from logcore.log.config import (
    colliding_topic,
    load_properties,
    topic_collision_warning,
    validate_topic_name,
    validate_topic_overrides,
)
from logcore.tools.dump import DumpOptions, dump_files
from logcore.records import TimestampType
from logcore.records.partitioner import murmur2_partition

PROG = "seglog"

_EXAMPLES_TOPICS = """examples:
  seglog topics --root /data/logs --create clicks --partitions 8 --config cleanup.policy=compact
  seglog topics --root s3://bucket/logs --storage-option endpoint_url=http://127.0.0.1:9000 --list
  seglog topics --root /data/logs --describe --topic clicks
  seglog topics --root /data/logs --alter --topic clicks --partitions 12
  seglog topics --root /data/logs --delete --topic clicks
"""
_EXAMPLES_PRODUCE = """examples:
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
  seglog consume --root /data/logs --topic clicks --from-beginning
  seglog consume --root /data/logs --topic clicks --partition 0 --offset 42 --max-messages 10
  seglog consume --root /data/logs --topic clicks --from-beginning --print-key --print-headers
  seglog consume --root /data/logs --topic clicks --follow

Output lines are like kafka-console-consumer's: [timestamp] [partition] [offset] [headers] [key]
value, separated by --key-separator (a tab by default); headers as k:v,k:v or NO_HEADERS.
Without --from-beginning, --offset or --timestamp reading starts at the end.
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


# ------------------------------------------------------------------------------------ helpers

def _key_value(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InvalidConfigError(f"{what} must be key=value, got {text!r}")
    return key, value


def parse_storage_options(items: Sequence[str] | None) -> dict:
    """`--storage-option k=v` pairs -> fsspec options (see logcore.storage.options)."""
    return nested_storage_options((_key_value(item, "--storage-option") for item in items or ()),
                                  "--storage-option")


def _configs(items: Sequence[str] | None, option: str = "--config") -> dict[str, str]:
    configs: dict[str, str] = {}
    for item in items or ():
        key, value = _key_value(item, option)
        configs[key] = value
    return configs


def _properties_file(path: str | None, option: str) -> str | None:
    """A .properties file given on the command line: it must exist (load_properties would read a
    missing path as the text of a properties file)."""
    import os

    if path is None:
        return None
    if not os.path.exists(path):
        raise InvalidConfigError(f"{option} {path}: no such file")
    if not os.path.isfile(path):
        raise InvalidConfigError(f"{option} {path}: not a file")
    return path


def _unescape_separator(text: str) -> str:
    # Lets a shell user type --key-separator '\t' for a tab, as Kafka's properties do.
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _open_root(args, *, create: bool = False, read_only: bool = False, defaults: dict | None = None):
    from logcore.log.log_root import LogRoot

    options = parse_storage_options(args.storage_option)
    if not create:
        return LogRoot.open(args.root, storage_options=options, read_only=read_only)
    try:
        return LogRoot.open(args.root, storage_options=options)
    except NotALogRootError:
        # Only an empty or missing location becomes a new root: nothing is written elsewhere.
        return LogRoot.open(args.root, storage_options=options, create=True, defaults=defaults)


def _stdout_bytes() -> BinaryIO:
    return getattr(sys.stdout, "buffer", None) or _TextAsBinary(sys.stdout)


class _TextAsBinary:
    """A binary facade over a text stream (a StringIO in tests without .buffer)."""

    def __init__(self, text: TextIO):
        self.text = text

    def write(self, data: bytes) -> int:
        self.text.write(data.decode("utf-8", errors="replace"))
        return len(data)

    def flush(self) -> None:
        self.text.flush()


# ------------------------------------------------------------------------------------ topics

def cmd_topics(args) -> int:
    actions = [a for a in ("create", "list", "describe", "delete", "alter") if getattr(args, a)]
    if len(actions) != 1:
        raise InvalidConfigError("give exactly one of --create, --list, --describe, --delete, --alter")
    action = actions[0]
    out = sys.stdout
    if action == "create":
        name = args.create
        validate_topic_name(name)
        if args.partitions is None or args.partitions < 1:
            raise InvalidConfigError(f"--create needs --partitions N with N >= 1, got {args.partitions}")
        configs = _configs(args.config)
        defaults = load_properties(_properties_file(args.defaults, "--defaults")) if args.defaults else None
        validate_topic_overrides(configs, defaults)     # bad input fails before anything is written
        root = _open_root(args, create=True, defaults=defaults)
        try:
            existing = root.list_topics()
            if name in existing and args.if_not_exists:
                return 0
            other = colliding_topic(name, existing)
            if other is not None:
                raise InvalidConfigError(
                    f"Topic {name!r} collides with existing topic {other!r}: '.' and '_' are the same in "
                    "Kafka's metric names")
            warning = topic_collision_warning(name, existing)
            if warning:
                sys.stderr.write(warning + "\n")
            root.create_topic(name, args.partitions, configs)
        finally:
            root.close()
        out.write(f"Created topic {name}.\n")
        return 0

    if args.config:
        raise InvalidConfigError("--config applies to --create only")
    root = _open_root(args, read_only=action in ("list", "describe"))
    try:
        if action == "list":
            for name in root.list_topics():
                out.write(name + "\n")
        elif action == "describe":
            names = [args.topic] if args.topic else root.list_topics()
            for name in names:
                _describe(root, name, out, args.all_configs)
        elif action == "delete":
            _require_topic(args, "--delete")
            root.delete_topic(args.topic)
            out.write(f"Deleted topic {args.topic}.\n")
        elif action == "alter":
            _require_topic(args, "--alter")
            if args.partitions is None:
                raise InvalidConfigError("--alter needs --partitions N (the new, larger count)")
            current = root.describe_topic(args.topic).partitions
            if args.partitions <= current:
                raise InvalidConfigError(
                    f"The topic {args.topic} currently has {current} partition(s); {args.partitions} would not "
                    "be an increase (partitions can only be added)")
            root.add_partitions(args.topic, args.partitions)
            out.write(f"Topic {args.topic} now has {args.partitions} partitions.\n")
    finally:
        root.close()
    return 0


def _require_topic(args, action: str) -> None:
    if not args.topic:
        raise InvalidConfigError(f"{action} needs --topic T")


def _describe(root, name: str, out: TextIO, all_configs: bool) -> None:
    info = root.describe_topic(name)
    if all_configs:
        configs = root.topic_config(name).to_properties()
    else:
        configs = info.config
    config_text = ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    out.write(f"Topic: {info.name}\tTopicId: {info.topic_id}\tPartitionCount: {info.partitions}\t"
              f"ReplicationFactor: 1\tConfigs: {config_text}\n")
    for p in range(info.partitions):
        log = root.log(name, p)
        try:
            out.write(f"\tTopic: {info.name}\tPartition: {p}\tLogStartOffset: {log.log_start_offset}\t"
                      f"HighWatermark: {log.high_watermark}\tLogEndOffset: {log.log_end_offset}\n")
        finally:
            log.close()


# ------------------------------------------------------------------------------------ produce

def _compression_arg(name: str | None):
    if name is None:
        return None
    from logcore.records.compression import codec_of

    try:
        return codec_of("none" if name == "uncompressed" else name)
    except ValueError as exc:
        raise InvalidConfigError(f"--compression-type: {exc}") from None


BATCH_OVERHEAD = 61            # RecordBatch v2 header bytes
_TIMESTAMP_DELTA = 5           # zigzag varint bytes of a timestamp delta up to 2**34 ms


def _uvarint_size(z: int) -> int:
    return 1 if z < 0x80 else (z.bit_length() + 6) // 7


def _field_size(data: bytes | None) -> int:
    """A length-prefixed field (key, value, header part): zigzag length varint and the bytes."""
    if data is None:
        return 1                   # -1
    n = len(data)
    return (1 if n < 64 else (n.bit_length() + 7) // 7) + n


def _record_size(record: tuple, offset_delta: int) -> int:
    """A record's bytes in an uncompressed batch, at most a few above the real size (the
    timestamp delta is counted at its widest)."""
    key, value, headers, _ = record
    body = 1 + _TIMESTAMP_DELTA + _uvarint_size(offset_delta << 1) + _field_size(key) + _field_size(value)
    if headers:
        body += _uvarint_size(len(headers) << 1)
        for k, v in headers:
            body += _field_size(k.encode()) + _field_size(v)
    else:
        body += 1
    return _uvarint_size(body << 1) + body


class _Producer:
    """Buffers records per partition, appends them in batches, commits every partition it wrote.

    A batch closes, as the Kafka producer's do, when the next record would take it past
    `batch_bytes` (the producer's batch.size, capped by the topic's max.message.bytes and
    segment.bytes so that an append can never be refused for its size), or at `batch_records`
    records. A record larger than the cap on its own is appended alone (and refused by the log
    with the topic's limit if it is too large)."""

    def __init__(self, root, topic: str, partitions: int, *, batch_bytes: int, compression,
                 batch_records: int | None = None, max_message_bytes: int | None = None):
        self.root = root
        self.max_message_bytes = max_message_bytes
        self.topic = topic
        self.partitions = partitions
        self.batch_bytes = batch_bytes
        self.batch_records = batch_records
        self.compression = compression
        self.logs: dict = {}
        self.buffers: dict[int, list] = {}
        self.sizes: dict[int, int] = {}
        self.counts = [0] * partitions
        self.sticky = 0                     # partition for records without a key

    def _full(self, p: int, size: int) -> bool:
        buffer = self.buffers.get(p)
        if not buffer:
            return False
        return (self.sizes[p] + size > self.batch_bytes
                or (self.batch_records is not None and len(buffer) >= self.batch_records))

    def add(self, partition: int | None, record: tuple, where: str = "") -> None:
        keyless = partition is None
        p = self.sticky if keyless else partition
        size = _record_size(record, len(self.buffers.get(p, ())))
        if self.max_message_bytes is not None and BATCH_OVERHEAD + size > self.max_message_bytes:
            self._check_alone(record, where)
        if self._full(p, size):
            self.append(p)
            if keyless:                     # sticky partitioning: the next batch goes elsewhere
                self.sticky = p = (self.sticky + 1) % self.partitions
                if self._full(p, size):
                    self.append(p)
            size = _record_size(record, len(self.buffers.get(p, ())))
        buffer = self.buffers.setdefault(p, [])
        buffer.append(record)
        self.sizes[p] = self.sizes.get(p, BATCH_OVERHEAD) + size

    def _check_alone(self, record: tuple, where: str) -> None:
        """A record that may not fit max.message.bytes even alone: its exact batch size decides,
        as the broker would refuse it (RecordTooLargeError, MESSAGE_TOO_LARGE)."""
        from logcore.errors import RecordTooLargeError
        from logcore.records.batch import build_batch

        from logcore.records.compression import Compression

        key, value, headers, ts = record
        codec = self.compression
        if codec is None:                   # the topic's compression.type decides
            name = self.root.topic_config(self.topic).compression_type
            codec = _compression_arg(name) if name != "producer" else None
        size = len(build_batch([(key, value, headers, 0 if ts is None else ts)], base_offset=0,
                               compression=codec if codec is not None else Compression.NONE))
        if size > self.max_message_bytes:
            raise RecordTooLargeError(
                f"the record{where} takes {size} bytes as a batch, more than topic {self.topic}'s "
                f"max.message.bytes={self.max_message_bytes}")

    def append(self, p: int) -> None:
        buffer = self.buffers.pop(p, None)
        self.sizes.pop(p, None)
        if not buffer:
            return
        log = self.logs.get(p)
        if log is None:
            log = self.logs[p] = self.root.log(self.topic, p, writer=True)
        log.append_records(buffer, compression=self.compression)
        self.counts[p] += len(buffer)

    def commit(self) -> None:
        for p in sorted(self.buffers):
            self.append(p)
        for log in self.logs.values():
            log.commit()

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


def _read_lines(stream: BinaryIO):
    for line in stream:
        if line.endswith(b"\r\n"):
            yield line[:-2]
        elif line.endswith(b"\n"):
            yield line[:-1]
        else:
            yield line


_LINE_PROPERTIES = ("parse.key", "key.separator", "null.marker", "parse.headers")


def _line_properties(items: Sequence[str] | None) -> dict[str, str]:
    """`--property k=v` of Kafka's console producer line reader (the ones seglog reads)."""
    props = _configs(items, "--property")
    for name in props:
        if name not in _LINE_PROPERTIES:
            raise InvalidConfigError(f"--property {name}: unknown; seglog produce reads "
                                     + ", ".join(n for n in _LINE_PROPERTIES if n != "parse.headers"))
    if "parse.headers" in props:
        raise InvalidConfigError("--property parse.headers is not supported: give --header K=V")
    return props


def _producer_properties(items: Sequence[str] | None) -> dict[str, str]:
    props = _configs(items, "--producer-property")
    for name in props:
        if name not in ("batch.size", "compression.type"):
            raise InvalidConfigError(f"--producer-property {name}: unknown; seglog produce reads "
                                     "batch.size and compression.type")
    return props


def _file_records(args) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of --value-file records, keys from the paired --key-file."""
    keys = args.key_file or []
    if keys and len(keys) != len(args.value_file):
        raise InvalidConfigError(f"--key-file given {len(keys)} times for {len(args.value_file)} --value-file: "
                                 "give one key file per value file, in the same order, or none")
    out = []
    for i, path in enumerate(args.value_file):
        key = _read_file(keys[i], "--key-file") if keys else None
        out.append((key, _read_file(path, "--value-file")))
    return out


def _read_file(path: str, option: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InvalidConfigError(f"{option} {path}: no such file") from None
    except IsADirectoryError:
        raise InvalidConfigError(f"{option} {path}: not a file") from None
    except OSError as exc:
        raise InvalidConfigError(f"{option} {path}: {exc.strerror or exc}") from None


def cmd_produce(args) -> int:
    started = time.monotonic()
    headers = tuple((k, v.encode()) for k, v in (_key_value(h, "--header") for h in args.header or ()))
    line_props = _line_properties(args.property)
    producer_props = _producer_properties(args.producer_property)
    key_separator = args.key_separator
    if key_separator is None and line_props.get("parse.key", "false").lower() == "true":
        key_separator = line_props.get("key.separator", "\t")     # Kafka's default: a tab
    separator = _unescape_separator(key_separator).encode() if key_separator is not None else None
    if separator == b"":
        raise InvalidConfigError("--key-separator must not be empty")
    null_marker = args.null_marker if args.null_marker is not None else line_props.get("null.marker")
    if null_marker == "":
        raise InvalidConfigError("--null-marker must not be empty")
    null = _unescape_separator(null_marker).encode() if null_marker is not None else None
    batch_size = args.batch_size
    if "batch.size" in producer_props:
        try:
            batch_size = int(producer_props["batch.size"])
        except ValueError:
            raise InvalidConfigError(f"--producer-property batch.size must be a number of bytes, "
                                     f"got {producer_props['batch.size']!r}") from None
    if batch_size < 1:
        raise InvalidConfigError(f"--batch-size must be at least 1 byte, got {batch_size}")
    if args.batch_records is not None and args.batch_records < 1:
        raise InvalidConfigError(f"--batch-records must be at least 1, got {args.batch_records}")
    if args.commit_every < 0:
        raise InvalidConfigError(f"--commit-every must be >= 0, got {args.commit_every}")
    if args.key_file and not args.value_file:
        raise InvalidConfigError("--key-file needs --value-file (one key file per value file)")
    compression = _compression_arg(args.compression_type or producer_props.get("compression.type"))
    files = _file_records(args) if args.value_file else None       # unreadable files fail before anything is written
    root = _open_root(args)
    producer = None
    try:
        root.check_not_served(                     # before a line of stdin is read
            "seglog produce", f"produce through it with a Kafka client (bootstrap.servers={{bootstrap}}),"
            f" e.g. kcat -P -b {{bootstrap}} -t {args.topic}")
        info = root.describe_topic(args.topic)
        if args.partition is not None and not 0 <= args.partition < info.partitions:
            raise InvalidConfigError(f"--partition {args.partition}: topic {args.topic} has partitions "
                                     f"0..{info.partitions - 1}")
        config = root.topic_config(args.topic)
        if config.compact and separator is None and not args.key_file:
            # Every record would be without a key, which a compacted topic refuses (as Kafka's
            # broker does): say so before reading any input.
            raise InvalidConfigError(
                f"topic {args.topic} has cleanup.policy={','.join(config.cleanup_policy)}: a compacted"
                " topic refuses records without a key, so give every line a key with --key-separator"
                " SEP (lines `key SEP value`), or give --key-file with --value-file")
        # Never a batch the log must refuse for its size: capped by the topic's limits.
        batch_bytes = max(BATCH_OVERHEAD + 1, min(batch_size, config.max_message_bytes, config.segment_bytes))
        producer = _Producer(root, args.topic, info.partitions, batch_bytes=batch_bytes,
                             compression=compression, batch_records=args.batch_records,
                             max_message_bytes=config.max_message_bytes)

        def partition_of(key: bytes | None) -> int | None:
            if args.partition is not None:
                return args.partition
            if key is not None:
                return murmur2_partition(key, info.partitions)
            return None

        lines = 0
        try:
            if files is not None:
                for (key, value), path in zip(files, args.value_file):
                    producer.add(partition_of(key), (key, value, headers, args.timestamp),
                                 f" of --value-file {path}")
                    lines += 1
            else:
                stdin = getattr(sys.stdin, "buffer", sys.stdin)
                for number, line in enumerate(_read_lines(stdin), start=1):
                    if isinstance(line, str):
                        line = line.encode()
                    key = None
                    if separator is not None:
                        key, found, value = line.partition(separator)
                        if not found:
                            raise InvalidConfigError(
                                f"No key separator {key_separator!r} found on line number {number}: "
                                f"{line[:80].decode('utf-8', 'replace')!r}")
                        if null is not None and key == null:
                            key = None
                    else:
                        value = line
                    if null is not None and value == null:
                        value = None                # a tombstone
                    producer.add(partition_of(key), (key, value, headers, args.timestamp),
                                 f" on line number {number}")
                    lines += 1
                    if args.commit_every and lines % args.commit_every == 0:
                        producer.commit()
        finally:
            producer.commit()      # what was read before an error is still produced, as Kafka's would be
        spread = ", ".join(f"{p}: {n}" for p, n in enumerate(producer.counts) if n)
        sys.stderr.write(f"Produced {lines} records to topic {args.topic} "
                         f"({spread or 'nothing'}) in {time.monotonic() - started:.3f} s\n")
    finally:
        if producer is not None:
            producer.close()
        root.close()
    return 0


# ------------------------------------------------------------------------------------ consume

_TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}


class _Formatter:
    """kafka-console-consumer's DefaultMessageFormatter."""

    def __init__(self, args):
        self.sep = _unescape_separator(args.key_separator).encode()
        self.columns = [("timestamp", args.print_timestamp), ("partition", args.print_partition),
                        ("offset", args.print_offset), ("headers", args.print_headers),
                        ("key", args.print_key)]

    def format(self, partition: int, record, timestamp_type: str) -> bytes:
        parts: list[bytes] = []
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
                    parts.append(b",".join(k.encode() + b":" + (b"null" if v is None else v)
                                           for k, v in record.headers))
                else:
                    parts.append(b"NO_HEADERS")
            elif column == "key":
                parts.append(b"null" if record.key is None else record.key)
        parts.append(b"null" if record.value is None else record.value)
        return self.sep.join(parts) + b"\n"


def _start_offset(args, log) -> int:
    if args.from_beginning:
        return log.log_start_offset
    if args.offset is not None:
        if args.offset == "earliest":
            return log.log_start_offset
        if args.offset == "latest":
            return log.high_watermark
        try:
            offset = int(args.offset)
        except ValueError:
            raise InvalidConfigError(f"--offset must be a number, earliest or latest, got {args.offset!r}") from None
        if offset < 0:
            raise InvalidConfigError(f"--offset must be >= 0, got {offset}")
        return offset
    if args.timestamp is not None:
        found = log.offset_for_timestamp(args.timestamp)
        return found[0] if found is not None else log.high_watermark
    return log.high_watermark


def cmd_consume(args) -> int:
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
        logs = {p: root.log(args.topic, p) for p in partitions}
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


# ------------------------------------------------------------------------------------ dump

def cmd_dump(args) -> int:
    options = DumpOptions(print_data_log=args.print_data_log, deep_iteration=args.deep_iteration,
                          verify_index_only=args.verify_index_only, index_sanity_check=args.index_sanity_check,
                          max_message_size=args.max_message_size, max_bytes=args.max_bytes,
                          skip_record_metadata=args.skip_record_metadata)
    if args.remote:
        if args.files or not args.root or not args.topic:
            raise InvalidConfigError("--remote needs --root and --topic (and no --files)")
        from logcore.tools.remote_segments import dump_remote
        root = _open_tiered_root(args)
        try:
            partitions = [args.partition] if args.partition is not None else None
            return dump_remote(root, args.topic, partitions, args.offset, options, sys.stdout, sys.stderr)
        finally:
            root.close()
    if not args.files:
        raise InvalidConfigError("give --files, or --remote with --root and --topic")
    files = [f for item in args.files for f in item.split(",") if f]
    return dump_files(files, options, sys.stdout, sys.stderr, parse_storage_options(args.storage_option))


def _open_tiered_root(args):
    """The root read-only, with tiered-storage settings from --config-file over its own."""
    from logcore.log.log_root import LogRoot

    props = load_properties(_properties_file(args.config_file, "--config-file")) if args.config_file else {}
    return LogRoot.open(args.root, storage_options=parse_storage_options(args.storage_option),
                        read_only=True, defaults=props)


# ------------------------------------------------------------------------------------ tiered

def cmd_tiered(args) -> int:
    from logcore.tools.remote_segments import print_segments, remote_segments

    if not args.list:
        raise InvalidConfigError("seglog tiered: give --list")
    root = _open_tiered_root(args)
    try:
        partitions = [args.partition] if args.partition is not None else None
        segments = remote_segments(root, args.topic, partitions, all_states=args.all_states)
        print_segments(segments, sys.stdout, rich=sys.stdout.isatty(),
                       title=f"remote segments of {args.topic}")
    finally:
        root.close()
    return 0


# ------------------------------------------------------------------------------------ maintain

def cmd_maintain(args) -> int:
    import signal
    import threading

    from logcore.log.config import MaintenanceConfig
    from logcore.log.log_root import LogRoot
    from logcore.maintenance.service import MaintenanceService

    props = load_properties(_properties_file(args.config_file, "--config-file")) if args.config_file else {}
    try:
        MaintenanceConfig.from_props(props)         # a bad file fails before anything is opened
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{args.config_file}: {exc}") from None
    root = LogRoot.open(args.root, storage_options=parse_storage_options(args.storage_option),
                        defaults=props)
    try:
        if root.read_only:
            raise InvalidConfigError(f"{root.url} is read-only (a copy of a Kafka log dir?): "
                                     "nothing can be deleted there")
        owner = root.served_by()
        if owner is not None:
            from logcore.log.root_owner import served_error
            raise served_error(root.url, owner, "seglog maintain",
                               "the broker applies retention and compaction to its root itself"
                               " (log.retention.check.interval.ms)")
        tier = root.remote_tier()                   # bad tiered storage settings fail now,
        if tier is not None:
            tier.check_access()                     # and so does a remote root we cannot write
        service = MaintenanceService(root, MaintenanceConfig.from_props(root.defaults()))
        topics = args.topic or None
        service.partitions(topics)                  # unknown topics fail now
        report = _MaintainReport(sys.stdout, sys.stderr)
        if args.once:
            summary = report.run(lambda progress: service.run_once(topics, progress=progress))
            report.summary(summary)
            return 0
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        sys.stderr.write(f"seglog maintain: checking {root.url} every "
                         f"{service.settings.retention_check_interval_ms} ms; Ctrl-C stops\n")
        try:
            passes = service.run_forever(stop, topics, on_pass=report.summary,
                                         progress=report.plain_progress)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        sys.stderr.write(f"seglog maintain: stopped after {passes} passes\n")
        return 0
    finally:
        root.close()


class _MaintainReport:
    """Progress while a pass runs and a table of what it deleted: rich on a terminal, plain
    lines otherwise (logs, pipes, tests)."""

    def __init__(self, out: TextIO, err: TextIO):
        self.out = out
        self.err = err
        self.rich = out.isatty() and err.isatty()

    def plain_progress(self, done: int, total: int, outcome) -> None:
        name = f"{outcome.topic}-{outcome.partition}"
        if outcome.skipped is not None:
            self.err.write(f"[{done}/{total}] {name}: skipped: {outcome.skipped}\n")
        else:
            did = []
            if outcome.segments_deleted:
                did.append(f"deleted {outcome.segments_deleted} segments ({outcome.bytes_deleted} bytes),"
                           f" log start offset now {outcome.log_start_offset}")
            t = outcome.tiering
            if t is not None and (t.segments_copied or t.remote_segments_deleted or t.error):
                did.append(f"copied {t.segments_copied} segments ({t.bytes_copied} bytes) to the remote tier,"
                           f" expired {t.remote_segments_deleted} remote segments"
                           f" ({t.remote_bytes_deleted} bytes)" + (f", error: {t.error}" if t.error else ""))
            if outcome.cleaned is not None:
                c = outcome.cleaned
                did.append(f"cleaned {c.bytes_read} bytes to {c.bytes_written}"
                           f" ({c.records_read - c.records_kept} records removed,"
                           f" {c.segments_before} segments to {c.segments_after})")
            self.err.write(f"[{done}/{total}] {name}: {'; '.join(did) or 'nothing to do'}\n")
        self.err.flush()

    def run(self, work):
        if not self.rich:
            return work(self.plain_progress)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=Console(file=self.err), transient=True) as bar:
            task = bar.add_task("maintain", total=None)

            def progress(done: int, total: int, outcome) -> None:
                bar.update(task, completed=done, total=total,
                           description=f"{outcome.topic}-{outcome.partition}")

            return work(progress)

    def summary(self, summary) -> None:
        rows = []
        for topic, outcomes in sorted(summary.by_topic().items()):
            starts = ",".join(f"{o.partition}:{o.log_start_offset}" for o in outcomes
                              if o.skipped is None)
            skipped = ",".join(str(o.partition) for o in outcomes if o.skipped is not None)
            cleaned = [o.cleaned for o in outcomes if o.cleaned is not None]
            tiering = [o.tiering for o in outcomes if o.tiering is not None]
            rows.append((topic, str(len(outcomes)), str(sum(o.segments_deleted for o in outcomes)),
                         str(sum(o.bytes_deleted for o in outcomes)),
                         str(sum(o.files_removed for o in outcomes)), starts or "-",
                         str(sum(c.bytes_read for c in cleaned)),
                         str(sum(c.records_read - c.records_kept for c in cleaned)),
                         skipped or "-",
                         str(sum(t.segments_copied for t in tiering)) if tiering else "-",
                         str(sum(t.remote_segments_deleted for t in tiering)) if tiering else "-"))
        header = ("topic", "partitions", "segments deleted", "bytes deleted", "files removed",
                  "log start offsets", "bytes cleaned", "records compacted away", "skipped partitions",
                  "segments copied", "remote segments expired")
        if self.rich:
            from rich.console import Console
            from rich.table import Table

            table = Table(*header, title="seglog maintain")
            for row in rows:
                table.add_row(*row)
            Console(file=self.out).print(table)
        else:
            widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
                      for i, h in enumerate(header)]
            for row in (header, *rows):
                self.out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
            self.out.write(f"total: {summary.segments_deleted} segments, "
                           f"{summary.bytes_deleted} bytes deleted; "
                           f"{len(summary.cleaned)} partitions cleaned; "
                           f"{len(summary.skipped)} partitions skipped\n")
        self.out.flush()


# ------------------------------------------------------------------------------------ repair

def cmd_repair(args) -> int:
    root = _open_root(args)
    out = sys.stdout
    try:
        if not root.storage.is_local:
            raise InvalidConfigError(
                f"seglog repair cuts segment files on a local disk; {root.storage.url} is an object store,"
                " whose segments are published whole and never recovered: readers name the damaged"
                " object and position, and a Spark query with failOnDataLoss=false skips it")
        info = root.describe_topic(args.topic)
        partitions = [args.partition] if args.partition is not None else list(range(info.partitions))
        for p in partitions:
            if not 0 <= p < info.partitions:
                raise InvalidConfigError(f"--partition {p}: topic {args.topic} has partitions "
                                         f"0..{info.partitions - 1}")
            log = root.log(args.topic, p, writer=True, repair=True)
            try:
                report = log.recovery
                name = f"{args.topic}-{p}"
                if not report.truncated and not report.rebuilt_indexes:
                    out.write(f"{name}: no damage found (log end offset {log.log_end_offset})\n")
                    continue
                for path in report.rebuilt_indexes:
                    out.write(f"{name}: rebuilt the indexes of {path}\n")
                for path, position, size, why in report.truncated:
                    out.write(f"{name}: cut {path} at position {position}: dropped {size} bytes ({why})\n")
                for path in report.deleted_segments:
                    out.write(f"{name}: deleted {path} (after the cut)\n")
                if report.dropped_offsets is not None:
                    first, end = report.dropped_offsets
                    out.write(f"{name}: dropped offsets {first}..{end - 1} ({end - first} offsets,"
                              f" {report.dropped_bytes} bytes); the log now ends at offset"
                              f" {log.log_end_offset}, high watermark {log.high_watermark}\n")
            finally:
                log.close()
    finally:
        root.close()
    return 0


# ------------------------------------------------------------------------------------ broker

def cmd_broker(args) -> int:
    from logcore.broker.server import run_from_properties
    overrides = _configs(args.override, "--override")
    return run_from_properties(_properties_file(args.config, "--config"), overrides)


# ------------------------------------------------------------------------------------ parser

def _add_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, metavar="URL",
                        help="the log root: a local folder, file:///path or s3://bucket/prefix (any fsspec URL)")
    _add_storage_option(parser)


def _add_storage_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-option", action="append", metavar="K=V",
                        help="fsspec option for the root's filesystem, e.g. endpoint_url=http://127.0.0.1:9000, "
                             "key=..., secret=..., client_kwargs.region_name=us-east-1 (repeatable; never printed)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="seglog: a Kafka-format segmented log on local disk and S3.",
        epilog="Run `seglog COMMAND --help` for a command's options and examples.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    topics = sub.add_parser("topics", help="create, list, describe, delete or grow topics",
                            description="Manage the topics of a log root (like kafka-topics).",
                            epilog=_EXAMPLES_TOPICS, formatter_class=raw)
    _add_root(topics)
    topics.add_argument("--create", metavar="TOPIC", help="create a topic (needs --partitions)")
    topics.add_argument("--list", action="store_true", help="list the topics, one per line")
    topics.add_argument("--describe", action="store_true", help="describe --topic T, or every topic")
    topics.add_argument("--delete", action="store_true", help="delete --topic T and all its data")
    topics.add_argument("--alter", action="store_true", help="add partitions to --topic T (--partitions N)")
    topics.add_argument("--topic", metavar="TOPIC", help="the topic for --describe, --delete, --alter")
    topics.add_argument("--partitions", type=int, metavar="N", help="partition count (create) or new count (alter)")
    topics.add_argument("--config", action="append", metavar="K=V",
                        help="topic config override for --create, Kafka names (repeatable); see docs/configuration.md")
    topics.add_argument("--if-not-exists", action="store_true", help="with --create: do nothing if the topic exists")
    topics.add_argument("--all-configs", action="store_true", help="with --describe: every config, not only overrides")
    topics.add_argument("--defaults", metavar="FILE",
                        help="with --create on a new root: root-level defaults (.properties with Kafka's log.* names)")
    topics.set_defaults(func=cmd_topics)

    produce = sub.add_parser("produce", help="append lines from stdin as records",
                             description="Append stdin lines to a topic (like kafka-console-producer).",
                             epilog=_EXAMPLES_PRODUCE, formatter_class=raw)
    _add_root(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, metavar="N", help="write every record to this partition")
    produce.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    produce.add_argument("--compression-type", metavar="CODEC",
                         choices=["none", "uncompressed", "gzip", "snappy", "lz4", "zstd"],
                         help="batch codec: none, gzip, snappy, lz4, zstd (default: the topic's compression.type)")
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
    _add_root(consume)
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
                         default="read_committed", help="read_committed (default) hides open and aborted transactions")
    consume.add_argument("--follow", action="store_true", help="keep waiting for new records")
    consume.add_argument("--timeout-ms", type=int, metavar="MS", help="with --follow: stop after MS without records")
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
