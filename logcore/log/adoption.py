"""Appending batches this engine staged earlier (Spark sink tasks): `append_staged` copies them
in at the LEO; `adopt_staged` / `adopt_staged_many` make staged files segments without copying;
on an object store `publish_staged_objects` makes staged objects whose batches already carry
their offsets segments by a server-side copy or by completing their uploads (`stamp_offsets`
stamps them when staging).

`StagedAdoption` is a part of `Log` (logcore.log.log), holding the log: every step runs in the
writer's critical section.
"""
from __future__ import annotations

import mmap
import numpy as np
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from logcore.errors import FencedWriterError, RecordTooLargeError, SegLogError
from logcore.records.batch import (CONTROL_MASK, F_BASE_OFFSET, INT32_MAX, batch_fields, iter_batches,
                                   parse_header, set_base_offset, set_log_append_time,
                                   set_partition_leader_epoch)
from logcore.log.segment_flusher import sync_all
from logcore.log.segment import LogSegment
from logcore.log.clock import now_ms as _now_ms
from logcore.log.local_log import remove_fenced_leftover
from logcore.log.segment_data import ObjectData

# publish_staged_objects: a partition's part copies and index PUTs in flight at once
_PUBLISH_THREADS = 8


def _tiles(fields: np.ndarray | None, size: int) -> bool:
    """Whether `batch_fields` rows describe batches that exactly tile a file of `size` bytes."""
    if fields is None or fields.ndim != 2 or fields.shape[1] < 9 or len(fields) == 0:
        return False
    positions, sizes = fields[:, 0], fields[:, 1]
    return bool(positions[0] == 0 and (sizes > 0).all() and (positions[1:] == positions[:-1] + sizes[:-1]).all()
                and positions[-1] + sizes[-1] == size)


def stamp_offsets(buf, fields: np.ndarray, first: int, epoch: int) -> np.ndarray:
    """Give the batches of `buf` (their `batch_fields` rows) consecutive offsets from `first` and
    the leader epoch `epoch`, in place: the first 16 bytes of each header (baseOffset,
    batchLength unchanged, partitionLeaderEpoch), which the CRC does not cover. Updates the
    rows' F_BASE_OFFSET; returns each batch's last offset."""
    positions, sizes, deltas = fields[:, 0], fields[:, 1], fields[:, 3]
    bases = first + np.concatenate(([0], np.cumsum(deltas + 1)[:-1]))
    head = np.empty(len(fields), dtype=[("base", ">i8"), ("length", ">i4"), ("epoch", ">i4")])
    head["base"] = bases
    head["length"] = sizes - 12
    head["epoch"] = epoch
    view = np.frombuffer(buf, dtype=np.uint8)
    view[positions[:, None] + np.arange(16)] = head.view(np.uint8).reshape(-1, 16)
    del view
    fields[:, F_BASE_OFFSET] = bases
    return bases + deltas


def _prefetch_headers(fd: int, positions: np.ndarray) -> None:
    """Start reading the pages that hold each batch's first 16 bytes, all at once."""
    if not hasattr(os, "posix_fadvise"):
        return
    pages = np.unique(np.concatenate((positions // mmap.PAGESIZE, (positions + 15) // mmap.PAGESIZE)))
    # one call per run of consecutive pages
    breaks = np.flatnonzero(np.diff(pages) != 1) + 1
    for run in np.split(pages, breaks):
        os.posix_fadvise(fd, int(run[0]) * mmap.PAGESIZE, len(run) * mmap.PAGESIZE, os.POSIX_FADV_WILLNEED)


class StagedAdoption:
    """Appending and adopting staged batches and files."""

    def __init__(self, log):
        self._log = log
        self._segment_bytes = log.config.segment_bytes
        self._segment_ms = log.config.segment_ms

    def reconfigure(self, config) -> None:
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms

    def append_staged(self, data: bytes) -> tuple[int, int]:
        """Append batches this engine built earlier (e.g. staged by Spark sink tasks).

        Each batch is checked (size, magic, CRC), gets its offsets from the LEO and this writer's
        epoch (patched in place: the CRC does not cover them); the records are not re-validated.
        Runs of batches go to a segment in one write, with Kafka's roll rules applied per batch.
        Returns (first offset, last offset), or (-1, -1) for no batch.
        """
        source = f"{self._log.topic}-{self._log.partition} staged"
        buf = bytearray(data)
        batches = list(iter_batches(buf, source=source, allow_partial_tail=False))
        if not batches:
            return -1, -1
        if any(h.producer_id >= 0 or h.is_control for _, h in batches):
            # Producer state must see these one by one: the general path.
            first = last = -1
            with self._log.critical():
                for pos, header in batches:
                    info = self._log.append_locked(bytearray(buf[pos:pos + header.size]), _now_ms(),
                                                   validated=True, assign=True)
                    first = info.first_offset if first < 0 else first
                    last = info.last_offset
            return first, last
        now = _now_ms()
        log_append = self._log.log_append_time()
        with self._log.critical():
            if self._log.is_closed:
                raise SegLogError(f"{self._log.topic}-{self._log.partition} is closed")
            first = next_offset = self._log.log_end_offset
            self._log.note_epoch_start(self._log.leader_epoch, first)
            run_start, run_end, run_headers = batches[0][0], batches[0][0], []
            run_first_ts = None
            for pos, header in batches:
                if header.size > self._segment_bytes:
                    raise RecordTooLargeError(
                        f"batch of {header.size} bytes exceeds segment.bytes={self._segment_bytes}")
                set_base_offset(buf, next_offset, pos)
                set_partition_leader_epoch(buf, self._log.leader_epoch, pos)
                if log_append:
                    set_log_append_time(buf, now, pos)
                header = parse_header(buf, pos)
                active = self._log.segments[-1]
                if active.should_roll(header.size, header.max_timestamp, header.last_offset,
                                      segment_bytes=self._segment_bytes, segment_ms=self._segment_ms,
                                      now_ms=now, pending_bytes=run_end - run_start,
                                      pending_batches=len(run_headers),
                                      pending_first_timestamp=run_first_ts):
                    if run_headers:
                        active.append(memoryview(buf)[run_start:run_end], run_headers)
                    if active.in_memory:
                        self._log.commit_locked()
                    else:
                        self._log.roll_to(next_offset)
                    run_start, run_end, run_headers, run_first_ts = pos, pos, [], None
                if pos != run_end:          # batches are contiguous in the staged bytes
                    raise SegLogError(f"{source}: batch at {pos} does not follow {run_end}")
                if run_first_ts is None:
                    run_first_ts = header.max_timestamp
                run_headers.append(header)
                run_end = pos + header.size
                next_offset = header.next_offset
            if run_headers:
                self._log.segments[-1].append(memoryview(buf)[run_start:run_end], run_headers)
            self._log.add_unflushed(sum(h.records_count for _, h in batches))
            self._log.maybe_flush(now)
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
        if not parts or not self._log.segment_store.in_place or self._log.log_append_time():
            return []
        adopted: list[tuple[int, int]] = []
        written: list[LogSegment] = []       # adopted, sealed, not yet synced nor closed
        with self._log.critical():
            if self._log.is_closed:
                raise SegLogError(f"{self._log.topic}-{self._log.partition} is closed")
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
                    self._log.storage.sync_dir(self._log.dir)
                    # One roll for the lot: segments adopted back to back need no active
                    # segment (nor producer snapshot: they hold no producer ids) between them.
                    self._log.roll_to(adopted[-1][1] + 1)
        return adopted

    def _adopt_file(self, path: str, verify_crc: bool, fields: np.ndarray | None,
                    written: list, headers_cached: bool = False) -> tuple[int, int] | None:
        source = f"{self._log.topic}-{self._log.partition} staged {path}"
        with open(self._log.storage.local_path(path), "r+b") as f:
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
        max_entries = self._log.config.segment_index_bytes // 12      # the time index's, the smaller
        if (len(fields) == 0 or len(fields) >= max_entries - 1 or (producer_ids >= 0).any()
                or (attributes & CONTROL_MASK).any() or int(counts.sum()) - 1 > INT32_MAX):
            return None
        first = self._log.log_end_offset
        self._log.note_epoch_start(self._log.leader_epoch, first)
        last_offsets = stamp_offsets(mm, fields, first, self._log.leader_epoch)
        active = self._log.segments[-1]
        if active.size() == 0 and active.base_offset == first and not active.in_memory:
            # The empty active segment has the name the adopted file takes. Its files are
            # deleted right here: not synced first (nothing could rely on them).
            active.close(sync=False)
            active.delete_files()
            self._log.log_segments.pop_active()
        elif active.writable:
            active.seal()
            active.close()
            self._log.log_segments.replace_active(self._log.new_segment(active.base_offset, writable=False))
        seg = self._log.new_segment(first, writable=False)
        self._log.storage.link(path, seg.log_path, durable=False)     # folder fsync: adopt_staged_many
        seg = self._log.new_segment(first, writable=True)
        seg.index_existing(positions, sizes, last_offsets, max_ts)
        seg.seal(fsync=False)
        written.append(seg)
        self._log.log_segments.add(self._log.new_segment(first, writable=False))
        return first, int(last_offsets[-1])

    def publish_staged_objects(self, parts: list[tuple[object, np.ndarray]],
                               place: Callable[[object, str], bool] | None = None) -> list[tuple[int, int]] | None:
        """Object store: make staged objects segments of this log, the bytes not passing
        through this process.

        `parts` are (source, `batch_fields` rows) in offset order; their batches already carry
        their offsets and this writer's epoch (`stamp_offsets`: a Spark sink task stamped them
        with a range reserved for it, see the connector's staging area). Offsets must start at
        or above the LEO and follow each other within a part (gaps between parts are allowed:
        ranges reserved but never published). Checked before anything is done
        (`staged_objects_refusal`): None (nothing done) when the parts cannot be published as
        they are; the caller then appends them with `append_staged`. `place(source, path)`
        creates a part's `.log` at `path` if nothing is there (True) or returns False; by
        default `source` is a staged object's path, copied on the server with If-None-Match (as
        `publish` PUTs one). Then its indexes are PUT. Returns each part's (first, last offset).
        Not committed: the HW moves with the next commit.
        """
        log = self._log
        place = place or log.storage.copy_if_absent
        with log.critical():
            if self.staged_objects_refusal([fields for _source, fields in parts]) is not None:
                return None
            log.fence.check()
            active = log.log_segments.pop_active()
            published: list[tuple[int, int]] = []
            # Every part is placed at the same time (each at its own name, which its
            # If-None-Match decides); a segment's indexes are PUT once its `.log` is there.
            pool = ThreadPoolExecutor(min(2 * len(parts), _PUBLISH_THREADS), thread_name_prefix="segment-publish")
            try:
                segments = [self._sealed_segment(fields) for _source, fields in parts]
                placed = [pool.submit(place, source, seg.log_path) for (source, _fields), seg in zip(parts, segments)]
                puts = []
                for (source, fields), seg, done in zip(parts, segments, placed):
                    if not done.result():
                        # A fenced writer's uncommitted leftover at this base is replaced; one
                        # of a newer writer fences this one (as LocalLog.publish).
                        remove_fenced_leftover(log.storage, log.fence, seg, log.leader_epoch)
                        if not place(source, seg.log_path):
                            raise FencedWriterError(f"segment {seg.log_path} was published by another writer")
                    puts += [pool.submit(log.storage.write_atomic, seg.index_path, seg.offset_index.to_bytes()),
                             pool.submit(log.storage.write_atomic, seg.time_index_path, seg.time_index.to_bytes())]
                    published.append(self._add_published(seg, fields))
                for put in puts:
                    put.result()
            finally:
                pool.shutdown(wait=True)
                # appends go to a fresh in-memory segment after what was published
                log.roll_to(published[-1][1] + 1 if published else active.base_offset)
        return published

    def staged_objects_refusal(self, parts: list[np.ndarray]) -> str | None:
        """Why staged parts (their `batch_fields` rows, in offset order) cannot be published
        as segments by `publish_staged_objects` now, or None when they can: not an object store,
        a LogAppendTime topic, producer ids or control batches, offsets below the LEO or
        overlapping, a part over segment.bytes or with more batches than the indexes hold,
        appended data not yet published."""
        log = self._log
        if log.segment_store.in_place:
            return "its log is not on an object store"
        if log.log_append_time():
            return "the topic has message.timestamp.type=LogAppendTime (the commit stamps the time)"
        if not parts:
            return "no part"
        max_entries = log.config.segment_index_bytes // 12      # the time index's, the smaller
        with log.critical():
            if log.is_closed:
                raise SegLogError(f"{log.topic}-{log.partition} is closed")
            active = log.segments[-1] if log.segments else None
            if active is None or not active.in_memory or active.size() != 0:
                return "it has appended data not yet published"
            end = log.log_end_offset
            for fields in parts:
                size = int(fields[-1, 0] + fields[-1, 1]) if len(fields) else 0
                if not _tiles(fields, size):
                    return "a part's batches do not tile it"
                bases, deltas, producer_ids, attributes = fields[:, 2], fields[:, 3], fields[:, 5], fields[:, 6]
                if len(fields) >= max_entries - 1 or size > self._segment_bytes:
                    return (f"a part of {size} bytes in {len(fields)} batches exceeds segment.bytes="
                            f"{self._segment_bytes} or what segment.index.bytes indexes")
                if (producer_ids >= 0).any() or (attributes & CONTROL_MASK).any():
                    return "a part holds producer ids or control batches"
                if int(bases[0]) < end:
                    return (f"its log end offset is {log.log_end_offset}, past offset {int(bases[0])}"
                            " reserved for a part (another writer appended since the job was planned)"
                            if int(bases[0]) < log.log_end_offset else
                            f"two parts' reserved offsets overlap at {int(bases[0])}")
                if ((bases[1:] != bases[:-1] + deltas[:-1] + 1).any()
                        or int(bases[-1] + deltas[-1] - bases[0]) > INT32_MAX):
                    return "a part's offsets do not follow each other"
                end = int(bases[-1] + deltas[-1]) + 1
        return None

    def _sealed_segment(self, fields: np.ndarray) -> LogSegment:
        """The segment a staged part becomes, its indexes built from its batches' fields."""
        log = self._log
        positions, sizes, bases, deltas, max_ts = fields.T[:5]
        seg = log.new_segment(int(bases[0]), writable=True, in_memory=True)
        seg.index_existing(positions, sizes, bases + deltas, max_ts)
        seg.seal()
        return seg

    def _add_published(self, seg: LogSegment, fields: np.ndarray) -> tuple[int, int]:
        """A part's segment, copied: in the log from now on (read from its object)."""
        log = self._log
        positions, sizes, bases, deltas = fields.T[:4]
        log.note_epoch_start(log.leader_epoch, int(bases[0]))
        seg.data = ObjectData(log.storage, seg.log_path, int(positions[-1] + sizes[-1]))
        seg.in_memory = False
        seg.writable = False
        log.log_segments.add(seg)
        return int(bases[0]), int(bases[-1] + deltas[-1])
