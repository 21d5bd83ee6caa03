"""Leader-election rules (pure) and the controller against a real ZooKeeper: failover when the
controller's session ends, leader moves on broker loss with epoch bumps, offline partitions,
unclean election, preferred-leader election, topic deletion."""
from __future__ import annotations

import logging
import time

import pytest
from hypothesis import given, settings, strategies as st

from logcore.cluster.controller import (Controller, elect_controlled_shutdown, elect_leader,
                                        elect_preferred, initial_state)
from logcore.cluster.reassignments import elect_reassigned, reassignment_plan
from logcore.cluster.znode_json import NO_LEADER, LeaderAndIsr
from logcore.cluster.zookeeper_store import ZooKeeperStore
from harness import wait_until


def test_election_rules():
    assert elect_leader([1, 2, 3], [3, 2, 1], live={2, 3}).leader == 2     # assignment order
    assert elect_leader([1, 2, 3], [3, 2, 1], live={2, 3}).isr == (3, 2)
    off = elect_leader([1, 2, 3], [1], live={2, 3})
    assert (off.leader, off.isr, off.unclean) == (NO_LEADER, (1,), False)   # ISR kept
    dirty = elect_leader([1, 2, 3], [1], live={3, 2}, unclean=True)
    assert (dirty.leader, dirty.isr, dirty.unclean) == (2, (2,), True)
    assert elect_leader([1, 2], [1, 2], live=set(), unclean=True).leader == NO_LEADER
    assert elect_preferred([1, 2, 3], [2, 3, 1], {1, 2, 3}) == 1
    assert elect_preferred([1, 2, 3], [2, 3], {1, 2, 3}) is None           # not in ISR
    assert elect_preferred([1, 2, 3], [1, 2, 3], {2, 3}) is None           # not live
    cs = elect_controlled_shutdown([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1})
    assert (cs.leader, cs.isr) == (2, (2, 3))
    assert initial_state([3, 1, 2], {1, 2}, 5) == LeaderAndIsr(1, 0, (1, 2), 5)


@settings(max_examples=300, deadline=None)
@given(st.permutations(range(1, 6)).flatmap(lambda a: st.tuples(
    st.just(a), st.sets(st.sampled_from(a), min_size=1), st.sets(st.sampled_from(a)), st.booleans())))
def test_election_properties(case):
    assignment, isr, live, unclean = case
    isr = [b for b in assignment if b in isr]
    e = elect_leader(assignment, isr, live, unclean)
    clean = [r for r in assignment if r in live and r in isr]
    if clean:
        assert e.leader == clean[0] and not e.unclean and e.leader in e.isr
        assert set(e.isr) <= set(isr) & set(live)
    elif unclean and set(live) & set(assignment):
        assert e.unclean and e.leader == next(r for r in assignment if r in live) and e.isr == (e.leader,)
    else:
        assert e.leader == NO_LEADER and e.isr == tuple(isr)


def wait_for(cond, timeout=20.0, what="condition"):
    return wait_until(cond, timeout, what, interval=0.05)


class Node:
    """A 'broker' as far as the metadata goes: its own session, registration and controller."""

    def __init__(self, hosts, broker_id, **kw):
        self.id = broker_id
        self.store = ZooKeeperStore(hosts, session_timeout_ms=2000).start()
        self.store.register_broker(broker_id, "127.0.0.1", 9090 + broker_id)
        self.controller = Controller(self.store, broker_id, **kw).start()

    def crash(self):
        """The session ends (as when the process dies): registration and /controller go."""
        self.store.close()
        self.controller.stop()


@pytest.fixture
def nodes(zk_hosts):
    made = []

    def make(broker_id, **kw):
        n = Node(zk_hosts, broker_id, **kw)
        made.append(n)
        return n
    yield make
    for n in made:
        n.controller.stop()
    for n in made:
        n.store.close()


def state(store, topic, p):
    return store.partition_state(topic, p, sync=True)


def test_failover_moves_leaders_with_epoch_bumps(nodes, zk_hosts):
    n1 = nodes(1)
    wait_for(lambda: n1.controller.active, what="first controller")
    n2, n3 = nodes(2), nodes(3)
    assert not n2.controller.active and not n3.controller.active
    n2.store.create_topic("t", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    wait_for(lambda: len(n2.store.partition_states("t")) == 3, what="initial states")
    s = n2.store.partition_states("t")
    assert [(x.leader, x.leader_epoch, x.isr) for x in s.values()] == \
        [(1, 0, (1, 2, 3)), (2, 0, (2, 3, 1)), (3, 0, (3, 1, 2))]
    epoch1 = n1.controller.fence.epoch
    assert all(x.controller_epoch == epoch1 for x in s.values())
    # the controller (and leader of partition 0) dies
    t0 = time.monotonic()
    n1.crash()
    wait_for(lambda: n2.controller.active or n3.controller.active, what="a new controller")
    new_ctl = n2 if n2.controller.active else n3
    assert new_ctl.controller.fence.epoch == epoch1 + 1
    wait_for(lambda: state(n2.store, "t", 0).leader == 2, what="partition 0 led by broker 2")
    failover = time.monotonic() - t0
    s = n2.store.partition_states("t")
    assert (s[0].leader, s[0].leader_epoch, s[0].isr) == (2, 1, (2, 3))
    # followers on the dead broker leave the ISR with an epoch bump; leaders stay
    assert (s[1].leader, s[1].leader_epoch, s[1].isr) == (2, 1, (2, 3))
    assert (s[2].leader, s[2].leader_epoch, s[2].isr) == (3, 1, (3, 2))
    assert all(x.controller_epoch == epoch1 + 1 for x in s.values())
    assert failover < 10, f"failover took {failover:.1f} s"
    # broker 1 returns and catches up (its leader adds it back to the ISR, a leader's CAS write),
    # then a preferred-leader election request gives it partition 0 back
    n1b = nodes(1)
    cur = state(n2.store, "t", 0)
    n2.store.update_partition_state("t", 0, LeaderAndIsr(2, cur.leader_epoch, (2, 3, 1), cur.controller_epoch),
                                    cur.zk_version)
    n1b.store.request_preferred_election([("t", 0)])
    wait_for(lambda: state(n2.store, "t", 0).leader == 1, what="preferred leader back")
    assert state(n2.store, "t", 0).leader_epoch == 2
    wait_for(lambda: n2.store.client.exists("/admin/preferred_replica_election") is None,
             what="request consumed")


def test_offline_partition_then_unclean_election(nodes, caplog):
    n1 = nodes(1)
    wait_for(lambda: n1.controller.active, what="controller")
    n2 = nodes(2)
    nodes(3)
    n1.store.create_topic("clean", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [2, 3]})
    n1.store.create_topic("dirty", "AAAAAAAAAAAAAAAAAAAAAg", {0: [2, 3]},
                          {"unclean.leader.election.enable": "true"})
    for t in ("clean", "dirty"):
        wait_for(lambda t=t: state(n1.store, t, 0), what=f"{t} state")
        cur = state(n1.store, t, 0)
        # the leader shrinks the ISR to itself (broker 3 fell behind)
        n2.store.update_partition_state(t, 0, LeaderAndIsr(2, cur.leader_epoch, (2,), cur.controller_epoch),
                                        cur.zk_version)
    with caplog.at_level(logging.WARNING, logger="logcore.cluster.controller"):
        n2.crash()
        wait_for(lambda: state(n1.store, "dirty", 0).leader == 3, what="unclean election")
        wait_for(lambda: state(n1.store, "clean", 0).leader == NO_LEADER, what="offline partition")
    clean, dirty = state(n1.store, "clean", 0), state(n1.store, "dirty", 0)
    assert clean.isr == (2,) and clean.leader_epoch == 1          # last ISR member kept
    assert dirty.isr == (3,) and dirty.leader_epoch == 1
    assert ("dirty", 0, 3) in n1.controller.unclean_elections
    assert "UNCLEAN leader election for dirty-0" in caplog.text
    # the last ISR member returns: the offline partition comes back with it
    nodes(2)
    wait_for(lambda: state(n1.store, "clean", 0).leader == 2, what="partition back online")
    assert state(n1.store, "clean", 0).leader_epoch == 2


def test_deletion_request_is_carried_out(nodes, zk_client):
    n1 = nodes(1)
    wait_for(lambda: n1.controller.active, what="controller")
    n1.store.create_topic("gone", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1]}, {"retention.ms": "1"})
    wait_for(lambda: state(n1.store, "gone", 0), what="state")
    n1.store.request_topic_deletion("gone")
    wait_for(lambda: zk_client.exists("/brokers/topics/gone") is None, what="topic znodes removed")
    assert zk_client.exists("/config/topics/gone") is None
    assert zk_client.exists("/admin/delete_topics/gone") is None


def test_reassignment_rules():
    # Kafka's fromOriginAndTarget: RS = TRS + (ORS - TRS)
    assert reassignment_plan([1, 2], (), [2, 3]) == ((2, 3, 1), (3,), (1,))
    assert reassignment_plan([1, 2, 3], (), [3, 2, 1]) == ((3, 2, 1), (), ())
    # a new target during a move keeps the origin ([1,2] moving to [2,3]), not the adding replica 3
    assert reassignment_plan([2, 3, 1], (3,), [4, 2]) == ((4, 2, 1), (4,), (1,))
    assert elect_reassigned([3, 2], [1, 2, 3], {1, 2, 3}) == 3
    assert elect_reassigned([3, 2], [1, 2], {1, 2, 3}) == 2          # 3 not in the ISR
    assert elect_reassigned([3, 2], [1, 2, 3], {1}) == NO_LEADER


def test_reassignment_resumes_after_controller_failover(nodes, zk_client):
    """The controller starts a reassignment (topic znode v3 with adding/removing replicas, an
    epoch bump), dies; the next controller completes it once the target is in the ISR, and the
    old controller's epoch can no longer write."""
    import json

    from logcore.errors import ControllerMovedError
    n1 = nodes(1)
    wait_for(lambda: n1.controller.active, what="controller")
    n2, n3 = nodes(2), nodes(3)
    n2.store.create_topic("mv", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2]})
    wait_for(lambda: state(n2.store, "mv", 0), what="initial state")
    old_fence = n1.controller.fence
    n2.store.request_reassignments({("mv", 0): [2, 3]})
    wait_for(lambda: n2.store.topic("mv").adding_replicas, what="reassignment started")
    raw, _ = zk_client.get("/brokers/topics/mv")
    assert json.loads(raw) == {"version": 3, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": {"0": [2, 3, 1]},
                               "adding_replicas": {"0": [3]}, "removing_replicas": {"0": [1]}}
    wait_for(lambda: zk_client.exists("/admin/reassign_partitions") is None, what="request consumed")
    s = state(n2.store, "mv", 0)
    assert (s.leader, s.leader_epoch, s.isr) == (1, 1, (1, 2))     # RS = ORS + TRS: epoch bump
    n1.crash()                                                      # controller and leader
    wait_for(lambda: n2.controller.active or n3.controller.active, what="a new controller")
    wait_for(lambda: state(n2.store, "mv", 0).leader == 2, what="leader 2")
    assert n2.store.topic("mv").partitions[0] == (2, 3, 1)         # still moving: 3 not in the ISR
    # the leader adds the caught-up replica 3 to the ISR (its own compare-and-set)
    cur = state(n2.store, "mv", 0)
    n2.store.update_partition_state("mv", 0, LeaderAndIsr(2, cur.leader_epoch, (2, 3), cur.controller_epoch),
                                    cur.zk_version)
    wait_for(lambda: n2.store.topic("mv").partitions[0] == (2, 3), what="reassignment completed")
    ta = n2.store.topic("mv")
    assert not ta.adding_replicas and not ta.removing_replicas
    done = state(n2.store, "mv", 0)
    assert (done.leader, done.isr) == (2, (2, 3)) and done.leader_epoch == cur.leader_epoch + 1
    with pytest.raises(ControllerMovedError):
        n2.store.set_reassignment(ta, 0, (1, 2), (), (), old_fence)
    assert n2.store.topic("mv").partitions[0] == (2, 3)


def test_reordering_replicas_changes_the_preferred_leader_only(nodes):
    """[1,2,3] -> [3,2,1]: nothing to add or remove, so the assignment changes at once; the
    leader stays (as in Kafka) until a preferred-leader election gives it to 3."""
    n1 = nodes(1)
    wait_for(lambda: n1.controller.active, what="controller")
    nodes(2), nodes(3)
    n1.store.create_topic("ro", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2, 3]})
    wait_for(lambda: state(n1.store, "ro", 0), what="initial state")
    n1.store.request_reassignments({("ro", 0): [3, 2, 1]})
    wait_for(lambda: n1.store.topic("ro").partitions[0] == (3, 2, 1), what="reordered")
    ta = n1.store.topic("ro")
    assert not ta.adding_replicas and not ta.removing_replicas
    s = state(n1.store, "ro", 0)
    assert (s.leader, s.isr) == (1, (1, 2, 3))
    n1.store.request_preferred_election([("ro", 0)])
    wait_for(lambda: state(n1.store, "ro", 0).leader == 3, what="preferred leader 3")


def _member(hosts, broker_id):
    """A registered broker without a controller of its own."""
    store = ZooKeeperStore(hosts, session_timeout_ms=2000).start()
    store.register_broker(broker_id, "127.0.0.1", 9090 + broker_id)
    return store


def test_a_broker_registered_after_a_state_was_written_counts_as_failed_for_it(zk_hosts):
    """KIP-380's broker epoch by zxid: broker 1 restarts (a new registration) while no controller
    runs; the next controller, which never saw the old registration, must not keep it as leader
    or ISR member of states written for its previous process, and the sole replica of a
    partition leads again at a new epoch, never at its old one."""
    s1, s3 = _member(zk_hosts, 1), _member(zk_hosts, 3)
    s2 = _member(zk_hosts, 2)
    made = [s1, s2, s3]
    ctl = Controller(s2, 2).start()
    try:
        wait_for(lambda: ctl.active, what="controller")
        s2.create_topic("t", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2, 3], 1: [2, 1, 3]})
        s2.create_topic("solo", "AAAAAAAAAAAAAAAAAAAAAg", {0: [1]})
        wait_for(lambda: len(s2.partition_states("t")) == 2 and s2.partition_states("solo"),
                 what="initial states")
        ctl.stop()
        s1.close()                                   # broker 1's process ends ...
        s1b = _member(zk_hosts, 1)                    # ... and a new one registers at once
        made.append(s1b)
        ctl = Controller(s2, 2).start()              # a controller with no memory of epochs
        wait_for(lambda: state(s2, "t", 0).leader_epoch == 1, what="partition 0 re-elected")
        p0 = state(s2, "t", 0)
        assert (p0.leader, p0.isr) == (2, (2, 3)), p0
        wait_for(lambda: state(s2, "t", 1).leader_epoch == 1, what="broker 1 out of partition 1's ISR")
        assert (state(s2, "t", 1).leader, state(s2, "t", 1).isr) == (2, (2, 3))
        wait_for(lambda: state(s2, "solo", 0).leader_epoch >= 1, what="the sole replica at a new epoch")
        assert state(s2, "solo", 0).leader == 1
    finally:
        ctl.stop()
        for s in made:
            s.close()


def test_a_controller_pass_cut_short_by_zookeeper_is_run_again(zk_hosts, caplog):
    """A pass that fails on a ZooKeeper error is retried with a backoff, with no further event:
    the partition of a dead leader gets a live one."""
    from logcore.errors import CoordinatorUnavailableError
    s1, s2, s3 = _member(zk_hosts, 1), _member(zk_hosts, 2), _member(zk_hosts, 3)
    ctl = Controller(s2, 2).start()
    try:
        wait_for(lambda: ctl.active, what="controller")
        s2.create_topic("t", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2, 3]})
        wait_for(lambda: s2.partition_states("t"), what="initial state")
        real = s2.partition_states
        failures = [3]

        def flaky(topic):
            if failures[0] > 0:
                failures[0] -= 1
                raise CoordinatorUnavailableError("ZooKeeper away for a moment (test)")
            return real(topic)
        s2.partition_states = flaky
        caplog.set_level(logging.WARNING)
        s1.close()                                   # the leader's session ends: one event
        wait_for(lambda: state(s2, "t", 0).leader == 2, timeout=15, what="a live leader")
        assert failures == [0]
        assert "controller pass failed" in caplog.text
    finally:
        ctl.stop()
        for s in (s2, s3):
            s.close()


def test_preferred_election_skips_a_restarted_broker(zk_hosts):
    """The preferred replica restarted since the state was written: its ISR seat is its previous
    process's, so a preferred-leader election (before any pass dropped it) leaves the leader."""
    ctl_store, s1, s2 = _member(zk_hosts, 9), _member(zk_hosts, 1), _member(zk_hosts, 2)
    made = [ctl_store, s2]
    try:
        ctl_store.create_topic("pref", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2]})
        fence = ctl_store.try_become_controller(9)
        ctl_store.create_partition_states("pref", {0: LeaderAndIsr(1, 0, (1, 2), fence.epoch)}, fence)
        cur = state(ctl_store, "pref", 0)
        moved = ctl_store.update_partition_state(
            "pref", 0, LeaderAndIsr(2, cur.leader_epoch + 1, (2, 1), fence.epoch), cur.zk_version, fence=fence)
        s1.close()
        made.append(_member(zk_hosts, 1))               # broker 1 again, a new registration
        ctl = Controller(ctl_store, 9)
        ctl.fence = fence
        assert ctl.elect_preferred_leaders([("pref", 0)]) == {}
        assert state(ctl_store, "pref", 0) == moved
    finally:
        for s in made:
            s.close()


def test_a_pass_running_past_stop_keeps_its_fence(nodes, caplog):
    """stop() joins the controller's worker for a bounded time; a pass still running after it
    (here: moving leaders off a broker in controlled shutdown, held inside the pass) must go on
    with its fence, so that what it writes is still checked against /controller_epoch, and must
    not fail on a fence taken away under it."""
    import threading

    n1 = nodes(1)
    wait_for(lambda: n1.controller.active, what="controller")
    n2 = nodes(2)
    n2.store.create_topic("cs", "AAAAAAAAAAAAAAAAAAAAAQ", {0: [1, 2]})
    wait_for(lambda: state(n2.store, "cs", 0), what="initial state")
    wait_for(lambda: set(state(n2.store, "cs", 0).isr) == {1, 2}, what="both in the ISR")
    old_epoch = n1.controller.fence.epoch
    entered, release = threading.Event(), threading.Event()
    real_states = n1.store.partition_states

    def held_states(topic):
        if n1.store.shutting_down() and topic == "cs":
            entered.set()
            release.wait(20)
        return real_states(topic)
    n1.store.partition_states = held_states
    n1.store.announce_controlled_shutdown(1)
    assert entered.wait(20), "the controller's pass did not reach the controlled shutdown"
    with caplog.at_level(logging.WARNING, logger="logcore.cluster.controller"):
        n1.controller.stop(timeout_s=0.2)         # the pass is still inside _move_off
        assert n1.controller.fence is not None and not n1.controller.active
        wait_for(lambda: n2.controller.active, what="broker 2 takes over")
        release.set()
        n1.controller._worker.join(20)
    assert not n1.controller._worker.is_alive()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], \
        [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    s = wait_for(lambda: (st := state(n2.store, "cs", 0)).leader == 2 and st, what="leader moved to 2")
    assert s.controller_epoch == n2.controller.fence.epoch > old_epoch
