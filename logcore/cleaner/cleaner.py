# Over 600 lines: one compaction pass (Kafka's Cleaner), whose steps share its offset map and segment groups.
"""The log cleaner: Kafka's compaction of one partition log (reference: kafka-storage.md section 5).

A pass on a log:
1. The dirty section starts at the first dirty offset (the `cleaner-offset-checkpoint` entry,
   clamped to [log start, LEO]) and ends at the first uncleanable offset: the smallest of the
   active segment's base, the HW, the LSO and the base of the first segment newer than
   `min.compaction.lag.ms`, rounded down to a segment boundary.
2. The offset map (key -> latest offset) is built from the dirty section, skipping aborted
   transactional data and control batches, until the section ends or the map is full; the pass
   covers [log start, map end) and the map end becomes the new checkpoint.
3. The segments below the map end are rewritten in groups of consecutive segments whose sizes
   add up to at most `segment.bytes` (merging small segments). A record is kept iff it is past the
   map end or no later record of its key is mapped; keyless records below the map end go; a
   tombstone goes once its batch's delete horizon (set when a pass first rewrites the batch:
   now + `delete.retention.ms`, in the batch header as Kafka 3.x does) has passed; aborted data
   goes, and transaction markers go once no data of their transaction is left and their own
   horizon has passed. Offsets, order and producer fields never change; a batch left empty is
   kept as a bare header where producer state needs it.
4. Each group's output replaces its source segments atomically (`swap.py`).
"""
from __future__ import annotations

import bisect
import heapq
import logging
import math
import mmap
import time
from dataclasses import dataclass, field

import numpy as np

from logcore.cleaner import _offsetmap, delayed_delete
from logcore.log.cleaner_checkpoint import CleanerCheckpoint
from logcore.cleaner.offset_map import OffsetMap
from logcore.cleaner.swap import SegmentOutput, abort_outputs, swap_in
from logcore.errors import CorruptRecordError, InvalidConfigError, ReadOnlyLogError, SegLogError
from logcore.records.arrow import batches_to_arrow
from logcore.records.batch import (COMPRESSION_MASK, CONTROL_MASK, DELETE_HORIZON_MASK, HEADER_SIZE,
                                   LOG_OVERHEAD, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, BatchHeader,
                                   assemble_batch, batch_fields, decode_records, iter_batches,
                                   records_section)
from logcore.records.compression import compress
from logcore.records.control import ControlType, parse_control_type

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
MIB = 1 << 20


class CleanerAbortedError(SegLogError):
    """The log changed under a pass (truncated, segments deleted): nothing was swapped in."""


@dataclass
class CleanStats:
    """What one pass did."""
    topic: str
    partition: int
    first_dirty_offset: int = 0
    end_offset: int = 0                 # the map end: the new first dirty offset
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0
    segments_before: int = 0
    segments_after: int = 0
    duration_s: float = 0.0
    map_utilization: float = 0.0
    map_keys: int = 0
    throttled_s: float = 0.0
    groups: list[tuple[int, int]] = field(default_factory=list)   # (base, segments merged)


@dataclass
class DirtySection:
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    compaction_overdue: bool            # a dirty record is older than max.compaction.lag.ms

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


class Throttler:
    """Keeps read + write bytes under `bytes_per_second` by sleeping (Kafka's cleaner throttle)."""

    def __init__(self, bytes_per_second: float):
        if not bytes_per_second > 0:
            raise InvalidConfigError(
                f"log.cleaner.io.max.bytes.per.second must be > 0, got {bytes_per_second!r}")
        self.rate = bytes_per_second
        self.start = time.monotonic()
        self.bytes = 0
        self.slept = 0.0

    def account(self, n: int) -> None:
        if math.isinf(self.rate):
            return
        self.bytes += n
        ahead = self.bytes / self.rate - (time.monotonic() - self.start)
        if ahead > 0.01:
            time.sleep(ahead)
            self.slept += ahead


class _TxnTracker:
    """Kafka's CleanedTransactionMetadata: which transactional batches and markers may go."""

    def __init__(self, aborted: list):
        self._pending = [(a.first_offset, a.last_offset, a.producer_id, a) for a in aborted]
        heapq.heapify(self._pending)
        self.ongoing_aborted: dict[int, list] = {}      # producer -> [AbortedTxn, observed]
        self.ongoing_committed: set[int] = set()

    def consume_up_to(self, offset: int) -> None:
        """Note the aborted transactions that start at or before `offset` (batches up to it
        were seen; non-transactional ones need nothing else)."""
        while self._pending and self._pending[0][0] <= offset:
            _, _, pid, txn = heapq.heappop(self._pending)
            self.ongoing_aborted.setdefault(pid, [txn, False])

    def on_data_batch(self, h: BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction (its records go)."""
        self.consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        entry = self.ongoing_aborted.get(h.producer_id)
        if entry is not None:
            entry[1] = True
            return True
        self.ongoing_committed.add(h.producer_id)
        return False

    def on_marker(self, h: BatchHeader, control_type) -> tuple[bool, object]:
        """(discardable, AbortedTxn to keep in the new txn index or None) for a control batch."""
        self.consume_up_to(h.last_offset)
        if control_type == ControlType.ABORT:
            entry = self.ongoing_aborted.pop(h.producer_id, None)
            if entry is not None and entry[1]:
                return False, entry[0]      # its data went in this pass: keep the marker once more
            return True, entry[0] if entry is not None else None
        if control_type == ControlType.COMMIT:
            seen = h.producer_id in self.ongoing_committed
            self.ongoing_committed.discard(h.producer_id)
            return not seen, None
        return False, None


class LogCleaner:
    """Compacts partition logs opened as writers. Settings are Kafka's `log.cleaner.*` ones."""

    def __init__(self, *, dedupe_buffer_size: int = 128 * MIB, io_buffer_size: int = 512 * 1024,
                 io_max_bytes_per_second: float = math.inf, load_factor: float = 0.9,
                 backoff_ms: int = 15000):
        if not isinstance(io_buffer_size, int) or io_buffer_size < HEADER_SIZE:
            raise InvalidConfigError(
                f"log.cleaner.io.buffer.size must be an integer >= {HEADER_SIZE}, got {io_buffer_size!r}")
        if not isinstance(backoff_ms, int) or backoff_ms < 0:
            raise InvalidConfigError(f"log.cleaner.backoff.ms must be an integer >= 0, got {backoff_ms!r}")
        Throttler(io_max_bytes_per_second)      # validates the rate
        self.offset_map = OffsetMap(dedupe_buffer_size, load_factor)
        self.io_buffer_size = io_buffer_size
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self.backoff_ms = backoff_ms

    # ------------------------------------------------------------------ choosing
    def dirty_section(self, log, now_ms: int | None = None) -> DirtySection:
        now_ms = _now_ms() if now_ms is None else now_ms
        checkpoint = CleanerCheckpoint(log)
        checkpointed = checkpoint.read()
        # What the writer changes under its lock (segments, offsets), read as one snapshot.
        segments, log_start, leo, hw, lso = log.cleaning_snapshot()
        first_dirty = checkpoint.within_log(checkpointed, log_start, leo)
        sealed = segments[:-1]
        bases = [s.base_offset for s in segments]
        bound = min(bases[-1] if bases else leo, hw, lso)
        lag = log.config.min_compaction_lag_ms
        ends = [bases[i + 1] for i in range(len(sealed))]
        if lag > 0:
            for seg, end in zip(sealed, ends):
                if end > first_dirty and seg.largest_timestamp > now_ms - lag:
                    bound = min(bound, seg.base_offset)
                    break
        i = bisect.bisect_right(bases, bound) - 1
        first_uncleanable = max(first_dirty, bases[i] if i >= 0 else bound)
        clean = dirty = 0
        overdue = False
        max_lag = log.config.max_compaction_lag_ms
        for seg, end in zip(sealed, ends):
            if seg.base_offset < first_dirty:
                clean += seg.size()
            elif seg.base_offset < first_uncleanable:
                dirty += seg.size()
            if end > first_dirty and seg.base_offset < first_uncleanable and max_lag < 2**63 - 1:
                head = seg.read_bytes(0, HEADER_SIZE)
                if len(head) == HEADER_SIZE:
                    first_ts = _header(head).max_timestamp
                    if first_ts >= 0 and now_ms - max_lag > first_ts:
                        overdue = True
        return DirtySection(first_dirty, first_uncleanable, clean, dirty, overdue)

    def dirty_ratio(self, log) -> float:
        return self.dirty_section(log).ratio

    def needs_cleaning(self, log, now_ms: int) -> bool:
        if not log.config.compact:
            return False
        section = self.dirty_section(log, now_ms)
        if section.first_uncleanable <= section.first_dirty:
            return False
        return (section.compaction_overdue and section.dirty_bytes > 0) or \
            section.ratio > log.config.min_cleanable_dirty_ratio

    def rank(self, log, now_ms: int) -> tuple[bool, float] | None:
        """(overdue, dirty ratio) of a log that needs cleaning, None if it does not: logs are
        cleaned in decreasing rank, overdue ones (max.compaction.lag.ms) first, then the
        filthiest (Kafka's LogCleanerManager.grabFilthiestCompactedLog)."""
        if not log.config.compact:
            return None
        section = self.dirty_section(log, now_ms)
        if section.first_uncleanable <= section.first_dirty:
            return None
        overdue = section.compaction_overdue and section.dirty_bytes > 0
        if not overdue and section.ratio <= log.config.min_cleanable_dirty_ratio:
            return None
        return (overdue, section.ratio)

    def pick(self, logs, now_ms: int):
        """The filthiest log that needs cleaning (overdue ones first), or None."""
        best, best_key = None, None
        for log in logs:
            key = self.rank(log, now_ms)
            if key is not None and (best_key is None or key > best_key):
                best, best_key = log, key
        return best

    # ------------------------------------------------------------------ cleaning
    def clean(self, log, now_ms: int | None = None) -> CleanStats | None:
        """One pass over `log` (opened as writer); None when nothing is cleanable."""
        if not log.writer:
            raise ReadOnlyLogError(f"{log.topic}-{log.partition}: the cleaner needs the log opened as writer")
        if not log.config.compact:
            raise InvalidConfigError(
                f"{log.topic}-{log.partition} has cleanup.policy={','.join(log.config.cleanup_policy)};"
                " the cleaner compacts only topics whose cleanup.policy includes compact")
        now_ms = _now_ms() if now_ms is None else now_ms
        started = time.monotonic()
        self.delete_expired_files(log)
        # A truncation from here on (a follower cutting where it diverged) abandons the pass.
        truncations = log.truncations
        section = self.dirty_section(log, now_ms)
        if section.first_uncleanable <= section.first_dirty:
            return None
        stats = CleanStats(log.topic, log.partition, first_dirty_offset=section.first_dirty)
        throttle = Throttler(self.io_max_bytes_per_second)
        aborted = _aborted_transactions(log, section.first_uncleanable)
        omap = self.offset_map
        omap.clear()
        end = self._build_map(log, section, aborted, throttle, stats)
        if end <= section.first_dirty:
            return None
        stats.end_offset = end
        stats.map_utilization = omap.utilization
        stats.map_keys = omap.size
        sealed = list(log.segments[:-1])
        to_clean = [s for s in sealed if s.base_offset < end]
        stats.segments_before = len(to_clean)
        groups = _group_by_size(to_clean, sealed, log.config.segment_bytes, section.first_uncleanable)
        txns = _TxnTracker(aborted)
        producers = _last_producer_offsets(log)
        outputs = []
        for group in groups:
            if log.is_closed:
                # Closed under the pass (a cluster member's replica reassigned away and deleted):
                # write nothing more into its folder.
                if not log.storage.is_local:
                    abort_outputs([o for _g, o in outputs])
                raise CleanerAbortedError(f"{log.topic}-{log.partition} was closed during cleaning")
            out = self._clean_group(log, group, txns, producers, end, now_ms, throttle, stats)
            outputs.append((group, out))
            if log.storage.is_local:
                # Local disk: each group is swapped in as soon as it is written (Kafka's order).
                swap_in(log, [(group, out)], truncations)
        if not log.storage.is_local:
            # Object stores: one conditional partition-state write switches every group at once.
            swap_in(log, outputs, truncations)
        stats.segments_after = len(groups)
        stats.groups = [(g[0].base_offset, len(g)) for g in groups]
        if not log.end_cleaning(truncations, end):
            raise CleanerAbortedError(
                f"{log.topic}-{log.partition}: the log was truncated or closed during cleaning;"
                " the pass's checkpoint is not written")
        stats.throttled_s = throttle.slept
        stats.duration_s = time.monotonic() - started
        logger.info("cleaned %s-%d: %d -> %d segments, %d of %d records kept, %.1f MB read, %.1f MB written",
                    log.topic, log.partition, stats.segments_before, stats.segments_after,
                    stats.records_kept, stats.records_read, stats.bytes_read / 1e6, stats.bytes_written / 1e6)
        return stats

    @staticmethod
    def delete_expired_files(log) -> list[str]:
        """Remove the files of segments replaced by earlier passes once file.delete.delay.ms has
        passed (wall clock); every pass starts with it. Returns the paths removed."""
        if not log.writer:
            raise ReadOnlyLogError(f"{log.topic}-{log.partition}: deleting replaced segments needs the log"
                                   " opened as writer")
        return delayed_delete.delete_expired(log)

    def _chunks(self, seg, start_position: int, throttle: Throttler, stats: CleanStats):
        """Whole batches of a sealed segment in buffers of about io_buffer_size (on local disk,
        views of the memory-mapped file: no copy out of the page cache)."""
        size = seg.size()
        mapped = _map_file(seg) if seg.storage.is_local and size > 0 else None
        try:
            pos, want = start_position, self.io_buffer_size
            while pos < size:
                if mapped is not None:
                    buf = mapped[pos:min(size, pos + want)]
                else:
                    buf = seg.read_bytes(pos, min(size, pos + want))
                end = _whole_batches_end(buf)
                if end == 0:
                    if pos + len(buf) >= size:
                        raise CorruptRecordError("segment ends in a partial batch", file=seg.log_path,
                                                 position=pos)
                    want = max(want * 2, _declared_size(buf))
                    continue
                throttle.account(end)
                stats.bytes_read += end
                yield buf[:end] if end < len(buf) else buf, pos
                pos += end
                want = self.io_buffer_size
        finally:
            if mapped is not None:
                _release(mapped)

    def _build_map(self, log, section: DirtySection, aborted, throttle: Throttler, stats: CleanStats) -> int:
        """Map the dirty section; returns the map end (first offset not covered)."""
        omap = self.offset_map
        ranges = [(a.producer_id, a.first_offset, a.last_offset) for a in aborted]
        by_producer: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in ranges:
            by_producer.setdefault(pid, []).append((first, last))
        segments = list(log.segments[:-1])
        for i, seg in enumerate(segments):
            seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else log.segments[-1].base_offset
            if seg_end <= section.first_dirty:
                continue
            if seg.base_offset >= section.first_uncleanable:
                break
            start = 0
            if seg.base_offset < section.first_dirty:
                start = seg.offset_index.lookup(section.first_dirty)[1]
            for chunk, base_pos in self._chunks(seg, start, throttle, stats):
                rows = _batch_rows(chunk, seg.log_path, base_pos)
                attrs = rows[:, 6]
                include = (attrs & CONTROL_MASK) == 0
                if by_producer:
                    for j in np.flatnonzero(include & ((attrs & TRANSACTIONAL_MASK) != 0)).tolist():
                        spans = by_producer.get(int(rows[j, 5]), ())
                        if any(first <= rows[j, 2] <= last for first, last in spans):
                            include[j] = False
                if (include & ((attrs & COMPRESSION_MASK) != 0)).any():
                    stop = self._map_decoded(chunk, section, ranges, seg.log_path, base_pos)
                else:
                    try:
                        stop = omap.put_batches(chunk, rows, include.view(np.uint8), section.first_dirty,
                                                section.first_uncleanable)
                    except _offsetmap.RecordError as exc:
                        raise _corrupt(exc, rows, seg.log_path, base_pos) from None
                if stop >= 0:
                    return stop
            omap.latest_offset = min(seg_end, section.first_uncleanable) - 1
        return section.first_uncleanable

    def _map_decoded(self, chunk, section: DirtySection, ranges, source: str, base_pos: int) -> int:
        """The map step for a chunk holding compressed batches: decode the key column, put it."""
        cols = batches_to_arrow(chunk, min_offset=section.first_dirty, max_offset=section.first_uncleanable,
                                aborted=ranges, source=source, base_position=base_pos)
        offsets = cols.column(0).to_numpy()
        consumed = self.offset_map.put_batch(cols.column(3), offsets)
        return int(offsets[consumed]) if consumed < len(offsets) else -1

    def _clean_group(self, log, group, txns: _TxnTracker, producers: dict, end: int, now_ms: int,
                     throttle: Throttler, stats: CleanStats) -> SegmentOutput:
        out = SegmentOutput(log, group[0].base_offset)
        table, slots = self.offset_map.table, self.offset_map.slots
        latest = end - 1
        horizon = now_ms + log.config.delete_retention_ms
        keep_lasts, keep_pids = _empty_batch_keepers(producers)
        last_header = None
        try:
            for seg in group:
                for chunk, base_pos in self._chunks(seg, 0, throttle, stats):
                    rows = _batch_rows(chunk, seg.log_path, base_pos)
                    if len(rows) == 0:
                        continue
                    # Uncompressed plain data batches are cleaned in C, many per call; control,
                    # transactional and compressed batches one by one here.
                    slow = (rows[:, 6] & (CONTROL_MASK | TRANSACTIONAL_MASK | COMPRESSION_MASK)) != 0
                    for lo, hi, is_slow in _runs(slow):
                        if is_slow:
                            for j in range(lo, hi):
                                pos = int(rows[j, 0])
                                h = _header(chunk, pos)
                                data = self._clean_batch(chunk, pos, h, txns, producers, table, slots, latest,
                                                         end, now_ms, horizon, stats, seg.log_path, base_pos, out)
                                if data is not None:
                                    out.append(data)
                            continue
                        txns.consume_up_to(int(rows[hi - 1, 2] + rows[hi - 1, 3]))
                        try:
                            data, meta, read, kept, tombstones = _offsetmap.clean_batches(
                                chunk, rows, lo, hi, table, slots, latest, end, now_ms, horizon,
                                keep_lasts, keep_pids)
                        except _offsetmap.RecordError as exc:
                            raise _corrupt(exc, rows, seg.log_path, base_pos) from None
                        stats.records_read += read
                        stats.records_kept += kept
                        stats.tombstones_removed += tombstones
                        out.append_many(data, meta)
                    last_header = _header(chunk, int(rows[-1, 0]))
            if out.empty and last_header is not None:
                # Keep the group's last offset on record (recovery of a swap reads the range).
                out.append(_empty_batch(last_header))
            out.finish()
        except BaseException:
            abort_outputs([out])
            raise
        throttle.account(out.size)
        stats.bytes_written += out.size
        return out

    def _clean_batch(self, chunk, pos: int, h: BatchHeader, txns: _TxnTracker, producers: dict, table,
                     slots: int, latest: int, end: int, now_ms: int, horizon: int, stats: CleanStats,
                     source: str, base_pos: int, out: SegmentOutput):
        """The bytes to write for one batch (original, rebuilt or empty header), or None to drop it."""
        original = chunk[pos:pos + h.size]
        horizon_passed = h.has_delete_horizon and h.delete_horizon_ms <= now_ms
        if h.is_control:
            records = decode_records(chunk, pos, h, source=source, base_position=base_pos, verify_crc=False)
            control_type = parse_control_type(records[0].key) if records else None
            discardable, txn = txns.on_marker(h, control_type)
            if not discardable or h.base_offset > latest:
                result = original
            elif h.has_delete_horizon:
                result = original if not horizon_passed else self._empty_or_drop(h, producers, end, control=True)
            else:
                # A marker whose transaction's data is gone stays delete.retention.ms more.
                result = _with_horizon(chunk, pos, h, horizon)
            if result is not None and txn is not None and len(result) > HEADER_SIZE:
                out.aborted.append(txn)     # read_committed readers still need the entry
            return result
        stats.records_read += h.records_count
        if txns.on_data_batch(h):
            stats.aborted_records_removed += h.records_count
            return self._empty_or_drop(h, producers, end, control=False)
        section = records_section(chunk, pos, h, source=source, base_position=base_pos)
        try:
            kept_bytes, kept, max_ts, tombstones_removed, horizon_set = _offsetmap.filter_records(
                section, h.records_count, table, slots, h.base_offset, latest, horizon_passed,
                h.base_timestamp, horizon if h.base_offset <= latest else INT64_MIN, h.has_delete_horizon)
        except _offsetmap.RecordError as exc:
            index, message = exc.args
            raise CorruptRecordError(f"record {index}: {message}", file=source, position=base_pos + pos) from None
        stats.records_kept += kept
        stats.tombstones_removed += tombstones_removed
        if kept == h.records_count and not horizon_set:
            return original
        if kept == 0:
            return self._empty_or_drop(h, producers, end, control=False)
        attributes = h.attributes | (DELETE_HORIZON_MASK if horizon_set else 0)
        if h.compression:
            kept_bytes = compress(h.compression, kept_bytes)
        max_timestamp = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else max_ts
        return assemble_batch(kept_bytes, base_offset=h.base_offset, attributes=attributes,
                              last_offset_delta=h.last_offset_delta,
                              base_timestamp=horizon if horizon_set else h.base_timestamp,
                              max_timestamp=max_timestamp, producer_id=h.producer_id,
                              producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                              records_count=kept, partition_leader_epoch=h.partition_leader_epoch)

    @staticmethod
    def _empty_or_drop(h: BatchHeader, producers: dict, end: int, *, control: bool):
        """An emptied batch: kept as a bare header where producer state or the round's last
        offset needs it, else dropped."""
        if h.next_offset == end:
            return _empty_batch(h)
        if h.producer_id >= 0:
            last = producers.get(h.producer_id)
            if last is not None:
                last_data, epoch = last
                if (not control and h.last_offset == last_data) or \
                        (control and h.producer_epoch == epoch and h.base_offset > last_data):
                    return _empty_batch(h)
        return None


# ---------------------------------------------------------------------------------------- helpers

def _now_ms() -> int:
    return int(time.time() * 1000)


def _header(buf, pos: int = 0) -> BatchHeader:
    from logcore.records.batch import parse_header
    return parse_header(buf, pos)


def _map_file(seg) -> memoryview:
    """A read-only view of a sealed local segment's file (its size does not change)."""
    with open(seg.storage.local_path(seg.log_path), "rb") as f:
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _release(view: memoryview) -> None:
    mapped = view.obj
    try:
        view.release()
        mapped.close()
    except BufferError:
        pass    # a view of it is still referenced (the caller's last chunk); unmapped when collected


def _batch_rows(chunk, source: str, base_pos: int) -> np.ndarray:
    """`batch_fields` of a chunk of whole batches (CRC checked), errors at file positions."""
    try:
        return batch_fields(chunk, source=source)
    except CorruptRecordError as exc:
        # The Python walk names the problem precisely (legacy magic, sizes, CRC values).
        for _ in iter_batches(chunk, source=source, base_position=base_pos, allow_partial_tail=False):
            pass
        raise CorruptRecordError(exc.reason, file=source, position=base_pos + (exc.position or 0)) from None


def _corrupt(exc, rows: np.ndarray, source: str, base_pos: int) -> CorruptRecordError:
    row, record, message = exc.args
    return CorruptRecordError(f"record {record}: {message}" if record >= 0 else message, file=source,
                              position=base_pos + int(rows[row, 0]))


def _runs(mask: np.ndarray):
    """(start, end, value) of each run of equal values of a boolean array."""
    change = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    bounds = [0, *change.tolist(), len(mask)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        yield lo, hi, bool(mask[lo])


def _empty_batch_keepers(producers: dict) -> tuple[np.ndarray, np.ndarray]:
    """(last data offsets, producer ids) sorted by offset: a data batch emptied by cleaning that
    ends at its producer's last data offset stays as a bare header (producer state needs it)."""
    pairs = sorted((last, pid) for pid, (last, _epoch) in producers.items() if last is not None and last >= 0)
    lasts = np.array([p[0] for p in pairs], dtype=np.int64)
    pids = np.array([p[1] for p in pairs], dtype=np.int64)
    return lasts, pids


def _declared_size(buf) -> int:
    if len(buf) < 12:
        return HEADER_SIZE
    return int.from_bytes(buf[8:12], "big", signed=True) + LOG_OVERHEAD


def _whole_batches_end(buf) -> int:
    """Length of the prefix of `buf` made of whole batches."""
    pos, n = 0, len(buf)
    while pos + 12 <= n:
        size = int.from_bytes(buf[pos + 8:pos + 12], "big", signed=True) + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > n:
            break
        pos += size
    return pos


def _empty_batch(h: BatchHeader) -> bytes:
    """Kafka's empty batch header: no records, the batch's offsets and producer fields kept."""
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return assemble_batch(b"", base_offset=h.base_offset, attributes=attributes,
                          last_offset_delta=h.last_offset_delta, base_timestamp=-1,
                          max_timestamp=h.max_timestamp, producer_id=h.producer_id,
                          producer_epoch=h.producer_epoch, base_sequence=h.base_sequence, records_count=0,
                          partition_leader_epoch=h.partition_leader_epoch)


def _with_horizon(chunk, pos: int, h: BatchHeader, horizon: int) -> bytes:
    """A control batch with its delete horizon set (records re-encoded against the new base)."""
    records = decode_records(chunk, pos, h, verify_crc=False)
    from logcore.records.batch import encode_record
    body = b"".join(encode_record(r.offset - h.base_offset, r.timestamp - horizon, r.key, r.value, r.headers)
                    for r in records)
    return assemble_batch(body, base_offset=h.base_offset, attributes=h.attributes | DELETE_HORIZON_MASK,
                          last_offset_delta=h.last_offset_delta, base_timestamp=horizon,
                          max_timestamp=h.max_timestamp, producer_id=h.producer_id,
                          producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                          records_count=h.records_count, partition_leader_epoch=h.partition_leader_epoch)



def _aborted_transactions(log, upper: int) -> list:
    found = []
    for seg in list(log.segments):
        if log.has_aborted_transactions(seg.base_offset):
            found.extend(a for a in seg.txn_index.all_aborted() if a.first_offset < upper)
    return sorted(found, key=lambda a: (a.first_offset, a.last_offset))


def _last_producer_offsets(log) -> dict[int, tuple[int, int]]:
    """producer id -> (last data offset, epoch) from the writer's producer state (under the
    log's lock: the writer adds producers while the pass runs)."""
    return log.producer_last_offsets()


def _group_by_size(to_clean: list, sealed: list, segment_bytes: int, first_uncleanable: int) -> list[list]:
    """Consecutive segments merged while their sizes add up to at most segment.bytes and their
    offsets fit one segment's 32-bit relative range (Kafka's groupSegmentsBySize)."""
    groups, i = [], 0
    bases = [s.base_offset for s in sealed]
    while i < len(to_clean):
        group = [to_clean[i]]
        size = to_clean[i].size()
        i += 1
        while i < len(to_clean):
            seg = to_clean[i]
            j = bases.index(seg.base_offset)
            last_estimate = (bases[j + 1] if j + 1 < len(bases) else first_uncleanable) - 1
            if size + seg.size() > segment_bytes or last_estimate - group[0].base_offset > INT32_MAX:
                break
            group.append(seg)
            size += seg.size()
            i += 1
        groups.append(group)
    return groups
