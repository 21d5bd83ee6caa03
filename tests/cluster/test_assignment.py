"""Kafka's rack-unaware replica assignment and the plain round-robin one."""
from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from logcore.cluster.assignment import assign_replicas, assign_simple, check_assignment
from logcore.errors import InvalidConfigError, InvalidReplicationFactorError


def test_kafka_class_comment_example():
    # AdminUtils' comment: 5 brokers, start index 0, shift 0
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert got[0] == [0, 1, 2]
    assert got[1] == [1, 2, 3]
    assert got[4] == [4, 0, 1]
    assert got[5] == [0, 2, 3]
    assert got[9] == [4, 1, 2]


def test_brokers_are_sorted_and_simple_mode_is_round_robin():
    assert assign_simple([3, 1, 2], 4, 3) == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 2, 3]}
    assert assign_replicas([30, 10, 20], 1, 2, start_index=0, replica_shift=0) == {0: [10, 20]}


def test_adding_partitions_continues_the_leaders():
    # Kafka's add-partitions path continues the leader round-robin; the shift is not replayed
    # for the earlier rounds (as in AdminUtils), so only the first replicas line up
    whole = assign_replicas(range(4), 12, 2, start_index=1, replica_shift=1)
    tail = assign_replicas(range(4), 5, 2, start_index=1, replica_shift=1, start_partition=7)
    assert sorted(tail) == list(range(7, 12))
    assert [tail[p][0] for p in tail] == [whole[p][0] for p in range(7, 12)]
    assert tail[8] == [1, 0]            # p8: 8 % 4 == 0 bumps the shift from 1 to 2


def test_errors():
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 2"):
        assign_replicas([1, 2], 3, 3)
    with pytest.raises(InvalidReplicationFactorError):
        assign_simple([1, 2], 3, 0)
    with pytest.raises(InvalidConfigError, match="partitions must be larger than 0"):
        assign_replicas([1, 2], 0, 1)
    with pytest.raises(InvalidConfigError, match="distinct"):
        assign_replicas([1, 1], 1, 1)


def test_check_assignment():
    check_assignment({0: [1, 2], 1: [2, 1]}, [1, 2])
    with pytest.raises(InvalidConfigError, match="twice"):
        check_assignment({0: [1, 1]})
    with pytest.raises(InvalidConfigError, match="unknown broker"):
        check_assignment({0: [1, 3]}, [1, 2])
    with pytest.raises(InvalidReplicationFactorError):
        check_assignment({0: [1, 2], 1: [1]})
    with pytest.raises(InvalidConfigError, match="0..1"):
        check_assignment({0: [1], 2: [1]})


cases = st.tuples(
    st.lists(st.integers(0, 1000), min_size=1, max_size=9, unique=True),
    st.integers(1, 60), st.integers(1, 9), st.integers(0, 2**31))


@settings(max_examples=300, deadline=None)
@given(cases)
def test_assignment_properties(case):
    brokers, partitions, rf, seed = case
    rf = min(rf, len(brokers))
    for got in (assign_replicas(brokers, partitions, rf, rng=random.Random(seed)),
                assign_simple(brokers, partitions, rf)):
        assert sorted(got) == list(range(partitions))
        check_assignment(got, brokers)          # distinct replicas, known brokers, same count
        assert all(len(r) == rf for r in got.values())
        # leaders (first replicas) go round-robin: counts differ by at most one
        leaders = Counter(r[0] for r in got.values())
        counts = [leaders.get(b, 0) for b in brokers]
        assert max(counts) - min(counts) <= 1
        # over whole rounds of n partitions every broker holds the same number of replicas
        n = len(brokers)
        whole = partitions - partitions % n
        if whole:
            load = Counter(b for p in range(whole) for b in got[p])
            assert set(load.values()) == {whole * rf // n} and len(load) == n


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 8), st.integers(0, 2**31))
def test_random_start_and_shift_spread_followers(n, seed):
    # with the shift, a broker's partitions put their second replica on every other broker
    got = assign_replicas(range(n), n * (n - 1), 2, rng=random.Random(seed))
    for b in range(n):
        followers = Counter(r[1] for r in got.values() if r[0] == b)
        assert set(followers) == set(range(n)) - {b}
