"""Producer state snapshot files: `<20-digit offset>.snapshot` (the state valid up to that
offset), big-endian:
int16 version (1) | uint32 CRC-32C of bytes [6, end) | int32 count | count x 46-byte entries
(int64 producerId, int16 epoch, int32 lastSequence, int64 lastOffset, int32 offsetDelta,
int64 timestamp, int32 coordinatorEpoch, int64 currentTxnFirstOffset or -1).
"""
from __future__ import annotations

import logging
import re
import struct
from typing import TYPE_CHECKING, Iterable

from logcore.errors import CorruptIndexError, ResourceNotFoundError
from logcore.log.producer_entry import BatchMetadata, ProducerStateEntry
from logcore.records.crc import crc32c

if TYPE_CHECKING:
    from logcore.storage import Storage

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_HEADER = struct.Struct(">hIi")   # version, crc, count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6                              # the CRC covers everything after version and crc
_SNAPSHOT_NAME = re.compile(r"([0-9]+)\.snapshot\Z")
assert _SNAPSHOT_ENTRY.size == 46


class CorruptSnapshotError(CorruptIndexError):
    """A producer state snapshot with a bad version, CRC or layout."""


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The snapshot file content (entries in producer id order)."""
    body = []
    for e in sorted(entries, key=lambda e: e.producer_id):
        body.append(_SNAPSHOT_ENTRY.pack(
            e.producer_id, e.producer_epoch, e.last_seq, e.last_data_offset, e.last_offset_delta,
            e.last_timestamp, e.coordinator_epoch,
            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset))
    after_crc = struct.pack(">i", len(body)) + b"".join(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(after_crc)) + after_crc


def decode_snapshot(data: bytes, *, source: str | None = None) -> list[ProducerStateEntry]:
    """The entries of a snapshot; CorruptSnapshotError on a bad version, CRC or size."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"producer snapshot is {len(data)} bytes, shorter than its "
                                   f"{_SNAPSHOT_HEADER.size}-byte header", file=source)
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"producer snapshot has unknown version {version} (expected "
                                   f"{SNAPSHOT_VERSION})", file=source)
    computed = crc32c(memoryview(data)[_CRC_START:])
    if crc != computed:
        raise CorruptSnapshotError(f"producer snapshot is corrupt: stored CRC {crc}, computed "
                                   f"{computed}", file=source)
    expected = _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size
    if count < 0 or len(data) != expected:
        raise CorruptSnapshotError(f"producer snapshot declares {count} entries "
                                   f"({expected} bytes) but is {len(data)} bytes", file=source)
    entries = []
    for (producer_id, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch,
         txn_first) in _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEADER.size:]):
        entry = ProducerStateEntry(producer_id, epoch, coordinator_epoch, timestamp,
                                   txn_first if txn_first >= 0 else None)
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        entries.append(entry)
    return entries


def snapshot_offsets_in(names: Iterable[str]) -> list[int]:
    """Offsets of the `.snapshot` files among a folder's file names, ascending."""
    return sorted(int(match.group(1)) for match in map(_SNAPSHOT_NAME.match, names) if match)


def list_snapshot_offsets(storage: Storage, directory: str) -> list[int]:
    """Offsets of the `.snapshot` files in `directory`, ascending."""
    return snapshot_offsets_in(storage.list_dir(directory))


def write_snapshot(storage: Storage, directory: str, offset: int,
                   entries: Iterable[ProducerStateEntry], *, durable: bool = True) -> str:
    """Write `<offset>.snapshot` atomically (fsynced unless not `durable`); returns its path."""
    path = storage.join(directory, snapshot_file_name(offset))
    storage.write_atomic(path, encode_snapshot(entries), durable=durable)
    return path


def load_latest_snapshot(storage: Storage, directory: str, upto_offset: int,
                         above_offset: int = -1, *, offsets: list[int] | None = None
                         ) -> tuple[int, list[ProducerStateEntry]] | None:
    """The newest readable snapshot with above_offset < offset <= upto_offset, as
    (offset, entries). Corrupt ones are skipped with a warning and deleted unless the storage is
    read-only. offsets: the snapshots a listing just found (None: list the folder)."""
    if offsets is None:
        offsets = list_snapshot_offsets(storage, directory)
    for offset in reversed(offsets):
        if offset > upto_offset or offset <= above_offset:
            continue
        path = storage.join(directory, snapshot_file_name(offset))
        try:
            return offset, decode_snapshot(storage.read(path), source=storage.describe(path))
        except ResourceNotFoundError:
            continue
        except CorruptSnapshotError as exc:
            log.warning("skipping producer snapshot: %s", exc)
            if not storage.read_only:
                storage.delete(path)
    return None
