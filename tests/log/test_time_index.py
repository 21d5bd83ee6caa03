"""TimeIndex: byte layout, maybe_append rules, lookups against a brute-force reference,
truncation by offset, the reserved last slot, corrupt files."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.errors import CorruptIndexError
from logcore.log.offset_index import IndexOffsetOverflowError, InvalidIndexEntryError
from logcore.log.time_index import TimeIndex
from logcore.storage import open_storage


@pytest.fixture(params=["local", "memory"])
def storage(request, storage_targets):
    target = storage_targets.make(request.param)
    return open_storage(target.url, target.storage_options)


def reference_lookup(entries, base, ts):
    best = (-1, base)
    for timestamp, offset in entries:
        if timestamp <= ts:
            best = (timestamp, offset)
    return best


def test_entry_bytes_are_timestamp_then_relative_offset():
    index = TimeIndex(None, None, 500, writable=True)
    index.maybe_append(1_700_000_000_000, 503)
    assert index.to_bytes() == struct.pack(">qi", 1_700_000_000_000, 3)
    assert index.to_bytes().hex() == "0000018bcfe56800" + "00000003"


def test_maybe_append_rules():
    index = TimeIndex(None, "t.timeindex", 100, writable=True)
    assert index.lookup(5) == (-1, 100)
    assert index.maybe_append(1000, 101)
    assert not index.maybe_append(1000, 102)       # equal timestamp: silently ignored
    assert index.entries == 1
    with pytest.raises(InvalidIndexEntryError, match="smaller than the last offset 101"):
        index.maybe_append(2000, 100)
    with pytest.raises(InvalidIndexEntryError, match="smaller than the last timestamp 1000"):
        index.maybe_append(999, 105)
    assert index.maybe_append(2000, 101)           # same offset, larger timestamp
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(3000, 100 + 2**31)
    assert index.last_entry == (2000, 101)


def test_first_append_below_base_is_an_overflow():
    index = TimeIndex(None, None, 100, writable=True)
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(5, 99)


def test_one_slot_reserved_for_the_final_entry():
    index = TimeIndex(None, None, 0, max_index_size=36, writable=True)  # 3 entries
    index.maybe_append(10, 1)
    assert not index.is_full()
    index.maybe_append(20, 2)
    assert index.is_full()
    with pytest.raises(InvalidIndexEntryError, match="full"):
        index.maybe_append(30, 3)
    assert index.maybe_append(30, 3, skip_full_check=True)
    assert index.entries == 3


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 10_000), st.integers(0, 20)), max_size=150),
       targets=st.lists(st.integers(-10, 2_000_000), min_size=1, max_size=30))
def test_lookup_matches_brute_force(steps, targets):
    base = 7_000
    index = TimeIndex(None, None, base, writable=True)
    entries, ts, offset = [], 0, base
    for dt, doff in steps:
        ts += dt
        offset += doff
        index.maybe_append(ts, offset)
        entries.append((ts, offset))
    for t in targets:
        assert index.lookup(t) == reference_lookup(entries, base, t)
    loaded = TimeIndex.from_bytes(index.to_bytes(), base)
    for t in targets:
        assert loaded.lookup(t) == reference_lookup(entries, base, t)


def test_truncate_to_searches_the_offset_column():
    index = TimeIndex(None, None, 0, writable=True)
    for ts, off in [(10, 5), (20, 9), (30, 9), (40, 15)]:
        index.maybe_append(ts, off)
    index.truncate_to(10)
    assert [index.entry(i) for i in range(index.entries)] == [(10, 5), (20, 9), (30, 9)]
    index.truncate_to(9)
    assert [index.entry(i) for i in range(index.entries)] == [(10, 5)]
    index.truncate_to(0)
    assert index.entries == 0 and index.last_entry == (-1, 0)


def test_local_round_trip_and_trim(storage):
    index = TimeIndex(storage, "p/00000000000000000000.timeindex", 0, writable=True)
    for i in range(1, 6):
        index.maybe_append(1000 * i, i * 3)
    index.flush()
    index.close()
    assert storage.size("p/00000000000000000000.timeindex") == 60
    loaded = TimeIndex(storage, "p/00000000000000000000.timeindex", 0)
    assert loaded.lookup(3500) == (3000, 9)
    loaded.sanity_check()


def test_default_sizes_match_kafka():
    index = TimeIndex(None, None, 0, writable=True)
    assert index.max_entries == 873_813  # file 10,485,756 bytes, 873,812 usable


def test_sanity_check_timestamps_going_backwards(storage):
    storage.write_atomic("bad.timeindex", struct.pack(">qiqi", 5000, 1, 4000, 2))
    with pytest.raises(CorruptIndexError, match="last timestamp 4000 is below the first"):
        TimeIndex(storage, "bad.timeindex", 0).sanity_check()


def test_sanity_check_offset_below_base(storage):
    storage.write_atomic("bad.timeindex", struct.pack(">qi", 5000, -1))
    with pytest.raises(CorruptIndexError, match="below the base offset"):
        TimeIndex(storage, "bad.timeindex", 10).sanity_check()


def test_sanity_check_length(storage):
    storage.write_atomic("bad.timeindex", struct.pack(">qi", 5000, 1) + b"\x00" * 5)
    with pytest.raises(CorruptIndexError, match="17 bytes") as info:
        TimeIndex(storage, "bad.timeindex", 0).sanity_check()
    assert info.value.file.endswith("bad.timeindex")


def test_zero_padding_is_not_a_valid_prefix(storage):
    storage.write_atomic("pad.timeindex", struct.pack(">qiqi", 100, 1, 200, 4) + bytes(12 * 5))
    index = TimeIndex(storage, "pad.timeindex", 0)
    assert index.entries == 7
    assert index.valid_prefix_entries() == 2
