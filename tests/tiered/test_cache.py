"""Chunk and index caches: GETs counted at the storage layer; LRU bounds in memory and on disk."""
from __future__ import annotations

import os

import pytest

from logcore.storage import open_storage
from logcore.tiered.cache import ChunkCache, DiskLru, LruBytes
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager
from logcore.tiered.rsm import IndexType
from tests.tiered.helpers import FaultyStorage, new_metadata, segment_bytes, segment_data

CHUNK = 8192


def setup(target, *, memory=1 << 20, disk=0, disk_path="", prefetch=0, compression="on"):
    storage = FaultyStorage(open_storage(target.url, target.storage_options))
    cache = ChunkCache(memory_bytes=memory, disk_bytes=disk, disk_path=disk_path, prefetch_threads=2)
    rsm = FsspecRemoteStorageManager(storage, chunk_size=CHUNK, compression=compression, cache=cache,
                                     prefetch_max_size=prefetch)
    log = segment_bytes(600)
    meta = new_metadata(0, 599, len(log))
    custom = rsm.copy_log_segment_data(meta, segment_data(log))
    meta = meta.with_update(meta.state.COPY_SEGMENT_FINISHED, custom_metadata=custom)
    return rsm, storage, meta, log


@pytest.mark.parametrize("prefetch", [0, 4 * CHUNK])
def test_sequential_read_gets_each_chunk_once(any_storage_url, prefetch):
    rsm, storage, meta, log = setup(any_storage_url, prefetch=prefetch)
    chunks = -(-len(log) // CHUNK)
    storage.reads.clear()
    stream = rsm.fetch_log_segment(meta, 0)
    got = b"".join(iter(lambda: stream.read(5000), b""))
    assert got == log
    data = storage.data_reads()
    assert len(data) == chunks                                  # one GET per chunk
    assert len(set(data)) == len(data)                          # none repeated
    assert len(storage.reads) - len(data) == 1                  # plus the manifest, once
    storage.reads.clear()
    assert rsm.fetch_log_segment(meta, 0).read() == log         # warm: no GET at all
    assert storage.reads == []
    rsm.close()


def test_ranged_read_fetches_only_the_chunks_it_needs(tmp_path):
    target = type("T", (), {"url": str(tmp_path / "r"), "storage_options": {}})()
    rsm, storage, meta, log = setup(target, prefetch=8 * CHUNK)
    storage.reads.clear()
    start, end = 3 * CHUNK + 100, 4 * CHUNK + 50               # spans chunks 3 and 4
    assert rsm.fetch_log_segment(meta, start, end).read() == log[start:end + 1]
    stored = [rsm.load_manifest(meta).chunk_index.stored_range(c) for c in (3, 4)]
    assert sorted((s, e) for _, s, e in storage.data_reads()) == stored
    rsm.close()


def test_no_cache_still_single_flight_and_prefetch(tmp_path):
    target = type("T", (), {"url": str(tmp_path / "r"), "storage_options": {}})()
    rsm, storage, meta, log = setup(target, memory=0, prefetch=3 * CHUNK)
    storage.reads.clear()
    assert rsm.fetch_log_segment(meta, 0).read() == log
    assert len(storage.data_reads()) == -(-len(log) // CHUNK)
    rsm.close()


def test_disk_cache_serves_after_memory_eviction(tmp_path):
    target = type("T", (), {"url": str(tmp_path / "r"), "storage_options": {}})()
    rsm, storage, meta, log = setup(target, memory=2 * CHUNK, disk=1 << 20,
                                    disk_path=str(tmp_path / "cache"))
    assert rsm.fetch_log_segment(meta, 0).read() == log
    assert rsm.cache.memory.size <= 2 * CHUNK
    storage.reads.clear()
    assert rsm.fetch_log_segment(meta, 0).read() == log
    assert storage.reads == []
    rsm.close()


def test_index_cache(tmp_path):
    target = type("T", (), {"url": str(tmp_path / "r"), "storage_options": {}})()
    rsm, storage, meta, log = setup(target)
    first = rsm.fetch_index(meta, IndexType.OFFSET)
    storage.reads.clear()
    assert rsm.fetch_index(meta, IndexType.OFFSET) == first
    assert storage.reads == []
    rsm.close()


def test_lru_bounds():
    lru = LruBytes(100)
    for i in range(10):
        lru.put(i, b"x" * 30)
        lru.get(0)                       # keep 0 hot
    assert lru.size <= 100 and lru.get(0) is not None and lru.get(1) is None
    lru.put("huge", b"x" * 101)          # larger than the cache: not kept, nothing evicted
    assert lru.get("huge") is None and lru.get(0) is not None


def test_disk_lru_bounds(tmp_path):
    disk = DiskLru(str(tmp_path / "d"), 100)
    for i in range(10):
        disk.put(("s", i), bytes([i]) * 30)
    assert disk.size <= 100
    files = os.listdir(disk.folder)          # this process's folder under the cache path
    assert sorted(files) == ["s-7", "s-8", "s-9"]
    assert disk.get(("s", 9)) == bytes([9]) * 30 and disk.get(("s", 1)) is None
