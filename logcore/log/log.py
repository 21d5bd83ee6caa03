"""One partition's log (Kafka's UnifiedLog): its offsets (log start, HW, LSO, LEO), epoch cache
and producer state, opened, refreshed, committed and closed here; the rest is its parts', each
owning its state: `LocalLog` (segments, roll, flush, recovery point), `ClientAppend` (the client
append and the one write every batch goes through), `FollowerAppend` (replication.py),
`ReplicaRole` (leader or follower, epoch, HW moves, truncation), `LogReader`, `LogRetention`,
`StagedAdoption`, `CleanerAccess` (the log cleaner's), `ProducerReplay` (the producer state kept
in step with the segments), `LogLoader` and `LogRefresh`; a writer's first steps once loaded are
writer_open.py's.

Visibility (DESIGN section 4): readers never see data at or above the high watermark, and with
read_committed not at or above the last stable offset. The HW is its own operation (a leader's
`maybe_increment_high_watermark`, a follower's `update_high_watermark`); the single-node policy
on top is `commit()`, which moves it to the LEO after it makes everything appended so far
durable (fsync on local disk, published objects on an object store) and records the HW where
other processes find it. `commit(durable=False)` (local disk: the broker, as Kafka) records the
HW without fsync: the data and the checkpoint are in the page cache, so they survive a crash of
the process but not a power cut; the data is fsynced by the flush policy (flush.messages /
flush.ms), at each roll (which moves the recovery point) and at close. A writer that takes a
partition cuts whatever a previous writer appended but never committed, so uncommitted data
never becomes visible later.

A writer holds the partition's leader epoch (writer_fence): every batch it writes is stamped
with that epoch, and every append (local disk) or commit (object store) checks it, so a stale
writer is fenced before it can change anything.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Iterable

from logcore.errors import DamagedLogError, FencedWriterError, ReadOnlyLogError, ResourceNotFoundError, SegLogError
from logcore.forwarding import forwarded
from logcore.records.compression import Compression
from logcore.records.control import ControlType
from logcore.log.leader_epoch import LeaderEpochCache
from logcore.log.checkpoint import LeaderEpochCheckpoint
from logcore.log.log_backend import LogBackend
from logcore.log.open_mode import OpenMode
from logcore.log.segment import LogSegment
from logcore.log.log_segments import LogSegments
# The parts of Log, by noun, and the names callers import from here.
from logcore.log.adoption import StagedAdoption
from logcore.log.cleaner_access import CleanerAccess
from logcore.log.client_append import AppendInfo, ClientAppend
from logcore.log.local_log import LocalLog
from logcore.log.segment_flusher import PendingFlush
from logcore.log.log_loader import (CLEAN_SHUTDOWN, KAFKA_CLEAN_SHUTDOWN, LEADER_EPOCH_CHECKPOINT, LoadContext,
                                    LoadedLog, LogLoader, RecoveryReport)
from logcore.log.log_reader import _READ_ATTEMPTS, FetchResult, LogReader
from logcore.log.log_refresh import LogRefresh, RefreshedView
from logcore.log.producer_replay import ProducerReplay
from logcore.log.writer_open import finish_writer_open
from logcore.log.replica_role import ReplicaRole
from logcore.log.segment_listing import SegmentListing
from logcore.log.replication import FollowerAppend
from logcore.log.retention import LogRetention, RetentionResult

# The names callers import from here (the file names are log_loader's).
__all__ = ["CLEAN_SHUTDOWN", "KAFKA_CLEAN_SHUTDOWN", "LEADER_EPOCH_CHECKPOINT", "Log"]

logger = logging.getLogger(__name__)

ISOLATION_LEVELS = ("read_committed", "read_uncommitted", "log_end")


class Log:
    """A partition's log. Open it through `LogRoot.log(topic, partition)`."""

    def __init__(self, backend: LogBackend, directory: str, topic: str, partition: int, config,
                 mode: OpenMode):
        """`backend`: where the log lives (log_backend.py); `mode`: how it is opened, one policy
        (open_mode.py: path writer, replica, repair, plain, range or Kafka-copy reader)."""
        if mode.writer != (backend.fence is not None):
            raise ValueError(f"{mode!r}: a writer holds a writer fence, a reader none")
        storage = backend.storage
        self.mode = mode
        # A reader's range [start, end) (range_open.py): the open prepares only what reading it needs.
        self._read_range = mode.read_range
        self.storage = storage
        self.replica = mode.replica
        self._kafka_copy = mode.kafka_copy
        self._repair = mode.repair
        # Truncations that removed offsets (truncate_to below the LEO, truncate_fully_and_start_at):
        # a cleaner pass that began before one must not swap its output in (replace_segments).
        self.truncations = 0
        # Tiered storage: the remote segments below the local ones (None: the log is all local).
        self.remote = backend.remote
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.state_store = backend.state_store
        self.fence = backend.fence
        self.read_only = not mode.writer or storage.read_only
        self.writer = mode.writer
        self.truncate_uncommitted = mode.truncates_uncommitted
        # The segment list, its base offsets and which segments have a .txnindex: one writer.
        self.log_segments = LogSegments()
        self.recovery = RecoveryReport()
        self.commit_marker: dict | None = None
        # Leader or follower, at which epoch, and what moves with the role.
        self._role = ReplicaRole(self, leads=mode.leads_when_opened)
        self.high_watermark = 0
        self.log_start_offset = 0
        # The producer state, kept in step with the segments (a range reader's loaded on need).
        self._producers = ProducerReplay(self, storage, directory, mode.read_range)
        self.producer_state = self._producers.state
        self._lock = threading.RLock()
        self._state_unsynced = False                # a commit wrote the HW without fsync
        self._closed = False
        epoch_path = storage.join(directory, LEADER_EPOCH_CHECKPOINT)
        self.epoch_cache = LeaderEpochCache(LeaderEpochCheckpoint(storage, epoch_path))
        # Local disk or object store: what differs between them, behind one protocol.
        self.segment_store = backend.segment_store(self)
        # The folder's segment list, shared with the loader; a reader's refresh of it.
        self.listing = SegmentListing(self.segment_store, topic, partition, remote=self.remote,
                                      kafka_copy=mode.kafka_copy)
        self._refresher = LogRefresh(self.state_store, self.listing, self.segment_store, self.epoch_cache,
                                     self.remote)
        # Batches tile the offsets without gaps (checked on read) unless compaction ran or may run.
        self._gapless = not config.compact and not self.listing.compacted_once()
        # Segments, roll, flush and the recovery point (Kafka's LocalLog).
        self.local = LocalLog(storage, directory, config, self.log_segments, self.segment_store, self.fence,
                              persist_rebuilt_index=self.writer and self.segment_store.in_place
                              and not self.read_only, gapless=self._gapless)
        self.pending_flushes = self.local.pending_flushes
        # Parts that work through the log's public operations (the module's docstring names them).
        self._append = ClientAppend(self, self._role)
        self._follower = FollowerAppend(self, self._append, self._role)
        self._reader = LogReader(self)
        self._retention = LogRetention(self)
        self._adoption = StagedAdoption(self)
        self._cleaner = CleanerAccess(self)
        if self.writer and self.read_only:
            raise ReadOnlyLogError(f"cannot open {directory} for writing: the log is read-only")
        if self.writer:
            # resume: take the epoch back if nobody took the partition since (WriterFence);
            # the load below cuts an uncommitted tail either way. A replica holds the fence
            # only as the lock of its directory: its epoch comes from the controller.
            epoch = self.fence.acquire(resume=mode.resume)
            if mode.leads_when_opened:
                self._role.opened_at(epoch)
        try:
            with self.critical() if self.writer else nullcontext():
                self._load(mode.kafka_clean)
        except DamagedLogError:
            # Not opened: let go of the files and of the partition (a repair may take it).
            for seg in self.segments:
                seg.data.close()
            if self.writer:
                self.state_store.close()
                self.fence.release()
            raise

    def new_segment(self, base_offset: int, *, writable: bool, in_memory: bool = False,
                    stem: str | None = None) -> LogSegment:
        """A segment of this log at `base_offset`, not yet in its list (LocalLog.new_segment)."""
        return self.local.new_segment(base_offset, writable=writable, in_memory=in_memory, stem=stem)

    # ------------------------------------------------------------------ what the segment store asks
    # (segment_store.SegmentStoreHost: the store calls the log through these, never its fields)
    recovery_point = forwarded("local.recovery_point",
                               "How far the data is known to be fsynced (LocalLog's).")
    recovery_point_unrecorded = forwarded("local.recovery_point_unrecorded",
                                          "The recovery point moved since the last commit recorded it.")

    @property
    def state_unsynced(self) -> bool:
        """The last commit wrote the HW without fsync."""
        return self._state_unsynced

    def note_state_synced(self) -> None:
        self._state_unsynced = False

    # ------------------------------------------------------------------ opening and refresh
    def load_context(self) -> LoadContext:
        """What loading this log reads, given explicitly to its `LogLoader`."""
        return LoadContext(self.storage, self.dir, self.topic, self.partition, self.state_store,
                           self.segment_store, self.epoch_cache, self.new_segment,
                           writer=self.writer, read_only=self.read_only, remote=self.remote,
                           repair=self._repair, kafka_copy=self._kafka_copy, read_range=self._read_range,
                           listing=self.listing)

    def _load(self, kafka_clean: bool) -> None:
        loaded = LogLoader(self.load_context(), kafka_clean).load()
        self._apply_loaded(loaded)
        self._finish_open(loaded)

    def _apply_loaded(self, loaded: LoadedLog) -> None:
        """The one place a load's result becomes the log's state."""
        self.log_segments.reset(loaded.segments, loaded.txn_bases)
        self.log_start_offset = loaded.log_start_offset
        self.local.loaded(loaded.recovery_point, loaded.checkpointed_recovery_point)
        self.high_watermark = loaded.high_watermark
        self.commit_marker = loaded.commit_marker
        self._producers.record_stored(loaded.stored_lso)
        self.recovery = loaded.recovery

    def _finish_open(self, loaded: LoadedLog) -> None:
        """What the opened log does before it serves: a reader rebuilds its producer state
        (unless range-bounded); a writer what writer_open.py says."""
        if self.writer:
            finish_writer_open(self, self._role, loaded)
        elif self._producers.loaded:
            self.rebuild_producer_state(loaded.empty_producers_at, loaded.snapshot_offsets)

    rebuild_producer_state = forwarded("_producers.rebuild",
                                       "Reload the newest usable snapshot and replay later batches"
                                       " (ProducerReplay.rebuild).")

    def refresh(self) -> None:
        """Readers: pick up new segments and the latest committed offsets (another process writes)."""
        if self.writer:
            return
        for attempt in range(_READ_ATTEMPTS):
            try:
                with self._lock:
                    self._apply_refreshed(self._refresher.view(self.segments, self.high_watermark))
                return
            except ResourceNotFoundError:
                # A segment file went away between the listing and the scan (a cleaner swap or
                # retention): list again.
                if attempt == _READ_ATTEMPTS - 1:
                    raise
                time.sleep(0.01 * attempt)

    def _apply_refreshed(self, view: RefreshedView) -> None:
        """The one place a refresh's result becomes a reader's state."""
        self.log_segments.reset(view.log_segments.list, view.log_segments.txn_bases)
        self.log_start_offset = view.log_start_offset
        hw = view.committed_hw if view.committed_hw is not None else self.log_start_offset
        self.high_watermark = min(max(hw, self.log_start_offset),
                                  self.listing.readable_end(self.segments, hw, self.log_end_offset))
        self._producers.refreshed(view.stored_lso)

    segments = forwarded("log_segments.list",
                         "The segments, oldest first (read only: `log_segments` changes them).")
    bases = forwarded("log_segments.bases", "The segments' base offsets (read only).")

    @property
    def local_log_start_offset(self) -> int:
        """The first offset held locally (Kafka's localLogStartOffset): below it, up to the log
        start offset, offsets are read from the remote tier."""
        if not self.bases:
            return self.log_start_offset
        return max(self.log_start_offset, self.bases[0])

    @property
    def tiered(self) -> bool:
        """Segments are copied to the remote tier (remote.storage.enable, copying not disabled),
        so local retention applies locally and total retention to the remote tier."""
        return (self.remote is not None and self.config.remote_storage_enable
                and not self.config.remote_log_copy_disable)

    @property
    def log_end_offset(self) -> int:
        segments = self.log_segments.list       # read on every append: one lookup
        if not segments:
            return self.log_start_offset
        return segments[-1].next_offset()

    last_stable_offset = forwarded("_producers.last_stable_offset",
                                   "The HW, or the first offset of the oldest open transaction below it.")

    def assume_high_watermark(self, offset: int) -> None:
        """A reader's view only: take `offset` (capped at the log end) as the HW when the stored
        one is lower. For a reader whose broker vouched for `offset` (its ListOffsets answer)
        while the stored checkpoint lags it: Apache Kafka writes replication-offset-checkpoint
        only every replica.high.watermark.checkpoint.interval.ms (5 s by default)."""
        if self.writer:
            raise ReadOnlyLogError(f"{self.topic}-{self.partition}: assume_high_watermark is for readers;"
                                   " a writer's HW is its own")
        with self._lock:
            target = min(int(offset), self.log_end_offset)
            if target > self.high_watermark:
                self.high_watermark = target
                self.producer_state.on_high_watermark_updated(target)

    def bound(self, isolation: str) -> int:
        if isolation == "read_committed":
            return self.last_stable_offset
        if isolation == "read_uncommitted":
            return self.high_watermark
        if isolation == "log_end":
            return self.log_end_offset
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation!r}")

    # ------------------------------------------------------------------ fencing
    @contextmanager
    def critical(self):
        """Writes happen here: under the fence (local: a lock held across the write)."""
        if not self.writer:
            raise ReadOnlyLogError(f"{self.topic}-{self.partition} was opened for reading only")
        with self._lock, self.segment_store.critical():
            yield

    @property
    def lock(self) -> threading.RLock:
        """The log's lock: what a writer changes together is read under it."""
        return self._lock

    def reconfigure(self, config) -> None:
        """Take a changed topic config (an altered override or broker default) at once: the
        append path's copies, the roll and flush policy; retention and the cleaner read
        `config` at each pass. Once compaction may run, gaps are allowed from then on."""
        with self._lock:
            self.config = config
            if config.compact:
                self._gapless = False
            self.local.reconfigure(config, gapless=self._gapless)
            self._append.reconfigure(config)
            self._follower.reconfigure(config)
            self._adoption.reconfigure(config)

    def attach_remote(self, view) -> None:
        """Tiering turned on while the log is open (remote.storage.enable set live): from now on
        it has the remote tier `view`, as if it had been opened with the setting."""
        with self._lock:
            if self.remote is None:
                self.remote = view
                self.listing.attach_remote(view)
                self._refresher.attach_remote(view)

    @property
    def gapless(self) -> bool:
        """Batches tile the offsets without gaps (no compaction ran nor may run)."""
        return self._gapless

    # ------------------------------------------------------------------ for the log cleaner (cleaner_access.py)
    def cleaning_snapshot(self) -> tuple[list[LogSegment], int, int, int, int]:
        """(segments, log start, LEO, HW, LSO) as one snapshot (CleanerAccess)."""
        return self._cleaner.cleaning_snapshot()

    def end_cleaning(self, truncations: int, first_dirty_offset: int) -> bool:
        """Record a finished pass unless truncated or closed since (CleanerAccess)."""
        return self._cleaner.end_cleaning(truncations, first_dirty_offset)

    def producer_last_offsets(self) -> dict[int, tuple[int, int]]:
        """producer id -> (last data offset, producer epoch) (CleanerAccess)."""
        return self._cleaner.producer_last_offsets()

    def has_aborted_transactions(self, base_offset: int) -> bool:
        """Whether the segment at `base_offset` has a transaction index (CleanerAccess)."""
        return self._cleaner.has_aborted_transactions(base_offset)

    def replace_segments(self, replacements: list, swap_files, truncations: int | None = None) -> bool:
        """Swap cleaned segments in (CleanerAccess.replace_segments)."""
        return self._cleaner.replace_segments(replacements, swap_files, truncations)

    # ------------------------------------------------------------------ appending (client_append.py)
    def roll_to(self, base_offset: int) -> LogSegment:
        """Start a new active segment at `base_offset` (LocalLog.roll_to)."""
        return self.local.roll_to(base_offset)

    def note_epoch_start(self, epoch: int, offset: int) -> None:
        """The epoch cache learns `epoch` at the first batch stamped with it: a leader's own
        (there from the open on, unless a truncation took it), or each newer epoch of the
        leader's batches a follower appends."""
        latest = self.epoch_cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            self.epoch_cache.assign(epoch, offset)

    def log_append_time(self) -> bool:
        return getattr(self.config, "message_timestamp_type", "CreateTime") == "LogAppendTime"

    def append_records(self, records: Iterable, *, compression: Compression | None = None,
                       producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                       is_transactional: bool = False) -> AppendInfo:
        """Append records as one batch (ClientAppend.append_records)."""
        return self._append.append_records(records, compression=compression, producer_id=producer_id,
                                           producer_epoch=producer_epoch, base_sequence=base_sequence,
                                           is_transactional=is_transactional)

    def append_batch(self, batch: bytes) -> AppendInfo:
        """Append one client-built RecordBatch v2 (ClientAppend.append_batch)."""
        return self._append.append_batch(batch)

    def append_and_commit_nowait(self, batches: list[bytes], written: list | None = None) -> tuple[list, bool]:
        """append_batch() each batch, then commit(durable=False), without blocking; `written`
        receives the batches as written (ClientAppend.append_and_commit_nowait)."""
        return self._append.append_and_commit_nowait(batches, written)

    def append_locked(self, data: bytearray, now: int, *, validated: bool,
                      assign: bool = False) -> AppendInfo:
        """In the critical section: a leader's append of one batch (ClientAppend.append_locked)."""
        return self._append.append_locked(data, now, validated=validated, assign=assign)

    def append_control(self, control_type: ControlType, *, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int = 0) -> AppendInfo:
        """Write a transaction marker (ClientAppend.append_control)."""
        return self._append.append_control(control_type, producer_id=producer_id,
                                           producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch)

    def flush_due(self, records: int, now: int) -> bool:
        return self.local.flush_due(records, now)

    def check_open(self) -> None:
        if self._closed:
            raise SegLogError(f"{self.topic}-{self.partition} is closed")

    # ------------------------------------------------------------------ reading (log_reader.py)
    def read(self, offset: int, max_bytes: int = 1 << 20, *, isolation: str = "read_committed",
             min_one_batch: bool = True, view: bool = False,
             buffer: bytearray | None = None, zero_copy: bool = False) -> FetchResult:
        """Whole batches from the one holding `offset`, none at or above the isolation bound
        (LogReader.read)."""
        return self._reader.read(offset, max_bytes, isolation=isolation, min_one_batch=min_one_batch,
                                 view=view, buffer=buffer, zero_copy=zero_copy)

    def read_nowait(self, offset: int, max_bytes: int = 1 << 20, **kwargs) -> FetchResult | None:
        """read() for a caller that must not block (LogReader.read_nowait)."""
        return self._reader.read_nowait(offset, max_bytes, **kwargs)

    def skip_damage(self, offset: int, error) -> tuple[int, str]:
        """Where a reader told to skip lost data goes on (LogReader.skip_damage)."""
        return self._reader.skip_damage(offset, error)

    def read_records(self, offset: int, *, max_records: int | None = None,
                     isolation: str = "read_committed"):
        """Data records from `offset` on (LogReader.read_records)."""
        return self._reader.read_records(offset, max_records=max_records, isolation=isolation)

    def read_records_with_timestamp_type(self, offset: int, *, max_records: int | None = None,
                                         isolation: str = "read_committed"):
        """As read_records, each with its batch's timestamp type."""
        return self._reader.read_records_with_timestamp_type(offset, max_records=max_records,
                                                             isolation=isolation)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp_ms` below the HW."""
        return self._reader.offset_for_timestamp(timestamp_ms)

    # ------------------------------------------------------------------ retention (retention.py)
    def apply_retention(self, now_ms: int | None = None) -> RetentionResult:
        """Delete the oldest segments that breach retention (LogRetention.apply_retention)."""
        return self._retention.apply_retention(now_ms)

    def move_log_start_offset(self, offset: int, reason: str = "log start offset") -> RetentionResult:
        """Move the log start offset up to `offset` (LogRetention.move_log_start_offset)."""
        return self._retention.move_log_start_offset(offset, reason)

    def delete_records_before(self, offset: int) -> RetentionResult:
        """Kafka's DeleteRecords (LogRetention.delete_records_before)."""
        return self._retention.delete_records_before(offset)

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Remove deleted segments whose file.delete.delay.ms has passed."""
        return self._retention.delete_expired_files(now_ms)

    def checkpoint_log_start_offset(self, offset: int, first_segment_base: int) -> None:
        """In the critical section: the log start offset moves to `offset`, checkpointed first
        (with the first segment kept, `first_segment_base`), before any file goes."""
        self.state_store.commit(high_watermark=self.high_watermark, log_start_offset=offset,
                                first_segment_base=first_segment_base, epoch=self.leader_epoch)
        self.log_start_offset = offset

    # ------------------------------------------------------------------ staged batches (adoption.py)
    def append_staged(self, data: bytes) -> tuple[int, int]:
        """Append batches this engine staged earlier (StagedAdoption.append_staged)."""
        return self._adoption.append_staged(data)

    def adopt_staged(self, path: str, *, verify_crc: bool = True, fields=None) -> tuple[int, int] | None:
        """Make a staged file a segment without copying it (StagedAdoption.adopt_staged)."""
        return self._adoption.adopt_staged(path, verify_crc=verify_crc, fields=fields)

    def adopt_staged_many(self, parts: list, *, verify_crc: bool = True,
                          headers_cached: bool = False) -> list[tuple[int, int]]:
        """adopt_staged for several staged files as one step (StagedAdoption.adopt_staged_many)."""
        return self._adoption.adopt_staged_many(parts, verify_crc=verify_crc, headers_cached=headers_cached)

    def publish_staged_objects(self, parts: list, place=None) -> list[tuple[int, int]] | None:
        """Object store: staged objects with their offsets made segments by server-side copies,
        or by `place` (StagedAdoption.publish_staged_objects)."""
        return self._adoption.publish_staged_objects(parts, place)

    def staged_objects_refusal(self, parts: list) -> str | None:
        """Why staged parts cannot be published as they are now (StagedAdoption)."""
        return self._adoption.staged_objects_refusal(parts)

    # ------------------------------------------------------------------ flush and commit
    def add_unflushed(self, records: int) -> None:
        """Count records appended outside `append_batch_locked` (staged runs) for flush.messages."""
        self.local.add_unflushed(records)

    def maybe_flush(self, now: int) -> None:
        self.local.maybe_flush(now)

    def segment_synced(self, pending: PendingFlush) -> None:
        """The flusher thread synced a rolled segment: move the recovery point (under the lock)."""
        with self._lock:
            if not self._closed:
                self.local.rolled_segments_synced()

    def sync_rolled_segments(self) -> None:
        """fsync every rolled segment the flusher has not synced yet, here and now."""
        self.local.sync_rolled_segments()

    def flush_locked(self) -> None:
        """In the critical section: fsync what was appended (LocalLog.flush_locked)."""
        self.local.flush_locked()

    def flush(self) -> None:
        """fsync appended data (local disk); on object stores data is durable once committed."""
        with self.critical():
            self.flush_locked()
            self.state_store.set_recovery_point(self.recovery_point)

    # ------------------------------------------------------------------ commit
    def commit(self, marker: dict | None = None, *, durable: bool = True) -> None:
        """Make everything appended visible (and durable): the high watermark moves to the LEO.

        `marker` (a small JSON-able dict) is recorded with this commit and becomes the log's
        `commit_marker` exactly when the new HW does, crash or not: the Spark sink records its
        (query, batch) there so that a replayed batch is recognised as already committed.

        durable=False (local disk; Kafka's default, the broker's commit): no fsync. The HW
        checkpoint is still replaced (write + rename) before the HW moves, so a writer that
        takes the partition after a crash of this process keeps what was committed; the data
        is fsynced per flush.messages / flush.ms, at rolls and at close, and a commit after such
        a flush writes the checkpoints durably. A power cut may lose what was not fsynced. A
        commit with a marker is always durable. Object stores are durable at every commit.

        A replica log (a cluster member's) records its current HW instead: replication moves
        its HW (maybe_increment_high_watermark / update_high_watermark), a commit never does.
        """
        if marker is not None and not durable:
            raise ValueError("a commit with a marker must be durable (durable=True)")
        with self.critical():
            self.commit_locked(marker, durable=durable)

    def commit_locked(self, marker: dict | None = None, *, durable: bool = True, root: bool = False) -> None:
        durable = self.segment_store.before_commit(durable)
        segments = self.log_segments.list
        if segments:
            leo, first_base = segments[-1].next_offset(), segments[0].base_offset
        else:
            leo = first_base = self.log_start_offset
        # A replica records its HW as replication moved it; the single-node policy makes
        # everything appended visible once recorded.
        moves = self.mode.commit_moves_high_watermark
        hw = leo if moves else self.high_watermark
        producer_state = self.producer_state
        # The LSO at the new HW, counting every transaction not yet ended as open (a floor).
        unstable = producer_state.first_unstable_offset
        # No producer in the state at the HW: the next open replays producer fields from here.
        empty_at = hw if hw == leo and not producer_state.has_producers else None
        self.state_store.commit(high_watermark=hw, log_start_offset=self.log_start_offset,
                                first_segment_base=first_base, epoch=self.leader_epoch,
                                recovery_point=self.segment_store.recovery_point_to_record(),
                                marker=marker, durable=durable, root=root,
                                last_stable_offset=hw if unstable is None else min(unstable, hw),
                                empty_producers_at=empty_at)
        self.local.recovery_point_recorded()
        self._state_unsynced = not durable
        # The single-node policy: once durable and recorded, everything appended is visible.
        if moves:
            self.set_high_watermark(leo)
        if marker is not None:
            self.commit_marker = marker

    def publish(self, seg: LogSegment) -> None:
        """Object store: publish `seg` at this writer's epoch (LocalLog.publish)."""
        self.local.publish(seg, self.leader_epoch)

    # ------------------------------------------------------------------ replication (replication.py)
    def append_as_follower(self, records, *, follower_at: int | None = None) -> tuple[int, int]:
        """Append the leader's batches verbatim (FollowerAppend.append_as_follower)."""
        return self._follower.append_as_follower(records, follower_at=follower_at)

    def append_as_follower_nowait(self, records, *, follower_at: int | None = None) -> tuple[int, int] | None:
        """append_as_follower() for a caller that must not block (FollowerAppend)."""
        return self._follower.append_as_follower_nowait(records, follower_at=follower_at)

    # ------------------------------------------------------------------ the replica role (replica_role.py)
    leader_epoch = forwarded("_role.leader_epoch",
                             "The leader epoch this log leads or follows at (ReplicaRole's).")

    def set_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset
        self.producer_state.on_high_watermark_updated(offset)

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Leader: advance the HW to `offset`, never backwards nor past the LEO (ReplicaRole)."""
        return self._role.maybe_increment_high_watermark(offset)

    def update_high_watermark(self, leader_high_watermark: int, *, follower_at: int | None = None) -> int:
        """Follower: take the HW from the leader's, capped at the LEO (ReplicaRole)."""
        return self._role.update_high_watermark(leader_high_watermark, follower_at=follower_at)

    def become_leader(self, epoch: int) -> None:
        """Lead the partition at `epoch` (ReplicaRole.become_leader)."""
        self._role.become_leader(epoch)

    def become_follower(self, epoch: int) -> None:
        """Follow the partition's leader at `epoch` (ReplicaRole.become_follower)."""
        self._role.become_follower(epoch)

    def end_offset_for_epoch(self, epoch: int):
        """(epoch, end offset) for a follower's divergence check (ReplicaRole)."""
        return self._role.end_offset_for_epoch(epoch)

    def truncate_to(self, offset: int, *, below_high_watermark: bool = False,
                    expected_end: int | None = None, follower_at: int | None = None) -> bool:
        """Remove every offset >= `offset` (ReplicaRole.truncate_to)."""
        return self._role.truncate_to(offset, below_high_watermark=below_high_watermark,
                                      expected_end=expected_end, follower_at=follower_at)

    def truncate_fully_and_start_at(self, offset: int, **options) -> bool:
        """Every local segment goes; the log restarts empty at `offset` (options: log_start_offset,
        epochs, producer_snapshot, snapshot_source, expected_end, follower_at: ReplicaRole's)."""
        return self._role.truncate_fully_and_start_at(offset, **options)

    def checkpoint_high_watermark(self) -> None:
        """Write the HW (and log start, recovery point) to the partition's checkpoints without
        fsync, as Kafka's replication-offset-checkpoint task does; for replica logs, whose HW
        moves with replication rather than at commits."""
        with self.critical():
            self.commit_locked(durable=False, root=True)

    # ------------------------------------------------------------------ truncation and close
    def truncate_locked(self, offset: int) -> None:
        """In the critical section: remove every offset >= `offset`, unchecked (truncate_to checks)."""
        if offset >= self.log_end_offset:
            return
        self.truncations += 1
        if self.local.truncate_to(offset):
            self.log_start_offset = offset      # everything went: the log restarts at `offset`
        self.high_watermark = min(self.high_watermark, offset)
        self.epoch_cache.truncate_from_end(offset)
        self.rebuild_producer_state()

    def restart_at(self, offset: int, log_start_offset: int) -> None:
        """In the critical section: every segment goes, the log restarts empty at `offset` with
        `log_start_offset` (truncate_fully_and_start_at, which checkpointed it first)."""
        self.truncations += 1
        self.log_start_offset = log_start_offset
        self.local.restart_at(offset)

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            if self.writer:
                try:
                    with self.critical():
                        self.segment_store.close_writer()
                except FencedWriterError:
                    logger.warning("%s-%d: closing a fenced writer; nothing more is written",
                                   self.topic, self.partition)
                    for seg in self.segments:
                        seg.data.close()
                finally:
                    self.pending_flushes.close_all()     # synced by flush_locked unless it failed
                    self.state_store.close()
                    self.fence.release()    # this writer no longer holds the partition
            else:
                for seg in self.segments:
                    seg.close()     # a reader's segments are sealed: only the indexes it opened close
            if self.remote is not None:
                self.remote.close()
            self._closed = True

    @property
    def is_closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset},"
                f" hw={self.high_watermark}, leo={self.log_end_offset}, epoch={self.leader_epoch})")
