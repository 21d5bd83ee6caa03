"""Where a partition's committed offsets live: high watermark, log start offset, recovery point.

On a local disk these are Kafka's own root checkpoint files (`replication-offset-checkpoint`,
`log-start-offset-checkpoint`, `recovery-point-offset-checkpoint`), shared by every partition of
the root and updated read-modify-write under a lock file, so that a copy of a Kafka broker's log
dir is read with that broker's high watermarks and Kafka's tools read ours.

Beside them each partition keeps its latest committed HW in `<topic>-<p>/high-watermark`
(seglog's: 16 bytes, overwritten in place). A commit without fsync (the broker's, as Kafka's
produce path) writes only that file: one pwrite, where replacing a root file is a create and a
rename that the file system journals (about 0.1 ms, and ms-long stalls behind other processes'
fsyncs on a busy disk); the root files follow at most every ROOT_CHECKPOINT_INTERVAL_MS (Kafka's
replica.high.watermark.checkpoint.interval.ms) and at every durable commit. The committed HW is
the larger of the two: every commit writes both or the file, so neither is ever ahead of a
commit, and a durable commit needs no fsync of the file (its root checkpoint is fsynced).

Object stores have no lock and no rename, and several writers (one per partition) must not
contend on one object: each partition keeps a `partition-state.json` object there, replaced with
If-Match. It carries the writer epoch, so a writer that takes the partition changes the object
and a fenced writer's conditional replace fails.
"""
from __future__ import annotations

import json
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass

from logcore.errors import CommitFailedError, CorruptIndexError, FencedWriterError, SegLogError
from logcore.log.checkpoint import OffsetCheckpoint

HW_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
ROOT_LOCK = ".seglog-root.lock"
OBJECT_STATE = "partition-state.json"
HW_FILE = "high-watermark"
LOG_START_FILE = "log-start-offset"     # seglog's own record of a log start offset it moved
ROOT_CHECKPOINT_INTERVAL_MS = 5000      # root files after commits without fsync (Kafka's HW interval)
_HW_RECORD = struct.Struct(">4sqI")     # magic, high watermark, CRC-32 of the first 12 bytes
_HW_HEAD, _HW_CRC = struct.Struct(">4sq"), struct.Struct(">I")     # its two parts, written as one
_HW_MAGIC = b"SGHW"
_HW_READ_ATTEMPTS = 3                   # a reader may meet a write in progress: read again


@dataclass
class PartitionState:
    high_watermark: int | None = None
    log_start_offset: int | None = None
    recovery_point: int | None = None
    # What the last commit recorded with its HW (e.g. the sink's query and batch id): visible
    # exactly when that commit's HW is, so a replayed commit can tell it already happened.
    marker: dict | None = None
    # Object stores: the cleaner's list of segments below its end ({"end", "segments": [[base,
    # stem], ...]}); None before the first compaction and on local disk.
    cleaned: dict | None = None
    # Local disk: the log start offset seglog itself last set (LOG_START_FILE), against which
    # the root's log-start-offset-checkpoint entry is checked before any segment goes.
    log_start_witness: int | None = None
    # Object stores: the last stable offset at the last commit (a floor of today's LSO, for
    # range-bounded readers, which rebuild no producer state); None when not recorded.
    last_stable_offset: int | None = None
    # Object stores: an offset at which the producer state was empty (the HW of the last commit
    # that found no producer): a writer's open replays batch headers from there instead of from
    # the log start (local disk has the producer snapshots of each roll instead). None: unknown.
    empty_producers_at: int | None = None


COMMIT_MARKER = "commit-marker.json"


class LocalPartitionState:
    """A partition's entries in the root's Kafka checkpoint files."""

    def __init__(self, storage, topic: str, partition: int, root: str = ""):
        self.storage = storage
        self.key = (topic, partition)
        self.root = root
        self._marker_path = storage.join(root, f"{topic}-{partition}", COMMIT_MARKER)
        self._hw_path = storage.join(root, f"{topic}-{partition}", HW_FILE)
        self._ls_path = storage.join(root, f"{topic}-{partition}", LOG_START_FILE)
        self._ls_written: int | None = None
        self._root_written = float("-inf")      # monotonic time of this writer's last root write
        self._hw_fd: int | None = None          # the high-watermark file, open for writing
        self._hw = OffsetCheckpoint(storage, storage.join(root, HW_CHECKPOINT) if root else HW_CHECKPOINT)
        self._rp = OffsetCheckpoint(storage, storage.join(root, RECOVERY_POINT_CHECKPOINT) if root else RECOVERY_POINT_CHECKPOINT)
        self._ls = OffsetCheckpoint(storage, storage.join(root, LOG_START_CHECKPOINT) if root else LOG_START_CHECKPOINT)

    def load(self) -> PartitionState:
        hw = self._hw.read().get(self.key)
        in_file = self._read_hw_file()
        if in_file is not None and (hw is None or in_file > hw):
            hw = in_file
        return PartitionState(hw, self._ls.read().get(self.key), self._rp.read().get(self.key),
                              self._resolve_marker(hw), log_start_witness=self._read_log_start())

    def _read_log_start(self) -> int | None:
        try:
            text = self.storage.read(self._ls_path).decode("ascii").strip()
            self._ls_written = int(text)
            return self._ls_written
        except (SegLogError, ValueError, UnicodeDecodeError):
            return None

    def _read_hw_file(self) -> int | None:
        """The HW in the partition's high-watermark file; None if missing or not valid (a torn
        write after a power cut: the root checkpoint, fsynced at durable commits, then counts)."""
        try:
            fd = os.open(self.storage.local_path(self._hw_path), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            for _ in range(_HW_READ_ATTEMPTS):
                data = os.pread(fd, _HW_RECORD.size, 0)
                if len(data) == _HW_RECORD.size:
                    magic, hw, crc = _HW_RECORD.unpack(data)
                    if magic == _HW_MAGIC and crc == zlib.crc32(data[:12]) and hw >= 0:
                        return hw
            return None
        finally:
            os.close(fd)

    def _write_hw_file(self, high_watermark: int) -> None:
        head = _HW_HEAD.pack(_HW_MAGIC, high_watermark)
        if self._hw_fd is None:     # kept open: the broker commits thousands of times a second
            self._hw_fd = os.open(self.storage.local_path(self._hw_path),
                                  os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.pwrite(self._hw_fd, head + _HW_CRC.pack(zlib.crc32(head)), 0)

    def close(self) -> None:
        """Release the open high-watermark file (the writer closes)."""
        if self._hw_fd is not None:
            os.close(self._hw_fd)
            self._hw_fd = None

    def _read_markers(self) -> dict:
        try:
            return json.loads(self.storage.read(self._marker_path))
        except SegLogError:
            return {}
        except ValueError as exc:
            raise CorruptIndexError(f"unreadable commit marker: {exc}", file=self._marker_path) from exc

    def _resolve_marker(self, high_watermark: int | None) -> dict | None:
        """The marker of the newest commit whose HW reached the checkpoint.

        The marker file is written before the HW checkpoint; a crash in between leaves a
        `current` entry above the checkpointed HW, and then `previous` is the one that counts.
        """
        doc = self._read_markers()
        for key in ("current", "previous"):
            entry = doc.get(key)
            if entry and high_watermark is not None and entry["high_watermark"] <= high_watermark:
                return entry["marker"]
        return None

    def _update(self, checkpoint: OffsetCheckpoint, value: int | None) -> None:
        entries = checkpoint.read()
        if value is None:
            if self.key not in entries:
                return
            entries.pop(self.key)
        elif entries.get(self.key) == value:
            return
        else:
            entries[self.key] = value
        checkpoint.write(entries)

    def commit(self, *, high_watermark: int, log_start_offset: int, first_segment_base: int,
               epoch: int, recovery_point: int | None = None, marker: dict | None = None,
               durable: bool = True, root: bool = False,
               last_stable_offset: int | None = None, empty_producers_at: int | None = None) -> None:
        # root=True: replace the root checkpoint files now even without fsync (a replica's
        # periodic HW checkpoint). (last_stable_offset and empty_producers_at: opens on local
        # disk take them from the producer snapshots of each roll.)
        # Callers hold the partition's writer lock (the fence); the root lock serialises the
        # read-modify-write of files shared with other partitions' writers. durable=False
        # replaces the files (write + rename) without fsync: the page cache keeps them across a
        # crash of the process, not across a power cut.
        if marker is not None:
            previous = self._resolve_marker(self._hw.read().get(self.key))
            doc = {"current": {"marker": marker, "high_watermark": high_watermark}}
            if previous is not None:
                doc["previous"] = {"marker": previous, "high_watermark": self._hw.read().get(self.key)}
            self.storage.write_atomic(self._marker_path, json.dumps(doc, sort_keys=True).encode())
        if log_start_offset != first_segment_base and log_start_offset != self._ls_written:
            # Before the root checkpoint: seglog's own record that it moved the log start (a
            # checkpoint entry above it was not written by seglog and is not acted on).
            self.storage.write_atomic(self._ls_path, f"{log_start_offset}\n".encode())
            self._ls_written = log_start_offset
        now = time.monotonic()
        if durable or root or (now - self._root_written) * 1000 >= ROOT_CHECKPOINT_INTERVAL_MS:
            # Kafka writes a log start offset only when it differs from the first segment's base:
            # above it (retention, DeleteRecords) or, with tiered storage, below it (the oldest
            # offsets are only in the remote tier).
            _root_checkpoints(self.storage, self.root).commit(
                self.key, {self._hw: high_watermark,
                           self._ls: log_start_offset if log_start_offset != first_segment_base else None,
                           **({self._rp: recovery_point} if recovery_point is not None else {})},
                durable=durable)
            self._root_written = now
        # After the root files: a durable commit that fails there has not moved the HW.
        self._write_hw_file(high_watermark)

    def root_write_due(self) -> bool:
        """Whether the next commit without fsync also replaces the root checkpoint files (a
        create and a rename under the root lock, which other writers may hold)."""
        return (time.monotonic() - self._root_written) * 1000 >= ROOT_CHECKPOINT_INTERVAL_MS

    def set_recovery_point(self, offset: int) -> None:
        with self.storage.lock(ROOT_LOCK):
            self._update(self._rp, offset)

    def forget(self) -> None:
        """Drop this partition from the root checkpoints (topic deletion)."""
        with self.storage.lock(ROOT_LOCK):
            for checkpoint in (self._hw, self._rp, self._ls):
                self._update(checkpoint, None)
        self.close()
        self.storage.delete(self._hw_path, missing_ok=True)
        self.storage.delete(self._ls_path, missing_ok=True)


_REMOVE = None


class _RootCheckpoints:
    """Group commit of the root checkpoint files: partitions committing at the same time share
    one read-modify-write (and its fsyncs) of each file instead of queueing on the root lock.

    The first committer to find no write in progress writes everything queued so far; the
    others wait for the round that holds their entries and see its error if it failed. A round
    is durable (fsync of each file and of the folder) when any of its committers asked for it.
    """

    def __init__(self, storage):
        self.storage = storage
        self._cv = threading.Condition()
        self._pending: dict[tuple, dict] = {}       # checkpoint path -> {key: value or None}
        self._pending_durable = False
        self._files: dict[str, OffsetCheckpoint] = {}
        self._unsynced: set[str] = set()            # files last replaced without fsync
        self._writing = False
        self._next_round = 1                        # the round that takes what is queued now
        self._done_round = 0
        self._failed: dict[int, BaseException] = {}

    def commit(self, key: tuple, values: dict[OffsetCheckpoint, int | None], *,
               durable: bool = True) -> None:
        with self._cv:
            for checkpoint, value in values.items():
                self._files[checkpoint.path] = checkpoint
                self._pending.setdefault(checkpoint.path, {})[key] = value
            self._pending_durable |= durable
            mine = self._next_round
            while self._done_round < mine:
                if self._writing:
                    self._cv.wait()
                    continue
                self._writing = True
                batch, self._pending = self._pending, {}
                batch_durable, self._pending_durable = self._pending_durable, False
                this_round = self._next_round
                self._next_round += 1
                error = None
                self._cv.release()
                try:
                    self._write(batch, batch_durable)
                except BaseException as exc:  # noqa: BLE001 - given to every committer of the round
                    error = exc
                finally:
                    self._cv.acquire()
                    self._writing = False
                    self._done_round = this_round
                    if error is not None:
                        self._failed[this_round] = error
                        for old in [r for r in self._failed if r < this_round - 1024]:
                            del self._failed[old]
                    self._cv.notify_all()
            error = self._failed.get(mine)
        if error is not None:
            raise error

    def _write(self, batch: dict[str, dict], durable: bool) -> None:
        with self.storage.lock(ROOT_LOCK):
            writes: list[tuple[str, bytes]] = []
            for path, changes in batch.items():
                checkpoint = self._files[path]
                entries = checkpoint.read()
                before = dict(entries)
                for key, value in changes.items():
                    if value is _REMOVE:
                        entries.pop(key, None)
                    else:
                        entries[key] = value
                # A durable round also rewrites an unchanged file that a previous round left
                # unsynced: its content is only in the page cache.
                if entries != before or (durable and path in self._unsynced):
                    writes.append((path, checkpoint.encode(entries)))
            # All the round's files at once: one folder fsync for them (each file is replaced
            # atomically on its own, as when they were written one by one).
            self.storage.write_atomic_many(writes, durable=durable)
            for path, _ in writes:
                if durable:
                    self._unsynced.discard(path)
                else:
                    self._unsynced.add(path)


_ROOTS: dict[tuple[str, str], _RootCheckpoints] = {}
_ROOTS_LOCK = threading.Lock()


def _root_checkpoints(storage, root: str) -> _RootCheckpoints:
    key = (storage.url, root)
    with _ROOTS_LOCK:
        found = _ROOTS.get(key)
        if found is None:
            found = _ROOTS[key] = _RootCheckpoints(storage)
        return found


class ObjectPartitionState:
    """A partition's committed offsets in one object, replaced with If-Match."""

    def __init__(self, storage, partition_dir: str):
        self.storage = storage
        self.path = storage.join(partition_dir, OBJECT_STATE)
        self.version: str | None = None
        self.epoch: int = -1
        self.marker: dict | None = None
        self.cleaned: dict | None = None
        self.stable: int | None = None  # the last stable offset last read or written
        self.empty_producers: int | None = None     # PartitionState.empty_producers_at, as stored
        self._offsets = (0, 0)          # (high watermark, log start) last read or written
        # The state read while the log was being built (records_cleaned_list), taken by the
        # open's load: one GET per open. Taken once, so a later load (a refresh) reads afresh.
        self._read_ahead: PartitionState | None = None
        self._absent = False            # the last load found no state object (a new partition)

    def records_cleaned_list(self) -> bool:
        """Whether the state lists segments the cleaner wrote. The state read here is what
        this open's load() returns: a writer's take-over is conditional on its version, so a
        state changed since is read again there."""
        try:
            self._read_ahead = self.load()
        except CorruptIndexError:
            return True             # the load names the damage; until then, assume gaps
        return self._read_ahead.cleaned is not None

    def load(self) -> PartitionState:
        ahead, self._read_ahead = self._read_ahead, None
        if ahead is not None:
            return ahead
        found = self.storage.read_versioned(self.path)
        self._absent = found is None
        if found is None:
            self.version = None
            return PartitionState()
        data, self.version = found
        try:
            doc = json.loads(data)
            self.epoch = int(doc.get("leader_epoch", -1))
            self.marker = doc.get("marker")
            self.cleaned = doc.get("cleaned")
            stable = doc.get("last_stable_offset")
            self.stable = int(stable) if stable is not None else None
            empty = doc.get("empty_producers_at")
            self.empty_producers = int(empty) if empty is not None else None
            self._offsets = (int(doc["high_watermark"]), int(doc["log_start_offset"]))
            return PartitionState(int(doc["high_watermark"]), int(doc["log_start_offset"]), None,
                                  self.marker, self.cleaned, last_stable_offset=self.stable,
                                  empty_producers_at=self.empty_producers)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptIndexError(f"unreadable partition state: {exc}", file=self.path) from exc

    def _put(self, doc: dict) -> bool:
        data = json.dumps(doc, sort_keys=True).encode()
        if self.version is None:
            new = self.storage.put_if_absent(self.path, data)
        else:
            new = self.storage.put_if_version(self.path, data, self.version)
        if new is None:
            return False
        self.version = new
        return True

    def take_over(self, epoch: int, loaded: PartitionState | None = None) -> PartitionState:
        """Stamp a new writer epoch into the state so that older writers' commits fail.
        loaded: what this object's last load() returned, tried first (the write is conditional
        on that version: a state changed since is read again)."""
        while True:
            # (a state found absent is created with If-None-Match: no need to look again)
            known = self.version is not None or self._absent
            state, loaded = (loaded, None) if loaded is not None and known else (self.load(), None)
            if self.epoch > epoch:
                raise FencedWriterError(
                    f"partition state {self.path} already has writer epoch {self.epoch}, newer than {epoch}")
            doc = {"high_watermark": state.high_watermark or 0,
                   "log_start_offset": state.log_start_offset or 0, "leader_epoch": epoch}
            if state.marker is not None:
                doc["marker"] = state.marker
            if state.cleaned is not None:
                doc["cleaned"] = state.cleaned
            if self.stable is not None:
                doc["last_stable_offset"] = self.stable
            if self.empty_producers is not None:
                doc["empty_producers_at"] = self.empty_producers
            if self._put(doc):
                self.epoch = epoch
                return PartitionState(doc["high_watermark"], doc["log_start_offset"], None,
                                      state.marker, state.cleaned,
                                      empty_producers_at=self.empty_producers)

    def commit(self, *, high_watermark: int, log_start_offset: int, first_segment_base: int,
               epoch: int, recovery_point: int | None = None, marker: dict | None = None,
               durable: bool = True, root: bool = False,
               last_stable_offset: int | None = None, empty_producers_at: int | None = None) -> None:
        # A conditional PUT is durable once it returns: `durable` and `root` change nothing here.
        # empty_producers_at is a fact about the data below it: written only by the commit
        # that found it (never carried on, so a later truncation cannot leave it stale).
        doc = {"high_watermark": high_watermark, "log_start_offset": log_start_offset,
               "leader_epoch": epoch}
        stable = last_stable_offset if last_stable_offset is not None else self.stable
        if stable is not None:
            doc["last_stable_offset"] = min(stable, high_watermark)
        marker = marker if marker is not None else self.marker
        if marker is not None:
            doc["marker"] = marker      # replaced in the same conditional write as the HW
        if self.cleaned is not None:
            doc["cleaned"] = self.cleaned
        if empty_producers_at is not None:
            doc["empty_producers_at"] = min(empty_producers_at, high_watermark)
        if self._put(doc):
            self.marker = marker
            self.stable = doc.get("last_stable_offset")
            self.empty_producers = doc.get("empty_producers_at")
            self._offsets = (high_watermark, log_start_offset)
        else:
            current = self.load()
            if self.epoch != epoch:
                raise FencedWriterError(
                    f"partition {self.path.rsplit('/', 2)[-2]} was taken by writer epoch {self.epoch};"
                    f" this writer's epoch {epoch} is fenced")
            raise CommitFailedError(
                f"partition state {self.path} changed under the writer (high watermark now"
                f" {current.high_watermark}); refresh and retry")

    def set_cleaned(self, cleaned: dict, *, epoch: int) -> None:
        """Switch the partition's cleaned-segment list (the cleaner's swap), conditionally."""
        doc = {"high_watermark": self._offsets[0], "log_start_offset": self._offsets[1],
               "leader_epoch": epoch, "cleaned": cleaned}
        if self.marker is not None:
            doc["marker"] = self.marker
        if self.stable is not None:
            doc["last_stable_offset"] = self.stable
        if self.empty_producers is not None:
            doc["empty_producers_at"] = self.empty_producers    # compaction keeps producer state
        if self._put(doc):
            self.cleaned = cleaned
            return
        self.load()
        if self.epoch != epoch:
            raise FencedWriterError(f"partition state {self.path} was taken by writer epoch {self.epoch};"
                                    f" this writer's epoch {epoch} is fenced")
        raise CommitFailedError(f"partition state {self.path} changed under the cleaner; retry the pass")

    def set_recovery_point(self, offset: int) -> None:
        pass

    def close(self) -> None:
        pass

    def forget(self) -> None:
        self.storage.delete(self.path, missing_ok=True)
