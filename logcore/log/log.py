# Over 600 lines: the writer state (segments, offsets, epoch) that append, roll and truncate change together.
"""One partition's log: its segments, offsets (log start, HW, LSO, LEO), appends, reads, recovery.

Visibility (DESIGN section 4): readers never see data at or above the high watermark, and with
read_committed not at or above the last stable offset. The HW is its own operation
(replication.py: a leader's `maybe_increment_high_watermark`, a follower's
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

import bisect
import logging
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterable

from logcore.errors import (DamagedLogError, FencedWriterError, InvalidRecordError, NotLeaderOrFollowerError,
                            OffsetOutOfRangeError, ReadOnlyLogError, RecordTooLargeError, SegLogError)
from logcore.records.batch import (CONTROL_MASK, LOG_OVERHEAD, TRANSACTIONAL_MASK, BatchHeader, Record,
                                   TimestampType, build_batch, parse_header, set_base_offset,
                                   set_log_append_time, set_partition_leader_epoch)
from logcore.records.compression import CODEC_BY_NAME, Compression
from logcore.records.control import ControlType
from logcore.log.leader_epoch import LeaderEpochCache
from logcore.log.checkpoint import LeaderEpochCheckpoint
from logcore.log.cleaner_checkpoint import CleanerCheckpoint
from logcore.log.producer_state import ProducerBatch, ProducerStateManager
from logcore.log.remote_view import RemoteLogView
from logcore.log.segment_flusher import PendingFlush
from logcore.log.segment_store import segment_store_for
from logcore.log.segment import LogSegment
from logcore.log.clock import now_ms as _now_ms
# The parts of Log, by noun (each a mixin of this class), and the names callers import from here.
from logcore.log.adoption import StagedAdoption
from logcore.log.log_flush import LogFlushing
from logcore.log.log_loader import (CLEAN_SHUTDOWN, DELETED_SUFFIX, KAFKA_CLEAN_SHUTDOWN,  # noqa: F401
                                    LEADER_EPOCH_CHECKPOINT, TEMP_SUFFIXES, LoadedLog, LogLoader,
                                    LogLoading, RecoveryReport)
from logcore.log.log_reader import FetchResult, LogReading, _end_marker  # noqa: F401
from logcore.log.log_refresh import LogRefresh
from logcore.log.range_open import RangeBoundedOpen
from logcore.log.segment_listing import SegmentListing
from logcore.log.log_validator import (MAX_INFLATION, ON_LOOP_INFLATION, ClientBatchValidation,  # noqa: F401
                                       _WouldBlock)
from logcore.log.replication import LogReplication
from logcore.log.retention import LogRetention

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


class Log(LogLoading, SegmentListing, RangeBoundedOpen, LogRefresh, ClientBatchValidation, StagedAdoption, LogReading,
          LogFlushing, LogRetention, LogReplication):
    """A partition's log. Open it through `LogRoot.log(topic, partition)`."""

    def __init__(self, storage, directory: str, topic: str, partition: int, config, state_store, *,
                 fence=None, read_only: bool = False, kafka_clean: bool = False,
                 truncate_uncommitted: bool = True, remote: RemoteLogView | None = None,
                 resume: tuple[int, str] | None = None, repair: bool = False,
                 kafka_copy: bool = False, replica: bool = False,
                 read_range: tuple[int | None, int | None] | None = None):
        if read_range is not None and fence is not None:
            raise ValueError("read_range is for readers: a writer opens the whole log")
        # A reader's range [start, end) (range_open.py): the open prepares only what reading it needs.
        self._read_range = read_range
        self._producer_state_loaded = read_range is None
        self.storage = storage
        # replica (a cluster member's log, local disk): the leader epoch is given from outside
        # (become_leader / become_follower), opening never truncates, and the HW moves only by
        # maybe_increment_high_watermark / update_high_watermark, never by a commit.
        self.replica = replica
        self._kafka_copy = kafka_copy
        # repair (`seglog repair`): recovery checks every segment and may cut committed data.
        self._repair = repair
        self._committed_hw: int | None = None
        # Batches tile the offsets without gaps (checked on read) unless compaction ran or may run.
        self._gapless = not config.compact and not self._compacted_once(storage, directory, topic, partition)
        # Truncations that removed offsets (truncate_to below the LEO, truncate_fully_and_start_at):
        # a cleaner pass that began before one must not swap its output in (replace_segments).
        self.truncations = 0
        # Tiered storage: the remote segments below the local ones (None: the log is all local).
        self.remote = remote
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.state_store = state_store
        self.fence = fence
        self.read_only = read_only or storage.read_only
        self.writer = fence is not None
        self.truncate_uncommitted = truncate_uncommitted and not replica
        # Hot-path copies of the config (read on every append).
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._flush_messages = config.flush_messages
        self._flush_ms = config.flush_ms
        self._max_message_bytes = config.max_message_bytes
        self._compact = config.compact
        self.segments: list[LogSegment] = []
        self._txn_bases: set[int] = set()        # segments that have a .txnindex
        self.bases: list[int] = []
        self.recovery = RecoveryReport()
        self.commit_marker: dict | None = None
        self.leader_epoch = -1
        # Whether this log takes a leader's appends. A path-mode writer leads by its fence; a
        # replica leads only between become_leader and become_follower, and the check is made
        # under the lock of the append itself, so a replica being deposed never appends a
        # client's batch stamped with the new leader's epoch (Kafka's leaderIsrUpdateLock).
        self.leads = not replica
        self.high_watermark = 0
        self.log_start_offset = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager(storage, directory, name=f"{topic}-{partition}")
        self._lock = threading.RLock()
        self._seen_start_state: int | None = None
        self._seen_first_base: int | None = None
        self._unflushed = 0
        self._last_flush_ms = _now_ms()
        self._checkpointed_recovery_point = 0       # the recovery point the last commit wrote
        self._state_unsynced = False                # a commit wrote the HW without fsync
        self._closed = False
        self._nonblocking = False                   # inside append_and_commit_nowait
        self._pending_flushes: list[PendingFlush] = []   # rolled segments not yet fsynced, in roll order
        self._flush_generation = 0                  # bumped by truncation: older pending flushes move nothing
        epoch_path = storage.join(directory, LEADER_EPOCH_CHECKPOINT)
        self.epoch_cache = LeaderEpochCache(LeaderEpochCheckpoint(storage, epoch_path))
        # Local disk or object store: what differs between them, behind one protocol.
        self.segment_store = segment_store_for(self)
        if self.writer and self.read_only:
            raise ReadOnlyLogError(f"cannot open {directory} for writing: the log is read-only")
        if replica and not (self.writer and storage.is_local):
            raise SegLogError(f"{directory}: a replica log is a writer on local disk")
        if self.writer:
            # resume: take the epoch back if nobody took the partition since (WriterFence);
            # the load below cuts an uncommitted tail either way. A replica holds the fence
            # only as the lock of its directory: its epoch comes from the controller.
            epoch = fence.acquire(resume=resume)
            if not replica:
                self.leader_epoch = epoch
        try:
            with self._critical() if self.writer else nullcontext():
                self._load(kafka_clean)
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
        return self.writer and self.storage.is_local

    def _new_segment(self, base_offset: int, *, writable: bool, in_memory: bool = False,
                     stem: str | None = None) -> LogSegment:
        seg = LogSegment(self.storage, self.dir, base_offset,
                         index_interval_bytes=self.config.index_interval_bytes,
                         max_index_size=self.config.segment_index_bytes,
                         writable=writable, in_memory=in_memory, stem=stem)
        seg.persist_rebuilt_index = self._local_writer and not self.read_only
        seg.contiguous = self._gapless
        return seg

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
                bounded = self._bounded_last_stable_offset()
                if bounded is not None:
                    return bounded
                self._ensure_producer_state()
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

    def _bound(self, isolation: str) -> int:
        if isolation == "read_committed":
            return self.last_stable_offset
        if isolation == "read_uncommitted":
            return self.high_watermark
        if isolation == "log_end":
            return self.log_end_offset
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation!r}")

    # ------------------------------------------------------------------ fencing
    @contextmanager
    def _critical(self):
        """Writes happen here: under the fence (local: a lock held across the write)."""
        if not self.writer:
            raise ReadOnlyLogError(f"{self.topic}-{self.partition} was opened for reading only")
        with self._lock, self.segment_store.critical():
            yield

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
        return base_offset in self._txn_bases

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
            with self._critical():
                if truncations is not None and truncations != self.truncations:
                    return False
                current = {id(seg) for seg in self.segments}
                if any(id(seg) not in current for old, *_ in replacements for seg in old):
                    return False
                swap_files()
                for old, base, stem, has_aborted in replacements:
                    i = next(k for k, seg in enumerate(self.segments) if seg is old[0])
                    self.segments[i:i + len(old)] = [self._new_segment(base, writable=False, stem=stem)]
                    self._txn_bases.difference_update(seg.base_offset for seg in old)
                    if has_aborted:
                        self._txn_bases.add(base)
                self.bases = [seg.base_offset for seg in self.segments]
                self._ts_cache_key = None
                return True

    # ------------------------------------------------------------------ appending
    def _roll_to(self, base_offset: int) -> LogSegment:
        if self.segments:
            active = self.segments[-1]
            if active.writable and not active.in_memory:
                self.segment_store.seal(active)
                self.segments[-1] = self._new_segment(active.base_offset, writable=False)
            if active.size() == 0 and active.base_offset == base_offset:
                return self.segments[-1]
            if active.in_memory and active.size() > 0:
                raise SegLogError("cannot roll an unpublished object-store segment")
            if active.in_memory and active.size() == 0:
                self.segments.pop()
                self.bases.pop()
        seg = self.segment_store.new_active(base_offset)
        # Its next offset and indexes are there before the segment is published: a thread that
        # reads the LEO without the lock must not compute it lazily while this writer appends,
        # or its stale result, stored after the append, hands the same offset out twice.
        seg.fill_lazy_state()
        self.segments.append(seg)
        self.bases.append(base_offset)
        self.segment_store.rolled(base_offset)
        return seg

    def _note_epoch_start(self, offset: int) -> None:
        """As Kafka's leader append: the epoch cache learns this writer's epoch at the first
        batch stamped with it (it is there from the open on, unless a truncation took it)."""
        latest = self.epoch_cache.latest_epoch
        if self.leader_epoch >= 0 and (latest is None or self.leader_epoch > latest):
            self.epoch_cache.assign(self.leader_epoch, offset)

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
                self._refuse_null_keys(missing, len(items))
        log_append = self._log_append_time()
        with self._critical():
            batch = build_batch(items, base_offset=self.log_end_offset,
                                compression=self._compression(compression),
                                producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=base_sequence, is_transactional=is_transactional,
                                partition_leader_epoch=self.leader_epoch,
                                timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                                log_append_time=now if log_append else None)
            return self._append_locked(bytearray(batch), now, validated=True)

    def _log_append_time(self) -> bool:
        return getattr(self.config, "message_timestamp_type", "CreateTime") == "LogAppendTime"

    def append_batch(self, batch: bytes) -> AppendInfo:
        """Append one client-built RecordBatch v2: validated, offsets assigned, epoch stamped."""
        with self._critical():
            return self._append_locked(bytearray(batch), _now_ms(), validated=False)

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
        if not (self.writer and self.storage.is_local) or not self._lock.acquire(blocking=False):
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
                            results.append(self._append_locked(data, _now_ms(), validated=False))
                        except _WouldBlock:
                            return results, False
                        except Exception as exc:  # noqa: BLE001 - that batch's own error
                            results.append(exc)
                finally:
                    self._nonblocking = False
                if self.high_watermark < self.log_end_offset and not self.replica:
                    # A replica's HW moves with replication, and its checkpoint is written on
                    # its own schedule (replica.high.watermark.checkpoint.interval.ms).
                    # A moved recovery point is written durably (fsync); the root files are
                    # replaced under the root lock: both are left to the blocking path.
                    if (self.recovery_point != self._checkpointed_recovery_point
                            or self.state_store.root_write_due()):
                        return results, False
                    try:
                        self._commit_locked(durable=False)
                    except Exception:  # noqa: BLE001 - the HW did not move: the blocking path retries
                        logger.debug("non-blocking commit of %s-%d failed; retrying in a thread",
                                     self.topic, self.partition, exc_info=True)
                        return results, False
                return results, True
            finally:
                self.fence.exit_critical()
        finally:
            self._lock.release()

    def _flush_due(self, records: int, now: int) -> bool:
        return self._unflushed + records >= self._flush_messages or now - self._last_flush_ms >= self._flush_ms

    def _append_locked(self, data: bytearray, now: int, *, validated: bool,
                       assign: bool = False) -> AppendInfo:
        if self._closed:
            raise SegLogError(f"{self.topic}-{self.partition} is closed")
        if not self.leads:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.partition}: this replica follows at leader epoch"
                f" {self.leader_epoch}; only the leader appends")
        if validated:
            header = parse_header(data)
            size = header.size
        else:
            fields = self._validate_client_batch(data, now)
            size = fields[1] + LOG_OVERHEAD
        if size > self._segment_bytes:
            raise RecordTooLargeError(
                f"batch of {size} bytes exceeds segment.bytes={self._segment_bytes}")
        leo = self.log_end_offset
        if not validated or assign:
            set_base_offset(data, leo)
            set_partition_leader_epoch(data, self.leader_epoch)
            if self._log_append_time():
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
        active = self.segments[-1]
        roll = active.should_roll(header.size, header.max_timestamp, header.last_offset,
                                  segment_bytes=self._segment_bytes,
                                  segment_ms=self._segment_ms, now_ms=now)
        if self._nonblocking and (roll or self._flush_due(header.records_count, now)):
            raise _WouldBlock()     # nothing changed yet: the blocking path appends this batch
        if roll:
            if active.in_memory:
                # An object-store segment is published at commit; rolling it means committing.
                self._commit_locked()
            else:
                self._roll_to(leo)
            active = self.segments[-1]
        self._note_epoch_start(header.base_offset)
        active.append(data, [header])
        if next_batch:
            self.producer_state.append_next_batch(header.producer_id, header.last_sequence,
                                                  header.base_offset, header.last_offset,
                                                  header.max_timestamp)
        elif analysis is not None:
            self._complete_producer_append(active, analysis, header)
        self._unflushed += header.records_count
        self._maybe_flush(now)
        log_append = now if header.timestamp_type == TimestampType.LOG_APPEND_TIME else -1
        return AppendInfo(header.base_offset, header.last_offset, header.max_timestamp,
                          header.records_count, log_append)

    def _complete_producer_append(self, active: LogSegment, analysis, header: BatchHeader) -> None:
        """The producer state's part of an append whose batch is in `active` already, and the
        aborted transactions it ends into the `.txnindex`. If that write fails (a full disk),
        the batch is taken out again and the producer state rebuilt from the log, so a failed
        append leaves nothing behind (a marker without its index entry would show aborted
        data to read_committed readers)."""
        try:
            for aborted in self.producer_state.complete_append(analysis, header.next_offset):
                active.txn_index.append(aborted)
                self._txn_bases.add(active.base_offset)
        except OSError:
            active.truncate_to(header.base_offset)
            self._rebuild_producer_state()
            raise

    def append_control(self, control_type: ControlType, *, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int = 0) -> AppendInfo:
        """Write a transaction marker (COMMIT/ABORT) for a producer's open transaction."""
        from logcore.records.batch import build_control_batch

        with self._critical():
            batch = build_control_batch(control_type, producer_id=producer_id, producer_epoch=producer_epoch,
                                        coordinator_epoch=coordinator_epoch, base_offset=self.log_end_offset,
                                        timestamp_ms=_now_ms(), partition_leader_epoch=self.leader_epoch)
            return self._append_locked(bytearray(batch), _now_ms(), validated=True)

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

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
        with self._critical():
            if follower_at is not None:
                self._require_follower(follower_at, "truncate")
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
        self._flush_generation += 1     # a pending flush of a rolled segment must not move the recovery point now
        keep = [s for s in self.segments if s.base_offset < offset or s is self.segments[0]]
        for seg in self.segments:
            if seg not in keep:
                seg.close()
                seg.delete_files()
        self.segments = keep
        self.bases = [s.base_offset for s in keep]
        last = self.segments[-1]
        if last.base_offset >= offset:
            # Everything goes: restart the log at `offset`.
            last.close()
            last.delete_files()
            self.segments, self.bases = [], []
            self.log_start_offset = offset
            self._roll_to(offset)
        else:
            self.segment_store.truncate_active(offset)
        self.high_watermark = min(self.high_watermark, offset)
        self.recovery_point = min(self.recovery_point, offset)
        self.epoch_cache.truncate_from_end(offset)
        self._rebuild_producer_state()

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            if self.writer:
                try:
                    with self._critical():
                        self.segment_store.close_writer()
                except FencedWriterError:
                    logger.warning("%s-%d: closing a fenced writer; nothing more is written",
                                   self.topic, self.partition)
                    for seg in self.segments:
                        seg.data.close()
                finally:
                    for pending in self._pending_flushes:     # synced by _flush_locked unless it failed
                        pending.close()
                    self._pending_flushes = []
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
