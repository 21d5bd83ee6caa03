"""Opening a partition's log: listing its files, cleaning what a crash left, recovery and the
loaded offsets (log start, recovery point, HW), the leader-epoch and producer-state replay.

A mixin of `Log` (logcore.log.log): the methods run on the log being opened, before it serves
anything; `Log.__init__` calls `_load`.
"""
from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field

from logcore.errors import (CorruptIndexError, CorruptRecordError, DamagedLogError, ResourceNotFoundError,
                            SegLogError)
from logcore.records.batch import HEADER_SIZE, BatchHeader, parse_header
from logcore.log.producer_state import ProducerBatch
from logcore.log.segment import LOG_SUFFIX, SNAPSHOT_SUFFIX, LogSegment, parse_segment_name, segment_name
from logcore.log.log_reader import _end_marker
from logcore.log.clock import now_ms as _now_ms

logger = logging.getLogger("logcore.log.log")   # the logger name users' configurations know

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

CLEAN_SHUTDOWN = ".seglog-clean-shutdown"

KAFKA_CLEAN_SHUTDOWN = ".kafka_cleanshutdown"

TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")

DELETED_SUFFIX = ".deleted"


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


@dataclass
class RecoveryReport:
    """What opening a log had to repair: one entry per segment that was cut or rebuilt."""
    truncated: list[tuple[str, int, int, str]] = field(default_factory=list)  # file, position, bytes, why
    rebuilt_indexes: list[str] = field(default_factory=list)
    deleted_segments: list[str] = field(default_factory=list)
    # repair: the offsets [first, end) it dropped (None: nothing), and the bytes
    dropped_offsets: tuple[int, int] | None = None
    dropped_bytes: int = 0


class LogLoading:
    """Opening and recovery, run by `Log.__init__` on the log being opened."""

    # ------------------------------------------------------------------ opening
    @staticmethod
    def _compacted_once(storage, directory: str, topic: str, partition: int) -> bool:
        """Whether the cleaner ever ran on the partition (its cleaner-offset-checkpoint entry, or
        an object store's list of cleaned segments): its segments may have offset gaps."""
        from logcore.log.checkpoint import OffsetCheckpoint
        root = directory.rsplit("/", 1)[0] if "/" in directory else ""
        path = storage.join(root, "cleaner-offset-checkpoint") if root else "cleaner-offset-checkpoint"
        try:
            if (topic, partition) in OffsetCheckpoint(storage, path).read():
                return True
        except SegLogError:
            return True
        if storage.is_local:
            return False
        try:
            return b'"cleaned"' in storage.read(storage.join(directory, "partition-state.json"))
        except ResourceNotFoundError:
            return False

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
        self._stored_lso = state.last_stable_offset
        self._committed_hw = state.high_watermark
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
        self._plan_range(state)
        while not self.storage.is_local and self.segments:
            count = len(self.segments)
            self._drop_unreachable_object_segments(only_needed=True)
            if len(self.segments) == count:
                break
            self._plan_range(state)     # a dropped segment may have held the range's start
        self._check_indexes(can_write, skip_active=self.storage.is_local and not clean and can_write)
        if self.storage.is_local and (not clean or self._repair) and self.segments:
            self._recover(can_write)
        if not self.segments:
            start = state.log_start_offset or 0
            if can_write:
                self._roll_to(start)
            else:
                self.log_start_offset = start
        first_base = self.segments[0].base_offset if self.segments else self.log_start_offset
        self.log_start_offset = self._start_offset(self._checked_start(state), first_base)
        # Retention moves the log start offset before it removes segments: a crash in between
        # leaves segments wholly below it, which go now (a reader just ignores them).
        self._drop_segments_below_start(delete_files=can_write)
        # A range-bounded reader leaves the last segment unprepared when the HW lies below it:
        # the LEO (at least that segment's base) then caps nothing and is not computed.
        leo = self.log_end_offset if not self.segments or self._needs(self.segments[-1]) else None
        if leo is not None:
            # As Kafka: nothing above the LEO can be flushed (a recovery cut it, or a power cut lost it).
            self.recovery_point = min(self.recovery_point, leo)
        if not self.read_only:
            # A writer re-assigns its epoch at the LEO below and writes the file once then.
            self.epoch_cache.truncate_from_end(leo, flush=not self.writer)
        hw = state.high_watermark
        if hw is None:
            # No committed HW: nothing is visible (a Kafka copy without a checkpoint entry, or
            # a partition that was never committed).
            hw = self.log_start_offset
            if self.read_only and self.segments and self.log_end_offset > self.log_start_offset:
                logger.warning("no high watermark for %s-%d in the checkpoint: nothing is readable",
                               self.topic, self.partition)
        self.high_watermark = max(hw, self.log_start_offset)
        if leo is not None:
            self.high_watermark = min(self.high_watermark, self._readable_end(hw, leo))
        if (self._local_writer and not self._repair and state.high_watermark is not None
                and leo < min(state.high_watermark, self._checkpointed_recovery_point)):
            seg = self.segments[-1]
            raise DamagedLogError(
                f"{self.topic}-{self.partition}: the log ends at offset {leo}, below its recovery point"
                f" {self._checkpointed_recovery_point} and committed high watermark {state.high_watermark}:"
                " data that was synced to disk is missing (a file was cut or removed). The partition is"
                f" not opened for writing. To accept the loss, run: seglog repair --root <root> --topic"
                f" {self.topic} --partition {self.partition}", file=seg.log_path, position=seg.size())
        if self._local_writer and state.high_watermark is not None and state.high_watermark > leo:
            # Committed data that a power cut took (it was not fsynced): the stored HW comes
            # down to the LEO now, or offsets appended from here would count as committed.
            logger.warning("%s-%d: the committed high watermark %d is above the log end %d",
                           self.topic, self.partition, state.high_watermark, leo)
            self.state_store.commit(high_watermark=leo, log_start_offset=self.log_start_offset,
                                    first_segment_base=self.segments[0].base_offset if self.segments else leo,
                                    epoch=self.leader_epoch, recovery_point=self.recovery_point)
        if not self.writer and self._producer_state_loaded:
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
            if self.replica:
                # Its epoch is the latest it holds until the controller says more.
                latest = self.epoch_cache.latest_epoch
                self.leader_epoch = latest if latest is not None else -1
            else:
                self.epoch_cache.assign(self.leader_epoch, self.log_end_offset)
            self.epoch_cache.flush()        # the truncation above, when assign changed nothing
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

    def _drop_unreachable_object_segments(self, *, only_needed: bool = False) -> None:
        """Object stores: a fenced writer may have published a segment after it lost the partition.

        Such a segment starts at or above the offset where the next writer took over and carries
        the older epoch; the leader-epoch checkpoint says which epoch owns each offset.
        only_needed: look only at the segments a range-bounded open prepares.
        """
        entries = self.epoch_cache.entries
        if len(entries) < 2:
            return
        first_takeover = entries[1][1]
        keep = []
        for seg in self.segments:
            if (seg.base_offset >= first_takeover and seg.stem == segment_name(seg.base_offset, "")
                    and (not only_needed or self._needs(seg))):
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
            if skip_active and i == len(self.segments) - 1 or not self._needs(seg):
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
            result = self._recover_segment(i, None, write=can_write and self.storage.is_local,
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
        self.segments[i] = self._new_segment(seg.base_offset, writable=False)
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
        if last and cut >= self.recovery_point and self.storage.is_local:
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

    def _checked_start(self, state) -> int | None:
        """The checkpointed log start offset, unless it contradicts the committed HW (a log
        start is never above it) or, on a local seglog root, the log start seglog itself last
        set (`log-start-offset` in the partition folder, written before the checkpoint): then it
        is reported and not acted on (no segment goes). A crash between the two writes leaves
        the folder's value ahead: that one counts."""
        start, hw = state.log_start_offset, state.high_watermark
        witness = state.log_start_witness
        local = self.storage.is_local and not self._kafka_copy and self.remote is None
        if local and witness is not None and (start is None or witness > start):
            start = witness
        if start is None or self.remote is not None:
            return start
        first = self.bases[0] if self.bases else None
        why = None
        if hw is not None and start > hw:
            why = f"above the committed high watermark {hw}"
        elif (local and len(self.bases) > 1 and start >= self.bases[1]
              and (witness is None or start > witness)):
            # Acting on it would delete whole segments: only seglog's own record may say so.
            why = (f"above the log start seglog last set ({witness if witness is not None else 'none'},"
                   f" segments from {first})")
        if why is None:
            return start
        key = (self.topic, self.partition, start)
        if getattr(self, "_reported_start", None) != key:
            self._reported_start = key
            logger.error("%s-%d: the log-start-offset-checkpoint entry %d is %s: ignored, no segment is"
                         " deleted. Correct or remove that entry", self.topic, self.partition, start, why)
        return witness if local and witness is not None and (hw is None or witness <= hw) else None

    def _readable_end(self, hw: int, leo: int) -> int:
        """Where the HW is capped: the LEO, unless the last segment holds bytes past its last
        whole batch while the committed HW is above that (damage a reader must fail on, not
        data to hide: reads of the offsets from the LEO on fail with the file and position)."""
        if hw <= leo or not self.segments:
            return leo
        last = self.segments[-1]
        end = last.scanned_end
        if end is not None and last.size() > end:
            return hw
        return leo

    def _recover(self, can_write: bool) -> None:
        """After an unclean shutdown: validate segments from the recovery point, cut the tail
        (every segment when repairing)."""
        start = 0 if self._repair else max(0, bisect.bisect_right(self.bases, self.recovery_point) - 1)
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
        try:
            for seg in self.segments[self._segment_index(start):]:
                for pos, header in seg.scan_headers(0):
                    if header.last_offset < start or header.producer_id < 0:
                        continue
                    marker = None
                    if header.is_control:
                        marker = _end_marker(seg.read_bytes(pos, pos + header.size), header, seg.log_path, pos)
                    self.producer_state.replay(ProducerBatch.from_header(header, marker))
        except CorruptRecordError as exc:
            if self.writer:
                raise
            # A reader still serves the offsets before the damage; its reads fail there.
            logger.warning("%s-%d: producer state replayed up to the damage only: %s", self.topic,
                           self.partition, exc)
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
