"""Caches of fetched remote data: chunks (memory and disk, LRU, bounded) and indexes.

Chunks are cached de-transformed (decrypted, decompressed), keyed by segment id and chunk number:
a remote segment attempt is immutable, so an entry never goes stale. A chunk that is being fetched
is fetched once: other readers of the same chunk wait for that fetch instead of issuing their own
GET (`ChunkCache.get` keeps the in-flight fetches). `ChunkCache.prefetch` starts fetches on a small
thread pool, for the next chunks of a sequential read.
"""
from __future__ import annotations

import os
import secrets
import shutil
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

ChunkKey = tuple[str, int]          # (segment id text, chunk number)
_PROCESS_FOLDER = "seglog-"


def _remove_stale_folders(path: str) -> None:
    """Remove the cache folders of processes that are gone."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for name in names:
        pid = name[len(_PROCESS_FOLDER):]
        if not (name.startswith(_PROCESS_FOLDER) and pid.isdigit()):
            continue
        try:
            os.kill(int(pid), 0)
            continue                    # still running (or not ours to signal): keep
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(os.path.join(path, name), ignore_errors=True)


class LruBytes:
    """A thread-safe LRU map of bytes values bounded by their total size."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._items: OrderedDict[object, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: object) -> bytes | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: object, value: bytes) -> None:
        if len(value) > self.max_bytes:
            return                              # never evict everything for one oversized entry
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._size -= len(old)
            self._items[key] = value
            self._size += len(value)
            while self._size > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._size -= len(evicted)


class DiskLru:
    """Chunks as files in one folder, bounded by total size, least recently used evicted.

    Files are written to a temp name and renamed, so a crash never leaves a torn entry. Each
    process keeps its entries in a folder of its own under the cache path (`seglog-<pid>`): the
    broker and a reader on the same machine may be given the same path (it is a root setting).
    At start the folders of processes no longer running are removed (entries of a previous
    process are not trusted)."""

    def __init__(self, path: str, max_bytes: int):
        self.path = path
        self.folder = os.path.join(path, f"{_PROCESS_FOLDER}{os.getpid()}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, int] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        _remove_stale_folders(path)
        shutil.rmtree(self.folder, ignore_errors=True)
        os.makedirs(self.folder, exist_ok=True)

    @property
    def size(self) -> int:
        return self._size

    @staticmethod
    def _name(key: ChunkKey) -> str:
        return f"{key[0]}-{key[1]}"

    def get(self, key: ChunkKey) -> bytes | None:
        name = self._name(key)
        with self._lock:
            if name not in self._entries:
                return None
            self._entries.move_to_end(name)
        try:
            with open(os.path.join(self.folder, name), "rb") as f:
                return f.read()
        except FileNotFoundError:               # evicted between the lookup and the open
            return None

    def put(self, key: ChunkKey, value: bytes) -> None:
        if len(value) > self.max_bytes:
            return
        name = self._name(key)
        tmp = os.path.join(self.folder, f".{name}.{secrets.token_hex(4)}.tmp")
        with open(tmp, "wb") as f:
            f.write(value)
        evict: list[str] = []
        with self._lock:
            os.replace(tmp, os.path.join(self.folder, name))
            self._size -= self._entries.pop(name, 0)
            self._entries[name] = len(value)
            self._size += len(value)
            while self._size > self.max_bytes:
                old, size = self._entries.popitem(last=False)
                self._size -= size
                evict.append(old)
            for old in evict:
                try:
                    os.unlink(os.path.join(self.folder, old))
                except FileNotFoundError:
                    pass


class ChunkCache:
    """Memory over disk over the remote store, with single-flight fetches and prefetch."""

    def __init__(self, *, memory_bytes: int = 0, disk_bytes: int = 0, disk_path: str = "",
                 prefetch_threads: int = 2):
        self.memory = LruBytes(memory_bytes) if memory_bytes > 0 else None
        self.disk = DiskLru(disk_path, disk_bytes) if disk_bytes > 0 else None
        self._inflight: dict[ChunkKey, Future] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=prefetch_threads, thread_name_prefix="rsm-prefetch")
        self.hits = 0
        self.loads = 0

    def _cached(self, key: ChunkKey) -> bytes | None:
        if self.memory is not None and (value := self.memory.get(key)) is not None:
            return value
        if self.disk is not None and (value := self.disk.get(key)) is not None:
            if self.memory is not None:
                self.memory.put(key, value)
            return value
        return None

    def _store(self, key: ChunkKey, value: bytes) -> None:
        if self.memory is not None:
            self.memory.put(key, value)
        if self.disk is not None:
            self.disk.put(key, value)

    def get(self, key: ChunkKey, load: Callable[[], bytes]) -> bytes:
        """The chunk from a cache, from a fetch in flight, or loaded now (and cached)."""
        value = self._cached(key)
        if value is not None:
            self.hits += 1
            return value
        future, owner = self._claim(key)
        if owner:
            self._run(key, load, future)
        return future.result()

    def get_async(self, key: ChunkKey, load: Callable[[], bytes]) -> Future:
        """A future of the chunk, fetched on the pool when neither cached nor in flight."""
        value = self._cached(key)
        if value is not None:
            done: Future = Future()
            done.set_result(value)
            return done
        future, owner = self._claim(key)
        if owner:
            self._pool.submit(self._run, key, load, future)
        return future

    def _claim(self, key: ChunkKey) -> tuple[Future, bool]:
        with self._lock:
            future = self._inflight.get(key)
            if future is not None:
                return future, False
            future = Future()
            self._inflight[key] = future
            return future, True

    def _run(self, key: ChunkKey, load: Callable[[], bytes], future: Future) -> None:
        try:
            value = self._cached(key)      # finished by another owner since our first look
            if value is None:
                value = load()
                self.loads += 1
                self._store(key, value)
            future.set_result(value)
        except BaseException as exc:
            future.set_exception(exc)
        finally:
            with self._lock:
                self._inflight.pop(key, None)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
