# Just over 700 lines: Kafka's producer state machine (sequences, transactions) and its .snapshot codec.
"""Producer state: idempotent de-duplication, open transactions and `.snapshot` files.

Per producer id the log keeps the epoch, the coordinator epoch, the first offset of the open
transaction and the metadata of the last 5 batches (Kafka's NUM_BATCHES_TO_RETAIN, matching
`max.in.flight.requests.per.connection <= 5`). An append goes through two steps, so that nothing
changes when validation fails or the write does not happen:

    analysis = state.analyze(batches, origin)      # duplicate? sequence/epoch errors raise here
    if analysis.duplicate: answer with its offsets, append nothing
    ... write the batches to the segment ...
    aborted = state.complete_append(analysis, next_offset)   # AbortedTxn entries for .txnindex

Snapshot file `<20-digit offset>.snapshot` (valid up to that offset), big-endian:
int16 version (1) | uint32 CRC-32C of bytes [6, end) | int32 count | count x 46-byte entries
(int64 producerId, int16 epoch, int32 lastSequence, int64 lastOffset, int32 offsetDelta,
int64 timestamp, int32 coordinatorEpoch, int64 currentTxnFirstOffset or -1).
"""
from __future__ import annotations

import enum
import logging
import re
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from logcore.errors import (
    CorruptIndexError,
    FencedWriterError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ResourceNotFoundError,
)
from logcore.log.txn_index import AbortedTxn
from logcore.records.control import ControlType, EndTransactionMarker
from logcore.records.crc import crc32c

if TYPE_CHECKING:
    from logcore.storage import Storage

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000   # producer.id.expiration.ms

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_HEADER = struct.Struct(">hIi")   # version, crc, count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6                              # the CRC covers everything after version and crc
_SNAPSHOT_NAME = re.compile(r"([0-9]+)\.snapshot\Z")
assert _SNAPSHOT_ENTRY.size == 46


class CorruptSnapshotError(CorruptIndexError):
    """A producer state snapshot with a bad version, CRC or layout."""


class TransactionCoordinatorFencedError(FencedWriterError):
    """An end-transaction marker from a coordinator epoch older than the one already seen."""


class AppendOrigin(enum.Enum):
    CLIENT = "client"            # produce requests: sequence numbers are checked
    REPLICATION = "replication"  # follower fetches and log recovery: no sequence checks
    COORDINATOR = "coordinator"  # transaction markers written by the coordinator


def increment_sequence(sequence: int, increment: int) -> int:
    """sequence + increment with int32 wrap to 0 after INT_MAX."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True)
class BatchMetadata:
    """What is retained of one appended batch: enough to answer a retry with its offsets."""

    last_seq: int
    last_offset: int
    offset_delta: int     # last offset - first offset (= last seq - first seq)
    timestamp: int        # the batch's max timestamp

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerStateEntry:
    """The state of one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=deque)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate_batch(self, producer_epoch: int, first_seq: int, last_seq: int
                             ) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def maybe_update_producer_epoch(self, producer_epoch: int) -> None:
        if self.producer_epoch != producer_epoch:
            self.batches.clear()   # sequences restart with a new epoch
            self.producer_epoch = producer_epoch

    def add_batch_metadata(self, batch: BatchMetadata) -> None:
        if len(self.batches) == NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()
        self.batches.append(batch)

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.add_batch_metadata(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update_from(self, staged: ProducerStateEntry) -> None:
        """Apply the result of a staged append (`ProducerAppendInfo`)."""
        self.maybe_update_producer_epoch(staged.producer_epoch)
        self.coordinator_epoch = staged.coordinator_epoch
        self.last_timestamp = staged.last_timestamp
        self.current_txn_first_offset = staged.current_txn_first_offset
        for batch in staged.batches:
            self.add_batch_metadata(batch)

    def staged_copy(self) -> ProducerStateEntry:
        """Same epochs, timestamp and open transaction; no batches (Kafka's updatedEntry)."""
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch,
                                  self.last_timestamp, self.current_txn_first_offset)


@dataclass(frozen=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int      # the offset of the end marker
    is_aborted: bool


@dataclass(frozen=True)
class ProducerBatch:
    """What producer state needs from one appended batch (data or end-transaction marker)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False
    is_control: bool = False
    end_marker: EndTransactionMarker | None = None   # for a control batch: its one record

    @classmethod
    def from_header(cls, header, end_marker: EndTransactionMarker | None = None
                    ) -> ProducerBatch:
        """From a `logcore.records.BatchHeader` (and the decoded marker of a control batch)."""
        return cls(header.producer_id, header.producer_epoch, header.base_sequence,
                   header.last_sequence, header.base_offset, header.last_offset,
                   header.max_timestamp, header.is_transactional, header.is_control, end_marker)


class ProducerAppendInfo:
    """The staged changes of one append for one producer; applied by `ProducerStateManager.update`."""

    def __init__(self, producer_id: int, current: ProducerStateEntry, origin: AppendOrigin,
                 where: str = ""):
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.where = where
        self.entry = current.staged_copy()
        self.started_transactions: list[int] = []   # first offsets

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        if producer_epoch < self.entry.producer_epoch:
            message = (f"epoch {producer_epoch} of producer {self.producer_id} at offset {offset}"
                       f"{self.where} is older than the last seen epoch {self.entry.producer_epoch}")
            if self.origin is AppendOrigin.REPLICATION:
                log.warning(message)
            else:
                raise InvalidProducerEpochError(message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        if producer_epoch != self.entry.producer_epoch:
            if first_seq != 0 and self.entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number {first_seq} for the new epoch {producer_epoch} of "
                    f"producer {self.producer_id} at offset {offset}{self.where}: a new epoch "
                    "starts at sequence 0")
            return
        if not self.entry.is_empty:
            current_last_seq = self.entry.last_seq
        elif producer_epoch == self.current.producer_epoch:
            current_last_seq = self.current.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        # A producer whose state was removed (expired, retention) may continue at any sequence.
        if self.current.producer_epoch != NO_PRODUCER_EPOCH \
                and not in_sequence(current_last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} at offset {offset}"
                f"{self.where}: {first_seq} (incoming seq. number), {current_last_seq} (current "
                "end sequence number)")

    def append_data_batch(self, producer_epoch: int, first_seq: int, last_seq: int,
                          last_timestamp: int, first_offset: int, last_offset: int,
                          is_transactional: bool) -> None:
        self._check_producer_epoch(producer_epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(producer_epoch, first_seq, first_offset)
        self.entry.add_batch(producer_epoch, last_seq, last_offset, last_offset - first_offset,
                             last_timestamp)
        in_txn = self.entry.current_txn_first_offset is not None
        if in_txn and not is_transactional:
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {self.producer_id} at offset "
                f"{first_offset}{self.where}: its transaction started at offset "
                f"{self.entry.current_txn_first_offset} is still open")
        if not in_txn and is_transactional:
            self.entry.current_txn_first_offset = first_offset
            self.started_transactions.append(first_offset)

    def append_end_txn_marker(self, marker: EndTransactionMarker, producer_epoch: int,
                              offset: int, timestamp: int) -> CompletedTxn | None:
        self._check_producer_epoch(producer_epoch, offset)
        if self.entry.coordinator_epoch > marker.coordinator_epoch:
            message = (f"invalid coordinator epoch for producer {self.producer_id} at offset "
                       f"{offset}{self.where}: {marker.coordinator_epoch} (zombie), "
                       f"{self.entry.coordinator_epoch} (current)")
            if self.origin is AppendOrigin.REPLICATION:
                log.info(message)
            else:
                raise TransactionCoordinatorFencedError(message)
        completed = None
        # Only a non-empty transaction completes: an empty one never moved the LSO.
        if self.entry.current_txn_first_offset is not None:
            completed = CompletedTxn(self.producer_id, self.entry.current_txn_first_offset, offset,
                                     marker.control_type == ControlType.ABORT)
        self.entry.maybe_update_producer_epoch(producer_epoch)
        self.entry.coordinator_epoch = marker.coordinator_epoch
        self.entry.last_timestamp = timestamp
        self.entry.current_txn_first_offset = None
        return completed

    def append(self, batch: ProducerBatch) -> CompletedTxn | None:
        if batch.is_control:
            if batch.end_marker is None:
                return None   # an empty control batch: the cleaner removed its transaction
            return self.append_end_txn_marker(batch.end_marker, batch.producer_epoch,
                                              batch.first_offset, batch.max_timestamp)
        self.append_data_batch(batch.producer_epoch, batch.base_sequence, batch.last_sequence,
                               batch.max_timestamp, batch.first_offset, batch.last_offset,
                               batch.is_transactional)
        return None


@dataclass(frozen=True)
class DuplicateBatch:
    """A retried batch already in the log: answer with its original offsets, append nothing."""

    producer_id: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class AppendAnalysis:
    duplicate: DuplicateBatch | None = None
    updates: dict[int, ProducerAppendInfo] = field(default_factory=dict)
    completed_txns: list[CompletedTxn] = field(default_factory=list)


# -- snapshot files ------------------------------------------------------------------------------

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


# -- the manager ---------------------------------------------------------------------------------

class ProducerStateManager:
    """Producer state of one partition, with its snapshots in `directory` (the partition folder)."""

    def __init__(self, storage: Storage, directory: str, *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 name: str | None = None):
        self.storage = storage
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.name = name or directory
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}                  # first offset -> producer id
        self._unreplicated: dict[int, CompletedTxn] = {}    # first offset -> completed txn
        self.map_end_offset = 0
        self.last_snapshot_offset = 0

    # -- reading ---------------------------------------------------------------------------------

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self._producers)

    @property
    def has_producers(self) -> bool:
        """Any producer in the state (a commit asks at every append: no copy)."""
        return bool(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def find_duplicate(self, producer_id: int, producer_epoch: int, first_seq: int,
                       last_seq: int) -> DuplicateBatch | None:
        entry = self._producers.get(producer_id)
        batch = entry.find_duplicate_batch(producer_epoch, first_seq, last_seq) if entry else None
        if batch is None:
            return None
        return DuplicateBatch(producer_id, batch.first_offset, batch.last_offset, batch.timestamp)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open (or completed but not yet replicated) transaction."""
        if not self._unreplicated and not self._ongoing:
            return None                 # no transaction: the common case, asked at every commit
        candidates = []
        if self._unreplicated:
            candidates.append(min(self._unreplicated))
        if self._ongoing:
            candidates.append(min(self._ongoing))
        return min(candidates) if candidates else None

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """{first offset: producer id} of the open transactions."""
        return dict(sorted(self._ongoing.items()))

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` ends: the first open transaction of another producer, or the
        offset after the marker."""
        for first_offset in sorted(self._ongoing):
            if self._ongoing[first_offset] != completed.producer_id:
                return first_offset
        return completed.last_offset + 1

    # -- appends ---------------------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin = AppendOrigin.CLIENT
                       ) -> ProducerAppendInfo:
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(producer_id, current, origin, f" in {self.name}")

    def analyze(self, batches: Iterable[ProducerBatch],
                origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendAnalysis:
        """Validate the producer fields of the batches of one append, before it is written.

        Raises OutOfOrderSequenceError, InvalidProducerEpochError, InvalidTxnStateError or
        TransactionCoordinatorFencedError; returns early with `duplicate` set for a client retry.
        """
        analysis = AppendAnalysis()
        for batch in batches:
            if batch.producer_id == NO_PRODUCER_ID:
                continue
            if origin is AppendOrigin.CLIENT and not batch.is_control:
                duplicate = self.find_duplicate(batch.producer_id, batch.producer_epoch,
                                                batch.base_sequence, batch.last_sequence)
                if duplicate is not None:
                    analysis.duplicate = duplicate
                    return analysis
            info = analysis.updates.get(batch.producer_id)
            if info is None:
                info = analysis.updates[batch.producer_id] = self.prepare_update(batch.producer_id,
                                                                                 origin)
            completed = info.append(batch)
            if completed is not None:
                analysis.completed_txns.append(completed)
        return analysis

    def is_next_batch(self, producer_id: int, producer_epoch: int, first_seq: int) -> bool:
        """A client's non-transactional data batch that simply continues its producer (known
        id, same epoch, no open transaction, first sequence right after the last one): the
        common case, which `analyze` would accept, and which cannot be a retry (the retained
        batches all lie below that sequence). `append_next_batch` records it once written."""
        entry = self._producers.get(producer_id)
        return (entry is not None and entry.producer_epoch == producer_epoch and bool(entry.batches)
                and entry.current_txn_first_offset is None
                and in_sequence(entry.batches[-1].last_seq, first_seq))

    def append_next_batch(self, producer_id: int, last_seq: int, first_offset: int,
                          last_offset: int, max_timestamp: int) -> None:
        """What complete_append(analyze(batch)) does for a batch `is_next_batch` accepted."""
        entry = self._producers[producer_id]
        entry.add_batch_metadata(BatchMetadata(last_seq, last_offset, last_offset - first_offset,
                                                max_timestamp))
        entry.last_timestamp = max_timestamp
        self.map_end_offset = last_offset + 1

    def update(self, info: ProducerAppendInfo) -> None:
        current = self._producers.get(info.producer_id)
        if current is None:
            entry = ProducerStateEntry(info.producer_id)
            entry.update_from(info.entry)
            self._producers[info.producer_id] = entry
        else:
            current.update_from(info.entry)
        for first_offset in info.started_transactions:
            self._ongoing[first_offset] = info.producer_id

    def complete_txn(self, completed: CompletedTxn) -> None:
        if self._ongoing.pop(completed.first_offset, None) is None:
            raise InvalidRecordError(
                f"transaction of producer {completed.producer_id} starting at offset "
                f"{completed.first_offset} in {self.name} was never started")
        self._unreplicated[completed.first_offset] = completed

    def complete_append(self, analysis: AppendAnalysis, next_offset: int) -> list[AbortedTxn]:
        """Apply an analysed append once its batches are in the log; returns the aborted
        transactions to add to the segment's `.txnindex` (with the LSO at their markers)."""
        for info in analysis.updates.values():
            self.update(info)
        aborted = []
        for completed in analysis.completed_txns:
            if completed.is_aborted:
                aborted.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                          completed.last_offset, self.last_stable_offset(completed)))
            self.complete_txn(completed)
        self.update_map_end_offset(next_offset)
        return aborted

    def replay(self, batch: ProducerBatch) -> list[AbortedTxn]:
        """Rebuild state from a batch already in the log (recovery): no sequence checks."""
        return self.complete_append(self.analyze([batch], AppendOrigin.REPLICATION),
                                    batch.last_offset + 1)

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the HW no longer hold the LSO back."""
        if not self._unreplicated:
            return
        for first_offset in [f for f, t in self._unreplicated.items()
                             if t.last_offset < high_watermark]:
            del self._unreplicated[first_offset]

    def remove_expired(self, now_ms: int, expiration_ms: int | None = None) -> list[int]:
        """Drop producers without an open transaction idle for `producer.id.expiration.ms`."""
        limit = self.producer_id_expiration_ms if expiration_ms is None else expiration_ms
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms, limit)]
        for pid in expired:
            del self._producers[pid]
        return expired

    @staticmethod
    def _is_expired(entry: ProducerStateEntry, now_ms: int, limit: int) -> bool:
        return entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= limit

    # -- snapshots and truncation ----------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return list_snapshot_offsets(self.storage, self.directory)

    def latest_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def take_snapshot(self) -> int | None:
        """Write a snapshot at the map end offset if there is news since the last one.

        Returns the offset written, or None (nothing new, or read-only storage)."""
        if self.map_end_offset <= self.last_snapshot_offset or self.storage.read_only:
            return None
        self.write_snapshot(self.map_end_offset)
        return self.map_end_offset

    def write_snapshot(self, offset: int | None = None, *, durable: bool = True) -> str:
        offset = self.map_end_offset if offset is None else offset
        path = write_snapshot(self.storage, self.directory, offset, self._producers.values(),
                              durable=durable)
        self.last_snapshot_offset = offset
        return path

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing[entry.current_txn_first_offset] = entry.producer_id

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int,
                            listed: list[int] | None = None) -> None:
        """Drop snapshots outside (log_start, log_end] and, unless the state is already at
        log_end, reload from the newest remaining snapshot. The caller then replays the log from
        `map_end_offset` to `log_end_offset` (assumed <= the HW).

        The folder is listed once here, or not at all when the caller just listed it (`listed`:
        the snapshots found): on an object store, which holds no snapshots, each listing is a
        request that finds none."""
        offsets = self.snapshot_offsets() if listed is None else list(listed)
        if not self.storage.read_only:
            self.delete_snapshots_after(log_end_offset, offsets)
            self.delete_snapshots_before(log_start_offset + 1, offsets)
            offsets = [snap for snap in offsets if log_start_offset < snap <= log_end_offset]
        if log_end_offset != self.map_end_offset:
            self._clear()
            loaded = load_latest_snapshot(self.storage, self.directory, log_end_offset,
                                          above_offset=log_start_offset, offsets=offsets)
            if loaded is None:
                self.map_end_offset = self.last_snapshot_offset = log_start_offset
            else:
                offset, entries = loaded
                for entry in entries:
                    if not self._is_expired(entry, now_ms, self.producer_id_expiration_ms):
                        self._load_entry(entry)
                self.map_end_offset = self.last_snapshot_offset = offset
        else:
            self.on_log_start_offset_incremented(log_start_offset, offsets)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (the log was emptied) and continue at `offset`."""
        self._clear()
        if not self.storage.read_only:
            self.delete_snapshots_after(-1)
        self.map_end_offset = self.last_snapshot_offset = offset

    def restore_snapshot(self, offset: int, data: bytes, *, source: str | None = None) -> int:
        """Take the producer state of another copy of the log (a remote segment's
        PRODUCER_SNAPSHOT index, KIP-405) as this log's state at `offset`, which the log now
        starts at: every snapshot here is replaced by `<offset>.snapshot` holding it. Returns the
        number of producers; CorruptSnapshotError (naming `source`) leaves everything as it was."""
        entries = decode_snapshot(data, source=source)
        self._clear()
        if not self.storage.read_only:
            self.delete_snapshots_after(-1)
        for entry in entries:
            self._load_entry(entry)
        self.map_end_offset = offset
        if not self.storage.read_only:
            self.write_snapshot(offset)
        self.last_snapshot_offset = offset
        return len(entries)

    def on_log_start_offset_incremented(self, log_start_offset: int,
                                        snapshot_offsets: list[int] | None = None) -> None:
        """snapshot_offsets: the snapshots the caller just listed (None: list the folder)."""
        for first_offset in [f for f, t in self._unreplicated.items()
                             if t.last_offset < log_start_offset]:
            del self._unreplicated[first_offset]
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        if snapshot_offsets is None:
            snapshot_offsets = self.snapshot_offsets()
        latest = snapshot_offsets[-1] if snapshot_offsets else None
        self.last_snapshot_offset = latest if latest is not None else log_start_offset

    def delete_snapshots_before(self, offset: int, listed: list[int] | None = None) -> None:
        """Delete snapshot files with offset < `offset` (listed: the snapshots a listing just
        found; None: list the folder)."""
        for snap in self.snapshot_offsets() if listed is None else listed:
            if snap < offset:
                self.storage.delete(self.storage.join(self.directory, snapshot_file_name(snap)))

    def delete_snapshots_after(self, offset: int, listed: list[int] | None = None) -> None:
        """Delete snapshot files with offset > `offset` (listed: as delete_snapshots_before)."""
        for snap in self.snapshot_offsets() if listed is None else listed:
            if snap > offset:
                self.storage.delete(self.storage.join(self.directory, snapshot_file_name(snap)))

    def __repr__(self) -> str:
        return (f"ProducerStateManager({self.name}, producers={len(self._producers)}, "
                f"map_end_offset={self.map_end_offset})")
