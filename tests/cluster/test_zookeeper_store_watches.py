"""The store's methods for what brokers and the controller watch and read (no raw kazoo calls
outside the store): topic assignments and configs, admin requests, controlled shutdowns, and the
read-back of an ISR write whose answer was lost."""
from __future__ import annotations

import json

import pytest

from logcore.cluster.compare_and_set import WriteOutcome
from logcore.cluster.znode_json import LeaderAndIsr
from harness import wait_until
from logcore.errors import CoordinatorUnavailableError

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def wait_for(cond, timeout=15.0, what="condition"):
    return wait_until(cond, timeout, what, interval=0.05)


def test_assignment_watch_follows_changes_and_ends_with_the_topic(stores):
    ctl, broker = stores(), stores()
    fence = ctl.try_become_controller(1)
    ta = ctl.create_topic("a", TOPIC_ID, {0: [1, 2]})
    seen, configs = [], []
    broker.watch_assignment("a", seen.append)
    broker.watch_topic_config("a", configs.append)
    assert [s.partitions for s in seen] == [{0: (1, 2)}] and configs == [{}]
    ctl.set_assignment(ta, {0: [1, 2], 1: [2, 1]})
    wait_for(lambda: seen[-1].partitions == {0: (1, 2), 1: (2, 1)}, what="added partition")
    _, version = ctl.topic_config("a")
    ctl.set_topic_config("a", {"retention.ms": "5"}, version)
    wait_for(lambda: configs[-1] == {"retention.ms": "5"}, what="config change")
    assert broker.assignments(["a", "nope"]).keys() == {"a"}
    assert broker.assignments()["a"].partitions == {0: (1, 2), 1: (2, 1)}
    ctl.request_topic_deletion("a")
    ctl.remove_topic("a", fence)
    wait_for(lambda: seen[-1] is None, what="topic gone")
    n = len(seen)
    ctl.create_topic("a", TOPIC_ID, {0: [1]})                # a new topic: a new watch's business
    assert len(seen) == n


def test_a_config_znode_that_is_not_json_is_skipped(stores, zk_client, caplog):
    ctl, broker = stores(), stores()
    ctl.create_topic("c", TOPIC_ID, {0: [1]})
    configs = []
    broker.watch_topic_config("c", configs.append)
    zk_client.set("/config/topics/c", b"not json")
    wait_for(lambda: "is not JSON" in caplog.text, what="the bad config logged")
    zk_client.set("/config/topics/c", json.dumps({"version": 1, "config": {"a": 1}}).encode())
    wait_for(lambda: configs[-1] == {"a": "1"}, what="the next good config")
    assert configs == [{}, {"a": "1"}]


def test_admin_requests_and_controlled_shutdowns_are_watched_and_consumed(stores):
    ctl, broker = stores(), stores()
    events, shutting = [], []
    ctl.requests.watch_admin_requests(lambda: events.append(1))
    ctl.requests.watch_controlled_shutdowns(shutting.append)
    assert len(events) == 3 and shutting == [set()]
    broker.request_preferred_election([("t", 0)])
    wait_for(lambda: len(events) == 4, what="preferred election request")
    broker.request_unclean_election([("t", 1)])
    broker.request_reassignments({("t", 0): [2, 1]})
    wait_for(lambda: len(events) == 6, what="the other requests")
    parts, version = ctl.requests.pending_preferred_elections()
    assert parts == [("t", 0)]
    ctl.requests.finish_preferred_elections(version)
    assert ctl.requests.pending_preferred_elections() is None
    parts, version = ctl.requests.pending_unclean_elections()
    assert parts == [("t", 1)]
    ctl.requests.finish_unclean_elections(version + 1)              # a newer request than read: it stays
    assert ctl.requests.pending_unclean_elections() == (parts, version)
    ctl.requests.finish_unclean_elections(version)
    targets, version = ctl.pending_reassignments()
    assert targets == {("t", 0): (2, 1)}
    ctl.requests.finish_reassignments(version)
    assert ctl.pending_reassignments() is None
    broker.announce_controlled_shutdown(7)
    wait_for(lambda: shutting[-1] == {7}, what="shutdown announced")
    assert ctl.connected


def test_an_isr_write_read_back_after_a_lost_answer(stores):
    ctl, leader, other = stores(), stores(), stores()
    fence = ctl.try_become_controller(1)
    ctl.create_topic("t", TOPIC_ID, {0: [1, 2, 3]})
    based = ctl.create_partition_states("t", {0: LeaderAndIsr(1, 0, (1, 2, 3), fence.epoch)}, fence)[0]
    proposed = LeaderAndIsr(1, 0, (1, 2), fence.epoch)
    assert leader.partition_state_write_outcome("t", 0, based, proposed) == (WriteOutcome.NOT_APPLIED, based)
    written = leader.update_partition_state("t", 0, proposed, based.zk_version)
    outcome, fresh = leader.partition_state_write_outcome("t", 0, based, proposed)
    assert outcome is WriteOutcome.APPLIED and fresh == written
    # someone else wrote the same ISR after another change: not this write
    other.update_partition_state("t", 0, LeaderAndIsr(1, 0, (1,), fence.epoch), written.zk_version)
    outcome, fresh = leader.partition_state_write_outcome("t", 0, based, proposed)
    assert outcome is WriteOutcome.SUPERSEDED and fresh.isr == (1,)
    leader.close()
    with pytest.raises(CoordinatorUnavailableError):
        leader.partition_state_write_outcome("t", 0, based, proposed)


def test_producer_id_blocks_are_claimed_in_turn(stores):
    a, b = stores(), stores()
    assert a.claim_producer_id_block(1, 1000) == (0, 999)
    assert b.claim_producer_id_block(2, 1000) == (1000, 1999)
