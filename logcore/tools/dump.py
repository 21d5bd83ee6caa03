# Over 600 lines: a decoder per Kafka file kind (segment, indexes, snapshot, checkpoints), engine-independent.
"""`seglog dump`: print segment, index, snapshot and checkpoint files the way Kafka's
DumpLogSegments tool does (same lines and field names), on local paths and any fsspec URL.

Corrupt data is reported (file and byte position) on stderr and the dump goes on with the next
file; the exit status is then 1. Index and snapshot entries are decoded here directly from their
fixed layouts (kafka-storage.md 2.3, 2.4, 3.5, 6.10) so that the tool reads exactly what is on disk,
independently of the engine's own index classes.
"""
from __future__ import annotations

import posixpath
import struct
from dataclasses import dataclass, field
from typing import Callable, TextIO

from logcore.errors import CorruptIndexError, CorruptRecordError, SegLogError
from logcore.records import (
    BatchHeader,
    ControlType,
    EndTransactionMarker,
    TimestampType,
    crc32c,
    decode_records,
    parse_control_type,
)
from logcore.records.compression import CODEC_NAMES
from logcore.storage import Storage, open_storage

HEADER_PROBE = 17          # baseOffset + batchLength + partitionLeaderEpoch + magic
MIN_ENTRY_SIZE = 14
HEADER_SIZE = 61
_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_ENTRY = struct.Struct(">ii")           # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")             # timestamp, relative offset
_TXN_ENTRY = struct.Struct(">hqqqq")           # version, producerId, first, last, lastStable
_SNAPSHOT_HEAD = struct.Struct(">hIi")         # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")   # 46 bytes, ProducerSnapshot.json v1 order
_READ_WINDOW = 8 << 20

CHECKPOINT_FILES = (
    "replication-offset-checkpoint", "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint", "cleaner-offset-checkpoint",
)
TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")

# seglog's own files in a partition folder or a root (besides Kafka's)
HW_FILE = "high-watermark"                  # logcore.log.partition_state: magic, HW, CRC-32
_HW_RECORD = struct.Struct(">4sqI")
_HW_MAGIC = b"SGHW"
CLEAN_SHUTDOWN_FILE = ".seglog-clean-shutdown"   # logcore.log.log: the log end offset at a clean close
_LOCK_PURPOSES = {
    ".writer.lock": "flocked by a partition's writer around each critical section",
    ".writer-held.lock": "flocked (shared) by every writer holding the partition",
    ".writer-epoch.lock": "flocked while a writer bumps writer-epoch",
    ".seglog-root.lock": "flocked around read-modify-write of the root checkpoint files",
    ".seglog-topics.json.lock": "flocked around changes to seglog-topics.json",
}
_SECRET_WORDS = ("secret", "password", "token", "customerkey", "storage.key", "access_key", "credential")


@dataclass
class DumpOptions:
    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = 5 * 1024 * 1024
    max_bytes: int = 2**31 - 1
    skip_record_metadata: bool = False

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.print_data_log     # Kafka: print-data-log implies deep


@dataclass
class _Report:
    """What Kafka prints at the end, to stderr: index mismatches, time index errors, offset gaps."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_offset_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def print(self, err: TextIO) -> None:
        for name, pairs in self.index_mismatches.items():
            err.write(f"Mismatches in :{name}\n")
            for index_offset, log_offset in pairs:
                err.write(f"  Index offset: {index_offset}, log offset: {log_offset}\n")
        for name, pairs in self.time_mismatches.items():
            err.write(f"Found timestamp mismatch in :{name}\n")
            for index_ts, log_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}\n")
        for name, pairs in self.time_out_of_order.items():
            err.write(f"Found out of order timestamp in :{name}\n")
            for index_ts, prev_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}\n")
        for pairs in self.time_offset_not_found.values():
            err.write("The following indexed offsets are not found in the log.\n")
            for index_offset, log_offset in pairs:
                err.write(f"Indexed offset: {index_offset}, found log offset: {log_offset}\n")
        for name, pairs in self.non_consecutive.items():
            err.write(f"Non-consecutive offsets in {name}\n")
            for first, second in pairs:
                err.write(f"  {first} is followed by {second}\n")


class _File:
    """One file in some storage, read in windows so that a 1 GiB segment is never held whole."""

    def __init__(self, storage: Storage, name: str, display: str):
        self.storage = storage
        self.name = name
        self.display = display
        self.size = storage.size(name)
        self._start = 0
        self._data = b""

    def read(self, start: int, length: int) -> bytes:
        end = min(start + length, self.size)
        if not (self._start <= start and end <= self._start + len(self._data)):
            self._start = start
            self._data = self.storage.read(self.name, start, min(self.size, start + max(length, _READ_WINDOW)))
        return self._data[start - self._start:end - self._start]

    def read_all(self) -> bytes:
        return self.storage.read(self.name)

    def sibling(self, suffix: str) -> "_File":
        base = self.name.split(".")[0]
        display_dir = posixpath.dirname(self.display)
        name = base + suffix
        return _File(self.storage, name, posixpath.join(display_dir, name) if display_dir else name)


def _base_offset(file: _File) -> int:
    prefix = file.name.split(".")[0]
    if not prefix.isdigit():
        raise CorruptIndexError(f"file name {file.name!r} does not start with a base offset", file=file.display)
    return int(prefix)


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _timestamp_type_name(tt: TimestampType | int) -> str:
    return {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}.get(
        TimestampType(tt), "NoTimestampType")


def _optional_long(value: int | None) -> str:
    # Kafka prints the Java OptionalLong as it is.
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


class _BatchScan:
    """Batches of a .log file one by one, as Kafka's FileLogInputStream finds them."""

    def __init__(self, file: _File, start: int = 0, limit: int | None = None):
        self.file = file
        self.pos = start
        self.limit = file.size if limit is None else min(limit, file.size)

    def next(self) -> tuple[int, BatchHeader, bytes] | None:
        """(position, header, batch bytes), or None at the end or before a partial tail.
        Raises CorruptRecordError for a batch that cannot be framed."""
        remaining = self.limit - self.pos
        if remaining < HEADER_PROBE:
            return None
        probe = self.file.read(self.pos, HEADER_PROBE)
        batch_length = struct.unpack_from(">i", probe, 8)[0]
        magic = probe[16]
        if batch_length < MIN_ENTRY_SIZE:
            raise CorruptRecordError(f"batch length {batch_length} is smaller than the minimum {MIN_ENTRY_SIZE}",
                                     file=self.file.display, position=self.pos)
        size = batch_length + 12
        if size > remaining:
            return None
        if magic != 2:
            kind = "legacy message format (magic %d) is not supported" % magic if magic in (0, 1) \
                else f"unknown record batch magic {magic}"
            raise CorruptRecordError(kind, file=self.file.display, position=self.pos)
        if size < HEADER_SIZE:
            raise CorruptRecordError(f"batch size {size} is smaller than the {HEADER_SIZE}-byte header",
                                     file=self.file.display, position=self.pos)
        data = self.file.read(self.pos, size)
        header = BatchHeader(*_HEADER.unpack_from(data, 0))
        pos = self.pos
        self.pos += size
        return pos, header, data


def _batch_is_valid(header: BatchHeader, data: bytes) -> bool:
    return header.size >= HEADER_SIZE and crc32c(memoryview(data)[21:]) == header.crc


class Dumper:
    """Dumps files to `out`; problems go to `err`. `errors` counts files with corrupt data."""

    def __init__(self, options: DumpOptions, out: TextIO, err: TextIO,
                 storage_options: dict | None = None,
                 value_decoder: Callable[[bytes], str] | None = None):
        self.options = options
        self.out = out
        self.err = err
        self.storage_options = storage_options
        self.decode = value_decoder or (lambda b: b.decode("utf-8", errors="replace"))
        self.report = _Report()
        self.errors = 0
        self._storages: dict[str, Storage] = {}

    # -- entry point ----------------------------------------------------------------------------

    def dump(self, paths: list[str]) -> int:
        for path in paths:
            self.out.write(f"Dumping {path}\n")
            try:
                file = self._open(path)
                self._dump_one(file)
            except SegLogError as exc:
                self.errors += 1
                self.out.flush()
                self.err.write(f"seglog: error: {exc}\n")
        self.out.flush()
        self.report.print(self.err)
        return 1 if self.errors else 0

    def _open(self, path: str) -> _File:
        if "://" in path:
            scheme, rest = path.split("://", 1)
            parent, _, name = rest.rstrip("/").rpartition("/")
            root = f"{scheme}://{parent}"
        else:
            root, name = posixpath.split(path)
            root = root or "."
        if not name:
            raise SegLogError(f"not a file: {path}")
        storage = self._storages.get(root)
        if storage is None:
            storage = open_storage(root, self.storage_options, read_only=True)
            self._storages[root] = storage
        return _File(storage, name, path)

    def _dump_one(self, file: _File) -> None:
        name = file.name
        for temp in TEMP_SUFFIXES:          # 0000.log.deleted is dumped as a .log
            if name.endswith(temp):
                name = name[: -len(temp)]
        suffix = name[name.rfind("."):] if "." in name else ""
        if suffix == ".log":
            self.dump_log(file)
        elif suffix == ".index":
            self.dump_offset_index(file)
        elif suffix == ".timeindex":
            self.dump_time_index(file)
        elif suffix == ".txnindex":
            self.dump_txn_index(file)
        elif suffix == ".snapshot":
            self.dump_producer_snapshot(file)
        elif name in CHECKPOINT_FILES:
            self.dump_offset_checkpoint(file)
        elif name == "leader-epoch-checkpoint":
            self.dump_leader_epoch_checkpoint(file)
        elif name == "partition.metadata":
            self.dump_partition_metadata(file)
        elif name == HW_FILE:
            self.dump_high_watermark(file)
        elif name == CLEAN_SHUTDOWN_FILE:
            self.dump_clean_shutdown(file)
        elif name.endswith(".json"):         # writer-epoch is JSON too (below)
            self.dump_json(file)
        elif name == "writer-epoch":
            self.dump_json(file, "writer epoch (seglog's writer fence)")
        elif name == "meta.properties":
            self.dump_properties(file)
        elif name.endswith(".lock") or name in _LOCK_PURPOSES:
            self.dump_lock(file)
        elif name == ".kafka_cleanshutdown":
            self.out.write("Kafka's clean-shutdown marker (no data): the broker closed this log dir cleanly\n")
        elif self._is_folder(file):
            self.err.write(f"Ignoring folder {file.display}: give the files in it ({file.display}/*)\n")
        else:
            self.err.write(f"Ignoring unknown file {file.display}\n")

    # -- .log -----------------------------------------------------------------------------------

    def dump_log(self, file: _File) -> None:
        out, opts = self.out, self.options
        out.write(f"Log starting offset: {_base_offset(file)}\n")
        scan = _BatchScan(file, 0, opts.max_bytes)
        last_offset = -1
        gaps: list[tuple[int, int]] = []
        problem: CorruptRecordError | None = None
        try:
            while (item := scan.next()) is not None:
                position, header, data = item
                valid = _batch_is_valid(header, data)
                self._print_batch(header, position, valid)
                if not valid:
                    problem = problem or CorruptRecordError(
                        f"CRC mismatch: stored {header.crc}, computed {crc32c(memoryview(data)[21:])}",
                        file=file.display, position=position)
                    continue
                if opts.deep:
                    records = decode_records(data, 0, header, source=file.display, base_position=position,
                                             verify_crc=False)
                    for record in records:
                        if last_offset != -1 and record.offset != last_offset + 1:
                            gaps.append((last_offset, record.offset))
                        last_offset = record.offset
                        self._print_record(header, record)
        except CorruptRecordError as exc:
            problem = exc
        if gaps:
            self.report.non_consecutive.setdefault(file.display, []).extend(gaps)
        if problem is not None:
            self.out.flush()
            raise problem
        trailing = scan.limit - scan.pos
        if trailing > 0 and opts.max_bytes == 2**31 - 1:
            out.write(f"Found {trailing} invalid bytes at the end of {file.name}\n")
            raise CorruptRecordError(f"{trailing} bytes of a partial batch at the end of the log",
                                     file=file.display, position=scan.pos)

    def _print_batch(self, h: BatchHeader, position: int, valid: bool) -> None:
        horizon = h.base_timestamp if h.has_delete_horizon else None
        self.out.write(
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} isTransactional: {_java_bool(h.is_transactional)} "
            f"isControl: {_java_bool(h.is_control)} deleteHorizonMs: {_optional_long(horizon)}"
            f" position: {position} {_timestamp_type_name(h.timestamp_type)}: {h.max_timestamp} "
            f"size: {h.size} magic: {h.magic} compresscodec: {CODEC_NAMES.get(h.attributes & 7, 'unknown')} "
            f"crc: {h.crc} isvalid: {_java_bool(valid)}\n")

    def _print_record(self, h: BatchHeader, r) -> None:
        parts: list[str] = []
        prefix = "| "
        if not self.options.skip_record_metadata:
            key_size = -1 if r.key is None else len(r.key)
            value_size = -1 if r.value is None else len(r.value)
            parts.append(f"{prefix}offset: {r.offset} {_timestamp_type_name(h.timestamp_type)}: {r.timestamp} "
                         f"keySize: {key_size} valueSize: {value_size}")
            prefix = " "
            header_keys = ",".join(k for k, _ in r.headers)
            parts.append(f" sequence: {r.sequence} headerKeys: [{header_keys}]")
            if h.is_control:
                parts.append(self._control_text(r))
        if self.options.print_data_log and not h.is_control:
            if r.key is not None:
                parts.append(f"{prefix}key: {self.decode(r.key)}")
                prefix = " "
            if r.value is not None:
                parts.append(f" payload: {self.decode(r.value)}")
        self.out.write("".join(parts) + "\n")

    @staticmethod
    def _control_text(r) -> str:
        control_type = parse_control_type(r.key)
        if control_type in (ControlType.ABORT, ControlType.COMMIT):
            marker = EndTransactionMarker.decode(r.key, r.value)
            return f" endTxnMarker: {marker.control_type.name} coordinatorEpoch: {marker.coordinator_epoch}"
        type_id = struct.unpack_from(">h", r.key, 2)[0]
        return f" controlType: {control_type.name}({type_id})"

    # -- indexes --------------------------------------------------------------------------------

    @staticmethod
    def _index_sanity(file: _File, data: bytes, entry_size: int) -> None:
        if len(data) % entry_size != 0:
            raise CorruptIndexError(
                f"index file size {len(data)} is not a multiple of the {entry_size}-byte entry size", file=file.display)

    def dump_offset_index(self, file: _File) -> None:
        base = _base_offset(file)
        data = file.read_all()
        entries = len(data) // _OFFSET_ENTRY.size
        if entries == 0:
            self.out.write(f"{file.display} is empty.\n")
            return
        if self.options.index_sanity_check:
            self._index_sanity(file, data, _OFFSET_ENTRY.size)
            last = base + _OFFSET_ENTRY.unpack_from(data, (entries - 1) * 8)[0]
            if last < base:
                raise CorruptIndexError(f"Corrupt index found, index file ({file.display}) has non-zero size but "
                                        f"the last offset is {last} which is less than the base offset {base}.",
                                        file=file.display)
            self.out.write(f"{file.display} passed sanity check.\n")
            return
        log = file.sibling(".log")
        mismatches: list[tuple[int, int]] = []
        for i in range(entries):
            relative, position = _OFFSET_ENTRY.unpack_from(data, i * 8)
            offset = base + relative
            if offset == base and i > 0:
                break                # zero padding of a preallocated index after a crash
            batch = _BatchScan(log, position, position + self.options.max_message_size).next()
            log_offset = batch[1].last_offset if batch is not None else -1
            if log_offset != offset:
                mismatches.append((offset, log_offset))
            if not self.options.verify_index_only:
                self.out.write(f"offset: {offset} position: {position}\n")
        if mismatches:
            self.report.index_mismatches.setdefault(file.display, []).extend(reversed(mismatches))
            self.errors += 1

    def dump_time_index(self, file: _File) -> None:
        base = _base_offset(file)
        data = file.read_all()
        entries = len(data) // _TIME_ENTRY.size
        if self.options.index_sanity_check:
            self._index_sanity(file, data, _TIME_ENTRY.size)
            if entries:
                first_ts = _TIME_ENTRY.unpack_from(data, 0)[0]
                last_ts, last_rel = _TIME_ENTRY.unpack_from(data, (entries - 1) * 12)
                if last_ts < first_ts:
                    raise CorruptIndexError(
                        f"Corrupt time index found, time index file ({file.display}) has non-zero size but the last "
                        f"timestamp is {last_ts} which is less than the first timestamp {first_ts}", file=file.display)
                if base + last_rel < base:
                    raise CorruptIndexError(
                        f"Corrupt time index found, time index file ({file.display}) has non-zero size but the last "
                        f"offset is {base + last_rel} which is less than the first offset {base}", file=file.display)
            self.out.write(f"{file.display} passed sanity check.\n")
            return
        log = file.sibling(".log")
        offset_index = _read_offset_index(file, base)
        prev_ts = -1
        found_problem = False
        for i in range(entries):
            timestamp, relative = _TIME_ENTRY.unpack_from(data, i * 12)
            offset = base + relative
            if offset == base and i > 0:
                break
            position = _lookup(offset_index, offset)
            scan = _BatchScan(log, position)
            match = None
            while (item := scan.next()) is not None:
                if item[1].last_offset >= offset:
                    match = item
                    break
            if match is None:
                self.report.time_offset_not_found.setdefault(file.display, []).append((offset, -1))
                found_problem = True
            elif match[1].last_offset != offset:
                self.report.time_offset_not_found.setdefault(file.display, []).append((offset, match[1].last_offset))
                found_problem = True
            else:
                pos, header, batch = match
                records = decode_records(batch, 0, header, source=log.display, base_position=pos)
                max_ts = max((r.timestamp for r in records), default=-1)
                if max_ts != timestamp:
                    self.report.time_mismatches.setdefault(file.display, []).append((timestamp, max_ts))
                    found_problem = True
                if prev_ts >= timestamp:
                    self.report.time_out_of_order.setdefault(file.display, []).append((timestamp, prev_ts))
                    found_problem = True
            if not self.options.verify_index_only:
                self.out.write(f"timestamp: {timestamp} offset: {offset}\n")
            prev_ts = timestamp
        if found_problem:
            self.errors += 1

    def dump_txn_index(self, file: _File) -> None:
        data = file.read_all()
        size = _TXN_ENTRY.size
        for pos in range(0, len(data) - len(data) % size, size):
            version, producer_id, first, last, lso = _TXN_ENTRY.unpack_from(data, pos)
            self.out.write(f"version: {version} producerId: {producer_id} firstOffset: {first} "
                           f"lastOffset: {last} lastStableOffset: {lso}\n")
        if len(data) % size:
            raise CorruptIndexError(f"{len(data) % size} trailing bytes after the last {size}-byte aborted "
                                    f"transaction entry at position {len(data) - len(data) % size}",
                                    file=file.display)

    # -- producer state snapshot ---------------------------------------------------------------

    def dump_producer_snapshot(self, file: _File) -> None:
        data = file.read_all()
        if len(data) < _SNAPSHOT_HEAD.size:
            raise CorruptIndexError(f"producer snapshot of {len(data)} bytes is shorter than its "
                                    f"{_SNAPSHOT_HEAD.size}-byte header", file=file.display)
        version, stored_crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
        if version != 1:
            raise CorruptIndexError(f"Snapshot contained an unknown file version {version}", file=file.display)
        computed = crc32c(memoryview(data)[6:])
        if computed != stored_crc:
            raise CorruptIndexError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored_crc}. "
                                    f"Computed crc: {computed}", file=file.display)
        expected = _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size
        if count < 0 or expected != len(data):
            raise CorruptIndexError(f"snapshot declares {count} entries ({expected} bytes) but holds {len(data)} "
                                    "bytes", file=file.display)
        for i in range(count):
            (producer_id, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch,
             txn_first) = _SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size)
            line = (f"producerId: {producer_id} producerEpoch: {epoch} coordinatorEpoch: {coordinator_epoch} "
                    f"currentTxnFirstOffset: {_optional_long(txn_first if txn_first >= 0 else None)} lastTimestamp: {timestamp} ")
            if last_offset >= 0:
                first_seq = last_seq - offset_delta if last_seq >= offset_delta else \
                    2**31 - 1 - (offset_delta - last_seq) + 1    # sequence wraps INT_MAX -> 0
                line += (f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_offset} "
                         f"offsetDelta: {offset_delta} timestamp: {timestamp}")
            self.out.write(line + "\n")

    # -- checkpoints (seglog addition: Kafka's tool does not dump them) -------------------------

    def _checkpoint_lines(self, file: _File, fields: int) -> list[list[str]]:
        text = file.read_all().decode("utf-8", errors="replace")
        lines = text.splitlines()
        if len(lines) < 2:
            raise CorruptIndexError("checkpoint needs a version line and a count line", file=file.display)
        version, count = lines[0].strip(), lines[1].strip()
        if version != "0":
            raise CorruptIndexError(f"unrecognised checkpoint version {version!r} on line 1", file=file.display)
        if not count.isdigit() or int(count) != len(lines) - 2:
            raise CorruptIndexError(f"checkpoint count line says {count!r} but {len(lines) - 2} entries follow",
                                    file=file.display)
        self.out.write(f"version: {version} entries: {count}\n")
        rows = []
        for n, line in enumerate(lines[2:], start=3):
            parts = line.split()
            numbers = parts[1:] if fields == 3 else parts        # topic partition offset | epoch offset
            if len(parts) != fields or not all(p.lstrip("-").isdigit() for p in numbers):
                raise CorruptIndexError(f"malformed checkpoint line {n}: {line!r}", file=file.display)
            rows.append(parts)
        return rows

    def dump_offset_checkpoint(self, file: _File) -> None:
        for topic, partition, offset in self._checkpoint_lines(file, 3):
            self.out.write(f"topic: {topic} partition: {partition} offset: {offset}\n")

    def dump_leader_epoch_checkpoint(self, file: _File) -> None:
        for epoch, start_offset in self._checkpoint_lines(file, 2):
            self.out.write(f"epoch: {epoch} startOffset: {start_offset}\n")

    # -- seglog's own files -----------------------------------------------------------------------

    @staticmethod
    def _is_folder(file: _File) -> bool:
        import os
        try:
            return os.path.isdir(file.storage.local_path(file.name))
        except Exception:   # noqa: BLE001 - object stores have no folders to tell apart
            return False

    def dump_high_watermark(self, file: _File) -> None:
        data = file.read_all()
        if len(data) != _HW_RECORD.size:
            raise CorruptIndexError(f"high-watermark of {len(data)} bytes at position 0: expected "
                                    f"{_HW_RECORD.size} (magic SGHW, offset, CRC-32)", file=file.display)
        import zlib
        magic, hw, crc = _HW_RECORD.unpack(data)
        if magic != _HW_MAGIC:
            raise CorruptIndexError(f"high-watermark magic {magic!r} at position 0 is not b'SGHW'",
                                    file=file.display)
        valid = crc == zlib.crc32(data[:12]) and hw >= 0
        self.out.write(f"highWatermark: {hw} crc: {crc} isvalid: {_java_bool(valid)}\n")
        if not valid:
            raise CorruptIndexError(f"high-watermark CRC {crc} at position 12 does not match its first 12 bytes "
                                    "(a torn write: the root's replication-offset-checkpoint then counts)",
                                    file=file.display)

    def dump_clean_shutdown(self, file: _File) -> None:
        text = file.read_all().decode("utf-8", errors="replace").strip()
        if not text.lstrip("-").isdigit():
            raise CorruptIndexError(f"clean-shutdown marker holds {text[:40]!r}, not an offset", file=file.display)
        self.out.write(f"cleanShutdown: true logEndOffset: {text}\n")

    def dump_json(self, file: _File, what: str | None = None) -> None:
        import json

        data = file.read_all()
        try:
            value = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            position = getattr(exc, "pos", getattr(exc, "start", 0))
            raise CorruptIndexError(f"not valid JSON at position {position}: {exc}", file=file.display) from None
        if what:
            self.out.write(f"{what}\n")
        self.out.write(json.dumps(_redacted(value), indent=2, sort_keys=True) + "\n")

    def dump_properties(self, file: _File) -> None:
        text = file.read_all().decode("utf-8", errors="replace")
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith(("#", "!")):
                key, _, value = line.partition("=")
                self.out.write(f"{key.strip()}: {'***' if _is_secret(key) else value.strip()}\n")

    def dump_lock(self, file: _File) -> None:
        purpose = _LOCK_PURPOSES.get(file.name, "a seglog lock file")
        self.out.write(f"lock file ({purpose}); {file.size} bytes, no data\n")

    def dump_partition_metadata(self, file: _File) -> None:
        text = file.read_all().decode("utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), start=1):
            parts = line.split()
            if len(parts) != 2 or not parts[0].endswith(":"):
                raise CorruptIndexError(f"malformed partition.metadata line {n}: {line!r}", file=file.display)
            self.out.write(f"{parts[0]} {parts[1]}\n")


def _read_offset_index(time_index: _File, base: int) -> list[tuple[int, int]]:
    """The entries of the .index beside a .timeindex; none when it is missing."""
    try:
        data = time_index.sibling(".index").read_all()
    except SegLogError:
        return []                       # no offset index: scan the log from the start
    entries = []
    for i in range(len(data) // 8):
        relative, position = _OFFSET_ENTRY.unpack_from(data, i * 8)
        if relative == 0 and i > 0:
            break
        entries.append((base + relative, position))
    return entries


def _lookup(entries: list[tuple[int, int]], offset: int) -> int:
    """Position of the largest index entry <= offset (0 when none), as OffsetIndex.lookup."""
    position = 0
    lo, hi = 0, len(entries) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if entries[mid][0] <= offset:
            position = entries[mid][1]
            lo = mid + 1
        else:
            hi = mid - 1
    return position


def dump_files(paths: list[str], options: DumpOptions, out: TextIO, err: TextIO,
               storage_options: dict | None = None) -> int:
    """Dump every file in `paths`; returns the exit status (1 if any file had corrupt data)."""
    return Dumper(options, out, err, storage_options).dump(paths)


def _is_secret(name: str) -> bool:
    lowered = str(name).lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _redacted(value):
    """JSON with the values of secret-looking keys (credentials in tiered settings) replaced."""
    if isinstance(value, dict):
        return {k: ("***" if _is_secret(k) and v not in (None, "") else _redacted(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value
