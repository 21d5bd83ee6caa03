# Over 700 lines: Kafka's UnifiedLog, the offsets (log start, HW, LSO, LEO), epoch and producer state and the one append path that changes them together; segments, roll, flush and recovery point are LocalLog's (local_log.py).
"""One partition's log (Kafka's UnifiedLog): its offsets (log start, HW, LSO, LEO), leader epoch
and producer state, appends, reads, recovery. Its segments, the roll, the flush policy and the
recovery point are its `LocalLog`'s (local_log.py).

Visibility (DESIGN section 4): readers never see data at or above the high watermark, and with
read_committed not at or above the last stable offset. The HW is its own operation
(a leader's `maybe_increment_high_watermark`, a follower's
`update_high_watermark`); the single-node policy on top is `commit()`, which moves it to the LEO
after it makes everything appended so far durable (fsync on local disk, published objects on an object
store) and records the HW where other processes find it. `commit(durable=False)` (local disk:
the broker, as Kafka) records the HW without fsync: the data and the checkpoint are in the page
cache, so they survive a crash of the process but not a power cut; the data is fsynced by the
flush policy (flush.messages / flush.ms), at each roll (which moves the recovery point) and at
close. A writer that takes a partition cuts
whatever a previous writer appended but never committed, so uncommitted data never becomes
visible later.

A writer holds the partition's leader epoch (writer_fence): every batch it writes is stamped
with that epoch, and every append (local disk) or commit (object store) checks it, so a stale
writer is fenced before it can change anything.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterable

from logcore.errors import (DamagedLogError, FencedWriterError, InvalidRecordError, NotLeaderOrFollowerError,
                            OffsetOutOfRangeError, ReadOnlyLogError, RecordTooLargeError, ResourceNotFoundError,
                            SegLogError)
from logcore.records.batch import (CONTROL_MASK, LOG_OVERHEAD, TRANSACTIONAL_MASK, BatchHeader, Record,
                                   TimestampType, build_batch, parse_header, set_base_offset,
                                   set_log_append_time, set_partition_leader_epoch)
from logcore.records.compression import CODEC_BY_NAME, Compression
from logcore.records.control import ControlType
from logcore.log.leader_epoch import LeaderEpochCache
from logcore.log.checkpoint import LeaderEpochCheckpoint
from logcore.log.cleaner_checkpoint import CleanerCheckpoint
from logcore.log.producer_state import ProducerBatch, ProducerStateManager
from logcore.log.log_backend import LogBackend
from logcore.log.open_mode import OpenMode
from logcore.log.segment import LogSegment
from logcore.log.log_segments import LogSegments
from logcore.log.clock import now_ms as _now_ms
# The parts of Log, by noun, and the names callers import from here.
from logcore.log.adoption import StagedAdoption
from logcore.log.local_log import LocalLog
from logcore.log.segment_flusher import PendingFlush
from logcore.log.log_loader import (CLEAN_SHUTDOWN, DELETED_SUFFIX, KAFKA_CLEAN_SHUTDOWN,  # noqa: F401
                                    LEADER_EPOCH_CHECKPOINT, TEMP_SUFFIXES, LoadContext, LoadedLog,
                                    LogLoader, RecoveryReport, replay_producer_state)
from logcore.log.log_reader import _READ_ATTEMPTS, FetchResult, LogReader, _end_marker  # noqa: F401
from logcore.log.log_refresh import LogRefresh, RefreshedView
from logcore.log.range_open import LsoFloor
from logcore.log.segment_listing import SegmentListing
from logcore.log.log_validator import (MAX_INFLATION, ON_LOOP_INFLATION, LogValidator,  # noqa: F401
                                       _WouldBlock)
from logcore.log.replication import FollowerAppend
from logcore.log.retention import LogRetention, RetentionResult

logger = logging.getLogger(__name__)

ISOLATION_LEVELS = ("read_committed", "read_uncommitted", "log_end")


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    log_append_time: int = -1
    duplicate: bool = False


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
        self._producer_state_loaded = mode.read_range is None
        self._lso_floor = LsoFloor(backend.storage, directory, mode.read_range)
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
        # Hot-path copies of the config (read on every append).
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._compact = config.compact
        self._validator = LogValidator(topic, partition, config)     # a client batch's checks
        # The segment list, its base offsets and which segments have a .txnindex: one writer.
        self.log_segments = LogSegments()
        self.recovery = RecoveryReport()
        self.commit_marker: dict | None = None
        self.leader_epoch = -1
        # Whether this log takes a leader's appends. A path-mode writer leads by its fence; a
        # replica leads only between become_leader and become_follower, and the check is made
        # under the lock of the append itself, so a replica being deposed never appends a
        # client's batch stamped with the new leader's epoch (Kafka's leaderIsrUpdateLock).
        self.leads = mode.leads_when_opened
        self.high_watermark = 0
        self.log_start_offset = 0
        self.producer_state = ProducerStateManager(storage, directory, name=f"{topic}-{partition}")
        self._lock = threading.RLock()
        self._state_unsynced = False                # a commit wrote the HW without fsync
        self._closed = False
        self._nonblocking = False                   # inside append_and_commit_nowait
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
        # Parts that work through the log's public operations: reads, retention, staged
        # adoption, the follower's append.
        self._reader = LogReader(self)
        self._retention = LogRetention(self)
        self._adoption = StagedAdoption(self)
        self._follower = FollowerAppend(self)
        if self.writer and self.read_only:
            raise ReadOnlyLogError(f"cannot open {directory} for writing: the log is read-only")
        if self.writer:
            # resume: take the epoch back if nobody took the partition since (WriterFence);
            # the load below cuts an uncommitted tail either way. A replica holds the fence
            # only as the lock of its directory: its epoch comes from the controller.
            epoch = self.fence.acquire(resume=mode.resume)
            if mode.leads_when_opened:
                self.leader_epoch = epoch
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

    @property
    def _local_writer(self) -> bool:
        return self.writer and self.segment_store.in_place

    def new_segment(self, base_offset: int, *, writable: bool, in_memory: bool = False,
                    stem: str | None = None) -> LogSegment:
        """A segment of this log at `base_offset`, not yet in its list (LocalLog.new_segment)."""
        return self.local.new_segment(base_offset, writable=writable, in_memory=in_memory, stem=stem)

    # ------------------------------------------------------------------ what the segment store asks
    # (segment_store.SegmentStoreHost: the store calls the log through these, never its fields)
    @property
    def recovery_point(self) -> int:
        """How far the data is known to be fsynced (LocalLog's)."""
        return self.local.recovery_point

    @property
    def recovery_point_unrecorded(self) -> bool:
        """The recovery point moved since the last commit recorded it."""
        return self.local.recovery_point_unrecorded

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
        self._lso_floor.record_stored(loaded.stored_lso)
        self.recovery = loaded.recovery

    def _finish_open(self, loaded: LoadedLog) -> None:
        """What the opened log does before it serves: a reader rebuilds its producer state
        (unless range-bounded); a writer rolls a first segment into an empty log, brings a stored
        HW above the LEO down, cuts an uncommitted tail (unless a replica), rebuilds its producer
        state and takes its epoch at the LEO."""
        if not self.writer:
            if self._producer_state_loaded:
                self._rebuild_producer_state()
            return
        if not self.segments:
            self.roll_to(self.log_start_offset)
        leo = self.log_end_offset
        if self._local_writer and loaded.committed_hw is not None and loaded.committed_hw > leo:
            # Committed data that a power cut took (it was not fsynced): the stored HW comes
            # down to the LEO now, or offsets appended from here would count as committed.
            logger.warning("%s-%d: the committed high watermark %d is above the log end %d",
                           self.topic, self.partition, loaded.committed_hw, leo)
            self.state_store.commit(high_watermark=leo, log_start_offset=self.log_start_offset,
                                    first_segment_base=self.segments[0].base_offset,
                                    epoch=self.leader_epoch, recovery_point=self.recovery_point)
        if self.truncate_uncommitted and leo > self.high_watermark:
            logger.warning("%s-%d: dropping %d uncommitted offsets above the high watermark %d",
                           self.topic, self.partition, leo - self.high_watermark, self.high_watermark)
            self._truncate_locked(self.high_watermark)
        self._rebuild_producer_state()
        if not self.mode.leads_when_opened:
            # A replica: its epoch is the latest it holds until the controller says more.
            latest = self.epoch_cache.latest_epoch
            self.leader_epoch = latest if latest is not None else -1
        else:
            self.epoch_cache.assign(self.leader_epoch, self.log_end_offset)
        self.epoch_cache.flush()        # the truncation above, when assign changed nothing
        self.segment_store.writer_opened()

    def _rebuild_producer_state(self) -> None:
        """Reload the newest usable snapshot, then replay producer fields of later batches.

        Only batch headers are read, plus the one record of each transaction marker.
        """
        self.producer_state.truncate_and_reload(self.log_start_offset, self.log_end_offset, _now_ms())
        self._replay_producer_state(self.producer_state.map_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)

    def _replay_producer_state(self, start: int) -> None:
        """Replay the producer fields of batches from `start` to the LEO (headers only)."""
        replay_producer_state(self.producer_state, self.log_segments, start, self.log_end_offset,
                              strict=self.writer, name=f"{self.topic}-{self.partition}")

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
        if self._producer_state_loaded:
            self._replay_producer_state(self.producer_state.map_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        self._lso_floor.record_stored(view.stored_lso)   # a newer snapshot may settle it too

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (read only: `log_segments` changes them)."""
        return self.log_segments.list

    @property
    def bases(self) -> list[int]:
        """The segments' base offsets (read only)."""
        return self.log_segments.bases

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
        if not self.segments:
            return self.log_start_offset
        return self.segments[-1].next_offset()

    @property
    def last_stable_offset(self) -> int:
        if not self._producer_state_loaded:
            with self._lock:
                bounded = self._lso_floor.settle(self.high_watermark, self.log_start_offset)
                if bounded is not None:
                    return bounded
                if not self._producer_state_loaded:     # first need of the exact LSO
                    self._producer_state_loaded = True
                    self._rebuild_producer_state()
        first_unstable = self.producer_state.first_unstable_offset
        if first_unstable is None:
            return self.high_watermark
        return min(first_unstable, self.high_watermark)

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

    @property
    def gapless(self) -> bool:
        """Batches tile the offsets without gaps (no compaction ran nor may run)."""
        return self._gapless

    # ------------------------------------------------------------------ for the log cleaner
    def cleaning_snapshot(self) -> tuple[list[LogSegment], int, int, int, int]:
        """(segments, log start offset, LEO, HW, LSO), read as one snapshot under the log's lock:
        the writer changes them together."""
        with self._lock:
            return (list(self.segments), self.log_start_offset, self.log_end_offset, self.high_watermark,
                    self.last_stable_offset)

    def end_cleaning(self, truncations: int, first_dirty_offset: int) -> bool:
        """Write a finished pass's end to the cleaner checkpoint, under the log's lock, unless
        the log was truncated (`truncations`: the count read when the pass began) or closed
        meanwhile: a truncation has lowered the checkpoint and the pass must not raise it again.
        False when it was not written."""
        with self._lock:
            if self.truncations != truncations or self.is_closed:
                return False
            CleanerCheckpoint(self).write(first_dirty_offset)
            return True

    def producer_last_offsets(self) -> dict[int, tuple[int, int]]:
        """producer id -> (last data offset, producer epoch) of the writer's producer state, read
        under the log's lock (the writer adds producers meanwhile)."""
        with self._lock:
            return {pid: (entry.last_data_offset, entry.producer_epoch)
                    for pid, entry in self.producer_state.producers.items()}

    def has_aborted_transactions(self, base_offset: int) -> bool:
        """Whether the segment at `base_offset` has a transaction index (aborted transactions)."""
        return self.log_segments.has_txn_index(base_offset)

    def replace_segments(self, replacements: list, swap_files, truncations: int | None = None) -> bool:
        """Kafka's replaceSegments, for the cleaner. `replacements`: (old segments, new base
        offset, new stem or None, whether the new segment has aborted transactions) for runs of
        consecutive segments of this log. Under the writer's critical section: False, changing
        nothing, when the log was closed or any old segment left it (truncation or retention) or, given
        `truncations` (the count read when the pass began), when the log was truncated since (a
        follower cut where it diverged from its leader: the pass's offset map may hold records
        that are gone); else `swap_files()` (the caller's crash-safe file steps) runs, then the
        new segments, opened read-only, take the old ones' places. Raises ReadOnlyLogError on a
        reader."""
        with self._lock:
            if self._closed:
                return False           # closed under the pass (its folder may be gone)
            with self.critical():
                if truncations is not None and truncations != self.truncations:
                    return False
                current = {id(seg) for seg in self.segments}
                if any(id(seg) not in current for old, *_ in replacements for seg in old):
                    return False
                swap_files()
                self.local.replace_runs(replacements)
                return True

    # ------------------------------------------------------------------ appending
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

    def _compression(self, compression) -> Compression:
        if compression is not None:
            return Compression(compression)
        name = getattr(self.config, "compression_type", "producer")
        return CODEC_BY_NAME.get(name, Compression.NONE)

    def append_records(self, records: Iterable, *, compression: Compression | None = None,
                       producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                       is_transactional: bool = False) -> AppendInfo:
        """Append records as one batch: offsets from the LEO, this writer's epoch stamped.

        `records`: (key, value, headers, timestamp_ms or None) tuples or Record-like objects.
        """
        now = _now_ms()
        items = []
        for item in records:
            if isinstance(item, Record):
                items.append((item.key, item.value, item.headers, item.timestamp))
            else:
                key, value, headers, ts = (tuple(item) + (None, None, None, None))[:4]
                items.append((key, value, headers or (), now if ts is None else ts))
        if not items:
            raise InvalidRecordError("cannot append an empty batch")
        if self._compact:
            missing = [i for i, item in enumerate(items) if item[0] is None]
            if missing:
                self._validator.refuse_null_keys(missing, len(items))
        log_append = self.log_append_time()
        with self.critical():
            batch = build_batch(items, base_offset=self.log_end_offset,
                                compression=self._compression(compression),
                                producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=base_sequence, is_transactional=is_transactional,
                                partition_leader_epoch=self.leader_epoch,
                                timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                                log_append_time=now if log_append else None)
            return self.append_locked(bytearray(batch), now, validated=True)

    def log_append_time(self) -> bool:
        return getattr(self.config, "message_timestamp_type", "CreateTime") == "LogAppendTime"

    def append_batch(self, batch: bytes) -> AppendInfo:
        """Append one client-built RecordBatch v2: validated, offsets assigned, epoch stamped."""
        with self.critical():
            return self.append_locked(bytearray(batch), _now_ms(), validated=False)

    def append_and_commit_nowait(self, batches: list[bytes]) -> tuple[list, bool]:
        """append_batch() each of `batches`, then commit(durable=False), for a caller that must
        not block (the broker's event loop): only what takes no fsync, roll, root checkpoint
        write or wait for a lock is done here.

        A batch given as a writable buffer (a bytearray, or a writable memoryview such as a
        slice of the request frame) gets its offsets and epoch stamped in place (no copy).

        Returns (results, committed): one AppendInfo or exception per batch handled (a prefix
        of `batches`; it stops before a batch that would roll a segment or reach the flush
        policy), and whether the HW now covers everything appended. The caller finishes what
        is left (the other batches, the commit) where it may block.
        """
        if not (self.writer and self.segment_store.in_place) or not self._lock.acquire(blocking=False):
            return [], False
        try:
            try:
                if self._closed or not self.fence.try_enter_critical():
                    return [], False
            except Exception:  # noqa: BLE001 - e.g. fenced: the blocking path reports it per batch
                return [], False
            try:
                results: list = []
                self._nonblocking = True
                try:
                    for batch in batches:
                        try:
                            data = batch if _writable(batch) else bytearray(batch)
                            results.append(self.append_locked(data, _now_ms(), validated=False))
                        except _WouldBlock:
                            return results, False
                        except Exception as exc:  # noqa: BLE001 - that batch's own error
                            results.append(exc)
                finally:
                    self._nonblocking = False
                if self.high_watermark < self.log_end_offset and self.mode.commit_moves_high_watermark:
                    # A replica's HW moves with replication, and its checkpoint is written on
                    # its own schedule (replica.high.watermark.checkpoint.interval.ms).
                    # A moved recovery point is written durably (fsync); the root files are
                    # replaced under the root lock: both are left to the blocking path.
                    if (self.local.recovery_point_unrecorded
                            or self.state_store.root_write_due()):
                        return results, False
                    try:
                        self.commit_locked(durable=False)
                    except Exception:  # noqa: BLE001 - the HW did not move: the blocking path retries
                        logger.debug("non-blocking commit of %s-%d failed; retrying in a thread",
                                     self.topic, self.partition, exc_info=True)
                        return results, False
                return results, True
            finally:
                self.fence.exit_critical()
        finally:
            self._lock.release()

    def flush_due(self, records: int, now: int) -> bool:
        return self.local.flush_due(records, now)

    def check_open(self) -> None:
        if self._closed:
            raise SegLogError(f"{self.topic}-{self.partition} is closed")

    def append_locked(self, data: bytearray, now: int, *, validated: bool,
                      assign: bool = False) -> AppendInfo:
        """A leader's append of one batch: checked (validated=False: a client's batch), its
        offsets and epoch stamped, deduplicated by producer state, then written by
        `append_batch_locked`, the append every batch goes through."""
        self.check_open()
        if not self.leads:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.partition}: this replica follows at leader epoch"
                f" {self.leader_epoch}; only the leader appends")
        if validated:
            header = parse_header(data)
            size = header.size
        else:
            fields = self._validator.validate(data, now, nonblocking=self._nonblocking)
            size = fields[1] + LOG_OVERHEAD
        if size > self._segment_bytes:
            raise RecordTooLargeError(
                f"batch of {size} bytes exceeds segment.bytes={self._segment_bytes}")
        leo = self.log_end_offset
        if not validated or assign:
            set_base_offset(data, leo)
            set_partition_leader_epoch(data, self.leader_epoch)
            if self.log_append_time():
                set_log_append_time(data, now)
                header = parse_header(data)
            elif validated:
                header = parse_header(data)
            else:                           # the stamped header without parsing it again
                header = BatchHeader(leo, fields[1], self.leader_epoch, *fields[3:])
        analysis = None
        next_batch = False
        if header.producer_id >= 0:
            next_batch = (not header.attributes & (CONTROL_MASK | TRANSACTIONAL_MASK)
                          and self.producer_state.is_next_batch(header.producer_id, header.producer_epoch,
                                                                header.base_sequence))
        if header.producer_id >= 0 and not next_batch:
            marker = _end_marker(data, header, "append", 0) if header.is_control else None
            analysis = self.producer_state.analyze([ProducerBatch.from_header(header, marker)])
            if analysis.duplicate is not None:
                d = analysis.duplicate
                return AppendInfo(d.first_offset, d.last_offset, d.timestamp, header.records_count,
                                  duplicate=True)
        self.append_batch_locked(data, header, now, self.leader_epoch, analysis, next_batch=next_batch)
        self.local.maybe_flush(now)
        log_append = now if header.timestamp_type == TimestampType.LOG_APPEND_TIME else -1
        return AppendInfo(header.base_offset, header.last_offset, header.max_timestamp,
                          header.records_count, log_append)

    def append_batch_locked(self, data, header: BatchHeader, now: int, epoch: int, analysis, *,
                            next_batch: bool = False) -> None:
        """Write one checked batch that starts at the LEO, for a leader's and a follower's append
        alike: roll first when due, the epoch cache learns `epoch` (the leader's, or the
        leader's batch's) at the batch, the producer state its producer fields (`analysis`, or
        `next_batch`: the producer's next in-sequence batch, which needs none)."""
        active = self.log_segments.active
        roll = active.should_roll(header.size, header.max_timestamp, header.last_offset,
                                  segment_bytes=self._segment_bytes,
                                  segment_ms=self._segment_ms, now_ms=now)
        if self._nonblocking and (roll or self.local.flush_due(header.records_count, now)):
            raise _WouldBlock()     # nothing changed yet: the blocking path appends this batch
        if roll:
            if active.in_memory:
                # An object-store segment is published at commit; rolling it means committing.
                self.commit_locked()
            else:
                self.local.roll_to(header.base_offset)
            active = self.log_segments.active
        self.note_epoch_start(epoch, header.base_offset)
        active.append(data, [header])
        if next_batch:
            self.producer_state.append_next_batch(header.producer_id, header.last_sequence,
                                                  header.base_offset, header.last_offset,
                                                  header.max_timestamp)
        elif analysis is not None:
            self._complete_producer_append(active, analysis, header)
        self.local.add_unflushed(header.records_count)

    def _complete_producer_append(self, active: LogSegment, analysis, header: BatchHeader) -> None:
        """The producer state's part of an append whose batch is in `active` already, and the
        aborted transactions it ends into the `.txnindex`. If that write fails (a full disk),
        the batch is taken out again and the producer state rebuilt from the log, so a failed
        append leaves nothing behind (a marker without its index entry would show aborted
        data to read_committed readers)."""
        try:
            for aborted in self.producer_state.complete_append(analysis, header.next_offset):
                active.txn_index.append(aborted)
                self.log_segments.mark_txn_index(active.base_offset)
        except OSError:
            active.truncate_to(header.base_offset)
            self._rebuild_producer_state()
            raise

    def append_control(self, control_type: ControlType, *, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int = 0) -> AppendInfo:
        """Write a transaction marker (COMMIT/ABORT) for a producer's open transaction."""
        from logcore.records.batch import build_control_batch

        with self.critical():
            batch = build_control_batch(control_type, producer_id=producer_id, producer_epoch=producer_epoch,
                                        coordinator_epoch=coordinator_epoch, base_offset=self.log_end_offset,
                                        timestamp_ms=_now_ms(), partition_leader_epoch=self.leader_epoch)
            return self.append_locked(bytearray(batch), _now_ms(), validated=True)

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

    def delete_oldest_locked(self, count: int, start_offset: int, now: int,
                             reasons: tuple[str, ...], *, move_start: bool = True) -> RetentionResult:
        """Delete the oldest `count` segments and move the log start offset to at least
        `start_offset` and the first remaining segment's base: checkpoint first, files after.

        move_start=False (tiered storage, local retention): the segments' data lives on in the
        remote tier, so the log start offset stays; the checkpoint still goes first, as it must
        now record a log start offset below the first local segment."""
        doomed = self.segments[:count]
        new_start = max(self.log_start_offset, start_offset,
                        self.segments[count].base_offset if 0 < count < len(self.segments) and move_start
                        else start_offset)
        if new_start > self.log_start_offset or (not move_start and count):
            first_base = self.segments[0 if move_start else count].base_offset
            self.state_store.commit(high_watermark=self.high_watermark, log_start_offset=new_start,
                                    first_segment_base=first_base, epoch=self.leader_epoch)
            self.log_start_offset = new_start
        self.log_segments.remove_first(count)       # files after (LocalLog.retire)
        if not self.read_only:
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            # Snapshots below the first local segment are no use locally (a remote segment
            # carries its own); the one at the first local base is where replay starts.
            self.producer_state.delete_snapshots_before(self.local_log_start_offset)
        self.producer_state.on_log_start_offset_incremented(self.log_start_offset)
        deleted_bytes = self.local.retire(doomed, now)
        if doomed:
            logger.info("%s-%d: deleted %d segments (%d bytes) below offset %d (%s)", self.topic,
                        self.partition, len(doomed), deleted_bytes, self.log_start_offset,
                        ", ".join(sorted(set(reasons))))
        return RetentionResult(len(doomed), deleted_bytes, self.log_start_offset,
                               tuple(s.base_offset for s in doomed), reasons)

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
        leo = self.log_end_offset
        first_base = self.segments[0].base_offset if self.segments else leo
        # A replica records its HW as replication moved it; the single-node policy makes
        # everything appended visible once recorded.
        hw = leo if self.mode.commit_moves_high_watermark else self.high_watermark
        # The LSO at the new HW, counting every transaction not yet ended as open (a floor).
        unstable = self.producer_state.first_unstable_offset
        self.state_store.commit(high_watermark=hw, log_start_offset=self.log_start_offset,
                                first_segment_base=first_base, epoch=self.leader_epoch,
                                recovery_point=self.segment_store.recovery_point_to_record(),
                                marker=marker, durable=durable, root=root,
                                last_stable_offset=hw if unstable is None else min(unstable, hw))
        self.local.recovery_point_recorded()
        self._state_unsynced = not durable
        # The single-node policy: once durable and recorded, everything appended is visible.
        if self.mode.commit_moves_high_watermark:
            self.set_high_watermark(leo)
        if marker is not None:
            self.commit_marker = marker

    def publish(self, seg: LogSegment) -> None:
        """Object store: publish `seg` at this writer's epoch (LocalLog.publish)."""
        self.local.publish(seg, self.leader_epoch)

    # ------------------------------------------------------------------ replication
    def append_as_follower(self, records, *, follower_at: int | None = None) -> tuple[int, int]:
        """Append the leader's batches verbatim (FollowerAppend.append_as_follower)."""
        return self._follower.append_as_follower(records, follower_at=follower_at)

    def append_as_follower_nowait(self, records, *, follower_at: int | None = None) -> tuple[int, int] | None:
        """append_as_follower() for a caller that must not block (FollowerAppend)."""
        return self._follower.append_as_follower_nowait(records, follower_at=follower_at)

    def require_local_writer(self, what: str) -> None:
        if not self.writer:
            raise ReadOnlyLogError(
                f"{self.topic}-{self.partition} was opened for reading only: cannot {what}")
        if not self.segment_store.in_place:
            raise SegLogError(f"{self.topic}-{self.partition}: {what} needs a log on local disk; an"
                              " object-store log takes its epoch from its writer fence")

    def require_follower(self, epoch: int, what: str) -> None:
        """Under the writer's lock: a follower's write for `epoch` goes ahead only while this
        replica still follows at that epoch. A fetch answered for an older epoch, or one that
        lands after become_leader, must not write a deposed leader's batches after the new
        epoch's entry (the epoch cache would then misdescribe the log)."""
        if self.leads or self.leader_epoch != epoch:
            now = "leads" if self.leads else "follows"
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.partition}: cannot {what} as a follower at leader epoch {epoch}:"
                f" this replica {now} at epoch {self.leader_epoch} now")

    # ------------------------------------------------------------------ high watermark
    def set_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset
        self.producer_state.on_high_watermark_updated(offset)

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Leader: advance the HW to `offset` (Kafka's maybeIncrementHighWatermark; for a
        replicated partition, the smallest LEO of the in-sync replicas). Never backwards: an
        offset at or below the HW changes nothing and returns False. Never past the LEO:
        raises OffsetOutOfRangeError. Only visibility moves: the HW is recorded for other
        processes by the next commit."""
        if not self.writer:
            raise ReadOnlyLogError(f"{self.topic}-{self.partition} was opened for reading only")
        with self._lock:
            leo = self.log_end_offset
            if offset > leo:
                raise OffsetOutOfRangeError(
                    f"{self.topic}-{self.partition}: cannot move the high watermark to {offset},"
                    f" past the log end offset {leo}", topic=self.topic, partition=self.partition,
                    offset=offset, log_start_offset=self.log_start_offset, log_end_offset=leo)
            if offset <= self.high_watermark:
                return False
            self.set_high_watermark(offset)
            return True

    def update_high_watermark(self, leader_high_watermark: int, *, follower_at: int | None = None) -> int:
        """Follower: take the HW from the leader's (Kafka's updateHighWatermark): it becomes
        min(leader's HW, own LEO), and never less than the log start offset. Returns it.
        `follower_at`: only while this replica follows at that leader epoch."""
        if not self.writer:
            raise ReadOnlyLogError(f"{self.topic}-{self.partition} was opened for reading only")
        with self._lock:
            if follower_at is not None:
                self.require_follower(follower_at, "take the leader's high watermark")
            hw = max(self.log_start_offset, min(leader_high_watermark, self.log_end_offset))
            self.set_high_watermark(hw)
            return hw

    # ------------------------------------------------------------------ leadership
    def become_leader(self, epoch: int) -> None:
        """Lead the partition at `epoch`, given from outside (a controller; the single-node
        writer fence is one such source): the epoch cache records (epoch, LEO) at once and
        batches appended from now on are stamped with `epoch`. An epoch below the cache's
        latest raises FencedWriterError; the same epoch again changes nothing."""
        self.require_local_writer("become leader")
        with self.critical():
            latest = self.epoch_cache.latest_epoch
            if latest is not None and epoch < latest:
                raise FencedWriterError(
                    f"{self.topic}-{self.partition}: leader epoch {epoch} is older than the latest"
                    f" epoch {latest} of its leader-epoch-checkpoint")
            self.leader_epoch = epoch
            try:
                self.epoch_cache.assign(epoch, self.log_end_offset)
            except OSError as exc:
                # A full disk: the cache is as it was, and the first append at this epoch
                # assigns it again (at the same LEO) or fails, writing nothing, until the
                # checkpoint can be written. Leading must not wait for the disk.
                logger.warning("%s-%d: leader epoch %d not written to the epoch checkpoint yet: %s",
                               self.topic, self.partition, epoch, exc)
            self.leads = True

    def become_follower(self, epoch: int) -> None:
        """Follow the partition's leader at `epoch` (given by the controller): the epoch is
        recorded for fencing, nothing is truncated and the epoch cache learns epochs only from
        the leader's batches (append_as_follower). From here on a leader's append raises
        NotLeaderOrFollowerError: the change is made under the append's lock, so no client
        batch lands after it stamped with `epoch`. An epoch below the current one raises
        FencedWriterError."""
        self.require_local_writer("become a follower")
        with self.critical():
            if epoch < self.leader_epoch:
                raise FencedWriterError(
                    f"{self.topic}-{self.partition}: leader epoch {epoch} is older than the current"
                    f" epoch {self.leader_epoch}")
            self.leads = False
            self.leader_epoch = epoch

    def truncate_fully_and_start_at(self, offset: int, *, log_start_offset: int | None = None,
                                    epochs: list[tuple[int, int]] | None = None,
                                    producer_snapshot: bytes | None = None,
                                    snapshot_source: str | None = None,
                                    expected_end: int | None = None,
                                    follower_at: int | None = None) -> bool:
        """A follower that cannot catch up by fetching (Kafka's truncateFullyAndStartAt): every
        local segment goes and the log restarts, empty, at `offset`; the HW and recovery point
        are `offset`. Without the other arguments (the leader's log start moved past this
        replica, replication.md 1.5) the log start offset is `offset`, the epoch cache is empty
        and so is the producer state. With tiered storage (KIP-405's follower catch-up) the
        caller gives what the remote segment ending at `offset` - 1 holds: the leader's
        `log_start_offset` (at most `offset`; the offsets below `offset` are the remote
        tier's), its leader-epoch entries and its producer snapshot, which become this log's
        epoch cache and producer state at `offset`.

        `expected_end`: do nothing and return False unless the LEO is that (checked under the
        writer's lock). The new log start offset is checkpointed before any file goes.
        `follower_at`: only while this replica follows at that leader epoch (as truncate_to)."""
        self.require_local_writer("truncate fully")
        start = offset if log_start_offset is None else min(log_start_offset, offset)
        with self.critical():
            if follower_at is not None:
                self.require_follower(follower_at, "truncate fully")
            if expected_end is not None and self.log_end_offset != expected_end:
                return False
            if producer_snapshot is not None:         # checked before anything changes
                from logcore.log.producer_state import decode_snapshot
                decode_snapshot(producer_snapshot, source=snapshot_source)
            self.state_store.commit(high_watermark=offset, log_start_offset=start,
                                    first_segment_base=offset, epoch=self.leader_epoch)
            self.truncations += 1
            self.log_start_offset = start
            self.local.restart_at(offset)
            self.epoch_cache.clear()
            for epoch, epoch_start in epochs or ():
                self.epoch_cache.assign(epoch, epoch_start)
            if epochs and start > 0:
                self.epoch_cache.truncate_from_start(start)
            if producer_snapshot is not None:
                self.producer_state.restore_snapshot(offset, producer_snapshot, source=snapshot_source)
            else:
                self.producer_state.truncate_fully_and_start_at(offset)
            self.set_high_watermark(offset)
            return True

    def checkpoint_high_watermark(self) -> None:
        """Write the HW (and log start, recovery point) to the partition's checkpoints without
        fsync, as Kafka's replication-offset-checkpoint task does; for replica logs, whose HW
        moves with replication rather than at commits."""
        with self.critical():
            self.commit_locked(durable=False, root=True)

    def end_offset_for_epoch(self, epoch: int):
        """(epoch, end offset) for a follower's divergence check (Kafka's
        OffsetsForLeaderEpoch): the largest epoch <= `epoch` this log knows and the offset
        where the next epoch starts (the LEO for the latest)."""
        with self._lock:
            return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # ------------------------------------------------------------------ truncation and close
    def truncate_to(self, offset: int, *, below_high_watermark: bool = False,
                    expected_end: int | None = None, follower_at: int | None = None) -> bool:
        """Remove every offset >= `offset` (a writer dropping uncommitted data, or a follower
        cutting where it diverged from the leader: the leader's `end_offset_for_epoch` of the
        follower's latest epoch). A cut below the HW removes committed data: it raises
        OffsetOutOfRangeError unless `below_high_watermark=True` says it is meant. The epoch
        cache loses its entries from `offset` on, also when `offset` is at or past the LEO.

        `expected_end`: do nothing and return False unless the LEO is that (checked under the
        writer's lock: a follower cuts only the log its decision was made on). Else True.
        `follower_at`: a follower's cut, made only while this replica follows at that leader
        epoch (else NotLeaderOrFollowerError: it leads now, or follows at another epoch)."""
        with self.critical():
            if follower_at is not None:
                self.require_follower(follower_at, "truncate")
            if expected_end is not None and self.log_end_offset != expected_end:
                return False
            if offset >= self.log_end_offset:
                self.epoch_cache.truncate_from_end(offset)
                return True
            committed = self.high_watermark
            if offset < committed and not below_high_watermark and offset < self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"{self.topic}-{self.partition}: truncating to offset {offset} would cut committed"
                    f" data below the high watermark {committed} (pass below_high_watermark=True to"
                    " mean it)", topic=self.topic, partition=self.partition, offset=offset,
                    log_start_offset=self.log_start_offset, log_end_offset=self.log_end_offset)
            self._truncate_locked(offset)
            if self.high_watermark < committed:
                self.segment_store.hw_lowered()
            if not self._gapless:
                # What is appended from `offset` on is dirty (Kafka's maybeTruncateCheckpoint).
                CleanerCheckpoint(self).truncate(offset)
            return True

    def _truncate_locked(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        self.truncations += 1
        if self.local.truncate_to(offset):
            self.log_start_offset = offset      # everything went: the log restarts at `offset`
        self.high_watermark = min(self.high_watermark, offset)
        self.epoch_cache.truncate_from_end(offset)
        self._rebuild_producer_state()

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


def _writable(buf) -> bool:
    return isinstance(buf, bytearray) or isinstance(buf, memoryview) and not buf.readonly and buf.contiguous
