"""Opening a partition's log (Kafka's LogLoader): listing its files, cleaning what a crash left,
recovery, and the loaded offsets (log start, recovery point, HW, LEO).

`LogLoader(context, kafka_clean).load()` computes the load on its own segment list and returns
it as one immutable `LoadedLog` (Kafka's LoadedLogOffsets, with the segments and what recovery
cut); it changes no field of the `Log`. What it reads is given explicitly as a `LoadContext`
(`Log.load_context()` builds one). The files it may change are those a crash left
(temporary files, torn tails a writer cuts, rebuilt indexes) and the leader-epoch cache of a
writer, which the log shares with it, as Kafka's loader does. The `Log` applies the value in
one place, `_apply_loaded`, then runs what a writer does once opened (`_finish_open`: the
uncommitted tail cut, the producer state, the epoch at the LEO). What differs between local
disk and an object store is asked of the segment store (segment_store.py), and the listing of
the folder is a `SegmentListing` (segment_listing.py) the log shares with its loader.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from logcore.errors import CorruptIndexError, CorruptRecordError, DamagedLogError
from logcore.records.batch import BatchHeader
from logcore.log.producer_snapshot import snapshot_offsets_in
from logcore.log.producer_state import ProducerBatch
from logcore.log.segment import LOG_SUFFIX, LogSegment, parse_segment_name, segment_name
from logcore.log.segment_listing import SegmentListing
from logcore.log.log_segments import LogSegments
from logcore.log.range_open import RangePlan
from logcore.log.log_reader import _end_marker

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

CLEAN_SHUTDOWN = ".seglog-clean-shutdown"

KAFKA_CLEAN_SHUTDOWN = ".kafka_cleanshutdown"

TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")

DELETED_SUFFIX = ".deleted"






@dataclass
class RecoveryReport:
    """What opening a log had to repair: one entry per segment that was cut or rebuilt."""
    truncated: list[tuple[str, int, int, str]] = field(default_factory=list)  # file, position, bytes, why
    rebuilt_indexes: list[str] = field(default_factory=list)
    deleted_segments: list[str] = field(default_factory=list)
    # repair: the offsets [first, end) it dropped (None: nothing), and the bytes
    dropped_offsets: tuple[int, int] | None = None
    dropped_bytes: int = 0


@dataclass(frozen=True)
class LoadedLog:
    """What opening a log found (Kafka's LoadedLogOffsets, plus the segments): applied to the
    `Log` in one place (`Log._apply_loaded`)."""
    segments: tuple[LogSegment, ...]
    txn_bases: frozenset[int]               # segments that have a .txnindex
    log_start_offset: int
    recovery_point: int
    checkpointed_recovery_point: int        # the recovery point as stored
    high_watermark: int
    log_end_offset: int | None              # None: a range-bounded reader did not compute it
    committed_hw: int | None                # the stored HW (None: none stored)
    commit_marker: dict | None
    stored_lso: int | None                  # the LSO an object store's last commit recorded
    recovery: RecoveryReport                # what recovery cut or rebuilt
    empty_producers_at: int | None = None   # PartitionState.empty_producers_at (object stores)
    snapshot_offsets: tuple[int, ...] = ()  # the producer snapshots the load's listing found


@dataclass(frozen=True)
class LoadContext:
    """What a load reads (never writes): where the log lives, how it is opened, and the parts
    the log shares with its loader (the epoch cache a writer's recovery fills, the segment store
    that cleans a crash's leftovers, the factory of segments)."""
    storage: object
    directory: str
    topic: str
    partition: int
    state_store: object
    segment_store: object
    epoch_cache: object
    new_segment: Callable[..., LogSegment]
    writer: bool
    read_only: bool
    remote: object = None                   # the remote tier's view (None: all local)
    repair: bool = False                    # `seglog repair`: check every segment, may cut committed data
    kafka_copy: bool = False                # a Kafka broker's copy (its own checkpoints)
    read_range: tuple[int | None, int | None] | None = None
    listing: object = None                  # the log's SegmentListing (None: the loader's own)


class LogLoader(RangePlan):
    """One load of a log: `load()` returns the `LoadedLog`."""

    def __init__(self, context, kafka_clean: bool = False):
        # A Log hands its context over itself (`load_context`): the loader reads nothing else.
        ctx = context if isinstance(context, LoadContext) else context.load_context()
        self.storage = ctx.storage
        self.dir = ctx.directory
        self.topic = ctx.topic
        self.partition = ctx.partition
        self.state_store = ctx.state_store
        self.segment_store = ctx.segment_store
        self.epoch_cache = ctx.epoch_cache
        self._new_segment = ctx.new_segment
        self.writer = ctx.writer
        self.read_only = ctx.read_only
        self.remote = ctx.remote
        self._repair = ctx.repair
        self._kafka_copy = ctx.kafka_copy
        self._read_range = ctx.read_range
        self._local_writer = ctx.writer and ctx.segment_store.in_place
        self.listing = ctx.listing or SegmentListing(ctx.segment_store, ctx.topic, ctx.partition,
                                                     remote=ctx.remote, kafka_copy=ctx.kafka_copy)
        self.kafka_clean = kafka_clean
        self.log_segments = LogSegments()
        self.recovery = RecoveryReport()
        self.recovery_point = 0
        self.log_start_offset = 0
        self._committed_hw: int | None = None
        self._needed: set[int] | None = None

    @property
    def segments(self) -> list[LogSegment]:
        return self.log_segments.list

    @property
    def bases(self) -> list[int]:
        return self.log_segments.bases

    @property
    def log_end_offset(self) -> int:
        if not self.segments:
            return self.log_start_offset
        return self.segments[-1].next_offset()

    def load(self) -> LoadedLog:
        """The loaded log; DamagedLogError (file and position) when a writer must not open it."""
        try:
            return self._load()
        except DamagedLogError:
            for seg in self.segments:
                seg.data.close()
            raise

    def _load(self) -> LoadedLog:
        names = self.listing.list_files()
        can_write = self.writer and not self.read_only
        if can_write:
            self.segment_store.clean_leftovers(names)      # Kafka's load steps 1-2
            # An object store's leftovers are only `.deleted` markers: without one nothing
            # changed, and the listing stands (one LIST less per open).
            if self.segment_store.in_place or any(n.endswith(TEMP_SUFFIXES) for n in names):
                names = self.listing.list_files()
        bases = sorted({parsed[0] for parsed in map(parse_segment_name, names)
                        if parsed is not None and parsed[1] == LOG_SUFFIX})
        clean = self.kafka_clean or CLEAN_SHUTDOWN in names
        state = self.state_store.load()
        if self.writer:
            state = self.segment_store.take_over(state)
        self._committed_hw = state.high_watermark
        self.recovery_point = state.recovery_point if state.recovery_point is not None else 0
        checkpointed_recovery_point = self.recovery_point
        plan, txn_bases = self.listing.segment_plan(names, bases, state)
        # Files written in place: a crash may leave torn tails, which recovery scans and cuts
        # (an object store publishes whole objects), and a writer appends to the last file.
        in_place = self.segment_store.in_place
        segments = []
        for i, (base, stem) in enumerate(plan):
            active_local = can_write and in_place and i == len(plan) - 1
            segments.append(self._new_segment(base, writable=active_local, stem=stem))
        self.log_segments.reset(segments, txn_bases)
        if can_write:
            self.segment_store.delete_replaced(names, state)
        self._plan_range(state)
        while self.segments:
            count = len(self.segments)
            self.listing.drop_unreachable_segments(self.log_segments, self.epoch_cache, delete=self.writer,
                                                   needs=self._needs)
            if len(self.segments) == count:
                break
            self._plan_range(state)     # a dropped segment may have held the range's start
        self._check_indexes(can_write, skip_active=in_place and not clean and can_write,
                            committed_below=None if in_place or not self.writer else state.high_watermark)
        if in_place and (not clean or self._repair) and self.segments:
            self._recover(can_write)
        if not self.segments:
            # (a writer rolls its first segment here once the load is applied)
            self.log_start_offset = state.log_start_offset or 0
        first_base = self.segments[0].base_offset if self.segments else self.log_start_offset
        self.log_start_offset = self.listing.start_offset(self.listing.checked_start(state, self.bases), first_base)
        # Retention moves the log start offset before it removes segments: a crash in between
        # leaves segments wholly below it, which go now (a reader just ignores them).
        self.listing.drop_segments_below_start(self.log_segments, self.log_start_offset, delete_files=can_write)
        # A range-bounded reader leaves the last segment unprepared when the HW lies below it:
        # the LEO (at least that segment's base) then caps nothing and is not computed.
        leo = self.log_end_offset if not self.segments or self._needs(self.segments[-1]) else None
        if leo is not None:
            # As Kafka: nothing above the LEO can be flushed (a recovery cut it, or a power cut lost it).
            self.recovery_point = min(self.recovery_point, leo)
        if not self.read_only:
            # A writer re-assigns its epoch at the LEO once opened and writes the file once then.
            self.epoch_cache.truncate_from_end(leo, flush=not self.writer)
        hw = state.high_watermark
        if hw is None:
            # No committed HW: nothing is visible (a Kafka copy without a checkpoint entry, or
            # a partition that was never committed).
            hw = self.log_start_offset
            if self.read_only and self.segments and self.log_end_offset > self.log_start_offset:
                logger.warning("no high watermark for %s-%d in the checkpoint: nothing is readable",
                               self.topic, self.partition)
        high_watermark = max(hw, self.log_start_offset)
        if leo is not None:
            high_watermark = min(high_watermark, self.listing.readable_end(self.segments, hw, leo))
        if (self._local_writer and not self._repair and state.high_watermark is not None
                and leo < min(state.high_watermark, checkpointed_recovery_point)):
            path = (self.segments[-1].log_path if self.segments
                    else self.storage.join(self.dir, segment_name(leo, LOG_SUFFIX)))
            raise DamagedLogError(
                f"{self.topic}-{self.partition}: the log ends at offset {leo}, below its recovery point"
                f" {checkpointed_recovery_point} and committed high watermark {state.high_watermark}:"
                " data that was synced to disk is missing (a file was cut or removed). The partition is"
                f" not opened for writing. To accept the loss, run: seglog repair --root <root> --topic"
                f" {self.topic} --partition {self.partition}", file=path,
                position=self.segments[-1].size() if self.segments else 0)
        return LoadedLog(tuple(self.segments), self.log_segments.txn_bases, self.log_start_offset,
                         self.recovery_point, checkpointed_recovery_point, high_watermark, leo,
                         state.high_watermark, state.marker, state.last_stable_offset, self.recovery,
                         state.empty_producers_at, tuple(snapshot_offsets_in(names)))

    def _check_indexes(self, can_write: bool, skip_active: bool = False,
                       committed_below: int | None = None) -> None:
        """Rebuild any missing or insane index of a sealed segment (in memory when read-only).

        skip_active: the last segment is about to be recovered (rebuilt) anyway; its index may be
        a crashed or live writer's preallocation, which is not worth a warning.
        committed_below: an object store's committed HW, for a writer: a segment that ends at or
        below it was published with its indexes before that commit moved the HW, and objects are
        immutable, so only the last segment (the LEO is read from its tail: a damaged one must be
        found here) and any reaching above the HW are checked (checking every segment made each
        open, so each commit of a stream, cost 3 requests more per segment).
        """
        last = len(self.segments) - 1
        for i, seg in enumerate(self.segments):
            if skip_active and i == last or not self._needs(seg):
                continue
            if committed_below is not None and i < last and self.segments[i + 1].base_offset <= committed_below:
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
            result = self._recover_segment(i, None, write=can_write and self.segment_store.in_place,
                                           may_cut=self._may_cut)
            if result.truncated_bytes:
                self._note_truncation(seg, result)

    def _recover_segment(self, i: int, on_batch, *, write: bool, may_cut=None):
        """Recover segment i; a sealed one (opened read-only) is reopened writable for the
        rebuild and sealed again afterwards, so its indexes end up rebuilt and trimmed on disk."""
        seg = self.segments[i]
        if not write or seg.writable:
            return seg.recover(on_batch, write=write, may_cut=may_cut)
        seg.close()
        seg = self._new_segment(seg.base_offset, writable=True)
        result = seg.recover(on_batch, write=True, may_cut=may_cut)
        seg.close()
        self.log_segments.replace_at(i, self._new_segment(seg.base_offset, writable=False))
        return result

    def _note_truncation(self, seg: LogSegment, result) -> None:
        self.recovery.truncated.append((seg.log_path, result.valid_bytes, result.truncated_bytes,
                                        result.error or "torn tail"))
        logger.warning("%s: dropped %d bytes from position %d (%s)", seg.log_path,
                       result.truncated_bytes, result.valid_bytes, result.error or "torn tail")

    def _protected_offset(self) -> int:
        """Recovery never cuts below this on its own: the committed HW and the recovery point."""
        return max(self._committed_hw or 0, self.recovery_point)

    def _may_cut(self, seg: LogSegment, result) -> bool:
        """Whether recovery may cut `seg` where its valid batches end (LogSegment.recover).

        A torn tail above the committed HW and the recovery point is cut, as Kafka does. Below
        them the bytes held committed data: a writer refuses to open (DamagedLogError, unless
        this is `seglog repair`), a reader leaves them, so reads fail there with the file and
        position instead of ending early. One exception: zeros from the cut to the end of the
        last segment above the recovery point are pages a power cut never wrote (commits
        without fsync, the broker's), not damage: they are cut, as a shorter file would be; so is
        a last batch that the file ends inside of (no whole valid batch follows the cut)."""
        if self._repair:
            return True
        cut = result.next_offset if result.next_offset is not None else seg.base_offset
        protect = self._protected_offset()
        if cut >= protect:
            return True
        last = seg.base_offset >= self.bases[-1]
        # (object stores publish whole objects: no write is ever half done there)
        if last and cut >= self.recovery_point and self.segment_store.in_place:
            rest = seg.data.read(result.valid_bytes, result.valid_bytes + result.truncated_bytes)
            if not any(rest) or seg.resync(result.valid_bytes) is None:
                logger.warning("%s: committed offsets from %d were not all written before a crash (%s):"
                               " %d bytes from position %d cut, above the recovery point %d",
                               seg.log_path, cut, result.error, result.truncated_bytes, result.valid_bytes,
                               self.recovery_point)
                return True
        if not self.writer:
            logger.warning("%s: damaged at position %d (%s), below the committed offset %d: reads"
                           " of offsets from %d fail there", seg.log_path, result.valid_bytes,
                           result.error, protect, cut)
            return False
        later = [s.log_path for s in self.segments if s.base_offset > seg.base_offset]
        raise DamagedLogError(
            f"{self.topic}-{self.partition}: {result.error}; the batches from offset {cut} on are"
            f" committed (high watermark {self._committed_hw}, recovery point {self.recovery_point})"
            f", so recovery does not cut them: {result.truncated_bytes} bytes of this segment"
            f"{f' and {len(later)} later segment(s)' if later else ''} would go. The partition is"
            " not opened for writing; readers fail at this position. To keep what lies before"
            f" the damage and drop the rest, run: seglog repair --root <root> --topic {self.topic}"
            f" --partition {self.partition}", file=seg.log_path, position=result.valid_bytes)

    def _recover(self, can_write: bool) -> None:
        """After an unclean shutdown: validate segments from the recovery point, cut the tail
        (every segment when repairing)."""
        start = 0 if self._repair else self.log_segments.index_of(self.recovery_point)
        if self._repair:
            try:
                old_end = max(self._committed_hw or 0, self.segments[-1].next_offset())
            except CorruptRecordError:
                old_end = self._committed_hw or 0
        for i in range(start, len(self.segments)):
            seg = self.segments[i]
            if seg.log_path in self.recovery.rebuilt_indexes and i < len(self.segments) - 1 or not self._needs(seg):
                continue
            result = self._recover_segment(i, self._replay_epoch, write=can_write, may_cut=self._may_cut)
            if result.truncated_bytes:
                self._note_truncation(seg, result)
                if self._repair:
                    cut = result.next_offset if result.next_offset is not None else seg.base_offset
                    self.recovery.dropped_offsets = (cut, max(old_end, cut))
                    self.recovery.dropped_bytes = result.truncated_bytes + sum(
                        s.size() for s in self.segments[i + 1:])
                later = self.segments[i + 1:]
                if later:
                    for dropped in later:
                        self.recovery.deleted_segments.append(dropped.log_path)
                        logger.warning("deleting %s after the corrupt tail of %s", dropped.log_path, seg.log_path)
                        if can_write:
                            dropped.close()
                            dropped.delete_files()
                    self.log_segments.keep_first(i + 1)
                    if can_write and not seg.writable and self.segment_store.in_place:
                        # The cut segment becomes the active one again.
                        seg.close()
                        self.log_segments.replace_at(i, self._new_segment(seg.base_offset, writable=True))
                        self.segments[i].recover(write=True)
                break

    def _replay_epoch(self, header: BatchHeader, data, seg) -> None:
        if header.partition_leader_epoch >= 0 and not self.read_only:
            latest = self.epoch_cache.latest_epoch
            if latest is None or header.partition_leader_epoch > latest:
                self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)


def replay_producer_state(producer_state, log_segments, start: int, leo: int, *, strict: bool,
                          name: str) -> None:
    """Replay into `producer_state` the producer fields of the batches of `log_segments` from
    `start` to the LEO `leo` (headers only, plus the one record of each transaction marker).
    strict: damage raises (a writer); else the offsets before it are replayed (a reader still
    serves them; its reads fail there)."""
    if start >= leo:
        return
    try:
        for seg in log_segments.list[log_segments.index_of(start):]:
            for pos, header in seg.scan_headers(0):
                if header.last_offset < start or header.producer_id < 0:
                    continue
                marker = None
                if header.is_control:
                    marker = _end_marker(seg.read_bytes(pos, pos + header.size), header, seg.log_path, pos)
                producer_state.replay(ProducerBatch.from_header(header, marker))
    except CorruptRecordError as exc:
        if strict:
            raise
        logger.warning("%s: producer state replayed up to the damage only: %s", name, exc)
    producer_state.update_map_end_offset(leo)
