"""Where a log's segments live: one narrow protocol for what differs between a local-disk segment
store and an object-store one, with the two implementations. The `Log` calls its store
(`log.segment_store`, chosen once by `LogRoot.log` with the rest of the `LogBackend`) instead of
branching on the storage kind. The store calls its log through public names only
(`SegmentStoreHost`).

Local disk (`LocalSegmentStore`): the active segment is a file appended in place. The writer's
critical section holds the fence's lock across each write. A roll seals the active file and
fsyncs it in the background (the recovery point passes it once synced) and writes a producer
snapshot; a flush fsyncs; a commit may skip the fsync (the broker's); truncation cuts the file;
a clean close flushes, snapshots and leaves the clean-shutdown marker. Deleted segments' files
are renamed `*.deleted` and removed after file.delete.delay.ms.

Object store (`ObjectSegmentStore`): the active segment is held in memory until a commit
publishes it (the `.log`, then its indexes); objects are immutable, so rolling a non-empty
active segment means committing, and truncating a published one rewrites it in one PUT. Data is
durable once committed: a flush does nothing. The fence is checked by the conditional write of
the partition state, so no lock is held across writes. A deleted segment gets a
`<base>.log.deleted` marker; its objects go, `.log` first, after the delay.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from typing import Protocol

from logcore.errors import ResourceNotFoundError
from logcore.log.deletion import SEGMENT_SUFFIXES, delete_expired_local, delete_segment_files
from logcore.log.log_loader import CLEAN_SHUTDOWN, TEMP_SUFFIXES
from logcore.log.segment import (DELETED_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, LogSegment, parse_segment_name,
                                 segment_name)
from logcore.log.segment_flusher import segment_flusher
from logcore.records.batch import HEADER_SIZE, iter_batches, parse_header
from logcore.log.clock import now_ms as _now_ms


class SegmentStore(Protocol):
    """What the log asks of the place its segments live. Every method runs under the log's
    lock (and, for writes, inside `critical()`)."""

    # Segments are files written in place on this machine: appends and reads of the active
    # segment take no network round trip (the broker's non-blocking paths), a replica's log and
    # staged files adopted by hard link live here, and a rebuilt index is persisted.
    in_place: bool
    # A writer that lost the partition may still publish a segment (object stores: no lock
    # held across writes); the listing drops such segments by their epoch.
    fenced_writers_publish: bool

    def list_files(self) -> list[str]:
        """The names in the partition folder (empty when it does not exist)."""

    def segment_plan(self, names: list[str], bases: list[int], state) -> tuple[list, set[int]]:
        """(base, stem) of each segment and the bases of those with a `.txnindex`."""

    def records_cleaned_list(self) -> bool:
        """Whether the partition state lists segments the cleaner wrote (object stores)."""

    def delete_replaced(self, names: list[str], state) -> None:
        """A writer's open: remove what a cleaner pass left behind (object stores)."""

    def refreshed_segments(self, segments: list, plan: list, bases: list[int], state,
                           high_watermark: int) -> list:
        """A reader's refresh: the segments to hold now, reusing those still valid."""

    def critical(self):
        """Context manager around one write of the writer (the fence held as the store needs)."""

    def clean_leftovers(self, names: list[str]) -> None:
        """A writer's open: finish or roll back what a crash left (`names`: the folder listing)."""

    def take_over(self, state):
        """A writer's open: the committed state it continues from (fencing older writers)."""

    def writer_opened(self) -> None:
        """A writer's open is done: ready the log for appends."""

    def new_active(self, base_offset: int) -> LogSegment:
        """A fresh, empty active segment at `base_offset` (not yet in the log's list)."""

    def seal(self, active: LogSegment) -> None:
        """Seal the active segment that a roll leaves behind (its files stay, read-only)."""

    def rolled(self, base_offset: int) -> None:
        """After a roll to `base_offset`."""

    def flush(self) -> bool:
        """Make what was appended durable; True when it then is up to the LEO (the recovery
        point moves there), False when commits make it durable (a no-op)."""

    def before_commit(self, durable: bool) -> bool:
        """Prepare a commit (publish what it makes visible); returns whether the state write
        must be durable."""

    def recovery_point_to_record(self) -> int | None:
        """The recovery point a commit records (None: the store keeps none)."""

    def truncate_active(self, offset: int) -> None:
        """Cut the last segment (which holds offsets below `offset`) at `offset`."""

    def hw_lowered(self) -> None:
        """A truncation brought the HW below the committed one: record it where it must."""

    def close_writer(self) -> None:
        """A writer's clean close (inside the critical section)."""

    def modified_ms(self, seg: LogSegment) -> int:
        """When the segment's data was last written (retention.ms for a segment without
        timestamps); 2**62 (never breaches) where the store has no such time."""

    def retire_segment(self, base: int, now_ms: int) -> None:
        """Mark a deleted segment's files (readers holding it keep reading until the delay)."""

    def remove_retired(self, base: int) -> None:
        """Remove a retired segment's files now."""

    def delete_expired(self, now_ms: int) -> int:
        """Remove the retired segments whose file.delete.delay.ms has passed; returns how many."""


class SegmentStoreHost(Protocol):
    """What a segment store asks of its log (the `Log`): public names only."""

    storage: object
    dir: str
    config: object
    fence: object
    state_store: object
    producer_state: object
    epoch_cache: object
    log_segments: object
    writer: bool
    recovery_point: int
    high_watermark: int
    log_start_offset: int
    leader_epoch: int
    pending_flushes: object

    @property
    def segments(self) -> list: ...
    @property
    def bases(self) -> list[int]: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def recovery_point_unrecorded(self) -> bool: ...
    @property
    def state_unsynced(self) -> bool: ...
    def new_segment(self, base_offset: int, *, writable: bool, in_memory: bool = False,
                    stem: str | None = None) -> LogSegment: ...
    def roll_to(self, base_offset: int) -> LogSegment: ...
    def publish(self, seg: LogSegment) -> None: ...
    def flush_locked(self) -> None: ...
    def note_state_synced(self) -> None: ...
    def segment_synced(self, *args) -> None: ...


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


def _listed(segments: list, bases: list[int], new_segment) -> list:
    """`segments` that the listing still has, plus a new reader segment for each listed base
    not held yet."""
    known = {s.base_offset for s in segments}
    listed = set(bases)
    kept = [s for s in segments if s.base_offset in listed]
    return kept + [new_segment(base, writable=False) for base in bases if base not in known]


class LocalSegmentStore:
    """Segments as files on local disk."""

    in_place = True
    fenced_writers_publish = False

    def __init__(self, log):
        self.log = log
        self.storage = log.storage
        self.dir = log.dir
        self._seen_inodes: dict[int, int] = {}      # id(segment) -> its .log's inode at a reader's last refresh

    def list_files(self) -> list[str]:
        return self.storage.list_dir(self.dir) if self.storage.exists(self.dir) else []

    def segment_plan(self, names: list[str], bases: list[int], state) -> tuple[list, set[int]]:
        return [(b, None) for b in bases], _txn_index_bases(names)

    def records_cleaned_list(self) -> bool:
        return False

    def delete_replaced(self, names: list[str], state) -> None:
        pass            # the cleaner swaps files in by rename: clean_leftovers finished it

    def refreshed_segments(self, segments: list, plan: list, bases: list[int], state,
                           high_watermark: int) -> list:
        """Segments whose `.log` file was replaced (a cleaned segment swapped in under the same
        name) are opened afresh; the listing's inode numbers tell, without a stat per file."""
        return _listed(self._without_replaced(segments), bases, self.log.new_segment)

    def _without_replaced(self, segments: list) -> list:
        inodes = {}
        try:
            with os.scandir(self.storage.local_path(self.dir)) as it:
                for entry in it:
                    if entry.name.endswith(LOG_SUFFIX) and parse_segment_name(entry.name):
                        inodes[int(entry.name[:20])] = entry.inode()
        except FileNotFoundError:
            return list(segments)
        keep = []
        seen = {}
        for seg in segments:
            inode = inodes.get(seg.base_offset)
            known = self._seen_inodes.get(id(seg)) or getattr(seg.data, "inode", None)
            if known is not None and inode is not None and known != inode:
                seg = self.log.new_segment(seg.base_offset, writable=False)
            if inode is not None:
                seen[id(seg)] = inode
            keep.append(seg)
        self._seen_inodes = seen        # only segments still held: their ids are not reused
        return keep

    @contextmanager
    def critical(self):
        fence = self.log.fence
        fence.enter_critical()
        try:
            yield
        finally:
            fence.exit_critical()

    def clean_leftovers(self, names: list[str]) -> None:
        """`.deleted` and `.cleaned` files go; a `.swap` set is complete (its swap committed)
        unless a `.cleaned` file at or below its base is left, in which case it is rolled back
        too. A complete set replaces every segment file whose base lies in the range its
        `.log.swap` covers, then takes its final names."""
        log = self.log
        storage, directory = log.storage, log.dir
        join = storage.join
        cleaned = [p[0] for p in map(_temp_segment_name, names) if p and p[2] == ".cleaned"]
        min_cleaned = min(cleaned) if cleaned else None
        for name in names:
            if name.endswith(DELETED_SUFFIX) or name.endswith(".cleaned"):
                storage.delete(join(directory, name))
        swaps = [n for n in names if n.endswith(".swap")]
        if min_cleaned is not None:
            for name in [n for n in swaps if int(n[:20]) >= min_cleaned]:
                storage.delete(join(directory, name))
            swaps = [n for n in swaps if int(n[:20]) < min_cleaned]
        swap_logs = [n for n in swaps if n.endswith(LOG_SUFFIX + ".swap")]
        ranges = []
        for name in swap_logs:
            base = int(name[:20])
            ranges.append((base, _next_offset_of_file(storage, join(directory, name), base)))
        if ranges:
            for name in self.list_files():
                parsed = parse_segment_name(name)
                if not parsed or parsed[1] not in (LOG_SUFFIX, ".index", ".timeindex", ".txnindex", SNAPSHOT_SUFFIX):
                    continue
                if parsed[1] != SNAPSHOT_SUFFIX and any(lo <= parsed[0] < hi for lo, hi in ranges):
                    storage.delete(join(directory, name))
        for name in swaps:
            storage.rename(join(directory, name), join(directory, name[: -len(".swap")]))
        names = self.list_files()
        logs = {n[:20] for n in names if n.endswith(LOG_SUFFIX) and parse_segment_name(n)}
        for name in names:
            parsed = parse_segment_name(name)
            if parsed and parsed[1] in (".index", ".timeindex", ".txnindex") and name[:20] not in logs:
                storage.delete(join(directory, name))

    def take_over(self, state):
        return state            # the fence's epoch file fenced older writers

    def writer_opened(self) -> None:
        # Not clean any more: a crash from here on is recovered at the next open.
        self.log.storage.delete(self.log.storage.join(self.log.dir, CLEAN_SHUTDOWN), missing_ok=True)

    def new_active(self, base_offset: int) -> LogSegment:
        log = self.log
        log.storage.makedirs(log.dir)
        return log.new_segment(base_offset, writable=True)

    def seal(self, active: LogSegment) -> None:
        log = self.log
        if not log.writer:
            active.seal()
            active.close()
            return
        # As Kafka: the sealed segment is fsynced in the background, not under the log's lock;
        # the recovery point passes it once that fsync returned.
        pending = log.pending_flushes.seal(active.data.open_fd(), active.next_offset(), active.log_path)
        active.seal(fsync=False)
        segment_flusher().submit(pending, log.segment_synced)
        # not close(): it would seal again with an fdatasync, here under the lock
        active.close(sync=False)

    def rolled(self, base_offset: int) -> None:
        if self.log.writer:
            # As Kafka, a snapshot at every roll, empty or not: readers replay only what follows.
            # Not fsynced (Kafka flushes it later too): a snapshot torn by a power loss fails its
            # CRC and recovery falls back to an older one and replays from there.
            self.log.producer_state.write_snapshot(base_offset, durable=False)

    def flush(self) -> bool:
        for seg in self.log.segments:
            if seg.writable:
                seg.flush()
        return True

    def before_commit(self, durable: bool) -> bool:
        log = self.log
        if durable:
            log.flush_locked()
        # The recovery point moved (flush policy, roll): record it durably, as Kafka's
        # recovery-point checkpoint is.
        return durable or log.recovery_point_unrecorded

    def recovery_point_to_record(self) -> int | None:
        return self.log.recovery_point

    def truncate_active(self, offset: int) -> None:
        log = self.log
        last = log.segments[-1]
        if not last.writable:
            last.close()
            # Cut before it is published, for the same reason as in roll_to.
            reopened = log.new_segment(last.base_offset, writable=True)
            reopened.truncate_to(offset)
            log.log_segments.replace_active(reopened)
        else:
            last.truncate_to(offset)

    def hw_lowered(self) -> None:
        # The stored HW comes down too: it must never cover offsets appended later.
        log = self.log
        first = log.segments[0].base_offset if log.segments else log.log_end_offset
        log.state_store.commit(high_watermark=log.high_watermark, log_start_offset=log.log_start_offset,
                               first_segment_base=first, epoch=log.leader_epoch,
                               recovery_point=log.recovery_point)

    def close_writer(self) -> None:
        log = self.log
        log.flush_locked()
        log.producer_state.write_snapshot(log.log_end_offset)
        for seg in log.segments:
            seg.close()
        if log.state_unsynced:
            # The last commit's HW checkpoint was not fsynced: make it durable (with the
            # recovery point) before the marker says clean.
            first = log.segments[0].base_offset if log.segments else log.log_end_offset
            log.state_store.commit(high_watermark=log.high_watermark, log_start_offset=log.log_start_offset,
                                   first_segment_base=first, epoch=log.leader_epoch,
                                   recovery_point=log.log_end_offset)
            log.note_state_synced()
        else:
            log.state_store.set_recovery_point(log.log_end_offset)
        log.storage.write_atomic(log.storage.join(log.dir, CLEAN_SHUTDOWN), str(log.log_end_offset).encode())

    def modified_ms(self, seg: LogSegment) -> int:
        if not seg.in_memory:
            try:
                return int(os.stat(self.log.storage.local_path(seg.log_path)).st_mtime * 1000)
            except FileNotFoundError:
                pass
        return 2**62

    def retire_segment(self, base: int, now_ms: int) -> None:
        # Renamed `*.deleted`: an open reader keeps its view; the rename sets the change time.
        log = self.log
        for suffix in SEGMENT_SUFFIXES:
            path = log.storage.join(log.dir, segment_name(base, suffix))
            try:
                log.storage.rename(path, path + DELETED_SUFFIX)
            except ResourceNotFoundError:
                pass        # an index that was never written

    def remove_retired(self, base: int) -> None:
        log = self.log
        for suffix in SEGMENT_SUFFIXES:
            log.storage.delete(log.storage.join(log.dir, segment_name(base, suffix) + DELETED_SUFFIX),
                               missing_ok=True)

    def delete_expired(self, now_ms: int) -> int:
        log = self.log
        paths = delete_expired_local(log.storage, log.dir, log.config.file_delete_delay_ms, now_ms)
        return sum(p.endswith(LOG_SUFFIX + DELETED_SUFFIX) for p in paths)


class ObjectSegmentStore:
    """Segments as immutable objects, the active one in memory until published."""

    in_place = False
    fenced_writers_publish = True

    def __init__(self, log):
        self.log = log
        self.storage = log.storage
        self.dir = log.dir

    def list_files(self) -> list[str]:
        # One LIST: an object store lists a missing prefix as empty (no HEAD before it).
        return self.storage.list_dir(self.dir)

    def segment_plan(self, names: list[str], bases: list[int], state) -> tuple[list, set[int]]:
        """The cleaner's list in the partition state names the segments below its end; listed
        originals there were replaced."""
        txn_bases = _txn_index_bases(names)
        cleaned = getattr(state, "cleaned", None)
        if not cleaned:
            return [(b, None) for b in bases], txn_bases
        end = int(cleaned["end"])
        plan = [(int(b), str(stem)) for b, stem in cleaned["segments"]]
        for base, stem in plan:
            if stem + ".txnindex" in names:
                txn_bases.add(base)
        txn_bases = {b for b in txn_bases if b >= end or any(b == p[0] for p in plan)}
        return plan + [(b, None) for b in bases if b >= end], txn_bases

    def records_cleaned_list(self) -> bool:
        # Asked of the partition state, which keeps what it read for the open's load.
        return self.log.state_store.records_cleaned_list()

    def delete_replaced(self, names: list[str], state) -> None:
        """Originals below the cleaned end and cleaned objects that no list names (a pass that
        crashed before its switch; also with no cleaned list yet: a first pass killed before
        its switch leaves objects)."""
        cleaned = state.cleaned or {"end": 0, "segments": []}
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

    def refreshed_segments(self, segments: list, plan: list, bases: list[int], state,
                           high_watermark: int) -> list:
        new_segment = self.log.new_segment
        if state.cleaned or any(s.stem != segment_name(s.base_offset, "") for s in segments):
            # Cleaned segments are immutable under their unique names; an original at or above
            # the HW this reader knew may have been replaced by a new writer: open it afresh.
            known = {s.stem: s for s in segments
                     if s.base_offset < high_watermark or s.stem != segment_name(s.base_offset, "")}
            return [known.get(stem or segment_name(base, "")) or new_segment(base, writable=False, stem=stem)
                    for base, stem in plan]
        # An object segment at or above the HW this reader knew may since have been replaced (a
        # new writer replacing a fenced writer's leftover): open those afresh. Segments below
        # the HW are final.
        return _listed([s for s in segments if s.base_offset < high_watermark], bases, new_segment)

    @contextmanager
    def critical(self):
        yield           # the partition state's conditional write fences a stale writer

    def clean_leftovers(self, names: list[str]) -> None:
        """A retention deletion marker (`<base>.log.deleted`) takes its segment's objects with it."""
        log = self.log
        for name in names:
            if name.endswith(DELETED_SUFFIX):
                if name.endswith(LOG_SUFFIX + DELETED_SUFFIX):
                    delete_segment_files(log.storage, log.dir, name[:20])
                log.storage.delete(log.storage.join(log.dir, name))

    def take_over(self, state):
        # A new writer epoch stamped into the partition state: an older writer's commit fails.
        # (conditional on the version of the state the open just read: no second read)
        return self.log.state_store.take_over(self.log.leader_epoch, state)

    def writer_opened(self) -> None:
        # The published segments are immutable: new data goes into a fresh in-memory one.
        self.log.roll_to(self.log.log_end_offset)

    def new_active(self, base_offset: int) -> LogSegment:
        return self.log.new_segment(base_offset, writable=True, in_memory=True)

    def seal(self, active: LogSegment) -> None:
        active.seal()
        active.close()

    def rolled(self, base_offset: int) -> None:
        pass

    def flush(self) -> bool:
        return False            # durable once committed

    def before_commit(self, durable: bool) -> bool:
        log = self.log
        log.fence.check()
        active = log.segments[-1]
        if active.in_memory and active.size() > 0:
            log.publish(active)
            log.roll_to(log.log_end_offset)
        log.epoch_cache.flush()
        return durable

    def recovery_point_to_record(self) -> int | None:
        return None

    def truncate_active(self, offset: int) -> None:
        # One segment holding offsets from `offset` on is cut. An unpublished one is cut in
        # memory; a published one is replaced by its part below `offset` in one PUT, then its
        # indexes (deleting it first would leave committed data only in memory, lost in a crash).
        log = self.log
        last = log.segments[-1]
        data = last.read_bytes(0, last.size())
        kept = bytearray()
        for pos, header in iter_batches(data, source=last.log_path):
            if header.base_offset >= offset:
                break
            kept += data[pos:pos + header.size]
        if len(kept) < len(data):
            seg = log.new_segment(last.base_offset, writable=True, in_memory=True, stem=last.stem)
            headers = [h for _p, h in iter_batches(bytes(kept))]
            if headers:
                seg.append(bytes(kept), headers)
            if not last.in_memory:
                if headers:
                    log.storage.write_atomic(last.log_path, bytes(kept))
                    seg.publish()       # finds the same bytes there, writes the indexes
                else:
                    last.delete_files()
            log.log_segments.replace_active(seg)
        if not log.segments[-1].in_memory:
            log.roll_to(log.log_end_offset)      # appends go to a fresh in-memory segment

    def hw_lowered(self) -> None:
        pass            # the HW of an object store's state moves only with a commit

    def close_writer(self) -> None:
        pass            # everything committed is published; the rest is dropped, as uncommitted

    def modified_ms(self, seg: LogSegment) -> int:
        return 2**62        # no modification time to offer: such a segment never breaches retention.ms

    def retire_segment(self, base: int, now_ms: int) -> None:
        # No rename on an object store: a `<base>.log.deleted` marker records when it went.
        log = self.log
        marker = log.storage.join(log.dir, segment_name(base, LOG_SUFFIX + DELETED_SUFFIX))
        log.storage.write_atomic(marker, json.dumps({"deleted_ms": now_ms}).encode())

    def remove_retired(self, base: int) -> None:
        log = self.log
        delete_segment_files(log.storage, log.dir, segment_name(base, ""))
        log.storage.delete(log.storage.join(log.dir, segment_name(base, LOG_SUFFIX + DELETED_SUFFIX)),
                           missing_ok=True)

    def delete_expired(self, now_ms: int) -> int:
        """Segments with a `.log.deleted` marker older than the delay, and segment objects below
        the log start offset that have no marker yet (a pass interrupted between the log start
        offset and the marker) get one now."""
        log = self.log
        delay = log.config.file_delete_delay_ms
        removed = 0
        names = self.list_files()
        marked = set()
        for name in names:
            if not name.endswith(LOG_SUFFIX + DELETED_SUFFIX):
                continue
            marked.add(name[:20])
            path = log.storage.join(log.dir, name)
            try:
                deleted_ms = int(json.loads(log.storage.read(path))["deleted_ms"])
            except (ResourceNotFoundError, ValueError, KeyError, TypeError):
                deleted_ms = now_ms     # unreadable marker: start its delay now
            if deleted_ms + delay <= now_ms:
                delete_segment_files(log.storage, log.dir, name[:20])
                log.storage.delete(path)
                removed += 1
        first_live = log.bases[0] if log.bases else log.log_end_offset
        for name in names:
            parsed = parse_segment_name(name)
            if (parsed and parsed[1] == LOG_SUFFIX and parsed[0] < first_live
                    and name[:20] not in marked):
                self.retire_segment(parsed[0], now_ms)
                if delay == 0:
                    delete_segment_files(log.storage, log.dir, name[:20])
                    log.storage.delete(log.storage.join(log.dir, name + DELETED_SUFFIX))
                    removed += 1
        return removed
