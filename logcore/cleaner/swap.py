"""Writing a cleaned segment and swapping it in for the segments it replaces, crash-safely.

Local disk (Kafka's protocol, kafka-storage.md 5.7): the new segment is written as
`<base>.log.cleaned` (+ `.index.cleaned`, `.timeindex.cleaned`, `.txnindex.cleaned`) and fsynced;
its files are renamed `.cleaned -> .swap` (the log last: a complete `.swap` set is the commit
point); the replaced segments' files are renamed `.deleted` (those the new segment replaces under
the same name get `.deleted` as a second link); the `.swap` files are renamed to their final names
(indexes first, the log last, each rename replacing the old file of the same name atomically).
The `.deleted` files are removed after file.delete.delay.ms (`delayed_delete.py`). `Log._load`
finishes or rolls back whatever a crash left (see `LocalSegmentStore.clean_leftovers` (segment_store.py)).

Object stores (no rename): the new segment's objects get a fresh name,
`<base>.<pass token>.log` (+ indexes), which the plain listing of `.log` objects ignores. One
conditional write of the partition's `partition-state.json` then records the list of cleaned
segments and the offset where they end; readers and writers take segments below that offset only
from the list; the same write lists the replaced segments with the time their objects may be
deleted (after file.delete.delay.ms). A crash leaves garbage that a writer opening the partition
deletes (unlisted cleaned objects, originals below the cleaned end, once not pending).
"""
from __future__ import annotations

import uuid

import numpy as np

from logcore.cleaner import delayed_delete
from logcore.errors import SegLogError
from logcore.log.index_interval import IndexInterval
from logcore.log.offset_index import OffsetIndex
from logcore.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_name
from logcore.log.time_index import TimeIndex
from logcore.records.batch import parse_header

CLEANED = ".cleaned"
SWAP = ".swap"
DELETED = ".deleted"
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


class SegmentOutput:
    """A cleaned segment being written: `.cleaned` files (local) or fresh objects (object store)."""

    def __init__(self, log, base_offset: int):
        self.log = log
        self.storage = log.storage
        self.base = base_offset
        self.local = self.storage.is_local
        config = log.config
        self.index_interval = IndexInterval(config.index_interval_bytes)
        self.offset_index = OffsetIndex(None, None, base_offset, max_index_size=config.segment_index_bytes,
                                        writable=True)
        self.time_index = TimeIndex(None, None, base_offset, max_index_size=config.segment_index_bytes,
                                    writable=True)
        self.aborted: list = []          # AbortedTxn entries of the markers kept in this segment
        self.size = 0
        self._max_ts, self._max_ts_offset = -1, -1
        self.stem = segment_name(base_offset, "") if self.local else \
            f"{segment_name(base_offset, '')}.c{uuid.uuid4().hex[:12]}"
        self.written: list[str] = []     # paths created so far (for abort)
        if self.local:
            for suffix in (LOG_SUFFIX,) + _INDEX_SUFFIXES:
                self.storage.delete(self.path(suffix, CLEANED), missing_ok=True)
            self._file = self.storage.open_append(self.path(LOG_SUFFIX, CLEANED))
            self.written.append(self.path(LOG_SUFFIX, CLEANED))
            self._buf = None
        else:
            self._file = None
            self._buf = bytearray()

    def path(self, suffix: str, temp: str = "") -> str:
        return self.storage.join(self.log.dir, self.stem + suffix + temp)

    @property
    def empty(self) -> bool:
        return self.size == 0

    def append(self, data) -> None:
        h = parse_header(data)
        if h.max_timestamp > self._max_ts:
            self._max_ts, self._max_ts_offset = h.max_timestamp, h.last_offset
        if self.index_interval.due(len(data)):
            self.offset_index.append(h.last_offset, self.size)
            self.time_index.maybe_append(self._max_ts, self._max_ts_offset)
        if self._file is not None:
            self._file.append(data)
        else:
            self._buf += data
        self.size += len(data)

    def append_many(self, data: bytes, meta: bytes) -> None:
        """Whole batches at once, with one int64 (last offset, max timestamp, size) row each:
        the same index entries `append` would make batch by batch."""
        rows = np.frombuffer(meta, dtype=np.int64).reshape(-1, 3)
        if len(rows) == 0:
            return
        last_offsets, max_ts, sizes = rows[:, 0], rows[:, 1], rows[:, 2]
        positions = self.size + np.cumsum(sizes) - sizes
        # Running max timestamp over the whole output and the last offset of the batch that
        # first reached it (a strictly larger timestamp moves it, as in `append`).
        running = np.maximum.accumulate(np.maximum(max_ts, self._max_ts))
        previous = np.concatenate(([self._max_ts], running[:-1]))
        holder = np.maximum.accumulate(np.where(running > previous, np.arange(len(rows)), -1))
        max_offsets = np.where(holder >= 0, last_offsets[np.maximum(holder, 0)], self._max_ts_offset)
        picked = self.index_interval.pick(sizes.tolist())
        if picked:
            at = np.asarray(picked, dtype=np.int64)
            self.offset_index.append_entries(last_offsets[at] - self.base, positions[at])
            ts, offs = running[at], max_offsets[at]
            keep = np.concatenate(([ts[0] > self.time_index.max_timestamp], ts[1:] > ts[:-1])) & (ts >= 0)
            self.time_index.append_entries(ts[keep], offs[keep] - self.base)
        self._max_ts, self._max_ts_offset = int(running[-1]), int(max_offsets[-1])
        if self._file is not None:
            self._file.append(data)
        else:
            self._buf += data
        self.size += len(data)

    def finish(self) -> None:
        """Write the indexes and make everything durable (not yet visible to the log)."""
        if self._max_ts >= 0:
            self.time_index.maybe_append(self._max_ts, self._max_ts_offset, skip_full_check=True)
        files = {INDEX_SUFFIX: self.offset_index.to_bytes(), TIME_INDEX_SUFFIX: self.time_index.to_bytes()}
        if self.aborted:
            files[TXN_INDEX_SUFFIX] = b"".join(a.to_bytes() for a in self.aborted)
        self.suffixes = list(files) + [LOG_SUFFIX]
        if self.local:
            self._file.flush(fsync=True)
            self._file.close()
            self._file = None
            # Plain files, fsynced: a torn `.cleaned` file is removed at load like any other,
            # and the folder is synced once when the swap renames them.
            for suffix, data in files.items():
                self.written.append(self.path(suffix, CLEANED))
                with self.storage.open_append(self.path(suffix, CLEANED)) as f:
                    f.append(data)
                    f.flush(fsync=True)
        else:
            # The .log first with If-None-Match: the name is fresh, so it can only be ours.
            if self.storage.put_if_absent(self.path(LOG_SUFFIX), bytes(self._buf)) is None:
                raise SegLogError(f"cleaned segment object {self.path(LOG_SUFFIX)} already exists")
            self.written.append(self.path(LOG_SUFFIX))
            self._buf = None
            for suffix, data in files.items():
                self.storage.write_atomic(self.path(suffix), data)
                self.written.append(self.path(suffix))

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        for path in self.written:
            self.storage.delete(path, missing_ok=True)
        self.written = []


def abort_outputs(outputs) -> None:
    for out in outputs:
        out.discard()


def swap_in(log, outputs, truncations: int | None = None) -> None:
    """Replace each group of segments by its cleaned output (`Log.replace_segments`: the file
    steps below run under the log's critical section, then the log switches to the new
    segments). Raises CleanerAbortedError when a group's segments left the log meanwhile, or
    the log was truncated since the pass read `truncations` (Log.truncations)."""
    from logcore.cleaner.cleaner import CleanerAbortedError
    replacements = [(group, out.base, None if log.storage.is_local else out.stem, bool(out.aborted))
                    for group, out in outputs]
    if log.storage.is_local:
        def swap_files():
            for group, out in outputs:
                _swap_local(log, group, out)
    else:
        def swap_files():
            _swap_object(log, outputs)
    if not log.replace_segments(replacements, swap_files, truncations):
        abort_outputs([o for _g, o in outputs])
        raise CleanerAbortedError(
            f"{log.topic}-{log.partition}: segments changed during cleaning (truncated or deleted);"
            " the pass is abandoned and will run again")


def _swap_local(log, group, out: SegmentOutput) -> None:
    """Three renaming steps, each made durable by one folder fsync before the next starts (a
    crash leaves a state `LocalSegmentStore.clean_leftovers` (segment_store.py) finishes or rolls back)."""
    storage = log.storage
    # 1. Commit point: every file of the new segment is `.swap` (the log renamed last).
    for suffix in out.suffixes:
        storage.rename(out.path(suffix, CLEANED), out.path(suffix, SWAP), durable=False)
    storage.sync_dir(log.dir)
    # 2. The replaced segments' files become `.deleted` (removed after file.delete.delay.ms).
    # Files the new segment replaces under the same name get the `.deleted` name as a second
    # link, so that they too stay readable during the delay.
    new_names = {out.path(suffix) for suffix in out.suffixes}
    for seg in group:
        seg.close()
        for path in (seg.log_path, seg.index_path, seg.time_index_path, seg.txn_index_path):
            if not storage.exists(path):
                continue
            storage.delete(path + DELETED, missing_ok=True)
            if path in new_names:
                storage.link(path, path + DELETED, durable=False)
            else:
                storage.rename(path, path + DELETED, durable=False)
    storage.sync_dir(log.dir)
    # 3. The new files take their final names, replacing the old files of the same names.
    for suffix in out.suffixes:
        storage.rename(out.path(suffix, SWAP), out.path(suffix), durable=False)
    storage.sync_dir(log.dir)


def _swap_object(log, outputs) -> None:
    last_group = outputs[-1][0]
    i = next(k for k, s in enumerate(log.segments) if s is last_group[-1])
    end = log.segments[i + 1].base_offset
    listing = [[out.base, out.stem] for _g, out in outputs]
    now = delayed_delete.now_ms()
    previous = log.state_store.cleaned
    due = now + log.config.file_delete_delay_ms
    replaced = delayed_delete.carry_over(previous, now) + [[seg.stem, due] for g, _o in outputs for seg in g]
    log.state_store.set_cleaned({"end": end, "segments": listing, "replaced": replaced}, epoch=log.leader_epoch)
    # Entries that fell due during the pass leave the list: delete their objects now (segments
    # of earlier passes, which the log no longer holds).
    kept = {stem for stem, _due in replaced}
    for stem, _due in delayed_delete.pending_objects(previous):
        if stem not in kept:
            delayed_delete.delete_object_segment(log, stem)
