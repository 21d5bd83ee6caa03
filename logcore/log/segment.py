"""One log segment: a `.log` file of RecordBatch v2 batches plus its offset, time and txn indexes.

A segment is either *active* (the writer appends to it) or *sealed* (immutable). On a local disk
the active segment is a real file appended in place; on an object store it is held in memory and
published as immutable objects when the writer commits or rolls (object stores have no append).
Readers in other processes see a local active segment grow; they bound every read by offset
(the high watermark), never by what happens to be in the file. Its parts, each a module: file
names (segment_names), where the bytes live (segment_data, chosen once at open), its indexes
(segment_indexes), the recovery scan, the checks of what is served (segment_verification) and
fetch windows (segment_window).
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from logcore.errors import CorruptIndexError, CorruptRecordError
from logcore.records.batch import (F_POSITION, HEADER_SIZE, BatchHeader, batch_fields, first_record_at_or_after,
                                   iter_batches, may_hold_timestamp, parse_header)
from logcore.log.index_interval import IndexInterval
from logcore.forwarding import forwarded
from logcore.log.segment_data import open_segment_data
from logcore.log.segment_indexes import SegmentIndexes
from logcore.log.segment_names import (DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX,
                                       TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, parse_segment_name,
                                       segment_name)
from logcore.log.segment_recovery import SCAN_CHUNK, RecoveryScan, ScanResult
from logcore.log.segment_verification import (VerifiedRanges, batch_offsets_error, first_bad_row,
                                              index_entry_problem, next_good_batch,
                                              offset_index_from_headers, verify_mapped)
from logcore.log.segment_window import locate_window, read_window
from logcore.log.time_index import TimeIndex

# Callers import the file names and the scan result from here.
__all__ = ["DELETED_SUFFIX", "INDEX_SUFFIX", "INT32_MAX", "LOG_SUFFIX", "SNAPSHOT_SUFFIX",
           "TIME_INDEX_SUFFIX", "TXN_INDEX_SUFFIX", "LogSegment", "ScanResult",
           "parse_segment_name", "segment_name"]

log = logging.getLogger(__name__)

# A header scan's first read: the batches of an index interval (4 KiB by default) and the one
# after it, so a lookup from the offset index's entry costs one read even for 1 KiB batches.
FIRST_SCAN_CHUNK = 16 * 1024
INT32_MAX = 2**31 - 1
_MAP_VERIFY_BYTES = 256 << 10   # a range this large is verified through a map, a smaller one copied


class LogSegment:
    """A `.log` file and its indexes, starting at `base_offset`."""

    def __init__(self, storage, directory: str, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int, writable: bool, in_memory: bool = False,
                 created_ms: int | None = None, limit_bytes: int | None = None,
                 stem: str | None = None):
        self.storage = storage
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.writable = writable
        self.in_memory = in_memory
        # stem: the file name before the suffix; a cleaned object-store segment has its own
        # (`<base>.<token>`), everything else Kafka's 20-digit base offset.
        self.stem = stem or segment_name(base_offset, "")
        self.log_path = storage.join(directory, self.stem + LOG_SUFFIX)
        self.index_path = storage.join(directory, self.stem + INDEX_SUFFIX)
        self.time_index_path = storage.join(directory, self.stem + TIME_INDEX_SUFFIX)
        self.txn_index_path = storage.join(directory, self.stem + TXN_INDEX_SUFFIX)
        self.data = open_segment_data(storage, self.log_path, writable=writable, in_memory=in_memory)
        # A read-only view of a file that may have a torn tail: reads stop at `limit_bytes`.
        self.limit_bytes = limit_bytes
        self.indexes = SegmentIndexes(storage, base_offset, index_path=self.index_path,
                                      time_index_path=self.time_index_path,
                                      txn_index_path=self.txn_index_path, max_index_size=max_index_size,
                                      writable=writable, unpublished=in_memory)
        self.created_ms = created_ms if created_ms is not None else int(time.time() * 1000)
        self.index_interval = IndexInterval(index_interval_bytes)
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        # File position after the last whole batch the last header scan to the end reached.
        self.scanned_end: int | None = None
        # A corrupt offset index found on use is rebuilt; the writer also writes it to disk.
        self.persist_rebuilt_index = False
        self.index_rebuilds = 0
        # (offset, position) where readers that skipped damage go on (Log.skip_damage)
        self.resume_points: list[tuple[int, int]] = []
        # No gaps between batches (a topic never compacted): each batch starts where the last
        # ended, the first at the segment's base, so a base offset moved either way shows.
        self.contiguous = False
        # Byte ranges whose batches were verified (CRC, offsets) or appended: see verify_range.
        self._verified = VerifiedRanges()
        # A fresh in-memory segment is empty; see next_offset() for why it is set here.
        self._next_offset: int | None = base_offset if in_memory else None

    offset_index = forwarded("indexes.offset", "The offset index (opened on first use).")
    time_index = forwarded("indexes.time", "The time index (opened on first use).")
    txn_index = forwarded("indexes.txn", "The transaction index (opened on first use).")

    def check_index_against_log(self) -> None:
        """Kafka's sanity checks plus: no index entry may point past the end of the `.log`."""
        self.indexes.check_against_log(self.size)

    # ---------------------------------------------------------------- sizes and offsets
    def size(self) -> int:
        size = self.data.size()
        return min(size, self.limit_bytes) if self.limit_bytes is not None else size

    def next_offset(self) -> int:
        """Offset after the last batch in this segment (base offset when empty).

        Computed on first use and cached. The lazy computation is only safe where nobody appends
        meanwhile: any thread may call this without the log's lock (the cleaner reads the LEO),
        and a value computed before an append but stored after it would put the LEO back. So a
        writer fills it before other threads can see a segment it appends to (`fill_lazy_state`
        in `Log.roll_to`), appends and truncation set it, and only sealed segments and
        read-only views compute it.
        """
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    def forget_next_offset(self) -> None:
        """A reader following another process's writer: the file may have grown since, so the
        next offset is computed again on use."""
        self._next_offset = None

    def fill_lazy_state(self) -> None:
        """Open the indexes and compute the next offset now. A writer calls this under its lock
        before other threads can see a segment it will append to: filled lazily by another
        thread, they would race its appends (a stale next offset stored over the one an append
        set, see next_offset; or a second writable index object over the same file, loading the
        first one's zero preallocation as entries)."""
        self.indexes.load()
        self._next_offset = self.next_offset()

    def _read_next_offset(self) -> int:
        entry_offset, position = self.offset_index.lookup(2**63 - 1)
        next_offset = self.base_offset
        if entry_offset > self.base_offset or position > 0:
            next_offset = entry_offset
        for _pos, header in self.scan_headers(position):
            next_offset = header.next_offset
        return next_offset

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp in the segment (time index, or a scan of the tail)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        if not self.indexes.time_loaded and not self.writable:
            # A sealed segment's last time-index entry holds its largest timestamp: read 12 bytes
            # instead of loading the whole index (timestamp lookups over thousands of segments).
            tail = TimeIndex.last_timestamp_in_file(self.storage, self.time_index_path)
            if tail is not None:
                return tail
        ts, offset = self.time_index.last_entry
        _, position = self.offset_index.lookup(max(offset, self.base_offset))
        for _pos, header in self.scan_headers(position):
            ts = max(ts, header.max_timestamp)
        return ts

    # ---------------------------------------------------------------- reading
    def read_bytes(self, start: int, end: int, buffer: bytearray | None = None) -> bytes | memoryview:
        end = min(end, self.size())
        if end <= start:
            return b""
        return self.data.read(start, end, buffer)

    def scan_headers(self, start: int = 0, end: int | None = None, *, strict: bool = False,
                     head: bytes | None = None):
        """Batch headers from `start` (a batch boundary) to `end`, without CRC checks.

        Reads in chunks; stops quietly at a partial trailing batch (a torn tail or a batch that
        is still being written by another process), or with `strict` (the caller looks for data
        that must be complete, below the high watermark) raises CorruptRecordError there. Offsets
        are checked whatever `strict`: each batch's base offset above the previous batch's last
        offset and at or above the segment's base (the CRC does not cover the base offset).
        `head`: the bytes already read at `start` (see `first_scan_chunk`), the first chunk.
        """
        limit = self.size() if end is None else min(end, self.size())
        pos = start
        prev_next = None
        prev = None
        base, contiguous = self.base_offset, self.contiguous
        # Start with a lookup's chunk (the headers past the index entry) and grow the chunk
        # for long scans.
        chunk_size = self.first_scan_chunk()
        while pos + HEADER_SIZE <= limit:
            if head is not None:
                chunk = head if len(head) <= limit - pos else head[:limit - pos]
                head = None
            else:
                chunk = self.read_bytes(pos, min(limit, pos + chunk_size))
            chunk_size = min(SCAN_CHUNK, chunk_size * 4)
            off = 0
            while off + HEADER_SIZE <= len(chunk):
                header = parse_header(chunk, off)
                try:
                    if header.magic != 2 or header.size < HEADER_SIZE:
                        # Let the validating path produce the precise error.
                        list(iter_batches(chunk[off:off + HEADER_SIZE + 64], source=self.log_path,
                                          base_position=pos + off, verify_crc=False))
                        raise CorruptRecordError(f"invalid batch header (size {header.size}, magic {header.magic})",
                                                 file=self.log_path, position=pos + off)
                    if pos + off + header.size > limit:
                        if strict:
                            raise CorruptRecordError(
                                f"batch declares {header.size} bytes, past the end of the segment"
                                f" ({limit} bytes)", file=self.log_path, position=pos + off)
                        if end is None:
                            self.scanned_end = pos + off
                        return
                    why = batch_offsets_error(header, base, contiguous, prev_next, pos + off)
                    if why is not None:
                        raise CorruptRecordError(why, file=self.log_path, position=pos + off)
                except CorruptRecordError as exc:
                    self.blame_previous(prev, exc)
                prev = (pos + off, header.size)
                prev_next = header.next_offset
                yield pos + off, header
                off += header.size
            if off == 0:
                return
            pos += off
        if strict and pos < limit:
            raise CorruptRecordError(f"{limit - pos} trailing bytes, shorter than a batch header",
                                     file=self.log_path, position=pos)
        if end is None:
            self.scanned_end = pos

    def check_straddling(self, position: int, header: BatchHeader, strict: bool) -> None:
        """A batch read below the bound (the HW) that reaches past it is not served, as Kafka;
        when the read is `strict` (the offset is below the HW, so the batch is committed data)
        its CRC must hold: a damaged lastOffsetDelta would otherwise hide committed records."""
        if strict:
            data = self.read_bytes(position, position + header.size)
            batch_fields(data, source=self.log_path, verify_crc=True, base_position=position)

    def blame_previous(self, prev: tuple[int, int] | None, exc: CorruptRecordError):
        """Raise `exc`, found at the header after the batch `prev` (position, size), or the
        CRC error of that batch when it has one: a damaged length field sends a header scan
        into the middle of the data, and the batch to name is the one whose length is wrong."""
        if prev is not None:
            position, size = prev
            data = self.read_bytes(position, position + size)
            try:
                batch_fields(data, source=self.log_path, verify_crc=True, base_position=position)
            except CorruptRecordError as crc_error:
                raise crc_error from exc
        raise exc

    def translate_offset(self, offset: int, start_position: int = 0, *,
                         strict: bool = False) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= offset (strict: see
        scan_headers)."""
        _, position, head = self.checked_lookup(offset)
        start = max(position, start_position)
        for pos, header in self.scan_headers(start, strict=strict,
                                             head=head if start == position else None):
            if header.last_offset >= offset:
                return pos, header
        return None

    def checked_lookup(self, offset: int) -> tuple[int, int, bytes | None]:
        """The offset index's entry for `offset`, checked against the batch it points at: a
        batch whose last offset is the entry's. An entry that does not match means the index
        is corrupt (Kafka's sanity check cannot see a wrong position): it is logged, rebuilt
        from the `.log` and never used. With the entry (offset, position), the bytes read at
        its position for the check (a header scan's first chunk, so the scan from there does
        not read them again), or None when none were read."""
        entry_offset, position = self.offset_index.lookup(offset)
        for resume_offset, resume_position in self.resume_points:
            # a reader skipped damage here (failOnDataLoss=false): start past it
            if resume_offset <= offset and resume_position > position:
                entry_offset, position = resume_offset, resume_position
        if self.resume_points and position in {p for _o, p in self.resume_points}:
            return entry_offset, position, None
        if position == 0 and entry_offset == self.base_offset:
            return entry_offset, position, None
        head = self.read_bytes(position, position + self.first_scan_chunk())
        problem = index_entry_problem(head, entry_offset, position, self.size())
        if problem is None:
            return entry_offset, position, head
        self.rebuild_offset_index(problem)
        return *self.offset_index.lookup(offset), None

    def first_scan_chunk(self) -> int:
        """Bytes of a header scan's first read: an index interval's batches and the next."""
        return min(SCAN_CHUNK, max(FIRST_SCAN_CHUNK, 2 * self.index_interval_bytes))

    def index_entry_problem(self, entry_offset: int, position: int) -> str | None:
        """Why the offset-index entry (entry_offset, position) is wrong, or None."""
        head = self.read_bytes(position, position + HEADER_SIZE)
        return index_entry_problem(head, entry_offset, position, self.size())

    def rebuild_offset_index(self, problem: str) -> None:
        """Replace a corrupt offset index by one built from the `.log`'s batch headers (in
        memory; on disk too when `persist_rebuilt_index`, the writer of a sealed segment)."""
        index = self.indexes.empty_offset_index()
        # A damaged `.log` (e.g. a batch's base offset changed) raises here, naming the .log:
        # then the index is not what is wrong.
        offset_index_from_headers(index, self.scan_headers(0), self.index_interval_bytes)
        if self.writable:
            raise CorruptIndexError(f"the active segment's offset index is corrupt: {problem}",
                                    file=self.index_path)
        log.warning("offset index %s is corrupt (%s): rebuilt from %s", self.index_path, problem,
                    self.log_path)
        self.indexes.replace_offset(index)
        self.index_rebuilds += 1
        if self.persist_rebuilt_index:
            try:
                self.storage.write_atomic(self.index_path, index.to_bytes())
            except Exception as exc:  # noqa: BLE001 - the rebuilt index in memory still serves
                log.warning("could not write the rebuilt index %s: %s", self.index_path, exc)

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True, *,
             view: bool = False, buffer: bytearray | None = None) -> bytes | memoryview:
        """Whole batches from the one holding `offset`, each wholly below `max_offset` (a
        memoryview over the bytes read when `view`, else bytes; read into `buffer` when one is
        given and the storage can, then valid until the buffer's next use).

        As Kafka, a batch that straddles the bound (the HW or LSO) is not served at all.
        """
        return self.read_window(offset, max_bytes, max_offset, min_one_batch, view=view, buffer=buffer)[1]

    def read_window(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True, *,
                    view: bool = False, buffer: bytearray | None = None, strict: bool = False,
                    next_base: int | None = None) -> tuple[int, bytes | memoryview]:
        """(file position of the data, data) of `read`. With `strict` (offset below the HW) a
        batch that cannot be whole (a length past the end of the file) is an error, not an end;
        the offsets of the batches read are checked (rising, in this segment, below
        `next_base`, the next segment's base) whatever `strict`."""
        return read_window(self, offset, max_bytes, max_offset, min_one_batch, view, buffer, strict, next_base)

    def locate(self, offset: int, max_bytes: int, max_offset: int,
               min_one_batch: bool = True, *, strict: bool = False) -> tuple[int, int, int]:
        """(start, end, next offset) of the batches `read` would return, found from the offset
        index and the batch headers alone: the data between is not read (zero-copy fetch).
        start == end when there is nothing to return.
        """
        return locate_window(self, offset, max_bytes, max_offset, min_one_batch, strict)

    def header_at(self, pos: int) -> BatchHeader:
        """The header of the batch at `pos`, which must look like one (magic, length)."""
        header = parse_header(self.read_bytes(pos, pos + HEADER_SIZE))
        if header.magic != 2 or header.size < HEADER_SIZE:
            raise CorruptRecordError(f"invalid batch header (size {header.size}, magic {header.magic})",
                                     file=self.log_path, position=pos)
        return header

    def verify_range(self, start: int, data=None, end: int | None = None,
                     next_base: int | None = None) -> int:
        """Check the batches in [start, end) of the file (their bytes are `data` when the caller
        has them): CRC, length, magic, offsets. Returns the position of the first bad batch
        (the caller serves what lies before it) or `end` when all are good. Verified ranges,
        and what append() wrote, are remembered until a truncation cuts them, so a range is
        checked once, not at every fetch."""
        if end is None:
            end = start + len(data)
        if end <= start or self._verified.covers(start, end):
            return end
        if data is None and end - start >= _MAP_VERIFY_BYTES:
            mapping = self.data.map_range(start, end)    # None where the bytes are not in a file
            if mapping is not None:
                return verify_mapped(lambda view: self.verify_range(start, view, end, next_base), *mapping)
        if data is None:
            data = self.read_bytes(start, end)
        try:
            fields = batch_fields(data, source=self.log_path, verify_crc=True, allow_partial_tail=False,
                                  base_position=start)
            bad = first_bad_row(fields, self.base_offset, self.contiguous, None, next_base)
            if bad is not None:
                raise CorruptRecordError(bad[1], file=self.log_path,
                                         position=start + int(fields[bad[0], F_POSITION]))
        except CorruptRecordError as exc:
            bad = exc.position if exc.position is not None else start
            if bad > start:
                # what lies before the damage is good: verify it alone
                return self.verify_range(start, memoryview(data)[:bad - start], bad, next_base)
            raise
        self._verified.mark(start, end)
        return end

    def _is_verified(self, start: int, end: int) -> bool:
        return self._verified.covers(start, end)

    def resync(self, position: int, min_base: int | None = None) -> tuple[int, int] | None:
        """(position, base offset) of the first whole batch after damage at `position` that
        passes every check (magic, length, CRC, offsets at or above the segment base), or None
        when the rest of the segment holds none. A reader told to skip lost data
        (failOnDataLoss=false) skips exactly the bytes in between."""
        found = next_good_batch(bytes(self.read_bytes(position, self.size())),
                                max(self.base_offset, min_base or 0))
        return None if found is None else (position + found[0], found[1])

    @property
    def is_local_file(self) -> bool:
        """The bytes are in a local file: a fetch may send them zero-copy from its descriptor."""
        return self.data.has_file

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`."""
        _, index_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(index_offset, starting_offset))
        for pos, header in self.scan_headers(position):
            if may_hold_timestamp(header, timestamp, starting_offset):
                found = first_record_at_or_after(self.read_bytes(pos, pos + header.size), 0, timestamp,
                                                 starting_offset, source=self.log_path, base_position=pos)
                if found is not None:
                    return found
        return None

    # ---------------------------------------------------------------- writing
    def _load_max_timestamp(self) -> None:
        """A reopened non-empty segment: its max timestamp so far, as Kafka takes it lazily from
        the time index's last entry (scanning the batch headers when the index is empty), so that
        appending older timestamps never offers the time index an entry below its last one."""
        ts, offset = self.time_index.last_entry
        if ts < 0:
            for _pos, h in self.scan_headers(0):
                if h.max_timestamp > ts:
                    ts, offset = h.max_timestamp, h.last_offset
        if ts >= 0:
            self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, offset

    def append(self, data, headers: list[BatchHeader]) -> int:
        """Append validated batches (their offsets already assigned); returns the position."""
        position = self.data.size()
        if headers and self.first_batch_timestamp is None and position == 0:
            self.first_batch_timestamp = headers[0].max_timestamp
        if self.max_timestamp_so_far < 0 and position > 0:
            self._load_max_timestamp()
        offset_index, time_index = self.offset_index, self.time_index
        undo = (self.first_batch_timestamp, self.max_timestamp_so_far, self.offset_of_max_timestamp,
                self._next_offset, self.index_interval.since, offset_index.entries,
                time_index.entries)
        try:
            self.data.append(data)
            self._index_batches(position, headers, offset_index, time_index)
        except OSError:
            # A full disk (ENOSPC) or an I/O error in the `.log` or an index: all or nothing,
            # so the segment is left exactly as it was (no torn batch, no index entry for a
            # batch that is not there, the next offset not moved) and the append can be retried.
            self._undo_append(position, undo)
            raise
        # Batches reach append() checked (CRC, offsets): serving them needs no second check.
        self._verified.mark(position, position + len(data))
        return position

    def _undo_append(self, position: int, undo: tuple) -> None:
        (self.first_batch_timestamp, self.max_timestamp_so_far, self.offset_of_max_timestamp,
         self._next_offset, self.index_interval.since, offset_entries, time_entries) = undo
        if self.data.size() > position:
            self.data.truncate(position)
        if self.offset_index.entries > offset_entries:
            self.offset_index.truncate_to_entries(offset_entries)
        if self.time_index.entries > time_entries:
            self.time_index.truncate_to_entries(time_entries)

    def index_existing(self, positions: np.ndarray, sizes: np.ndarray, last_offsets: np.ndarray,
                       max_timestamps: np.ndarray) -> None:
        """Index the batches already in this fresh segment's `.log` (a staged file adopted as
        the segment), with the same entries `append` would have made, written in bulk."""
        if len(positions) == 0:
            return
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = int(max_timestamps[0])
        picked = self.index_interval.pick(sizes.tolist())
        running_max = np.maximum.accumulate(max_timestamps)
        # offset of the running maximum: the last offset of the batch that first reached it
        new_max = np.concatenate(([True], running_max[1:] > running_max[:-1]))
        holder = np.maximum.accumulate(np.where(new_max, np.arange(len(sizes)), 0))
        max_offsets = last_offsets[holder]
        if picked:
            at = np.asarray(picked, dtype=np.int64)
            self.offset_index.append_entries(last_offsets[at] - self.base_offset, positions[at])
            ts, offs = running_max[at], max_offsets[at]
            keep = np.concatenate(([ts[0] > self.time_index.max_timestamp], ts[1:] > ts[:-1]))
            keep &= ts >= 0
            self.time_index.append_entries(ts[keep], offs[keep] - self.base_offset)
        if running_max[-1] > self.max_timestamp_so_far:
            self.max_timestamp_so_far = int(running_max[-1])
            self.offset_of_max_timestamp = int(max_offsets[-1])
        self._next_offset = int(last_offsets[-1]) + 1

    def _index_batches(self, position: int, headers: list[BatchHeader], offset_index, time_index) -> None:
        batch_pos = position
        due = self.index_interval.due
        last_offset = None
        for header in headers:
            size, last_offset = header.size, header.last_offset
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp = last_offset
            if due(size):
                offset_index.append(last_offset, batch_pos)
                time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            batch_pos += size
        if last_offset is not None:
            self._next_offset = last_offset + 1

    def should_roll(self, batch_size: int, max_timestamp: int, last_offset: int, *,
                    segment_bytes: int, segment_ms: int, now_ms: int, pending_bytes: int = 0,
                    pending_batches: int = 0, pending_first_timestamp: int | None = None) -> bool:
        """Kafka's roll rules for appending one more batch. `pending_*` describe batches that
        will be written before it in the same run (an append of many staged batches)."""
        size = self.size() + pending_bytes
        if size > segment_bytes - batch_size:
            return True
        if size > 0:
            if self.first_batch_timestamp is None and self.size() == 0:
                if pending_first_timestamp is not None:
                    waited = max_timestamp - pending_first_timestamp
                    if pending_first_timestamp >= 0 and waited > segment_ms:
                        return True
            elif self.first_batch_timestamp is None:
                # A segment reopened with data in it: as Kafka, take the roll time from its
                # first batch, not from when this process opened it.
                head = self.read_bytes(0, HEADER_SIZE)
                if len(head) == HEADER_SIZE:
                    self.first_batch_timestamp = parse_header(head).max_timestamp
            if self.first_batch_timestamp is not None and self.first_batch_timestamp >= 0:
                waited = max_timestamp - self.first_batch_timestamp
            elif self.first_batch_timestamp is None and self.size() == 0:
                waited = -1
            else:
                waited = now_ms - self.created_ms
            if waited > segment_ms:
                return True
        if pending_batches:
            # Each pending batch adds at most one entry to each index.
            if (self.offset_index.entries + pending_batches >= self.offset_index.max_entries
                    or self.time_index.entries + pending_batches >= self.time_index.max_entries - 1):
                return True
        elif self.offset_index.is_full() or self.time_index.is_full():
            return True
        return last_offset - self.base_offset > INT32_MAX

    def seal(self, *, fsync: bool = True) -> None:
        """The segment stops being active: final time-index entry, trimmed indexes, data
        fsynced (unless the caller has that done elsewhere: a writer's background flush)."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.trim()
        self.time_index.trim()
        if fsync:
            self.data.flush()

    def flush(self) -> None:
        for flush in self.flush_calls():
            flush()

    def flush_calls(self) -> list:
        """What `flush` does, one call per file (the .log and each writable index), for a
        caller that syncs several files at once."""
        return [self.data.flush, *self.indexes.flush_calls()]

    def publish(self) -> None:
        """Object store: write this in-memory segment as immutable objects (`.log` first).

        The `.log` object is created with If-None-Match, so a fenced writer can never replace a
        segment that another writer published, and it goes first so that a writer losing that
        race writes nothing at all (not over the winner's index objects). A reader that lists
        the `.log` before its indexes are there finds no index and scans the segment; it never
        reads it anyway until the high watermark, committed after publish, covers it.

        The indexes are PUT at the same time (one round trip, not two or three): their order
        makes no crash safer. A crash among them leaves a segment above the committed HW, which
        a writer's open checks: a missing offset index is rebuilt from the `.log` (as when the
        crash came before any PUT); a missing time index, possible before too (a crash after the
        offset index), reads as empty.
        """
        assert self.in_memory
        self.seal()
        published = self.data.publish(self.storage, self.log_path)    # SegmentExists when lost
        puts = [(self.index_path, self.offset_index.to_bytes()),
                (self.time_index_path, self.time_index.to_bytes())]
        if self.txn_index.entries:
            puts.append((self.txn_index_path, self.txn_index.to_bytes()))
        with ThreadPoolExecutor(len(puts), thread_name_prefix="segment-index-put") as pool:
            # every PUT has ended when publish returns (or raises the first one's error)
            for done in [pool.submit(self.storage.write_atomic, path, data) for path, data in puts]:
                done.result()
        self.data = published
        self.in_memory = False
        self.indexes.unpublished = False
        self.writable = False

    # ---------------------------------------------------------------- recovery and truncation
    def recover(self, on_batch=None, *, write: bool = True, may_cut=None) -> ScanResult:
        """Validate every batch, rebuild the indexes, and cut a torn or corrupt tail.

        `on_batch(header, data_of_batch)` is called for each valid batch (producer state and
        leader-epoch replay). With write=False (read-only copies) nothing is written: the torn
        tail is only hidden through `limit_bytes` and the indexes are rebuilt in memory.
        `may_cut(segment, result)`, when given, decides before anything is cut: it returns
        False to leave the bytes as they are (the result then says 0 bytes truncated, with the
        error) or raises.
        """
        # A read-only copy rebuilds the indexes in memory, never touching the files.
        self.indexes.start_over(in_place=write)
        self.index_interval.reset()
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = None
        file_size = self.data.size()
        scan = RecoveryScan(self.data, file_size, base_offset=self.base_offset,
                            contiguous=self.contiguous, source=self.log_path)
        for pos, header, data in scan.batches():
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = header.max_timestamp
            if self.index_interval.due(header.size):
                self.offset_index.append(header.last_offset, pos)
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            if on_batch is not None:
                on_batch(header, data, self)
        valid, next_offset, error = scan.valid_bytes, scan.next_offset, scan.error
        truncated = file_size - valid
        self.scanned_end = valid
        if truncated and may_cut is not None and not may_cut(self, scan.result(truncated)):
            truncated = 0
            error = error or f"{file_size - valid} trailing bytes"
        if truncated:
            if write:
                self.data.truncate(valid)
                self._verified.forget_from(valid)
                if next_offset is not None:
                    self.txn_index.truncate_to(next_offset)
            else:
                self.limit_bytes = valid
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self._next_offset = next_offset if next_offset is not None else self.base_offset
        return ScanResult(valid, truncated, next_offset, error)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch at or above `offset` (cut at a batch boundary); returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        if header.base_offset < offset:
            # The batch holding `offset` starts below it: keep it whole, cut after it.
            position += header.size
        size = self.data.size()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.data.truncate(position)
        self._verified.forget_from(position)
        # Recompute the in-memory max timestamp and the next offset from what is left. The next
        # offset is set, not reset for a lazy recomputation: see next_offset().
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        next_offset = self.base_offset
        for _pos, h in self.scan_headers(0):
            if h.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = h.max_timestamp
                self.offset_of_max_timestamp = h.last_offset
            next_offset = h.next_offset
        self._next_offset = next_offset
        self.index_interval.reset()
        return size - position

    def close(self, *, sync: bool = True) -> None:
        """Seal (an active segment) and release the files; sync=False skips the fdatasync, for
        a segment whose files are deleted next or synced elsewhere."""
        if self.writable and not self.in_memory:
            self.seal(fsync=sync)
        self.indexes.close()
        self.data.close()

    def delete_files(self) -> None:
        for path in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
            self.storage.delete(path, missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size()})"
