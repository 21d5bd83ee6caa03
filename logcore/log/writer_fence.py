"""Writer fencing by leader epoch: at most one writer per partition.

A writer takes a partition by bumping the epoch in the partition's `writer-epoch` file (a seglog
file, not Kafka's): JSON `{"epoch": N, "writer": "<random id>", "acquired_ms": T}`. The bump is a
conditional write (put_if_absent for the first epoch, put_if_version after), retried on a lost
race, so racing writers always end up with distinct epochs and exactly one of them current.

Local disk: `acquire` and `critical` also hold an flock on the partition's `.writer.lock`, so a
write done inside `critical()` never interleaves with a takeover. The check inside is one stat:
the fence keeps the epoch file it wrote open, which pins its inode (no reuse), so "same inode,
mtime and size at the path" means "still my file". Object stores have no locks: `check` reads
the epoch object (one GET) and the caller's own conditional commit is the final guard.

Taking a partition always succeeds and fences the previous writer, except for a caller that only
wants a partition nobody uses (`only_if_free`, e.g. a maintenance pass, which must not fence a
live producer or sink). Whether a writer still holds a partition: on local disk every writer
holds a shared flock on `.writer-held.lock` until it releases (the kernel drops it when the process
dies), and `only_if_free` needs it exclusively for a moment; on object stores a writer marks its
epoch record `released` when it closes, and a record that is not released counts as held.

Resuming (`acquire(resume=(epoch, writer_id))`): a writer that held the partition and released
it takes it back at the SAME epoch when nobody took it in between, so a writer that opens and
closes a partition per commit (the Spark sink, once per micro-batch) does not add a leader-epoch
entry per commit; Kafka too bumps the epoch only when leadership changes. It resumes only when
  - the partition's epoch record still names exactly that epoch and writer id (any other
    writer's takeover, a bump, changed it), and
  - nobody holds the partition now: on local disk the fence gets `.writer-held.lock`
    exclusively for a moment (every live writer holds it shared; the kernel drops it when a
    process dies), on object stores the record is marked `released` and the fence replaces it
    (released=False) with put_if_version, so of two racing resumers only one wins.
Otherwise it bumps as any takeover does. Why this is safe: an epoch claims "one writer since
this epoch's first offset". The record is unchanged since the resumed writer held it, so nobody
wrote at another epoch in between; and the partition is free, so the earlier holder of that
identity (maybe a process still alive) has closed or died and cannot write at that epoch any
more. A zombie that tries to resume after a newer writer took the partition finds another epoch
or writer id and bumps, which fences the newer writer exactly as any takeover does (and shows as
a new leader-epoch entry). A resumed fence pins the epoch file anew on local disk, so a later
takeover (a new file) is still detected by `check`.
"""
from __future__ import annotations

import fcntl
import json
import os
import random
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from logcore.errors import (CommitFailedError, CorruptIndexError, FencedWriterError,
                            PartitionInUseError)
from logcore.storage import Storage

EPOCH_FILE = "writer-epoch"
LOCK_FILE = ".writer.lock"
HELD_FILE = ".writer-held.lock"    # a `.lock` name: never listed as partition content
_MAX_ACQUIRE_ATTEMPTS = 200


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    writer: str
    acquired_ms: int
    released: bool = False          # the writer closed: the partition is free to take

    def encode(self) -> bytes:
        doc = {"epoch": self.epoch, "writer": self.writer, "acquired_ms": self.acquired_ms}
        if self.released:
            doc["released"] = True
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, data: bytes, source: str) -> EpochRecord:
        try:
            obj = json.loads(data)
            epoch, writer, acquired = obj["epoch"], obj["writer"], obj.get("acquired_ms", 0)
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptIndexError(f"unreadable writer epoch ({type(exc).__name__}: {exc})",
                                    file=source) from None
        if (not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0
                or not isinstance(writer, str) or not isinstance(acquired, int)):
            raise CorruptIndexError(f"bad writer epoch record {obj!r}", file=source)
        return cls(epoch, writer, acquired, obj.get("released") is True)


class WriterFence:
    """One writer's claim on one partition folder of a storage."""

    def __init__(self, storage: Storage, partition_dir: str, *, writer_id: str | None = None,
                 only_if_free: bool = False):
        self.storage = storage
        self.only_if_free = only_if_free
        self.held_path = storage.join(partition_dir.strip("/"), HELD_FILE)
        self._held_fd: int | None = None       # local: .writer-held.lock, shared-flocked while I write
        self.partition_dir = partition_dir.strip("/")
        self.writer_id = writer_id or secrets.token_hex(8)
        self.epoch_path = storage.join(self.partition_dir, EPOCH_FILE)
        self.lock_path = storage.join(self.partition_dir, LOCK_FILE)
        self._epoch: int | None = None
        self._version: str | None = None       # object stores: the ETag of my epoch object
        self._pinned_fd: int | None = None     # local: my epoch file, held open to pin its inode
        self._pinned_key: tuple[int, int, int] | None = None
        self._lock_fd: int | None = None       # local: .writer.lock, flocked in critical()
        self._thread_lock = threading.Lock()   # flock does not exclude threads sharing one fd
        self._epoch_os_path: str | None = None
        self.resumed = False                   # the last acquire took the epoch back (no bump)

    # -- reading -------------------------------------------------------------------------------

    def _read(self) -> tuple[EpochRecord, str] | None:
        found = self.storage.read_versioned(self.epoch_path)
        if found is None:
            return None
        return EpochRecord.decode(found[0], self.storage.describe(self.epoch_path)), found[1]

    def current_epoch(self) -> int:
        """The partition's epoch now (-1 if no writer ever took it); bumps nothing."""
        found = self._read()
        return -1 if found is None else found[0].epoch

    @property
    def partition_leader_epoch(self) -> int:
        """My epoch: stamp it into every batch this writer writes."""
        if self._epoch is None:
            raise FencedWriterError(f"writer {self.writer_id} has not acquired partition "
                                    f"{self.storage.describe(self.partition_dir)}")
        return self._epoch

    # -- taking the partition ------------------------------------------------------------------

    def acquire(self, min_epoch: int = 0, *, resume: tuple[int, str] | None = None) -> int:
        """Bump the partition's epoch (to at least `min_epoch`) and make it mine; returns it.

        resume=(epoch, writer_id), this partition's `partition_leader_epoch` and `writer_id` when
        the caller last held it: take it back at that epoch, without a bump, if the record is
        unchanged and nobody holds the partition (module docstring); `resumed` says which.
        With `only_if_free`, PartitionInUseError instead when another writer holds it."""
        self.resumed = False
        if self.storage.is_local:
            free = self._hold_local(exclusive=resume is not None)
            with self.storage.lock(self.lock_path):
                epoch = self._bump(min_epoch, resume if free else None)
                self._pin_local(epoch)
            if self._lock_fd is None:
                self._lock_fd = os.open(self.storage.local_path(self.lock_path),
                                        os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if free:
                fcntl.flock(self._held_fd, fcntl.LOCK_SH)   # now held like any writer's
            return epoch
        return self._bump(min_epoch, resume)

    def _hold_local(self, *, exclusive: bool = False) -> bool:
        """Hold `.writer-held.lock` shared, as every writer does, or return True holding it
        exclusively (nobody else holds the partition; the caller shares it once it took the
        partition). `exclusive` asks for that if possible (a resume); `only_if_free` insists."""
        if self._held_fd is None:
            self.storage.makedirs(self.partition_dir)
            self._held_fd = os.open(self.storage.local_path(self.held_path),
                                    os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not self.only_if_free:
            if exclusive:
                try:
                    fcntl.flock(self._held_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    pass                # a live writer holds it: no resume, a takeover
            fcntl.flock(self._held_fd, fcntl.LOCK_SH)
            return False
        try:
            fcntl.flock(self._held_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._held_fd)
            self._held_fd = None
            raise PartitionInUseError(
                f"partition {self.storage.describe(self.partition_dir)} is held by another writer"
                " (a live process has it open for writing)") from None
        return True

    def _bump(self, min_epoch: int, resume: tuple[int, str] | None = None) -> int:
        """Take the partition: resume it (see acquire) or write a higher epoch. Local disk: the
        caller holds the lock file, and passes `resume` only while the partition is free."""
        for attempt in range(_MAX_ACQUIRE_ATTEMPTS):
            found = self._read()
            now_ms = int(time.time() * 1000)
            if (self.only_if_free and not self.storage.is_local and found is not None
                    and not found[0].released):
                record = found[0]
                raise PartitionInUseError(
                    f"partition {self.storage.describe(self.partition_dir)} is held by writer epoch"
                    f" {record.epoch} since {record.acquired_ms} (ms since the epoch): it has not"
                    " released it (still writing, or it stopped without closing; the next writer"
                    " that closes the partition releases it)")
            if (resume is not None and found is not None and resume[0] >= min_epoch
                    and (found[0].epoch, found[0].writer) == (resume[0], resume[1])
                    and (self.storage.is_local or found[0].released)):
                epoch, writer = found[0].epoch, found[0].writer
                if self.storage.is_local:
                    # Unchanged, and nobody holds it (the caller holds the lock file and the held
                    # lock exclusively): it is mine as it stands. No write; the caller re-pins it.
                    version: str | None = found[1]
                else:
                    version = self.storage.put_if_version(
                        self.epoch_path, EpochRecord(epoch, writer, now_ms).encode(), found[1])
                if version is not None:
                    self.writer_id, self._epoch, self._version = writer, epoch, version
                    self.resumed = True
                    return epoch
                resume = None           # another writer took or resumed it meanwhile: bump past it
                continue
            if found is None:
                epoch = max(0, min_epoch)
                version = self.storage.put_if_absent(
                    self.epoch_path, EpochRecord(epoch, self.writer_id, now_ms).encode())
            else:
                epoch = max(found[0].epoch + 1, min_epoch)
                version = self.storage.put_if_version(
                    self.epoch_path, EpochRecord(epoch, self.writer_id, now_ms).encode(), found[1])
            if version is not None:
                self._epoch, self._version = epoch, version
                return epoch
            # lost the race to another writer: back off a little, re-read, bump past it
            time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 20)))
        raise CommitFailedError(f"could not take partition {self.storage.describe(self.partition_dir)}: "
                                f"lost {_MAX_ACQUIRE_ATTEMPTS} races for its writer epoch")

    def _pin_local(self, epoch: int) -> None:
        self._unpin()
        fd = os.open(self.storage.local_path(self.epoch_path), os.O_RDONLY | os.O_CLOEXEC)
        st = os.fstat(fd)
        record = EpochRecord.decode(os.pread(fd, max(st.st_size, 1), 0),
                                    self.storage.describe(self.epoch_path))
        if (record.epoch, record.writer) != (epoch, self.writer_id):  # cannot happen under the flock
            os.close(fd)
            raise self._fenced(record.epoch)
        self._pinned_fd = fd
        self._pinned_key = (st.st_ino, st.st_mtime_ns, st.st_size)

    def _unpin(self) -> None:
        if self._pinned_fd is not None:
            os.close(self._pinned_fd)
            self._pinned_fd, self._pinned_key = None, None

    # -- checking ------------------------------------------------------------------------------

    def _fenced(self, current: int) -> FencedWriterError:
        return FencedWriterError(
            f"writer {self.writer_id} is fenced on partition "
            f"{self.storage.describe(self.partition_dir)}: it holds epoch {self._epoch}, "
            f"the partition's epoch is now {current}")

    def check(self) -> None:
        """Raise FencedWriterError unless the partition's epoch is still mine."""
        if self.storage.is_local and self._pinned_key is not None:   # pinned: acquired, local
            if self._epoch_os_path is None:      # resolved once: this runs on every append
                self._epoch_os_path = self.storage.local_path(self.epoch_path)
            try:
                st = os.stat(self._epoch_os_path)
            except FileNotFoundError:
                raise self._fenced(-1) from None
            if (st.st_ino, st.st_mtime_ns, st.st_size) == self._pinned_key:
                return
        mine = self.partition_leader_epoch      # raises if never acquired
        found = self._read()
        if found is None:
            raise self._fenced(-1)
        record, version = found
        if (record.epoch, record.writer) != (mine, self.writer_id):
            raise self._fenced(record.epoch)
        if self.storage.is_local:
            self._pin_local(mine)  # rewritten with my own record: follow the new inode
        else:
            self._version = version

    @contextmanager
    def critical(self) -> Iterator[None]:
        """A section in which this writer may write: checked first, and on local disk no other
        writer can take the partition until it ends."""
        self.enter_critical()
        try:
            yield
        finally:
            self.exit_critical()

    def enter_critical(self) -> None:
        """`critical()` without a context manager (the append path calls it for every batch):
        must be paired with exit_critical(), also when this raises nothing."""
        self.partition_leader_epoch  # raises if never acquired
        if not self.storage.is_local or self._lock_fd is None:
            self.check()
            return
        self._thread_lock.acquire()
        try:
            self._lock_file_and_check(wait=True)
        except BaseException:
            self._thread_lock.release()
            raise

    def try_enter_critical(self) -> bool:
        """enter_critical() for a caller that must not wait (an event loop): False, holding
        nothing, when another thread or process is inside a critical section now, or on object
        stores (the check is a GET). A True must be paired with exit_critical()."""
        lock_fd, pinned = self._lock_fd, self._pinned_key
        if lock_fd is None or pinned is None or self._epoch_os_path is None:
            return self._try_enter_first()
        # The broker's path for every batch, inlined (lock, flock, one stat): check()'s fast case.
        if not self._thread_lock.acquire(blocking=False):
            return False
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._thread_lock.release()
            return False
        except BaseException:
            self._thread_lock.release()
            raise
        try:
            try:
                st = os.stat(self._epoch_os_path)
            except FileNotFoundError:
                raise self._fenced(-1) from None
            if (st.st_ino, st.st_mtime_ns, st.st_size) != pinned:
                self.check()        # not my file as pinned: the full check (fenced, or re-pin)
        except BaseException:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
            self._thread_lock.release()
            raise
        return True

    def _try_enter_first(self) -> bool:
        """try_enter_critical() before the fast path applies (nothing pinned or resolved yet,
        or not local)."""
        self.partition_leader_epoch  # raises if never acquired
        if not self.storage.is_local or self._lock_fd is None:
            return False
        if not self._thread_lock.acquire(blocking=False):
            return False
        try:
            taken = self._lock_file_and_check(wait=False)
        except BaseException:
            self._thread_lock.release()
            raise
        if not taken:
            self._thread_lock.release()
        return taken

    def _lock_file_and_check(self, *, wait: bool) -> bool:
        """flock the partition's lock file, then check the fence (the lock is let go if that
        fails). False, holding nothing, when wait=False and another process holds it. The caller
        holds the thread lock."""
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            self.check()
        except BaseException:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            raise
        return True

    def exit_critical(self) -> None:
        lock_fd = self._lock_fd
        if lock_fd is None or not self.storage.is_local:
            return
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    # -- lifetime ------------------------------------------------------------------------------

    def release(self) -> None:
        """The writer is done: others may take the partition without fencing anyone (local: the
        shared hold goes; object stores: the epoch record is marked released if still mine)."""
        if not self.storage.is_local and self._epoch is not None and self._version is not None:
            record = EpochRecord(self._epoch, self.writer_id, int(time.time() * 1000), released=True)
            try:
                self.storage.put_if_version(self.epoch_path, record.encode(), self._version)
            except Exception:   # best effort: an unreleased record only makes maintenance wait
                pass
            self._version = None
        self.close()

    def close(self) -> None:
        """Release the local file handles (the epoch stays mine until someone bumps it)."""
        if self._held_fd is not None:
            os.close(self._held_fd)
            self._held_fd = None
        self._unpin()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> WriterFence:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"WriterFence({self.storage.describe(self.partition_dir)!r}, "
                f"writer={self.writer_id}, epoch={self._epoch})")
