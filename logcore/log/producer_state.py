"""Producer state: idempotent de-duplication, open transactions and `.snapshot` files.

Per producer id the log keeps the epoch, the coordinator epoch, the first offset of the open
transaction and the metadata of the last 5 batches (Kafka's NUM_BATCHES_TO_RETAIN, matching
`max.in.flight.requests.per.connection <= 5`). An append goes through two steps, so that nothing
changes when validation fails or the write does not happen:

    analysis = state.analyze(batches, origin)      # duplicate? sequence/epoch errors raise here
    if analysis.duplicate: answer with its offsets, append nothing
    ... write the batches to the segment ...
    aborted = state.complete_append(analysis, next_offset)   # AbortedTxn entries for .txnindex

What is kept per producer id is producer_entry's; the `.snapshot` file codec is producer_snapshot's.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from logcore.errors import (
    FencedWriterError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from logcore.log.producer_entry import (NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchMetadata,
                                        ProducerStateEntry, in_sequence)
from logcore.log.producer_snapshot import (decode_snapshot, list_snapshot_offsets, load_latest_snapshot,
                                           snapshot_file_name, write_snapshot)
from logcore.log.txn_index import AbortedTxn
from logcore.records.control import ControlType, EndTransactionMarker

if TYPE_CHECKING:
    from logcore.storage import Storage

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000   # producer.id.expiration.ms


class TransactionCoordinatorFencedError(FencedWriterError):
    """An end-transaction marker from a coordinator epoch older than the one already seen."""


class AppendOrigin(enum.Enum):
    CLIENT = "client"            # produce requests: sequence numbers are checked
    REPLICATION = "replication"  # follower fetches and log recovery: no sequence checks
    COORDINATOR = "coordinator"  # transaction markers written by the coordinator


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

    def is_next_batch(self, producer_id: int, producer_epoch: int, first_seq: int,
                      transactional: bool = False) -> bool:
        """A data batch that simply continues its producer (known id, same epoch, first sequence
        right after the last one) and its transaction state: a non-transactional batch with no
        transaction open, or a transactional one inside the producer's open transaction (not its
        first batch, which starts it). The common case, which `analyze` would accept, and which
        cannot be a retry (the retained batches all lie below that sequence).
        `append_next_batch` records it once written."""
        entry = self._producers.get(producer_id)
        return (entry is not None and entry.producer_epoch == producer_epoch and bool(entry.batches)
                and (entry.current_txn_first_offset is not None) == transactional
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
