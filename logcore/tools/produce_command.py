"""`seglog produce`: stdin lines or files as records (kafka-console-producer): the line and file
readers, the producer properties and the batching producer.
"""
from __future__ import annotations

import sys
import time
from typing import BinaryIO, Sequence

from logcore.errors import InvalidConfigError
from logcore.records.partitioner import murmur2_partition
from logcore.tools.arguments import _configs, _key_value, _open_root, _unescape_separator
from logcore.tools.client_properties import client_properties


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

    def __init__(self, sink, topic: str, partitions: int, *, batch_bytes: int, compression,
                 batch_records: int | None = None, max_message_bytes: int | None = None,
                 topic_compression: str = "producer", topic_level: int | None = None):
        self.sink = sink                    # where closed batches go: a root's logs, or the brokers
        self.max_message_bytes = max_message_bytes
        self.topic_compression = topic_compression
        self.topic_level = topic_level      # the topic's level for its codec (LogConfig.compression_level)
        self.topic = topic
        self.partitions = partitions
        self.batch_bytes = batch_bytes
        self.batch_records = batch_records
        self.compression = compression
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
        name = self.topic_compression
        topic_codec = _compression_arg(name) if name != "producer" else None
        # the log's choice too: the topic's codec, when it names one, else the command's
        codec = topic_codec if topic_codec is not None else self.compression
        level = self.topic_level if topic_codec is not None else None
        size = len(build_batch([(key, value, headers, 0 if ts is None else ts)], base_offset=0,
                               compression=codec if codec is not None else Compression.NONE,
                               compression_level=level))
        if size > self.max_message_bytes:
            raise RecordTooLargeError(
                f"the record{where} takes {size} bytes as a batch, more than topic {self.topic}'s "
                f"max.message.bytes={self.max_message_bytes}")

    def append(self, p: int) -> None:
        buffer = self.buffers.pop(p, None)
        self.sizes.pop(p, None)
        if not buffer:
            return
        self.sink.append(p, buffer, self.compression)
        self.counts[p] += len(buffer)

    def commit(self) -> None:
        for p in sorted(self.buffers):
            self.append(p)
        self.sink.commit()

    def close(self) -> None:
        self.sink.close()


class _RootLogs:
    """Closed batches appended to the partitions' logs of a root (this process writes them)."""

    def __init__(self, root, topic: str):
        self.root = root
        self.topic = topic
        self.logs: dict = {}

    def append(self, p: int, records: list, compression) -> None:
        log = self.logs.get(p)
        if log is None:
            log = self.logs[p] = self.root.log(self.topic, p, writer=True)
        log.append_records(records, compression=compression)

    def commit(self) -> None:
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
    broker = bool(getattr(args, "bootstrap_server", None))
    if broker and args.storage_option:
        raise InvalidConfigError("--storage-option applies to --root only, not --bootstrap-server")
    headers = tuple((k, v.encode()) for k, v in (_key_value(h, "--header") for h in args.header or ()))
    line_props = _line_properties(args.property)
    if broker:
        producer_props = client_properties(args.command_config, args.producer_property, BROKER_PRODUCER_KEYS,
                                           command="seglog produce --bootstrap-server",
                                           item_option="--producer-property")
    else:
        if args.command_config:
            raise InvalidConfigError("--command-config applies to --bootstrap-server only (client properties)")
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
    compression = _compression_arg(_codec_name(args, producer_props))
    files = _file_records(args) if args.value_file else None       # unreadable files fail before anything is written
    source = _Input(args, files, headers, separator, key_separator, null)
    if broker:
        lines, counts = _produce_to_brokers(args, source, producer_props, batch_size, compression)
    else:
        lines, counts = _produce_to_root(args, source, batch_size, compression)
    spread = ", ".join(f"{p}: {n}" for p, n in enumerate(counts) if n)
    sys.stderr.write(f"Produced {lines} records to topic {args.topic} "
                     f"({spread or 'nothing'}) in {time.monotonic() - started:.3f} s\n")
    return 0


# Producer properties `--bootstrap-server` applies (--command-config, --producer-property).
BROKER_PRODUCER_KEYS = ("acks", "batch.size", "compression.type", "delivery.timeout.ms")


def _codec_name(args, producer_props: dict[str, str]) -> str | None:
    """The batch codec of --compression-type, Kafka's --compression-codec, or compression.type."""
    given = {name: value for name, value in (("--compression-type", args.compression_type),
                                             ("--compression-codec", args.compression_codec)) if value}
    if len(set(given.values())) > 1:
        raise InvalidConfigError(" and ".join(f"{k} {v}" for k, v in given.items()) + " disagree: give one")
    return next(iter(given.values()), None) or producer_props.get("compression.type")


def _acks(args, props: dict[str, str]) -> int:
    text = args.request_required_acks if args.request_required_acks is not None else props.get("acks", "all")
    value = {"all": -1, "-1": -1, "1": 1}.get(str(text).strip().lower())
    if value is None:
        if str(text).strip() == "0":
            raise InvalidConfigError("acks=0 is not supported: without an answer from the broker seglog produce"
                                     " could not say what was written; give acks=1 or all")
        raise InvalidConfigError(f"acks must be all, -1 or 1, got {text!r}")
    return value


class _Input:
    """The records to produce: stdin lines (split at the key separator) or --value-file files."""

    def __init__(self, args, files, headers, separator, key_separator, null):
        self.args = args
        self.files = files
        self.headers = headers
        self.separator = separator
        self.key_separator = key_separator
        self.null = null

    def feed(self, producer: "_Producer", partition_of) -> int:
        """Add every record to `producer`, committing every --commit-every lines; the count."""
        args, headers, separator, null = self.args, self.headers, self.separator, self.null
        lines = 0
        if self.files is not None:
            for (key, value), path in zip(self.files, args.value_file):
                producer.add(partition_of(key), (key, value, headers, args.timestamp), f" of --value-file {path}")
                lines += 1
            return lines
        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        for number, line in enumerate(_read_lines(stdin), start=1):
            if isinstance(line, str):
                line = line.encode()
            key = None
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    raise InvalidConfigError(
                        f"No key separator {self.key_separator!r} found on line number {number}: "
                        f"{line[:80].decode('utf-8', 'replace')!r}")
                if null is not None and key == null:
                    key = None
            else:
                value = line
            if null is not None and value == null:
                value = None                # a tombstone
            producer.add(partition_of(key), (key, value, headers, args.timestamp), f" on line number {number}")
            lines += 1
            if args.commit_every and lines % args.commit_every == 0:
                producer.commit()
        return lines


def _partitioner(args, partitions: int):
    def partition_of(key: bytes | None) -> int | None:
        if args.partition is not None:
            return args.partition
        if key is not None:
            return murmur2_partition(key, partitions)
        return None
    return partition_of


def _produce_to_root(args, source: _Input, batch_size: int, compression) -> tuple[int, list[int]]:
    root = _open_root(args)
    producer = None
    try:
        root.check_not_served(                     # before a line of stdin is read
            "seglog produce", f"produce through it: seglog produce --bootstrap-server {{bootstrap}}"
            f" --topic {args.topic}, or any Kafka client (bootstrap.servers={{bootstrap}})")
        info = root.describe_topic(args.topic)
        if args.partition is not None and not 0 <= args.partition < info.partitions:
            raise InvalidConfigError(f"--partition {args.partition}: topic {args.topic} has partitions "
                                     f"0..{info.partitions - 1}")
        config = root.topic_config(args.topic)
        if config.compact and source.separator is None and not args.key_file:
            # Every record would be without a key, which a compacted topic refuses (as Kafka's
            # broker does): say so before reading any input.
            raise InvalidConfigError(
                f"topic {args.topic} has cleanup.policy={','.join(config.cleanup_policy)}: a compacted"
                " topic refuses records without a key, so give every line a key with --key-separator"
                " SEP (lines `key SEP value`), or give --key-file with --value-file")
        # Never a batch the log must refuse for its size: capped by the topic's limits.
        batch_bytes = max(BATCH_OVERHEAD + 1, min(batch_size, config.max_message_bytes, config.segment_bytes))
        producer = _Producer(_RootLogs(root, args.topic), args.topic, info.partitions, batch_bytes=batch_bytes,
                             compression=compression, batch_records=args.batch_records,
                             max_message_bytes=config.max_message_bytes,
                             topic_compression=config.compression_type,
                             topic_level=config.compression_level)
        try:
            lines = source.feed(producer, _partitioner(args, info.partitions))
        finally:
            producer.commit()      # what was read before an error is still produced, as Kafka's would be
        return lines, producer.counts
    finally:
        if producer is not None:
            producer.close()
        root.close()


def _produce_to_brokers(args, source: _Input, props: dict[str, str], batch_size: int,
                        compression) -> tuple[int, list[int]]:
    from logcore.tools.client_properties import client_security, int_property, timeout_s
    from logcore.tools.partition_leaders import PartitionLeaders
    from logcore.tools.topic_producer import WINDOWS, TopicProducer

    acks = _acks(args, props)
    delivery_ms = int_property(props, "delivery.timeout.ms", 120_000, minimum=1)
    leaders = PartitionLeaders(args.bootstrap_server, args.topic, client_id=props.get("client.id", "console-producer"),
                               timeout_s=timeout_s(props), windows=WINDOWS, security=client_security(props))
    try:
        if args.partition is not None:
            leaders.check_partition(args.partition)
        sink = TopicProducer(leaders, acks=acks, timeout_ms=delivery_ms)
        producer = _Producer(sink, args.topic, leaders.partitions, batch_bytes=max(BATCH_OVERHEAD + 1, batch_size),
                             compression=compression, batch_records=args.batch_records)
        try:
            lines = source.feed(producer, _partitioner(args, leaders.partitions))
        finally:
            producer.commit()      # what was read before an error is still produced
        return lines, producer.counts
    finally:
        leaders.close()
