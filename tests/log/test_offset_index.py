"""OffsetIndex: byte layout, lookups against a brute-force reference, preallocation and trimming,
corrupt and zero-padded files, local disk and object storage."""
from __future__ import annotations

import os
import struct
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.errors import CorruptIndexError, ReadOnlyLogError
from logcore.log.offset_index import (
    IndexOffsetOverflowError,
    InvalidIndexEntryError,
    OffsetIndex,
)
from logcore.storage import open_storage


@pytest.fixture(params=["local", "memory"])
def storage(request, storage_targets):
    target = storage_targets.make(request.param)
    return open_storage(target.url, target.storage_options)


@pytest.fixture
def local(tmp_path):
    return open_storage(str(tmp_path))


def reference_lookup(entries, base, target):
    """Largest (offset, position) with offset <= target, else (base, 0): a linear scan."""
    best = (base, 0)
    for offset, position in entries:
        if offset <= target:
            best = (offset, position)
    return best


def test_entry_bytes_are_big_endian_relative_offset_then_position():
    index = OffsetIndex(None, None, 1000, writable=True)
    index.append(1005, 4096)
    index.append(1000 + 2**31 - 1, 2**31 - 1)
    assert index.to_bytes() == bytes.fromhex("00000005 00001000 7fffffff 7fffffff".replace(" ", ""))


def test_reads_hand_built_file(local):
    data = struct.pack(">iiii", 3, 100, 9, 250)
    local.write_atomic("p/00000000000000000050.index", data)
    index = OffsetIndex(local, "p/00000000000000000050.index", 50)
    assert index.entries == 2
    assert index.lookup(49) == (50, 0)
    assert index.lookup(53) == (53, 100)
    assert index.lookup(58) == (53, 100)
    assert index.lookup(59) == (59, 250)
    assert index.lookup(10**15) == (59, 250)
    assert index.last_offset == 59
    index.sanity_check()


@settings(max_examples=60, deadline=None)
@given(base=st.integers(0, 2**40),
       deltas=st.lists(st.integers(1, 1000), max_size=200),
       targets=st.lists(st.integers(-5, 250_000), min_size=1, max_size=30))
def test_lookup_matches_brute_force(base, deltas, targets):
    index = OffsetIndex(None, None, base, writable=True)
    entries, rel, pos = [], 0, 0
    for delta in deltas:
        rel += delta
        pos += delta * 7
        index.append(base + rel, pos)
        entries.append((base + rel, pos))
    for t in targets:
        assert index.lookup(base + t) == reference_lookup(entries, base, base + t)
    # the same through the bytes (the read-only path)
    loaded = OffsetIndex.from_bytes(index.to_bytes(), base)
    for t in targets:
        assert loaded.lookup(base + t) == reference_lookup(entries, base, base + t)


@settings(max_examples=40, deadline=None)
@given(deltas=st.lists(st.integers(1, 50), max_size=60), cut=st.integers(-3, 2000))
def test_truncate_to_removes_entries_at_or_above(deltas, cut):
    base = 100
    index = OffsetIndex(None, None, base, writable=True)
    offsets, rel = [], 0
    for delta in deltas:
        rel += delta
        index.append(base + rel, rel)
        offsets.append(base + rel)
    index.truncate_to(base + cut)
    kept = [o for o in offsets if o < base + cut]
    assert index.entries == len(kept)
    assert index.last_offset == (kept[-1] if kept else base)


def test_append_rules():
    index = OffsetIndex(None, "x.index", 10, max_index_size=24, writable=True)
    with pytest.raises(IndexOffsetOverflowError, match="int32"):
        index.append(9, 0)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(10 + 2**31, 0)
    index.append(12, 100)
    with pytest.raises(InvalidIndexEntryError, match="not larger than the last offset 12"):
        index.append(12, 200)
    with pytest.raises(InvalidIndexEntryError, match="position"):
        index.append(13, -1)
    index.append(13, 200)
    index.append(20, 300)
    assert index.is_full()
    with pytest.raises(InvalidIndexEntryError, match="full"):
        index.append(21, 400)


def test_read_only_index_refuses_appends(storage):
    storage.write_atomic("a.index", struct.pack(">ii", 1, 1))
    index = OffsetIndex(storage, "a.index", 0)
    with pytest.raises(ReadOnlyLogError):
        index.append(5, 5)


def test_local_file_preallocated_while_active_and_trimmed_on_close(local, tmp_path):
    index = OffsetIndex(local, "s.index", 0, max_index_size=1000, writable=True)
    os_path = tmp_path / "s.index"
    assert os_path.stat().st_size == 1000 // 8 * 8  # Kafka rounds down to whole entries
    for i in range(1, 11):
        index.append(i * 10, i * 4096)
    # written through: the first 80 bytes on disk are the entries, the rest zero padding
    raw = os_path.read_bytes()
    assert raw[:80] == index.to_bytes() and raw[80:] == bytes(len(raw) - 80)
    index.flush()
    index.close()
    assert os_path.stat().st_size == 80
    reopened = OffsetIndex(local, "s.index", 0)
    assert reopened.entries == 10 and reopened.lookup(55) == (50, 5 * 4096)
    reopened.sanity_check()


def test_reopen_writable_regrows_and_continues(local, tmp_path):
    index = OffsetIndex(local, "s.index", 0, max_index_size=800, writable=True)
    index.append(5, 50)
    index.close()
    again = OffsetIndex(local, "s.index", 0, max_index_size=800, writable=True)
    assert (tmp_path / "s.index").stat().st_size == 800
    assert again.entries == 1
    again.append(9, 90)
    again.close()
    assert OffsetIndex(local, "s.index", 0).to_bytes() == struct.pack(">iiii", 5, 50, 9, 90)


def test_crash_leaves_zero_padding_that_loads_as_entries(local, tmp_path):
    index = OffsetIndex(local, "s.index", 0, max_index_size=160, writable=True)
    for i in range(1, 4):
        index.append(i * 10, i * 100)
    index.flush()
    os.close(index._fd)  # simulate a crash: no trim
    index._fd = None
    loaded = OffsetIndex(local, "s.index", 0)
    assert loaded.entries == 20  # Kafka's rule: floor(length / 8) entries, padding included
    assert loaded.valid_prefix_entries() == 3
    assert loaded.file_length == 160
    assert loaded.drop_invalid_tail() == 17
    assert loaded.lookup(10**6) == (30, 300) and loaded.entries == 3


def test_truncate_on_disk_zeroes_the_dropped_entries(local, tmp_path):
    index = OffsetIndex(local, "s.index", 0, max_index_size=80, writable=True)
    for i in range(1, 6):
        index.append(i, i * 10)
    index.truncate_to(3)
    assert index.entries == 2
    raw = (tmp_path / "s.index").read_bytes()
    assert len(raw) == 80 and raw[16:] == bytes(64)
    index.append(7, 70)
    index.close()
    assert OffsetIndex(local, "s.index", 0).to_bytes() == struct.pack(">iiiiii", 1, 10, 2, 20, 7, 70)


def test_reset_and_resize(local):
    index = OffsetIndex(local, "s.index", 0, max_index_size=80, writable=True)
    index.append(1, 1)
    index.trim()
    assert index.max_entries == 1 and index.is_full()
    index.reset()
    assert index.entries == 0 and index.max_entries == 10
    index.append(2, 2)
    assert index.lookup(5) == (2, 2)


def test_object_storage_publishes_on_flush(storage_targets):
    target = storage_targets.make("memory")
    storage = open_storage(target.url)
    index = OffsetIndex(storage, "t-0/00000000000000000000.index", 0, writable=True)
    index.append(3, 30)
    assert not storage.exists("t-0/00000000000000000000.index")
    index.flush()
    assert storage.read("t-0/00000000000000000000.index") == struct.pack(">ii", 3, 30)
    loaded = OffsetIndex(storage, "t-0/00000000000000000000.index", 0)
    assert loaded.lookup(100) == (3, 30)


def test_sanity_check_negative_relative_offset(storage):
    storage.write_atomic("bad.index", struct.pack(">iiii", 5, 10, -3, 20))
    with pytest.raises(CorruptIndexError, match="below the base offset") as info:
        OffsetIndex(storage, "bad.index", 100).sanity_check()
    assert "bad.index" in str(info.value) and info.value.file.endswith("bad.index")


def test_sanity_check_length_not_multiple_of_entry(storage):
    storage.write_atomic("bad.index", struct.pack(">ii", 5, 10) + b"\x00\x01\x02")
    index = OffsetIndex(storage, "bad.index", 0)
    assert index.entries == 1
    with pytest.raises(CorruptIndexError, match="11 bytes is not a multiple of the 8-byte"):
        index.sanity_check()


def test_garbage_file_is_not_a_valid_prefix(storage):
    rng = np.random.default_rng(7)
    storage.write_atomic("junk.index", rng.integers(0, 256, 800, dtype=np.uint8).tobytes())
    index = OffsetIndex(storage, "junk.index", 0)
    assert index.entries == 100
    assert index.valid_prefix_entries() < 100


def test_rename_follows_the_file(storage):
    index = OffsetIndex(storage, "a.index", 0, writable=True)
    index.append(1, 1)
    index.flush()
    index.rename_to("a.index.deleted")
    assert storage.exists("a.index.deleted") and not storage.exists("a.index")
    index.delete()
    assert not storage.exists("a.index.deleted")


def test_lookup_is_logarithmic_on_a_full_index(local):
    n = 1_310_720  # a full 10 MiB offset index
    rel = np.arange(1, n + 1, dtype=">i4")
    data = np.empty(n, dtype=[("key", ">i4"), ("value", ">i4")])
    data["key"], data["value"] = rel, rel * 2
    local.write_atomic("big.index", data.tobytes())
    index = OffsetIndex(local, "big.index", 0)
    targets = np.random.default_rng(1).integers(0, n + 10, 2000)
    start = time.perf_counter()
    for t in targets:
        offset, position = index.lookup(int(t))
        assert position == 2 * offset
    per_lookup = (time.perf_counter() - start) / len(targets)
    # A linear scan or a per-call byte swap of 1.3M entries costs >= 300 us; searchsorted ~ 2 us.
    assert per_lookup < 100e-6, f"{per_lookup * 1e6:.1f} us per lookup"
