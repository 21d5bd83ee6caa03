"""The one compare-and-set retry loop (logcore.cluster.compare_and_set), without ZooKeeper."""
from dataclasses import dataclass

import pytest

from logcore.cluster.compare_and_set import WriteOutcome, classify_write, compare_and_set
from logcore.errors import CoordinatorUnavailableError, ZkVersionConflictError


@dataclass(frozen=True)
class Node:
    value: int
    zk_version: int


class Znode:
    """A znode whose version moves under the writer `races` times."""

    def __init__(self, races=0):
        self.node, self.races, self.reads, self.writes = Node(0, 0), races, 0, 0

    def read(self):
        self.reads += 1
        return self.node

    def write(self, current, new):
        self.writes += 1
        if self.races:
            self.races -= 1
            self.node = Node(self.node.value + 100, self.node.zk_version + 1)
        if current.zk_version != self.node.zk_version:
            raise ZkVersionConflictError("moved")
        self.node = Node(new, current.zk_version + 1)
        return self.node


def test_applies_on_the_first_try_and_retries_a_lost_race_from_a_fresh_read():
    z = Znode()
    assert compare_and_set(z.read, lambda n: n.value + 1, z.write) == Node(1, 1)
    z = Znode(races=2)
    assert compare_and_set(z.read, lambda n: n.value + 1, z.write) == Node(201, 3)
    assert (z.reads, z.writes) == (3, 3)


def test_nothing_to_write_and_absent_znodes_write_nothing():
    z = Znode()
    assert compare_and_set(z.read, lambda n: None, z.write) is None
    assert compare_and_set(lambda: None, lambda n: 1, z.write) is None
    assert z.writes == 0


def test_a_value_already_read_saves_the_first_read():
    z = Znode()
    assert compare_and_set(z.read, lambda n: n.value + 1, z.write, first=z.node) == Node(1, 1)
    assert z.reads == 0


def test_every_race_lost_raises_the_conflict_and_an_unknown_outcome_is_not_retried():
    z = Znode(races=10)
    with pytest.raises(ZkVersionConflictError):
        compare_and_set(z.read, lambda n: n.value + 1, z.write, attempts=3)
    assert z.writes == 3

    def unknown(_current, _new):
        raise CoordinatorUnavailableError("connection lost before the answer")
    with pytest.raises(CoordinatorUnavailableError):
        compare_and_set(z.read, lambda n: 1, unknown)


def test_a_read_back_recognises_its_own_write():
    based, proposed = Node(5, 3), Node(6, -1)
    same = lambda a, b: a.value == b.value          # noqa: E731
    assert classify_write(None, based, proposed, same=same) is WriteOutcome.NOT_APPLIED
    assert classify_write(based, based, proposed, same=same) is WriteOutcome.NOT_APPLIED
    assert classify_write(Node(6, 4), based, proposed, same=same) is WriteOutcome.APPLIED
    assert classify_write(Node(7, 4), based, proposed, same=same) is WriteOutcome.SUPERSEDED
    assert classify_write(Node(6, 5), based, proposed, same=same) is WriteOutcome.SUPERSEDED
