"""Reading a log: fetches bounded by the HW / LSO / LEO with their aborted transactions, records,
skipping damage, and the timestamp lookup.

`LogReader` is a part of `Log` (logcore.log.log), holding the log; the log delegates to it.
"""
from __future__ import annotations

import bisect
import errno
import time
from dataclasses import dataclass, field
from typing import Iterator

from logcore.errors import (CorruptIndexError, CorruptRecordError, OffsetOutOfRangeError,
                            ResourceNotFoundError, SegLogError)
from logcore.records.batch import (F_BASE_OFFSET, F_LAST_DELTA, BatchHeader, Record, batch_fields,
                                   decode_records, iter_batches)
from logcore.records.control import ControlType, EndTransactionMarker, parse_control_type
from logcore.log.file_slice import FileSlice
from logcore.records import TimestampType
from logcore.log.segment import LogSegment

_READ_ATTEMPTS = 4          # a reader retries a read that met a segment the cleaner replaced


def _verified(seg: LogSegment, start: int, data, next_base: int | None):
    """`data` (bytes or a FileSlice at file position `start`) cut before its first damaged
    batch; CorruptRecordError (file and position) when that is the first batch."""
    if isinstance(data, FileSlice):
        try:
            end = seg.verify_range(start, end=start + data.size, next_base=next_base)
        except BaseException:
            data.close()
            raise
        if end < start + data.size:
            data.size = end - start
            data.next_offset = _next_offset_after(seg.read_bytes(start, end))
    else:
        end = seg.verify_range(start, data, next_base=next_base)
        if end < start + len(data):
            data = data[:end - start]
    return data


def _slice(seg: LogSegment, offset: int, max_bytes: int, bound: int, min_one_batch: bool, *,
           strict: bool = False) -> tuple[int, FileSlice | bytes]:
    """(file position, what `seg.read` would return as an open range of the segment's file
    (b"" for none))."""
    start, end, next_offset = seg.locate(offset, max_bytes, bound, min_one_batch, strict=strict)
    if end <= start:
        return start, b""
    try:
        fd = seg.data.open_fd()
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        # Out of descriptors (many slices in flight): copy this range instead of failing the read.
        return start, seg.read_bytes(start, end)
    return start, FileSlice(fd, start, end - start, next_offset, seg.log_path)


def _next_offset_after(data: bytes | FileSlice) -> int:
    """The offset after the last whole batch in `data` (which starts at a batch boundary)."""
    if isinstance(data, FileSlice):
        return data.next_offset
    fields = batch_fields(data, verify_crc=False, allow_partial_tail=True)
    if not len(fields):
        return -1
    return int(fields[-1, F_BASE_OFFSET] + fields[-1, F_LAST_DELTA]) + 1


def _end_marker(data, header: BatchHeader, source: str, pos: int) -> EndTransactionMarker | None:
    """The transaction marker in a control batch (None for other control record types).

    `data` holds just this batch; `pos` is where the batch sits in `source` (for errors)."""
    records = decode_records(data, 0, header, source=source, base_position=pos)
    if not records:
        return None
    if parse_control_type(records[0].key) not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    return EndTransactionMarker.decode(records[0].key, records[0].value)


@dataclass(frozen=True)
class FetchResult:
    data: bytes | FileSlice
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list = field(default_factory=list)
    source: str | None = None       # the segment file `data` was read from (None: remote tier)
    position: int = 0               # the file position of data[0], for error messages


class LogReader:
    """Fetches, record reads and the timestamp lookup."""

    def __init__(self, log):
        self._log = log

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
        log = self._log
        for attempt in range(_READ_ATTEMPTS):
            try:
                result = self._read(offset, max_bytes, isolation, min_one_batch, view, buffer, zero_copy)
                if result.data or log.writer or attempt > 0 or offset >= log.bound(isolation):
                    return result
                # Nothing where something must be: the segment's files may be gone.
            except (ResourceNotFoundError, FileNotFoundError, CorruptRecordError, CorruptIndexError):
                if log.writer or attempt == _READ_ATTEMPTS - 1:
                    raise
                time.sleep(0.01 * attempt)
            log.refresh()
            self._check_in_range(offset)
        raise SegLogError(f"{log.topic}-{log.partition}: offset {offset} could not be read")

    def read_nowait(self, offset: int, max_bytes: int = 1 << 20, **kwargs) -> FetchResult | None:
        """read() for a caller that must not block (the broker's event loop): None, having read
        nothing, when another thread holds the log's lock or `offset` lies before the active
        segment (older bytes may have to come from disk); the caller then reads in a thread."""
        if not self._log.writer or not self._log.segment_store.in_place:
            return None
        bases = self._log.bases
        if not bases or offset < bases[-1] or not self._log.lock.acquire(blocking=False):
            return None
        try:
            return self.read(offset, max_bytes, **kwargs)
        finally:
            self._log.lock.release()

    def skip_damage(self, offset: int, error: CorruptRecordError) -> tuple[int, str]:
        """A reader told to skip lost data (Spark's failOnDataLoss=false) met `error` reading
        at `offset`: (the next offset it can read, what it skips: the offsets and the damaged
        bytes of the file). The skip ends at the next whole batch that passes every check in
        the same segment, else at the next segment, else at the HW. Damage that no local
        segment holds (the remote tier) is raised again."""
        with self._log.lock:
            for i, seg in enumerate(self._log.segments):
                if seg.log_path == error.file:
                    break
            else:
                raise error
            position = error.position or 0
            found = seg.resync(position, min_base=offset + 1)
            if found is not None:
                end_position, next_offset = found
                if (next_offset, end_position) not in seg.resume_points:
                    seg.resume_points.append((next_offset, end_position))
            else:
                end_position = seg.size()
                next_offset = self._log.bases[i + 1] if i + 1 < len(self._log.bases) else self._log.high_watermark
            next_offset = max(next_offset, offset + 1)
            return next_offset, (f"offsets {offset}..{next_offset - 1} are unreadable: bytes {position}.."
                                 f"{end_position - 1} of {seg.log_path} are damaged ({error.reason})")

    def _check_in_range(self, offset: int) -> None:
        leo = self._log.log_end_offset
        if offset < self._log.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self._log.topic}-{self._log.partition}"
                f" (log start {self._log.log_start_offset}, log end {leo})",
                topic=self._log.topic, partition=self._log.partition, offset=offset,
                log_start_offset=self._log.log_start_offset, log_end_offset=leo)

    def _read(self, offset: int, max_bytes: int, isolation: str, min_one_batch: bool,
              view: bool = False, buffer: bytearray | None = None,
              zero_copy: bool = False) -> FetchResult:
        log = self._log
        with log.lock:
            bound = log.bound(isolation)
            self._check_in_range(offset)
            result = b""
            source, start = None, 0
            from_remote = False
            if offset < bound:
                position = offset
                if log.remote is not None and offset < log.local_log_start_offset:
                    result = log.remote.read(offset, max_bytes, bound, min_one_batch)
                    from_remote = bool(result)
                    if not from_remote:
                        position = log.local_log_start_offset
                i = log.log_segments.index_of(position)
                while not from_remote and i < len(log.segments):
                    seg = log.segments[i]
                    if seg.base_offset >= bound:
                        break
                    # Below the bound every batch is whole: a scan that stops early is damage.
                    next_base = log.bases[i + 1] if i + 1 < len(log.bases) else None
                    if zero_copy and seg.is_local_file:
                        start, result = _slice(seg, position, max_bytes, bound, min_one_batch, strict=True)
                    else:
                        start, result = seg.read_window(position, max_bytes, bound, min_one_batch, view=view,
                                                        buffer=buffer, strict=True, next_base=next_base)
                    if result and zero_copy:
                        # What a broker sends as stored is checked first (CRC, offsets), once
                        # per range of a sealed segment: the good part before damage goes out.
                        result = _verified(seg, start, result, next_base)
                    if result:
                        source = seg.log_path
                        break
                    if next_base is not None and seg.translate_offset(position, strict=True) is not None:
                        # A batch here holds `position` but was not served (it does not fit the
                        # budget, or reaches the bound): the answer is nothing, not a later
                        # segment's batches (the reader would skip the offsets in between).
                        break
                    if not log.writer and i + 1 < len(log.segments) and seg.size() == 0 \
                            and (seg.storage is None or not seg.storage.exists(seg.log_path)):
                        # An empty sealed segment whose file is gone: retention deleted it under
                        # us. (Kafka's cleaner leaves empty sealed segments: a segment whose
                        # records were all compacted away keeps its file; it is skipped.)
                        raise ResourceNotFoundError(f"segment {seg.log_path} is gone")
                    i += 1
                    if i < len(log.segments):
                        position = max(position, log.segments[i].base_offset)
            aborted = []
            # Aborted transactions can only come from the remote tier or a local .txnindex:
            # without either, the fetched batches are not walked again here.
            if isolation == "read_committed" and result and (from_remote or log.log_segments.any_txn_index):
                upper = _next_offset_after(result)
                complete = False
                if from_remote:
                    aborted, complete = log.remote.collect_aborted(offset, upper)
                if log.log_segments.any_txn_index and not complete:    # else no aborted transaction is local
                    aborted = aborted + self._collect_aborted(offset, upper)
            return FetchResult(result, log.high_watermark, log.last_stable_offset,
                               log.log_start_offset, aborted, source, start)

    def _collect_aborted(self, fetch_offset: int, upper_bound: int) -> list:
        """Aborted transactions overlapping [fetch_offset, upper_bound), as Kafka collects them.

        An entry sits in the segment of its marker, which may come after the fetched data, so the
        search goes on through later segments until an entry's LSO reaches the bound; only
        segments that have a transaction index are visited.
        """
        found = []
        segments = self._log.log_segments
        if not segments.any_txn_index:
            return found
        start = segments.bases[segments.index_of(fetch_offset)] if segments else 0
        for base in segments.txn_bases_from(start):
            i = segments.position_of(base)
            if i is None:
                continue
            seg = segments.list[i]
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
        position = max(offset, self._log.log_start_offset)
        while max_records is None or emitted < max_records:
            fetch = self.read(position, 1 << 20, isolation=isolation)
            if not fetch.data:
                return
            aborted = {(a.producer_id, a.first_offset, a.last_offset) for a in fetch.aborted}
            next_position = position
            where = {"source": fetch.source or f"{self._log.topic}-{self._log.partition}", "base_position": fetch.position}
            for pos, header in iter_batches(fetch.data, **where):
                next_position = header.next_offset
                if header.is_control or header.last_offset < position:
                    continue
                if header.is_transactional and any(
                        pid == header.producer_id and first <= header.base_offset <= last
                        for pid, first, last in aborted):
                    continue
                timestamp_type = header.timestamp_type
                for record in decode_records(fetch.data, pos, header, **where):
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
        with self._log.lock:
            found = None
            local_start = self._log.local_log_start_offset
            if self._log.remote is not None and self._log.log_start_offset < local_start:
                found = self._log.remote.find_offset_by_timestamp(timestamp_ms, self._log.log_start_offset,
                                                                  local_start)
            if found is None:
                found = self._local_offset_for_timestamp(timestamp_ms)
            if found is not None and found[0] < self._log.high_watermark:
                return found
            return None

    def _local_offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """The local segments' answer. The first segment whose largest timestamp reaches the
        target is found by binary search over the running maximum of the segments' largest
        timestamps (cached for sealed segments), then the segment's time and offset indexes
        narrow the scan."""
        if not self._log.segments:
            return None
        sealed = self._log.log_segments.sealed_running_max_timestamps()
        i = bisect.bisect_left(sealed, timestamp_ms)
        if i == len(sealed) and self._log.segments[-1].largest_timestamp < timestamp_ms:
            return None
        found = self._log.segments[i].find_offset_by_timestamp(timestamp_ms, self._log.log_start_offset)
        if found is None:
            # The running maximum came from an earlier segment: scan on from here.
            for seg in self._log.segments[i + 1:]:
                found = seg.find_offset_by_timestamp(timestamp_ms, self._log.log_start_offset)
                if found is not None:
                    break
        return found
