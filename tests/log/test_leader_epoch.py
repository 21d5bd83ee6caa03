"""LeaderEpochCache: Kafka's assign / end_offset_for / truncation rules, persistence, load-time
fix of stale tail entries."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.log.checkpoint import LeaderEpochCheckpoint
from logcore.log.leader_epoch import LeaderEpochCache
from logcore.storage import open_storage


@pytest.fixture(params=["local", "memory"])
def storage(request, storage_targets):
    target = storage_targets.make(request.param)
    return open_storage(target.url, target.storage_options)


def make_cache(storage, entries=()):
    cache = LeaderEpochCache(LeaderEpochCheckpoint(storage, "t-0/leader-epoch-checkpoint"))
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_assign_persists_synchronously(storage):
    make_cache(storage, [(0, 0), (3, 1200)])
    assert storage.read("t-0/leader-epoch-checkpoint") == b"0\n2\n0 0\n3 1200\n"
    assert make_cache(storage).entries == [(0, 0), (3, 1200)]


def test_assign_ignores_repeats_of_the_latest_epoch(storage):
    cache = make_cache(storage, [(2, 10)])
    assert not cache.assign(2, 10)
    assert not cache.assign(2, 15)
    assert cache.entries == [(2, 10)]
    assert cache.assign(2, 5)   # same epoch, earlier start: replaces
    assert cache.entries == [(2, 5)]


def test_assign_truncates_conflicting_tail(storage):
    cache = make_cache(storage, [(0, 0), (1, 10), (2, 20), (4, 30)])
    cache.assign(3, 25)      # removes (4, 30): epoch >= 3
    assert cache.entries == [(0, 0), (1, 10), (2, 20), (3, 25)]
    cache.assign(5, 15)      # removes entries starting at >= 15
    assert cache.entries == [(0, 0), (1, 10), (5, 15)]
    assert make_cache(storage).entries == [(0, 0), (1, 10), (5, 15)]


def test_invalid_entries_are_refused(storage):
    cache = make_cache(storage)
    with pytest.raises(ValueError, match="epoch and start offset"):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -3)


def test_end_offset_for(storage):
    cache = make_cache(storage, [(1, 0), (3, 100), (6, 250)])
    leo = 400
    assert cache.end_offset_for(-1, leo) == (-1, -1)
    assert cache.end_offset_for(6, leo) == (6, 400)      # latest epoch: the LEO
    assert cache.end_offset_for(7, leo) == (-1, -1)      # no epoch above
    assert cache.end_offset_for(3, leo) == (3, 250)
    assert cache.end_offset_for(4, leo) == (3, 250)      # unknown epoch: floor epoch, next start
    assert cache.end_offset_for(0, leo) == (0, 0)        # below every entry: asked epoch
    assert cache.end_offset_for(1, leo) == (1, 100)


def test_truncate_from_end(storage):
    cache = make_cache(storage, [(1, 0), (3, 100), (6, 250)])
    cache.truncate_from_end(300)
    assert cache.entries == [(1, 0), (3, 100), (6, 250)]
    cache.truncate_from_end(250)
    assert cache.entries == [(1, 0), (3, 100)]
    cache.truncate_from_end(50)
    assert cache.entries == [(1, 0)]
    assert make_cache(storage).entries == [(1, 0)]


def test_truncate_from_start(storage):
    cache = make_cache(storage, [(1, 0), (3, 100), (6, 250)])
    cache.truncate_from_start(0)
    assert cache.entries == [(1, 0), (3, 100), (6, 250)]
    cache.truncate_from_start(120)
    assert cache.entries == [(3, 120), (6, 250)]
    cache.truncate_from_start(250)
    assert cache.entries == [(6, 250)]
    cache.truncate_from_start(300)
    assert cache.entries == [(6, 300)]
    assert make_cache(storage).entries == [(6, 300)]


def test_epoch_for_offset(storage):
    cache = make_cache(storage, [(1, 10), (3, 100)])
    assert cache.epoch_for_offset(5) is None
    assert cache.epoch_for_offset(10) == 1
    assert cache.epoch_for_offset(99) == 1
    assert cache.epoch_for_offset(100) == 3
    assert cache.epoch_for_offset(10**12) == 3
    assert cache.latest_epoch == 3 and cache.previous_epoch() == 1
    assert cache.entries_up_to(100) == [(1, 10)]


def test_load_drops_stale_tail_entries_at_or_above_leo(storage):
    LeaderEpochCheckpoint(storage, "t-0/leader-epoch-checkpoint").write([(0, 0), (2, 50), (4, 90)])
    cache = LeaderEpochCache(LeaderEpochCheckpoint(storage, "t-0/leader-epoch-checkpoint"),
                             log_end_offset=90)
    assert cache.entries == [(0, 0), (2, 50)]
    assert LeaderEpochCheckpoint(storage, "t-0/leader-epoch-checkpoint").read() == [(0, 0), (2, 50)]


def test_load_on_read_only_storage_fixes_in_memory_only(tmp_path):
    writer = open_storage(str(tmp_path))
    LeaderEpochCheckpoint(writer, "leader-epoch-checkpoint").write([(0, 0), (2, 50)])
    reader = open_storage(str(tmp_path), read_only=True)
    cache = LeaderEpochCache(LeaderEpochCheckpoint(reader, "leader-epoch-checkpoint"),
                             log_end_offset=10)
    assert cache.entries == [(0, 0)]
    assert LeaderEpochCheckpoint(writer, "leader-epoch-checkpoint").read() == [(0, 0), (2, 50)]


def test_load_makes_a_non_monotonic_file_monotonic(storage):
    LeaderEpochCheckpoint(storage, "t-0/leader-epoch-checkpoint").write([(0, 0), (5, 100), (3, 80)])
    assert make_cache(storage).entries == [(0, 0), (3, 80)]


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 100)), max_size=30))
def test_entries_stay_strictly_increasing(ops):
    cache = LeaderEpochCache.from_entries([])
    for epoch, start in ops:
        cache.assign(epoch, start)
        epochs = [e for e, _ in cache.entries]
        starts = [s for _, s in cache.entries]
        assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))
        assert cache.latest_entry == (epoch, start) or (
            epoch == cache.latest_epoch and start >= cache.latest_entry[1])
