"""What `seglog reassign-partitions --throttle` throttles, computed as Kafka's
ReassignPartitionsCommand computes it (the cluster test is in
tests/cluster/test_replication_throttle.py), and the options it refuses."""
from __future__ import annotations

import argparse

import pytest

from logcore.errors import InvalidConfigError
from logcore.tools.kafka_admin import Reassignment
from logcore.tools.reassign_partitions_command import cmd_reassign_partitions
from logcore.tools.reassignment_throttle import PartitionMove, move_map, moving_brokers, topic_throttles


def test_sources_lead_and_new_replicas_follow():
    current = {("a", 0): [1, 2], ("a", 1): [2, 3], ("b", 0): [3]}
    plan = {("a", 0): [2, 4], ("a", 1): [2, 3], ("b", 0): [1, 3]}
    moves = move_map({}, plan, current)
    assert moves["a"][0] == PartitionMove(frozenset({1, 2}), frozenset({4}))
    assert moves["a"][1] == PartitionMove(frozenset({2, 3}), frozenset())
    assert topic_throttles(moves) == {
        "a": {"leader.replication.throttled.replicas": "0:1,0:2,1:2,1:3",
              "follower.replication.throttled.replicas": "0:4"},
        "b": {"leader.replication.throttled.replicas": "0:3", "follower.replication.throttled.replicas": "0:1"}}
    assert moving_brokers(moves) == [1, 2, 3, 4]


def test_reassignments_in_progress_keep_their_sources_and_are_throttled_too():
    in_progress = {("a", 0): Reassignment(replicas=(5, 1, 2), adding=(5,), removing=(2,)),
                   ("c", 3): Reassignment(replicas=(7, 8), adding=(8,), removing=(7,))}
    current = {("a", 0): [5, 1, 2]}
    moves = move_map(in_progress, {("a", 0): [5, 6]}, current)
    # the plan replaces a-0's move: its sources are the original replicas, not the ones added
    assert moves["a"][0] == PartitionMove(frozenset({1, 2}), frozenset({5, 6}))
    assert moves["c"][3] == PartitionMove(frozenset({7}), frozenset({8}))
    assert topic_throttles(moves)["c"] == {"leader.replication.throttled.replicas": "3:7",
                                           "follower.replication.throttled.replicas": "3:8"}


def test_leader_entries_sort_as_text_as_kafkas_treeset():
    moves = move_map({}, {("t", 10): [1], ("t", 9): [1]}, {("t", 10): [2], ("t", 9): [2]})
    assert topic_throttles(moves)["t"]["leader.replication.throttled.replicas"] == "10:2,9:2"


@pytest.mark.parametrize("options, message", [
    ({"verify": True, "throttle": 1000}, "--throttle applies with --execute only"),
    ({"execute": True, "throttle": -5}, "at least 0"),
    ({"execute": True, "preserve_throttles": True}, "--preserve-throttles applies with --verify only"),
])
def test_refused_options(tmp_path, options, message):
    plan = tmp_path / "p.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}')
    args = argparse.Namespace(bootstrap_server="127.0.0.1:1", reassignment_json_file=str(plan), execute=False,
                              verify=False, cancel=False, list=False, additional=False, throttle=-1,
                              preserve_throttles=False)
    for k, v in options.items():
        setattr(args, k, v)
    with pytest.raises(InvalidConfigError, match=message):
        cmd_reassign_partitions(args)
