"""One partition's log: its segments, offsets (log start, HW, LSO, LEO), appends, reads, recovery.

Visibility (DESIGN section 4): readers never see data at or above the high watermark, and with
read_committed not at or above the last stable offset. The HW moves only at `commit()`, which
makes everything appended so far durable (fsync on local disk, published objects on an object
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
import errno
import json
import logging
import mmap
import os
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np

from logcore.errors import (CorruptIndexError, CorruptRecordError, FencedWriterError,
                            InvalidRecordError, OffsetOutOfRangeError, PolicyViolationError,
                            ReadOnlyLogError, RecordTooLargeError, ResourceNotFoundError,
                            SegLogError)
from logcore.records.batch import (ATTRIBUTES_OFFSET, CONTROL_MASK, F_BASE_OFFSET, F_LAST_DELTA, HEADER_SIZE,
                                   INT32_MAX, LOG_OVERHEAD, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, BatchHeader,
                                   Record, TimestampType, batch_fields, build_batch, check_produced_records,
                                   decode_records, header_fields,
                                   iter_batches, parse_header, set_base_offset, set_log_append_time,
                                   set_partition_leader_epoch)
from logcore.records.arrow import record_columns
from logcore.records.compression import Compression
from logcore.records.control import ControlType, EndTransactionMarker, parse_control_type
from logcore.log.leader_epoch import LeaderEpochCache
from logcore.log.checkpoint import LeaderEpochCheckpoint
from logcore.log.producer_state import ProducerBatch, ProducerStateManager
from logcore.log.file_slice import FileSlice
from logcore.log.remote_view import RemoteLogView
from logcore.log.segment_flusher import PendingFlush, segment_flusher, sync_all
from logcore.log.retention import RetentionResult, SegmentInfo, deletable_segments
from logcore.log.segment import (INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX,
                                 TXN_INDEX_SUFFIX, LogSegment, _SegmentExists, parse_segment_name,
                                 segment_name)

logger = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN = ".seglog-clean-shutdown"
KAFKA_CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
ISOLATION_LEVELS = ("read_committed", "read_uncommitted", "log_end")
TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")
_READ_ATTEMPTS = 4          # a reader retries a read that met a segment the cleaner replaced
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

_COMPRESSION_BY_NAME = {"uncompressed": Compression.NONE, "none": Compression.NONE,
                        "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                        "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


_DELTAS = np.arange(1 << 16, dtype=np.int64)   # expected offset deltas of a produced batch
_SMALL_BATCH = 16                                 # records: checked in a Python loop


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    log_append_time: int = -1
    duplicate: bool = False


@dataclass(frozen=True)
class FetchResult:
    data: bytes | FileSlice
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list = field(default_factory=list)


@dataclass
class RecoveryReport:
    """What opening a log had to repair: one entry per segment that was cut or rebuilt."""
    truncated: list[tuple[str, int, int, str]] = field(default_factory=list)  # file, position, bytes, why
    rebuilt_indexes: list[str] = field(default_factory=list)
    deleted_segments: list[str] = field(default_factory=list)


class _WouldBlock(Exception):
    """append_and_commit_nowait reached a batch that would roll a segment or fsync."""



def _tiles(fields: np.ndarray | None, size: int) -> bool:
    """Whether `batch_fields` rows describe batches that exactly tile a file of `size` bytes."""
    if fields is None or fields.ndim != 2 or fields.shape[1] < 9 or len(fields) == 0:
        return False
    positions, sizes = fields[:, 0], fields[:, 1]
    return bool(positions[0] == 0 and (sizes > 0).all() and (positions[1:] == positions[:-1] + sizes[:-1]).all()
                and positions[-1] + sizes[-1] == size)


def _prefetch_headers(fd: int, positions: np.ndarray) -> None:
    """Start reading the pages that hold each batch's first 16 bytes, all at once."""
    if not hasattr(os, "posix_fadvise"):
        return
    pages = np.unique(np.concatenate((positions // mmap.PAGESIZE, (positions + 15) // mmap.PAGESIZE)))
    # one call per run of consecutive pages
    breaks = np.flatnonzero(np.diff(pages) != 1) + 1
    for run in np.split(pages, breaks):
        os.posix_fadvise(fd, int(run[0]) * mmap.PAGESIZE, len(run) * mmap.PAGESIZE, os.POSIX_FADV_WILLNEED)

class Log:
    """A partition's log. Open it through `LogRoot.log(topic, partition)`."""

    def __init__(self, storage, directory: str, topic: str, partition: int, config, state_store, *,
                 fence=None, read_only: bool = False, kafka_clean: bool = False,
                 truncate_uncommitted: bool = True, remote: RemoteLogView | None = None,
                 resume: tuple[int, str] | None = None):
        self.storage = storage
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
        self.truncate_uncommitted = truncate_uncommitted
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
        if self.writer and self.read_only:
            raise ReadOnlyLogError(f"cannot open {directory} for writing: the log is read-only")
        if self.writer:
            # resume: take the epoch back if nobody took the partition since (WriterFence);
            # the load below cuts an uncommitted tail either way.
            self.leader_epoch = fence.acquire(resume=resume)
        with self._critical() if self.writer else nullcontext():
            self._load(kafka_clean)

    # ------------------------------------------------------------------ opening
    @property
    def _local_writer(self) -> bool:
        return self.writer and self.storage.is_local

    def _new_segment(self, base_offset: int, *, writable: bool, in_memory: bool = False,
                     stem: str | None = None) -> LogSegment:
        return LogSegment(self.storage, self.dir, base_offset,
                          index_interval_bytes=self.config.index_interval_bytes,
                          max_index_size=self.config.segment_index_bytes,
                          writable=writable, in_memory=in_memory, stem=stem)

    def _list_files(self) -> list[str]:
        if not self.storage.exists(self.dir):
            return []
        return self.storage.list_dir(self.dir)

    def _load(self, kafka_clean: bool) -> None:
        names = self._list_files()
        can_write = self.writer and not self.read_only
        if can_write:
            self._clean_temporary_files(names)
            names = self._list_files()
        bases = sorted({parsed[0] for parsed in map(parse_segment_name, names)
                        if parsed is not None and parsed[1] == LOG_SUFFIX})
        self._txn_bases = _txn_index_bases(names)
        clean = kafka_clean or CLEAN_SHUTDOWN in names
        state = self.state_store.load()
        if self.writer and not self.storage.is_local:
            state = self.state_store.take_over(self.leader_epoch)
        self.commit_marker = state.marker
        self.recovery_point = state.recovery_point if state.recovery_point is not None else 0
        self._checkpointed_recovery_point = self.recovery_point
        plan = self._segment_plan(names, bases, state)
        for i, (base, stem) in enumerate(plan):
            active_local = can_write and self.storage.is_local and i == len(plan) - 1
            self.segments.append(self._new_segment(base, writable=active_local, stem=stem))
        if can_write and not self.storage.is_local:
            # Also with no cleaned list yet: a first pass killed before its switch leaves objects.
            self._delete_replaced_objects(names, state.cleaned or {"end": 0, "segments": []})
        self.bases = [s.base_offset for s in self.segments]
        if not self.storage.is_local and len(self.segments) > 0:
            self._drop_unreachable_object_segments()
        self._check_indexes(can_write, skip_active=self.storage.is_local and not clean and can_write)
        if self.storage.is_local and not clean and self.segments:
            self._recover(can_write)
        if not self.segments:
            start = state.log_start_offset or 0
            if can_write:
                self._roll_to(start)
            else:
                self.log_start_offset = start
        first_base = self.segments[0].base_offset if self.segments else self.log_start_offset
        self.log_start_offset = self._start_offset(state.log_start_offset, first_base)
        # Retention moves the log start offset before it removes segments: a crash in between
        # leaves segments wholly below it, which go now (a reader just ignores them).
        self._drop_segments_below_start(delete_files=can_write)
        leo = self.log_end_offset
        # As Kafka: nothing above the LEO can be flushed (a recovery cut it, or a power cut lost it).
        self.recovery_point = min(self.recovery_point, leo)
        if not self.read_only:
            self.epoch_cache.truncate_from_end(leo)
        hw = state.high_watermark
        if hw is None:
            # No committed HW: nothing is visible (a Kafka copy without a checkpoint entry, or
            # a partition that was never committed).
            hw = self.log_start_offset
            if self.read_only and self.segments and leo > self.log_start_offset:
                logger.warning("no high watermark for %s-%d in the checkpoint: nothing is readable",
                               self.topic, self.partition)
        self.high_watermark = min(max(hw, self.log_start_offset), leo)
        if self._local_writer and state.high_watermark is not None and state.high_watermark > leo:
            # Committed data that a power cut took (it was not fsynced): the stored HW comes
            # down to the LEO now, or offsets appended from here would count as committed.
            logger.warning("%s-%d: the committed high watermark %d is above the log end %d",
                           self.topic, self.partition, state.high_watermark, leo)
            self.state_store.commit(high_watermark=leo, log_start_offset=self.log_start_offset,
                                    first_segment_base=self.segments[0].base_offset if self.segments else leo,
                                    epoch=self.leader_epoch, recovery_point=self.recovery_point)
        if not self.writer:
            self._rebuild_producer_state()
        if self.writer:
            if self.truncate_uncommitted and leo > self.high_watermark:
                logger.warning("%s-%d: dropping %d uncommitted offsets above the high watermark %d",
                               self.topic, self.partition, leo - self.high_watermark, self.high_watermark)
                self._truncate_locked(self.high_watermark)
            self._rebuild_producer_state()
            if not self.storage.is_local:
                # The published segments are immutable: new data goes into a fresh in-memory one.
                self._roll_to(self.log_end_offset)
            self.epoch_cache.assign(self.leader_epoch, self.log_end_offset)
            if self.storage.is_local:
                self.storage.delete(self.storage.join(self.dir, CLEAN_SHUTDOWN), missing_ok=True)

    def _clean_temporary_files(self, names: list[str]) -> None:
        """Kafka's load steps 1-2 for what a crash left.

        Object stores: a retention deletion marker (`<base>.log.deleted`) takes its segment's
        objects with it. Local disk: `.deleted` and `.cleaned` files go; a `.swap` set is complete
        (its swap committed) unless a `.cleaned` file at or below its base is left, in which
        case it is rolled back too. A complete set replaces every segment file whose base lies
        in the range its `.log.swap` covers, then takes its final names.
        """
        join = self.storage.join
        if not self.storage.is_local:
            for name in names:
                if name.endswith(DELETED_SUFFIX):
                    if name.endswith(LOG_SUFFIX + DELETED_SUFFIX):
                        self._delete_segment_objects(name[:20])
                    self.storage.delete(join(self.dir, name))
            return
        cleaned = [p[0] for p in map(_temp_segment_name, names) if p and p[2] == ".cleaned"]
        min_cleaned = min(cleaned) if cleaned else None
        for name in names:
            if name.endswith(DELETED_SUFFIX) or name.endswith(".cleaned"):
                self.storage.delete(join(self.dir, name))
        swaps = [n for n in names if n.endswith(".swap")]
        if min_cleaned is not None:
            for name in [n for n in swaps if int(n[:20]) >= min_cleaned]:
                self.storage.delete(join(self.dir, name))
            swaps = [n for n in swaps if int(n[:20]) < min_cleaned]
        swap_logs = [n for n in swaps if n.endswith(LOG_SUFFIX + ".swap")]
        ranges = []
        for name in swap_logs:
            base = int(name[:20])
            ranges.append((base, _next_offset_of_file(self.storage, join(self.dir, name), base)))
        if ranges:
            for name in self._list_files():
                parsed = parse_segment_name(name)
                if not parsed or parsed[1] not in (LOG_SUFFIX, ".index", ".timeindex", ".txnindex", SNAPSHOT_SUFFIX):
                    continue
                if parsed[1] != SNAPSHOT_SUFFIX and any(lo <= parsed[0] < hi for lo, hi in ranges):
                    self.storage.delete(join(self.dir, name))
        for name in swaps:
            self.storage.rename(join(self.dir, name), join(self.dir, name[: -len(".swap")]))
        names = self._list_files()
        logs = {n[:20] for n in names if n.endswith(LOG_SUFFIX) and parse_segment_name(n)}
        for name in names:
            parsed = parse_segment_name(name)
            if parsed and parsed[1] in (".index", ".timeindex", ".txnindex") and name[:20] not in logs:
                self.storage.delete(join(self.dir, name))

    # ------------------------------------------------------------------ cleaned segments
    def _segment_plan(self, names: list[str], bases: list[int], state) -> list[tuple[int, str | None]]:
        """(base, stem) of each segment. On an object store the cleaner's list in the partition
        state names the segments below its end; listed originals there were replaced."""
        cleaned = getattr(state, "cleaned", None)
        if self.storage.is_local or not cleaned:
            return [(b, None) for b in bases]
        end = int(cleaned["end"])
        plan = [(int(b), str(stem)) for b, stem in cleaned["segments"]]
        for base, stem in plan:
            if stem + ".txnindex" in names:
                self._txn_bases.add(base)
        self._txn_bases = {b for b in self._txn_bases if b >= end or any(b == p[0] for p in plan)}
        return plan + [(b, None) for b in bases if b >= end]

    def _delete_replaced_objects(self, names: list[str], cleaned: dict) -> None:
        """A writer removes what a cleaner pass left behind: originals below the cleaned end and
        cleaned objects that no list names (a pass that crashed before its switch)."""
        end = int(cleaned["end"])
        listed = {str(stem) for _b, stem in cleaned["segments"]}
        # Replaced segments stay until their file.delete.delay.ms passed (readers may hold them).
        now = _now_ms()
        pending = {str(stem) for stem, due in cleaned.get("replaced", []) if int(due) > now}
        for name in names:
            parsed = parse_segment_name(name)
            if parsed is None or parsed[1] == SNAPSHOT_SUFFIX:
                continue
            base, suffix = parsed
            stem = name.rsplit(".", 1)[0]
            if stem in pending:
                continue
            if suffix in (LOG_SUFFIX, ".index", ".timeindex", ".txnindex"):
                stale = base < end
            else:
                stale = stem not in listed and suffix.count(".") == 2
            if stale:
                self.storage.delete(self.storage.join(self.dir, name), missing_ok=True)

    def _refresh_cleaned_objects(self, names: list[str], bases: list[int], state) -> None:
        plan = self._segment_plan(names, bases, state)
        # Cleaned segments are immutable under their unique names; an original at or above the
        # HW this reader knew may have been replaced by a new writer: open it afresh.
        known = {s.stem: s for s in self.segments
                 if s.base_offset < self.high_watermark or s.stem != segment_name(s.base_offset, "")}
        self.segments = [known.get(stem or segment_name(base, "")) or self._new_segment(base, writable=False, stem=stem)
                         for base, stem in plan]
        self.bases = [s.base_offset for s in self.segments]

    def _drop_replaced_local_segments(self) -> None:
        """Local disk: forget segments whose `.log` file was replaced (a cleaned segment swapped
        in under the same name); the listing's inode numbers tell, without a stat per file."""
        inodes = {}
        try:
            with os.scandir(self.storage.local_path(self.dir)) as it:
                for entry in it:
                    if entry.name.endswith(LOG_SUFFIX) and parse_segment_name(entry.name):
                        inodes[int(entry.name[:20])] = entry.inode()
        except FileNotFoundError:
            return
        keep = []
        for seg in self.segments:
            inode = inodes.get(seg.base_offset)
            known = getattr(seg, "_inode", None) or getattr(seg.data, "inode", None)
            if known is not None and inode is not None and known != inode:
                seg = self._new_segment(seg.base_offset, writable=False)
            seg._inode = inode
            keep.append(seg)
        self.segments = keep
        self.bases = [s.base_offset for s in keep]

    def _drop_unreachable_object_segments(self) -> None:
        """Object stores: a fenced writer may have published a segment after it lost the partition.

        Such a segment starts at or above the offset where the next writer took over and carries
        the older epoch; the leader-epoch checkpoint says which epoch owns each offset.
        """
        entries = self.epoch_cache.entries
        if len(entries) < 2:
            return
        first_takeover = entries[1][1]
        keep = []
        for seg in self.segments:
            if seg.base_offset >= first_takeover and seg.stem == segment_name(seg.base_offset, ""):
                head = seg.read_bytes(0, 61)
                if len(head) == 61:
                    ple = parse_header(head).partition_leader_epoch
                    owner = self.epoch_cache.epoch_for_offset(seg.base_offset)
                    if ple >= 0 and owner is not None and ple != owner:
                        logger.warning("ignoring segment %s: written by fenced epoch %d, offset owned by %d",
                                       seg.log_path, ple, owner)
                        if self.writer:
                            seg.delete_files()
                        continue
            keep.append(seg)
        self.segments = keep
        self.bases = [s.base_offset for s in keep]

    def _check_indexes(self, can_write: bool, skip_active: bool = False) -> None:
        """Rebuild any missing or insane index of a sealed segment (in memory when read-only).

        skip_active: the last segment is about to be recovered (rebuilt) anyway; its index may be
        a crashed or live writer's preallocation, which is not worth a warning.
        """
        for i, seg in enumerate(self.segments):
            if skip_active and i == len(self.segments) - 1:
                continue
            problem = None
            if not self.storage.exists(seg.index_path):
                problem = "missing offset index"
            else:
                try:
                    seg.check_index_against_log()
                except CorruptIndexError as exc:
                    problem = str(exc)
            if problem is None:
                continue
            logger.warning("rebuilding indexes of %s: %s", seg.log_path, problem)
            self.recovery.rebuilt_indexes.append(seg.log_path)
            result = self._recover_segment(i, None, write=can_write and self.storage.is_local)
            if result.truncated_bytes:
                self._note_truncation(seg, result)

    def _recover_segment(self, i: int, on_batch, *, write: bool):
        """Recover segment i; a sealed one (opened read-only) is reopened writable for the
        rebuild and sealed again afterwards, so its indexes end up rebuilt and trimmed on disk."""
        seg = self.segments[i]
        if not write or seg.writable:
            return seg.recover(on_batch, write=write)
        seg.close()
        seg = self._new_segment(seg.base_offset, writable=True)
        result = seg.recover(on_batch, write=True)
        seg.close()
        self.segments[i] = self._new_segment(seg.base_offset, writable=False)
        return result

    def _note_truncation(self, seg: LogSegment, result) -> None:
        self.recovery.truncated.append((seg.log_path, result.valid_bytes, result.truncated_bytes,
                                        result.error or "torn tail"))
        logger.warning("%s: dropped %d bytes from position %d (%s)", seg.log_path,
                       result.truncated_bytes, result.valid_bytes, result.error or "torn tail")

    def _recover(self, can_write: bool) -> None:
        """After an unclean shutdown: validate segments from the recovery point, cut the tail."""
        start = max(0, bisect.bisect_right(self.bases, self.recovery_point) - 1)
        for i in range(start, len(self.segments)):
            seg = self.segments[i]
            if seg.log_path in self.recovery.rebuilt_indexes and i < len(self.segments) - 1:
                continue
            result = self._recover_segment(i, self._replay_epoch, write=can_write)
            if result.truncated_bytes:
                self._note_truncation(seg, result)
                later = self.segments[i + 1:]
                if later:
                    for dropped in later:
                        self.recovery.deleted_segments.append(dropped.log_path)
                        logger.warning("deleting %s after the corrupt tail of %s", dropped.log_path, seg.log_path)
                        if can_write:
                            dropped.close()
                            dropped.delete_files()
                    self.segments = self.segments[: i + 1]
                    self.bases = self.bases[: i + 1]
                    if can_write and not seg.writable and self.storage.is_local:
                        # The cut segment becomes the active one again.
                        seg.close()
                        self.segments[i] = self._new_segment(seg.base_offset, writable=True)
                        self.segments[i].recover(write=True)
                break

    def _replay_epoch(self, header: BatchHeader, data, seg) -> None:
        if header.partition_leader_epoch >= 0 and not self.read_only:
            latest = self.epoch_cache.latest_epoch
            if latest is None or header.partition_leader_epoch > latest:
                self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)

    def _rebuild_producer_state(self) -> None:
        """Reload the newest usable snapshot, then replay producer fields of later batches.

        Only batch headers are read, plus the one record of each transaction marker.
        """
        leo = self.log_end_offset
        self.producer_state.truncate_and_reload(self.log_start_offset, leo, _now_ms())
        self._replay_producer_state(self.producer_state.map_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)

    def _replay_producer_state(self, start: int) -> None:
        """Replay the producer fields of batches from `start` to the LEO (headers only)."""
        leo = self.log_end_offset
        if start >= leo:
            return
        for seg in self.segments[self._segment_index(start):]:
            for pos, header in seg.scan_headers(0):
                if header.last_offset < start or header.producer_id < 0:
                    continue
                marker = None
                if header.is_control:
                    marker = _end_marker(seg.read_bytes(pos, pos + header.size), header, seg.log_path, pos)
                self.producer_state.replay(ProducerBatch.from_header(header, marker))
        self.producer_state.update_map_end_offset(leo)

    # ------------------------------------------------------------------ offsets
    def _start_offset(self, checkpointed: int | None, first_base: int) -> int:
        """The log start offset: the checkpointed one, but never below the first local
        segment's base, unless the log has a remote tier. There the checkpoint alone says it: it
        is written before local copies go (local retention) and before remote segments go
        (total retention), so it never points below what exists; no entry means the log starts
        at its first local segment."""
        if self.remote is not None:
            return first_base if checkpointed is None else checkpointed
        return max(checkpointed or 0, first_base)

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
        with self._lock:
            if self.storage.is_local:
                self.fence.enter_critical()
                try:
                    yield
                finally:
                    self.fence.exit_critical()
            else:
                yield

    # ------------------------------------------------------------------ appending
    def _roll_to(self, base_offset: int) -> LogSegment:
        in_memory = not self.storage.is_local
        if self.segments:
            active = self.segments[-1]
            if active.writable and not active.in_memory:
                if self.writer and self.storage.is_local:
                    # As Kafka: the sealed segment is fsynced in the background, not under the
                    # log's lock; the recovery point passes it once that fsync returned.
                    pending = PendingFlush(active.data.open_fd(), active.next_offset(),
                                           self._flush_generation, active.log_path)
                    active.seal(fsync=False)
                    self._pending_flushes.append(pending)
                    segment_flusher().submit(pending, self._flushed_in_background)
                    # not close(): it would seal again with an fdatasync, here under the lock
                    active.close(sync=False)
                else:
                    active.seal()
                    active.close()
                self.segments[-1] = self._new_segment(active.base_offset, writable=False)
            if active.size() == 0 and active.base_offset == base_offset:
                return self.segments[-1]
            if active.in_memory and active.size() > 0:
                raise SegLogError("cannot roll an unpublished object-store segment")
            if active.in_memory and active.size() == 0:
                self.segments.pop()
                self.bases.pop()
        if self.storage.is_local:
            self.storage.makedirs(self.dir)
        seg = self._new_segment(base_offset, writable=True, in_memory=in_memory)
        # Its next offset and indexes are there before the segment is published: a thread that
        # reads the LEO without the lock must not compute it lazily while this writer appends,
        # or its stale result, stored after the append, hands the same offset out twice.
        seg.fill_lazy_state()
        self.segments.append(seg)
        self.bases.append(base_offset)
        if self.storage.is_local and self.writer:
            # As Kafka, a snapshot at every roll, empty or not: readers replay only what follows.
            # Not fsynced (Kafka flushes it later too): a snapshot torn by a power loss fails its
            # CRC and recovery falls back to an older one and replays from there.
            self.producer_state.write_snapshot(base_offset, durable=False)
        return seg

    def _compression(self, compression) -> Compression:
        if compression is not None:
            return Compression(compression)
        name = getattr(self.config, "compression_type", "producer")
        return _COMPRESSION_BY_NAME.get(name, Compression.NONE)

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
                if self.high_watermark < self.log_end_offset:
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

    def _validate_client_batch(self, data: bytearray, now: int) -> tuple:
        """Every check of a client-built batch; returns its header fields (BatchHeader's order)."""
        source = f"{self.topic}-{self.partition} append"
        if len(data) < HEADER_SIZE:
            raise CorruptRecordError(f"{len(data)} bytes is shorter than a batch header", file=source,
                                     position=0)
        fields = header_fields(data)
        (base_offset, batch_length, _epoch, _magic, _crc, attributes, last_offset_delta, _base_ts,
         _max_ts, producer_id, _producer_epoch, base_sequence, records_count) = fields
        size = batch_length + LOG_OVERHEAD
        if size != len(data):
            raise InvalidRecordError(
                f"an append takes exactly one whole batch: the batch declares {size} bytes"
                f" but {len(data)} were given")
        max_bytes = self._max_message_bytes
        if size > max_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_bytes}")
        if attributes & CONTROL_MASK:
            raise InvalidRecordError("clients may not append control batches")
        if records_count <= 0 or records_count != last_offset_delta + 1:
            raise InvalidRecordError(
                f"batch record count {records_count} does not match lastOffsetDelta {last_offset_delta}")
        if producer_id >= 0 and base_sequence < 0:
            raise InvalidRecordError(f"producer {producer_id} sent a batch without a sequence number")
        # Magic, CRC and every record in one C call (the rules of decode_records).
        checked = check_produced_records(data, source=source)
        if checked is None:               # compressed: decompressed and checked as columns
            self._check_record_columns(data, base_offset, records_count, now, source)
        else:
            bad, delta, null_key, min_ts, max_ts = checked
            if bad >= 0:
                raise InvalidRecordError(f"record {bad} has offset delta {delta}, expected {bad}")
            if self._compact and null_key >= 0:
                raise InvalidRecordError(
                    f"compacted topic {self.topic} requires a key on every record (record {null_key} has none)")
            if not attributes & TIMESTAMP_TYPE_MASK:
                before = self.config.message_timestamp_before_max_ms
                after = self.config.message_timestamp_after_max_ms
                if now - min_ts > before or max_ts - now > after:
                    # out of bounds: the column check names the first record outside
                    self._check_record_columns(data, base_offset, records_count, now, source)
        if attributes & TIMESTAMP_TYPE_MASK:
            raise InvalidRecordError("producers may not set LogAppendTime timestamps")
        return fields

    def _check_record_columns(self, data, base_offset: int, records_count: int, now: int,
                              source: str) -> None:
        """The record checks of _validate_client_batch on decoded columns (compressed batches,
        and the error message of a timestamp out of bounds)."""
        columns = record_columns(data, source=source)
        if columns.rows != records_count:
            raise InvalidRecordError(
                f"batch declares {records_count} records but holds {columns.rows}")
        if columns.rows <= _SMALL_BATCH:    # numpy's fixed cost exceeds the loop's
            deltas = [o - base_offset for o in columns.offsets.tolist()]
            bad = next((i for i, d in enumerate(deltas) if d != i), None)
        else:
            deltas = columns.offsets - base_offset
            expected = _DELTAS[:columns.rows] if columns.rows <= len(_DELTAS) else np.arange(columns.rows)
            bad = None if (deltas == expected).all() else int(np.argmax(deltas != expected))
        if bad is not None:
            raise InvalidRecordError(
                f"record {bad} has offset delta {int(deltas[bad])}, expected {bad}")
        if self._compact and columns.key_nulls:
            valid = np.unpackbits(np.frombuffer(columns.key_validity, dtype=np.uint8), bitorder="little")
            i = int(np.argmin(valid[:columns.rows]))
            raise InvalidRecordError(
                f"compacted topic {self.topic} requires a key on every record (record {i} has none)")
        if data[ATTRIBUTES_OFFSET + 1] & TIMESTAMP_TYPE_MASK == 0:
            before = self.config.message_timestamp_before_max_ms
            after = self.config.message_timestamp_after_max_ms
            if before < 2**63 - 1 or after < 2**63 - 1:
                ts = columns.timestamps_ms
                bad = (now - ts > before) | (ts - now > after)
                if bad.any():
                    raise InvalidRecordError(
                        f"record timestamp {int(ts[np.argmax(bad)])} is outside the allowed range around"
                        f" {now} (message.timestamp.before.max.ms / message.timestamp.after.max.ms)")

    def _append_locked(self, data: bytearray, now: int, *, validated: bool,
                       assign: bool = False) -> AppendInfo:
        if self._closed:
            raise SegLogError(f"{self.topic}-{self.partition} is closed")
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
        active.append(data, [header])
        if next_batch:
            self.producer_state.append_next_batch(header.producer_id, header.last_sequence,
                                                  header.base_offset, header.last_offset,
                                                  header.max_timestamp)
        elif analysis is not None:
            for aborted in self.producer_state.complete_append(analysis, header.next_offset):
                active.txn_index.append(aborted)
                self._txn_bases.add(active.base_offset)
        self._unflushed += header.records_count
        self._maybe_flush(now)
        log_append = now if header.timestamp_type == TimestampType.LOG_APPEND_TIME else -1
        return AppendInfo(header.base_offset, header.last_offset, header.max_timestamp,
                          header.records_count, log_append)

    def append_staged(self, data: bytes) -> tuple[int, int]:
        """Append batches this engine built earlier (e.g. staged by Spark sink tasks).

        Each batch is checked (size, magic, CRC), gets its offsets from the LEO and this writer's
        epoch (patched in place: the CRC does not cover them); the records are not re-validated.
        Runs of batches go to a segment in one write, with Kafka's roll rules applied per batch.
        Returns (first offset, last offset), or (-1, -1) for no batch.
        """
        source = f"{self.topic}-{self.partition} staged"
        buf = bytearray(data)
        batches = list(iter_batches(buf, source=source, allow_partial_tail=False))
        if not batches:
            return -1, -1
        if any(h.producer_id >= 0 or h.is_control for _, h in batches):
            # Producer state must see these one by one: the general path.
            first = last = -1
            with self._critical():
                for pos, header in batches:
                    info = self._append_locked(bytearray(buf[pos:pos + header.size]), _now_ms(),
                                               validated=True, assign=True)
                    first = info.first_offset if first < 0 else first
                    last = info.last_offset
            return first, last
        now = _now_ms()
        log_append = self._log_append_time()
        with self._critical():
            if self._closed:
                raise SegLogError(f"{self.topic}-{self.partition} is closed")
            first = next_offset = self.log_end_offset
            run_start, run_end, run_headers = batches[0][0], batches[0][0], []
            run_first_ts = None
            for pos, header in batches:
                if header.size > self._segment_bytes:
                    raise RecordTooLargeError(
                        f"batch of {header.size} bytes exceeds segment.bytes={self._segment_bytes}")
                set_base_offset(buf, next_offset, pos)
                set_partition_leader_epoch(buf, self.leader_epoch, pos)
                if log_append:
                    set_log_append_time(buf, now, pos)
                header = parse_header(buf, pos)
                active = self.segments[-1]
                if active.should_roll(header.size, header.max_timestamp, header.last_offset,
                                      segment_bytes=self._segment_bytes, segment_ms=self._segment_ms,
                                      now_ms=now, pending_bytes=run_end - run_start,
                                      pending_batches=len(run_headers),
                                      pending_first_timestamp=run_first_ts):
                    if run_headers:
                        active.append(memoryview(buf)[run_start:run_end], run_headers)
                    if active.in_memory:
                        self._commit_locked()
                    else:
                        self._roll_to(next_offset)
                    run_start, run_end, run_headers, run_first_ts = pos, pos, [], None
                if pos != run_end:          # batches are contiguous in the staged bytes
                    raise SegLogError(f"{source}: batch at {pos} does not follow {run_end}")
                if run_first_ts is None:
                    run_first_ts = header.max_timestamp
                run_headers.append(header)
                run_end = pos + header.size
                next_offset = header.next_offset
            if run_headers:
                self.segments[-1].append(memoryview(buf)[run_start:run_end], run_headers)
            self._unflushed += sum(h.records_count for _, h in batches)
            self._maybe_flush(now)
        return first, next_offset - 1

    def adopt_staged(self, path: str, *, verify_crc: bool = True,
                     fields: np.ndarray | None = None) -> tuple[int, int] | None:
        """Local disk: make a staged file of batches a segment of this log without copying it.

        `path` (relative to the storage root, on the log's file system) holds contiguous batches
        this engine built, as `append_staged` takes them. The file gets a second name as a new
        segment at the LEO (a hard link), its batches get their offsets and this writer's epoch
        in place (outside the CRC), its indexes are built, it is fsynced and sealed, and a new
        active segment follows it. The staged name stays valid, so a commit retried after a
        crash can adopt it again (a writer that reopens the log drops the uncommitted segment).
        Returns (first offset, last offset), or None when the file cannot be adopted and must go
        through `append_staged`: not local disk, a LogAppendTime topic, producer ids or control
        batches, more than segment.bytes, or more batches than the indexes hold.

        Every batch's length and magic are checked, and with `verify_crc` its CRC too. A caller
        that wrote the file itself in this process's lifetime (nothing but a crash of the machine
        could have torn it since) may skip the CRCs: then only the headers are read, which for a
        file written past the page cache saves reading it all back from the disk. Such a caller
        may also pass the file's `batch_fields` rows, which it kept while writing: then nothing
        is scanned, and the header pages to patch are fetched from the disk all at once
        (fadvise WILLNEED) instead of one fault at a time. Rows that do not tile the file
        exactly are ignored and the headers scanned.
        """
        adopted = self.adopt_staged_many([(path, fields)], verify_crc=verify_crc)
        return adopted[0] if adopted else None

    def adopt_staged_many(self, parts: list[tuple[str, np.ndarray | None]], *,
                          verify_crc: bool = True, headers_cached: bool = False) -> list[tuple[int, int]]:
        """`adopt_staged` for several staged files in order, as one step: one folder fsync for
        all their new names and one new active segment after the last (not one per file).

        `parts` are (path, batch_fields rows or None). `headers_cached`: the pages holding the
        batch headers are likely in the page cache already (the writer left them there), so they
        are not read ahead before being patched. Returns the (first, last offset) of each
        file adopted: the leading ones, up to the first that cannot be adopted (the caller
        appends that one with `append_staged` and goes on with the rest).
        """
        if not parts or not self.storage.is_local or self._log_append_time():
            return []
        adopted: list[tuple[int, int]] = []
        written: list[LogSegment] = []       # adopted, sealed, not yet synced nor closed
        with self._critical():
            if self._closed:
                raise SegLogError(f"{self.topic}-{self.partition} is closed")
            try:
                for path, fields in parts:
                    got = self._adopt_file(path, verify_crc, fields, written, headers_cached)
                    if got is None:
                        break
                    adopted.append(got)
            finally:
                if adopted:
                    # Everything adopted is durable before anyone (commit, close) can record a
                    # recovery point or HW past it, also when a later file failed: each .log
                    # (the staged bytes, written past the page cache without a sync, and the
                    # patched headers) and index, all at once, then the new names.
                    try:
                        sync_all([call for seg in written for call in seg.flush_calls()])
                    finally:
                        for seg in written:
                            seg.close()     # nothing left to sync
                    self.storage.sync_dir(self.dir)
                    # One roll for the lot: segments adopted back to back need no active
                    # segment (nor producer snapshot: they hold no producer ids) between them.
                    self._roll_to(adopted[-1][1] + 1)
        return adopted

    def _adopt_file(self, path: str, verify_crc: bool, fields: np.ndarray | None,
                    written: list, headers_cached: bool = False) -> tuple[int, int] | None:
        source = f"{self.topic}-{self.partition} staged {path}"
        with open(self.storage.local_path(path), "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0 or size > self._segment_bytes:
                return None
            if verify_crc or not _tiles(fields, size):
                fields = None
            elif not headers_cached:
                _prefetch_headers(f.fileno(), fields[:, 0])
            with mmap.mmap(f.fileno(), size) as mm:
                if not verify_crc and hasattr(mm, "madvise"):
                    mm.madvise(mmap.MADV_RANDOM)     # only the headers' pages are read
                if fields is None:
                    fields = batch_fields(mm, source=source, verify_crc=verify_crc)
                return self._adopt_mapped(path, mm, fields, written)

    def _adopt_mapped(self, path: str, mm, fields: np.ndarray, written: list) -> tuple[int, int] | None:
        """Under the critical section: patch, link and index one staged file as the segment
        at the LEO; its writable segment goes to `written`. The caller syncs and closes those,
        fsyncs the folder and rolls (`adopt_staged_many`)."""
        positions, sizes, _bases, deltas, max_ts, producer_ids, attributes = fields.T[:7]
        counts = deltas + 1
        max_entries = self.config.segment_index_bytes // 12      # the time index's, the smaller
        if (len(fields) == 0 or len(fields) >= max_entries - 1 or (producer_ids >= 0).any()
                or (attributes & CONTROL_MASK).any() or int(counts.sum()) - 1 > INT32_MAX):
            return None
        first = self.log_end_offset
        bases = first + np.concatenate(([0], np.cumsum(counts)[:-1]))
        last_offsets = bases + deltas
        # baseOffset, batchLength (unchanged) and partitionLeaderEpoch: the first 16 bytes
        # of each header, outside the CRC.
        head = np.empty(len(fields), dtype=[("base", ">i8"), ("length", ">i4"), ("epoch", ">i4")])
        head["base"] = bases
        head["length"] = sizes - 12
        head["epoch"] = self.leader_epoch
        view = np.frombuffer(mm, dtype=np.uint8)
        view[positions[:, None] + np.arange(16)] = head.view(np.uint8).reshape(-1, 16)
        del view
        active = self.segments[-1]
        if active.size() == 0 and active.base_offset == first and not active.in_memory:
            # The empty active segment has the name the adopted file takes. Its files are
            # deleted right here: not synced first (nothing could rely on them).
            active.close(sync=False)
            active.delete_files()
            self.segments.pop()
            self.bases.pop()
        elif active.writable:
            active.seal()
            active.close()
            self.segments[-1] = self._new_segment(active.base_offset, writable=False)
        seg = self._new_segment(first, writable=False)
        self.storage.link(path, seg.log_path, durable=False)     # folder fsync: adopt_staged_many
        seg = self._new_segment(first, writable=True)
        seg.index_existing(positions, sizes, last_offsets, max_ts)
        seg.seal(fsync=False)
        written.append(seg)
        self.segments.append(self._new_segment(first, writable=False))
        self.bases.append(first)
        return first, int(last_offsets[-1])

    def append_control(self, control_type: ControlType, *, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int = 0) -> AppendInfo:
        """Write a transaction marker (COMMIT/ABORT) for a producer's open transaction."""
        from logcore.records.batch import build_control_batch

        with self._critical():
            batch = build_control_batch(control_type, producer_id=producer_id, producer_epoch=producer_epoch,
                                        coordinator_epoch=coordinator_epoch, base_offset=self.log_end_offset,
                                        timestamp_ms=_now_ms(), partition_leader_epoch=self.leader_epoch)
            return self._append_locked(bytearray(batch), _now_ms(), validated=True)

    def _maybe_flush(self, now: int) -> None:
        if self._flush_due(0, now):
            self._flush_locked()

    def _flushed_in_background(self, pending: PendingFlush) -> None:
        """The flusher thread synced `pending`: move the recovery point (under the lock)."""
        with self._lock:
            if not self._closed:
                self._advance_past_synced()

    def _advance_past_synced(self) -> None:
        """Move the recovery point past the synced head of the pending flushes (roll order: a
        segment counts only once every older one is on disk too)."""
        while self._pending_flushes and self._pending_flushes[0].synced:
            pending = self._pending_flushes.pop(0)
            if pending.generation == self._flush_generation:
                self.recovery_point = max(self.recovery_point, pending.end_offset)
            pending.close()

    def _sync_pending_flushes(self) -> None:
        """fsync every rolled segment the flusher has not synced yet, here and now."""
        for pending in self._pending_flushes:
            pending.sync()
        self._advance_past_synced()

    def _flush_locked(self) -> None:
        if self.storage.is_local:
            self._sync_pending_flushes()
            for seg in self.segments:
                if seg.writable:
                    seg.flush()
            self.recovery_point = self.log_end_offset
        self._unflushed = 0
        self._last_flush_ms = _now_ms()

    def flush(self) -> None:
        """fsync appended data (local disk); on object stores data is durable once committed."""
        with self._critical():
            self._flush_locked()
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
        """
        if marker is not None and not durable:
            raise ValueError("a commit with a marker must be durable (durable=True)")
        with self._critical():
            self._commit_locked(marker, durable=durable)

    def _commit_locked(self, marker: dict | None = None, *, durable: bool = True) -> None:
        if self.storage.is_local:
            if durable:
                self._flush_locked()
            # The recovery point moved (flush policy, roll): record it durably, as Kafka's
            # recovery-point checkpoint is.
            durable = durable or self.recovery_point != self._checkpointed_recovery_point
        else:
            self.fence.check()
            active = self.segments[-1]
            if active.in_memory and active.size() > 0:
                self._publish(active)
                self._roll_to(self.log_end_offset)
            self.epoch_cache.flush()
        leo = self.log_end_offset
        first_base = self.segments[0].base_offset if self.segments else leo
        self.state_store.commit(high_watermark=leo, log_start_offset=self.log_start_offset,
                                first_segment_base=first_base, epoch=self.leader_epoch,
                                recovery_point=self.recovery_point if self.storage.is_local else None,
                                marker=marker, durable=durable)
        self._checkpointed_recovery_point = self.recovery_point
        self._state_unsynced = not durable
        self.high_watermark = leo
        if marker is not None:
            self.commit_marker = marker
        self.producer_state.on_high_watermark_updated(leo)

    def _publish(self, seg: LogSegment) -> None:
        try:
            seg.publish()
        except _SegmentExists:
            # Either we are fenced, or a fenced writer left an uncommitted segment at this base.
            self.fence.check()
            head = self.storage.read(seg.log_path, 0, 61)
            if len(head) == 61 and parse_header(head).partition_leader_epoch < self.leader_epoch:
                logger.warning("replacing %s left by a fenced writer", seg.log_path)
                # Its index objects go first: a reader must never pair them with our `.log`.
                for path in (seg.index_path, seg.time_index_path, seg.txn_index_path, seg.log_path):
                    self.storage.delete(path)
                seg.in_memory = True
                seg.writable = True
                seg.publish()
            else:
                raise FencedWriterError(f"segment {seg.log_path} was published by another writer")

    # ------------------------------------------------------------------ reading
    def refresh(self) -> None:
        """Readers: pick up new segments and the latest committed offsets (another process writes)."""
        if self.writer:
            return
        for attempt in range(_READ_ATTEMPTS):
            try:
                return self._refresh_once()
            except ResourceNotFoundError:
                # A segment file went away between the listing and the scan (a cleaner swap or
                # retention): list again.
                if attempt == _READ_ATTEMPTS - 1:
                    raise
                time.sleep(0.01 * attempt)

    def _refresh_once(self) -> None:
        with self._lock:
            state = self.state_store.load()
            names = self._list_files()
            bases = sorted({p[0] for p in map(parse_segment_name, names) if p and p[1] == LOG_SUFFIX})
            self._txn_bases = _txn_index_bases(names)
            if self.storage.is_local:
                self._drop_replaced_local_segments()
            if not self.storage.is_local and (
                    state.cleaned or any(s.stem != segment_name(s.base_offset, "") for s in self.segments)):
                self._refresh_cleaned_objects(names, bases, state)
            else:
                if not self.storage.is_local:
                    # An object segment at or above the HW this reader knew may since have been
                    # replaced (a new writer replacing a fenced writer's leftover): open those
                    # afresh. Segments below the HW are final.
                    self.segments = [s for s in self.segments if s.base_offset < self.high_watermark]
                    self.bases = [s.base_offset for s in self.segments]
                known = set(self.bases)
                gone = [s for s in self.segments if s.base_offset not in set(bases)]
                if gone:
                    self.segments = [s for s in self.segments if s.base_offset in set(bases)]
                for base in bases:
                    if base not in known:
                        self.segments.append(self._new_segment(base, writable=False))
            self.segments.sort(key=lambda s: s.base_offset)
            self.bases = [s.base_offset for s in self.segments]
            for seg in self.segments[-2:]:
                seg._next_offset = None
            if not self.storage.is_local and self.segments:
                self._drop_unreachable_object_segments()
            first_base = self.segments[0].base_offset if self.segments else 0
            if self.remote is not None and (state.log_start_offset != self._seen_start_state
                                            or first_base != self._seen_first_base):
                # Local copies went (local retention) or remote segments expired (the log start
                # offset moved): the remote segments this reader knows may be stale.
                self.remote.refresh()
            self._seen_start_state, self._seen_first_base = state.log_start_offset, first_base
            self.log_start_offset = self._start_offset(state.log_start_offset, first_base)
            self._drop_segments_below_start(delete_files=False)
            hw = state.high_watermark if state.high_watermark is not None else self.log_start_offset
            self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)
            self._replay_producer_state(self.producer_state.map_end_offset)
            self.producer_state.on_high_watermark_updated(self.high_watermark)

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    def read(self, offset: int, max_bytes: int = 1 << 20, *, isolation: str = "read_committed",
             min_one_batch: bool = True, view: bool = False,
             buffer: bytearray | None = None, zero_copy: bool = False) -> FetchResult:
        """Whole batches from the one holding `offset`, none at or above the isolation bound.

        `view=True` gives the data as a memoryview over the bytes read (no copy when the read
        window is cut at a batch boundary), for callers that only decode it; with `buffer`, a
        local segment is read into it (a reader reusing one buffer allocates nothing per read)
        and the data is valid until the buffer's next use. With `zero_copy`, batches in a local
        segment file come as a FileSlice (an open range of the file, for sendfile; the caller
        closes it) and only other storage (remote tier, object store) as bytes.

        A reader in another process than the writer may find a segment it listed replaced (the
        cleaner swapped it) or gone (retention deleted it): it refreshes its view of the
        segments and the log start offset and reads again; an offset now below the log start
        offset is out of range.
        """
        for attempt in range(_READ_ATTEMPTS):
            try:
                result = self._read(offset, max_bytes, isolation, min_one_batch, view, buffer, zero_copy)
                if result.data or self.writer or attempt > 0 or offset >= self._bound(isolation):
                    return result
                # Nothing where something must be: the segment's files may be gone.
            except (ResourceNotFoundError, FileNotFoundError, CorruptRecordError, CorruptIndexError):
                if self.writer or attempt == _READ_ATTEMPTS - 1:
                    raise
                time.sleep(0.01 * attempt)
            self.refresh()
            self._check_in_range(offset)
        raise SegLogError(f"{self.topic}-{self.partition}: offset {offset} could not be read")

    def _check_in_range(self, offset: int) -> None:
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}"
                f" (log start {self.log_start_offset}, log end {leo})",
                topic=self.topic, partition=self.partition, offset=offset,
                log_start_offset=self.log_start_offset, log_end_offset=leo)

    def _read(self, offset: int, max_bytes: int, isolation: str, min_one_batch: bool,
              view: bool = False, buffer: bytearray | None = None,
              zero_copy: bool = False) -> FetchResult:
        with self._lock:
            bound = self._bound(isolation)
            self._check_in_range(offset)
            result = b""
            from_remote = False
            if offset < bound:
                position = offset
                if self.remote is not None and offset < self.local_log_start_offset:
                    result = self.remote.read(offset, max_bytes, bound, min_one_batch)
                    from_remote = bool(result)
                    if not from_remote:
                        position = self.local_log_start_offset
                i = self._segment_index(position)
                while not from_remote and i < len(self.segments):
                    seg = self.segments[i]
                    if seg.base_offset >= bound:
                        break
                    if zero_copy and seg.is_local_file:
                        result = _slice(seg, position, max_bytes, bound, min_one_batch)
                    else:
                        result = seg.read(position, max_bytes, bound, min_one_batch, view=view, buffer=buffer)
                    if result:
                        break
                    if not self.writer and i + 1 < len(self.segments) and seg.size() == 0 \
                            and (seg.storage is None or not seg.storage.exists(seg.log_path)):
                        # An empty sealed segment whose file is gone: retention deleted it under
                        # us. (Kafka's cleaner leaves empty sealed segments: a segment whose
                        # records were all compacted away keeps its file; it is skipped.)
                        raise ResourceNotFoundError(f"segment {seg.log_path} is gone")
                    i += 1
                    if i < len(self.segments):
                        position = max(position, self.segments[i].base_offset)
            aborted = []
            # Aborted transactions can only come from the remote tier or a local .txnindex:
            # without either, the fetched batches are not walked again here.
            if isolation == "read_committed" and result and (from_remote or self._txn_bases):
                upper = _next_offset_after(result)
                complete = False
                if from_remote:
                    aborted, complete = self.remote.collect_aborted(offset, upper)
                if self._txn_bases and not complete:    # else no aborted transaction is local
                    aborted = aborted + self._collect_aborted(offset, upper)
            return FetchResult(result, self.high_watermark, self.last_stable_offset,
                               self.log_start_offset, aborted)

    def _collect_aborted(self, fetch_offset: int, upper_bound: int) -> list:
        """Aborted transactions overlapping [fetch_offset, upper_bound), as Kafka collects them.

        An entry sits in the segment of its marker, which may come after the fetched data, so the
        search goes on through later segments until an entry's LSO reaches the bound; only
        segments that have a transaction index are visited.
        """
        found = []
        if not self._txn_bases:
            return found
        start = self.bases[self._segment_index(fetch_offset)] if self.bases else 0
        for base in sorted(b for b in self._txn_bases if b >= start):
            i = bisect.bisect_left(self.bases, base)
            if i == len(self.bases) or self.bases[i] != base:
                continue
            seg = self.segments[i]
            result = seg.txn_index.collect_aborted(fetch_offset, upper_bound)
            found.extend(result.aborted)
            if result.is_complete:
                break
        return found

    def read_records(self, offset: int, *, max_records: int | None = None,
                     isolation: str = "read_committed") -> Iterator[Record]:
        """Data records from `offset` on (control records and aborted data skipped)."""
        for _, record in self.read_records_with_timestamp_type(offset, max_records=max_records, isolation=isolation):
            yield record

    def read_records_with_timestamp_type(self, offset: int, *, max_records: int | None = None,
                                         isolation: str = "read_committed") -> Iterator[tuple[TimestampType, Record]]:
        """As read_records, each record with its batch's timestamp type (what Kafka's consumers
        report: a batch the broker stamped with LogAppendTime says so, whatever the topic config)."""
        emitted = 0
        position = max(offset, self.log_start_offset)
        while max_records is None or emitted < max_records:
            fetch = self.read(position, 1 << 20, isolation=isolation)
            if not fetch.data:
                return
            aborted = {(a.producer_id, a.first_offset, a.last_offset) for a in fetch.aborted}
            next_position = position
            for pos, header in iter_batches(fetch.data, source=f"{self.topic}-{self.partition}"):
                next_position = header.next_offset
                if header.is_control or header.last_offset < position:
                    continue
                if header.is_transactional and any(
                        pid == header.producer_id and first <= header.base_offset <= last
                        for pid, first, last in aborted):
                    continue
                timestamp_type = header.timestamp_type
                for record in decode_records(fetch.data, pos, header, source=f"{self.topic}-{self.partition}"):
                    if record.offset < position:
                        continue
                    yield timestamp_type, record
                    emitted += 1
                    if max_records is not None and emitted >= max_records:
                        return
            if next_position <= position:
                return
            position = next_position

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= timestamp_ms, at or above
        the log start offset and below the HW (Kafka's ListOffsets by timestamp).

        With a remote tier, the remote segments below the local log start are searched first
        (KIP-405: by their metadata's max timestamp, then the segment's remote time and offset
        indexes); the local segments answer when they hold nothing.
        """
        with self._lock:
            found = None
            local_start = self.local_log_start_offset
            if self.remote is not None and self.log_start_offset < local_start:
                found = self.remote.find_offset_by_timestamp(timestamp_ms, self.log_start_offset,
                                                             local_start)
            if found is None:
                found = self._local_offset_for_timestamp(timestamp_ms)
            if found is not None and found[0] < self.high_watermark:
                return found
            return None

    def _local_offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """The local segments' answer. The first segment whose largest timestamp reaches the
        target is found by binary search over the running maximum of the segments' largest
        timestamps (cached for sealed segments), then the segment's time and offset indexes
        narrow the scan."""
        if not self.segments:
            return None
        sealed = self._sealed_running_max_timestamps()
        i = bisect.bisect_left(sealed, timestamp_ms)
        if i == len(sealed) and self.segments[-1].largest_timestamp < timestamp_ms:
            return None
        found = self.segments[i].find_offset_by_timestamp(timestamp_ms, self.log_start_offset)
        if found is None:
            # The running maximum came from an earlier segment: scan on from here.
            for seg in self.segments[i + 1:]:
                found = seg.find_offset_by_timestamp(timestamp_ms, self.log_start_offset)
                if found is not None:
                    break
        return found

    def _sealed_running_max_timestamps(self) -> list[int]:
        """Running maximum of the largest timestamps of every segment but the active one."""
        sealed = len(self.segments) - 1
        key = (sealed, self.bases[0] if self.bases else -1)
        if getattr(self, "_ts_cache_key", None) != key:
            running, current = [], -1
            for seg in self.segments[:sealed]:
                current = max(current, seg.largest_timestamp)
                running.append(current)
            self._ts_cache, self._ts_cache_key = running, key
        return self._ts_cache

    # ------------------------------------------------------------------ retention
    def apply_retention(self, now_ms: int | None = None) -> RetentionResult:
        """Delete the oldest whole segments that breach the log start offset, retention.bytes or
        retention.ms (the last two only with `delete` in cleanup.policy), never anything at or
        above the high watermark. When every segment goes, a new empty active segment is rolled
        first, as Kafka does. The log start offset and its checkpoint move before any file goes;
        then the files are renamed `.deleted` (local disk) or marked deleted (object stores) and
        removed after file.delete.delay.ms (`delete_expired_files`)."""
        now = _now_ms() if now_ms is None else now_ms
        with self._critical():
            if self.tiered:
                return self._apply_local_retention_locked(now)
            decision = deletable_segments(
                self._segment_infos(), high_watermark=self.high_watermark,
                log_start_offset=self.log_start_offset, now_ms=now,
                retention_ms=self.config.retention_ms, retention_bytes=self.config.retention_bytes,
                delete_policy=self.config.delete)
            if decision.count == 0:
                return RetentionResult(0, 0, self.log_start_offset)
            if decision.count == len(self.segments):
                self._roll_to(self.log_end_offset)
            return self._delete_oldest_locked(decision.count, self.log_start_offset, now,
                                              decision.reasons)

    def _apply_local_retention_locked(self, now: int) -> RetentionResult:
        """Tiered storage (Kafka's local retention): delete local copies of segments already in
        the remote tier that breach local.retention.ms / local.retention.bytes (-2: retention.*);
        the log start offset stays where the remote segments start. Total retention is the
        remote tier's (logcore.tiered.remote_log_manager), which moves the log start offset."""
        self.remote.refresh()
        highest = self.remote.end_offset()
        copied_end = highest + 1 if highest is not None else 0
        # A segment may go only when all of it is in the remote tier, or below the log start offset.
        bound = min(self.high_watermark, max(copied_end, self.log_start_offset))
        decision = deletable_segments(
            self._segment_infos(), high_watermark=bound, log_start_offset=self.log_start_offset,
            now_ms=now, retention_ms=self.config.effective_local_retention_ms,
            retention_bytes=self.config.effective_local_retention_bytes, delete_policy=True)
        if decision.count == 0:
            return RetentionResult(0, 0, self.log_start_offset)
        reasons = tuple(f"local {r}" if r != "log start offset" else r for r in decision.reasons)
        return self._delete_oldest_locked(decision.count, self.log_start_offset, now, reasons,
                                          move_start=False)

    def move_log_start_offset(self, offset: int, reason: str = "log start offset") -> RetentionResult:
        """Move the log start offset up to `offset` (at most the HW) and delete the local
        segments wholly below it, whatever the cleanup policy: the remote tier's total retention
        expiring remote segments. A lower offset than the current one changes nothing."""
        now = _now_ms()
        with self._critical():
            target = min(offset, self.high_watermark)
            if target <= self.log_start_offset:
                return RetentionResult(0, 0, self.log_start_offset)
            count = 0
            while (count + 1 < len(self.segments)
                   and self.segments[count + 1].base_offset <= target):
                count += 1
            return self._delete_oldest_locked(count, target, now, (reason,) * count)

    def delete_records_before(self, offset: int) -> RetentionResult:
        """Kafka's DeleteRecords: move the log start offset up to `offset` (-1: the high
        watermark), at most the high watermark, and delete the segments wholly below it.

        PolicyViolationError unless cleanup.policy contains `delete`; OffsetOutOfRangeError for an
        offset below 0 (other than -1) or above the high watermark. A lower offset than the
        current log start offset changes nothing."""
        if not self.config.delete:
            raise PolicyViolationError(
                f"cannot delete records of {self.topic}-{self.partition}: its cleanup.policy is"
                f" {','.join(self.config.cleanup_policy)}, and deleting records needs `delete`")
        now = _now_ms()
        with self._critical():
            target = self.high_watermark if offset == -1 else offset
            if target < 0 or target > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.topic}-{self.partition} before offset {offset}:"
                    f" it must be between 0 and the high watermark {self.high_watermark} (or -1)",
                    topic=self.topic, partition=self.partition, offset=offset,
                    log_start_offset=self.log_start_offset, log_end_offset=self.log_end_offset)
            if target <= self.log_start_offset:
                return RetentionResult(0, 0, self.log_start_offset)
            count = 0
            while (count + 1 < len(self.segments)
                   and self.segments[count + 1].base_offset <= target):
                count += 1
            return self._delete_oldest_locked(count, target, now, ("delete records",) * count)

    def _segment_infos(self) -> list[SegmentInfo]:
        infos = []
        for i, seg in enumerate(self.segments):
            ts = seg.largest_timestamp
            if ts < 0:
                ts = self._segment_mtime_ms(seg)
            last = i == len(self.segments) - 1
            following = seg.next_offset() if last else self.segments[i + 1].base_offset
            infos.append(SegmentInfo(seg.base_offset, following, seg.size(), ts))
        return infos

    def _segment_mtime_ms(self, seg: LogSegment) -> int:
        """Kafka's fallback for a segment without timestamps: the file's modification time.
        Object stores have none to offer here: such a segment never breaches retention.ms."""
        if self.storage.is_local and not seg.in_memory:
            try:
                return int(os.stat(self.storage.local_path(seg.log_path)).st_mtime * 1000)
            except FileNotFoundError:
                pass
        return 2**62

    def _delete_oldest_locked(self, count: int, start_offset: int, now: int,
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
        self.segments = self.segments[count:]
        self.bases = [s.base_offset for s in self.segments]
        self._txn_bases -= {s.base_offset for s in doomed}
        if not self.read_only:
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            # Snapshots below the first local segment are no use locally (a remote segment
            # carries its own); the one at the first local base is where replay starts.
            self.producer_state.delete_snapshots_before(self.local_log_start_offset)
        self.producer_state.on_log_start_offset_incremented(self.log_start_offset)
        deleted_bytes = 0
        for seg in doomed:
            deleted_bytes += seg.size()
            seg.close()
            self._retire_segment_files(seg.base_offset, now)
        if doomed:
            logger.info("%s-%d: deleted %d segments (%d bytes) below offset %d (%s)", self.topic,
                        self.partition, len(doomed), deleted_bytes, self.log_start_offset,
                        ", ".join(sorted(set(reasons))))
        if self.config.file_delete_delay_ms == 0:
            for seg in doomed:
                self._remove_retired_files(seg.base_offset)
        return RetentionResult(len(doomed), deleted_bytes, self.log_start_offset,
                               tuple(s.base_offset for s in doomed), reasons)

    def _retire_segment_files(self, base: int, now: int) -> None:
        """Local disk: rename the segment's files `*.deleted` (an open reader keeps its view).
        Object stores have no rename: a `<base>.log.deleted` marker records when it went."""
        if self.storage.is_local:
            for suffix in SEGMENT_SUFFIXES:
                path = self.storage.join(self.dir, segment_name(base, suffix))
                try:
                    self.storage.rename(path, path + DELETED_SUFFIX)
                except ResourceNotFoundError:
                    pass        # an index that was never written
        else:
            marker = self.storage.join(self.dir, segment_name(base, LOG_SUFFIX + DELETED_SUFFIX))
            self.storage.write_atomic(marker, json.dumps({"deleted_ms": now}).encode())

    def _remove_retired_files(self, base: int) -> None:
        if self.storage.is_local:
            for suffix in SEGMENT_SUFFIXES:
                self.storage.delete(self.storage.join(
                    self.dir, segment_name(base, suffix) + DELETED_SUFFIX), missing_ok=True)
        else:
            self._delete_segment_objects(segment_name(base, ""))
            self.storage.delete(self.storage.join(
                self.dir, segment_name(base, LOG_SUFFIX + DELETED_SUFFIX)), missing_ok=True)

    def _delete_segment_objects(self, prefix: str) -> None:
        for suffix in SEGMENT_SUFFIXES:
            self.storage.delete(self.storage.join(self.dir, prefix + suffix), missing_ok=True)

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Remove deleted segments whose file.delete.delay.ms has passed; returns how many.

        Local disk: `*.deleted` files by their change time (set by the rename). Object stores:
        segments with a `.log.deleted` marker older than the delay, and segment objects below
        the log start offset that have no marker yet (a pass interrupted between the log start
        offset and the marker) get one now."""
        now = _now_ms() if now_ms is None else now_ms
        with self._critical():
            return self._delete_expired_locked(now)

    def _delete_expired_locked(self, now: int) -> int:
        delay = self.config.file_delete_delay_ms
        removed = 0
        names = self._list_files()
        if self.storage.is_local:
            for name in names:
                if not name.endswith(DELETED_SUFFIX) or parse_segment_name(name) is None:
                    continue
                path = self.storage.join(self.dir, name)
                try:
                    changed_ms = int(os.stat(self.storage.local_path(path)).st_ctime * 1000)
                except FileNotFoundError:
                    continue
                if changed_ms + delay <= now:
                    self.storage.delete(path)
                    removed += name.endswith(LOG_SUFFIX + DELETED_SUFFIX)
            return removed
        marked = set()
        for name in names:
            if not name.endswith(LOG_SUFFIX + DELETED_SUFFIX):
                continue
            marked.add(name[:20])
            path = self.storage.join(self.dir, name)
            try:
                deleted_ms = int(json.loads(self.storage.read(path))["deleted_ms"])
            except (ResourceNotFoundError, ValueError, KeyError, TypeError):
                deleted_ms = now    # unreadable marker: start its delay now
            if deleted_ms + delay <= now:
                self._delete_segment_objects(name[:20])
                self.storage.delete(path)
                removed += 1
        first_live = self.bases[0] if self.bases else self.log_end_offset
        for name in names:
            parsed = parse_segment_name(name)
            if (parsed and parsed[1] == LOG_SUFFIX and parsed[0] < first_live
                    and name[:20] not in marked):
                self._retire_segment_files(parsed[0], now)
                if delay == 0:
                    self._delete_segment_objects(name[:20])
                    self.storage.delete(self.storage.join(
                        self.dir, name + DELETED_SUFFIX))
                    removed += 1
        return removed

    def _drop_segments_below_start(self, *, delete_files: bool) -> None:
        """Forget the leading segments wholly below the log start offset (and, for a writer,
        remove their files): what a retention pass left when it stopped after the checkpoint."""
        count = 0
        while (count + 1 < len(self.segments)
               and self.segments[count + 1].base_offset <= self.log_start_offset):
            count += 1
        if count == 0:
            return
        doomed = self.segments[:count]
        self.segments = self.segments[count:]
        self.bases = [s.base_offset for s in self.segments]
        self._txn_bases -= {s.base_offset for s in doomed}
        for seg in doomed:
            seg.close()
            if delete_files:
                logger.warning("%s-%d: deleting %s, below the log start offset %d", self.topic,
                               self.partition, seg.log_path, self.log_start_offset)
                seg.delete_files()

    # ------------------------------------------------------------------ truncation and close
    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= `offset` (a writer dropping uncommitted or diverged data)."""
        with self._critical():
            committed = self.high_watermark
            self._truncate_locked(offset)
            if self.storage.is_local and self.high_watermark < committed:
                # The stored HW comes down too: it must never cover offsets appended later.
                first = self.segments[0].base_offset if self.segments else self.log_end_offset
                self.state_store.commit(high_watermark=self.high_watermark,
                                        log_start_offset=self.log_start_offset,
                                        first_segment_base=first, epoch=self.leader_epoch,
                                        recovery_point=self.recovery_point)

    def _truncate_locked(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
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
            if not self.storage.is_local:
                self._roll_to(offset)
            else:
                self._roll_to(offset)
        elif self.storage.is_local:
            if not last.writable:
                last.close()
                # Cut before it is published, for the same reason as in _roll_to.
                reopened = self._new_segment(last.base_offset, writable=True)
                reopened.truncate_to(offset)
                self.segments[-1] = reopened
            else:
                last.truncate_to(offset)
        else:
            # Object segments: one holding offsets from `offset` on is cut. An unpublished one
            # is cut in memory; a published one is replaced by its part below `offset` in one
            # PUT, then its indexes (deleting it first would leave committed data only in
            # memory, lost in a crash).
            data = last.read_bytes(0, last.size())
            kept = bytearray()
            for pos, header in iter_batches(data, source=last.log_path):
                if header.base_offset >= offset:
                    break
                kept += data[pos:pos + header.size]
            if len(kept) < len(data):
                seg = self._new_segment(last.base_offset, writable=True, in_memory=True, stem=last.stem)
                headers = [h for _p, h in iter_batches(bytes(kept))]
                if headers:
                    seg.append(bytes(kept), headers)
                if not last.in_memory:
                    if headers:
                        self.storage.write_atomic(last.log_path, bytes(kept))
                        seg.publish()       # finds the same bytes there, writes the indexes
                    else:
                        last.delete_files()
                self.segments[-1] = seg
            if not self.segments[-1].in_memory:
                self._roll_to(self.log_end_offset)      # appends go to a fresh in-memory segment
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
                        if self.storage.is_local:
                            self._flush_locked()
                            self.producer_state.write_snapshot(self.log_end_offset)
                            for seg in self.segments:
                                seg.close()
                            if self._state_unsynced:
                                # The last commit's HW checkpoint was not fsynced: make it
                                # durable (with the recovery point) before the marker says clean.
                                first = self.segments[0].base_offset if self.segments else self.log_end_offset
                                self.state_store.commit(
                                    high_watermark=self.high_watermark,
                                    log_start_offset=self.log_start_offset, first_segment_base=first,
                                    epoch=self.leader_epoch, recovery_point=self.log_end_offset)
                                self._state_unsynced = False
                            else:
                                self.state_store.set_recovery_point(self.log_end_offset)
                            self.storage.write_atomic(self.storage.join(self.dir, CLEAN_SHUTDOWN),
                                                      str(self.log_end_offset).encode())
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
                    seg.offset_index.close()
                    seg.time_index.close()
                    seg.data.close()
            if self.remote is not None:
                self.remote.close()
            self._closed = True

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset},"
                f" hw={self.high_watermark}, leo={self.log_end_offset}, epoch={self.leader_epoch})")


def _writable(buf) -> bool:
    return isinstance(buf, bytearray) or isinstance(buf, memoryview) and not buf.readonly and buf.contiguous


def _next_offset_of_file(storage, path: str, base: int) -> int:
    """Offset after the last whole batch of a segment file (headers read one by one)."""
    pos, size, end = 0, storage.size(path), base
    while pos + HEADER_SIZE <= size:
        header = parse_header(storage.read(path, pos, pos + HEADER_SIZE))
        if header.size < HEADER_SIZE or pos + header.size > size:
            break
        end = header.next_offset
        pos += header.size
    return end


def _temp_segment_name(name: str) -> tuple[int, str, str] | None:
    """(base, suffix, temporary suffix) of a name like 00000000000000000100.index.cleaned."""
    parsed = parse_segment_name(name)
    if parsed is None:
        return None
    for temp in TEMP_SUFFIXES:
        if parsed[1].endswith(temp):
            return parsed[0], parsed[1][: -len(temp)], temp
    return None


def _txn_index_bases(names: list[str]) -> set[int]:
    return {p[0] for p in map(parse_segment_name, names) if p and p[1] == ".txnindex"}


def _slice(seg: LogSegment, offset: int, max_bytes: int, bound: int, min_one_batch: bool) -> FileSlice | bytes:
    """What `seg.read` would return, as an open range of the segment's file (b"" for none)."""
    start, end, next_offset = seg.locate(offset, max_bytes, bound, min_one_batch)
    if end <= start:
        return b""
    try:
        fd = seg.data.open_fd()
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        # Out of descriptors (many slices in flight): copy this range instead of failing the read.
        return seg.read_bytes(start, end)
    return FileSlice(fd, start, end - start, next_offset, seg.log_path)


def _next_offset_after(data: bytes | FileSlice) -> int:
    """The offset after the last whole batch in `data` (which starts at a batch boundary)."""
    if isinstance(data, FileSlice):
        return data.next_offset
    fields = batch_fields(data, verify_crc=False, allow_partial_tail=True)
    if not len(fields):
        return -1
    return int(fields[-1, F_BASE_OFFSET] + fields[-1, F_LAST_DELTA]) + 1


def _end_marker(data, header: BatchHeader, source: str, pos: int) -> EndTransactionMarker | None:
    """The transaction marker in a control batch (None for other control record types)."""
    records = decode_records(data, pos, header, source=source)
    if not records:
        return None
    if parse_control_type(records[0].key) not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    return EndTransactionMarker.decode(records[0].key, records[0].value)
