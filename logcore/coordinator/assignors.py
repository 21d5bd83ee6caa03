"""The server-side assignors of consumer-protocol groups (KIP-848): the group coordinator computes
each member's target partitions with one of them, named as Kafka names them.

- `uniform` (Kafka's default): balanced, then sticky. Every member gets as many partitions as
  any other member subscribed to the same topics, give or take one, and keeps as many of its
  current target partitions as that balance allows. Members with different subscriptions are
  balanced as far as their subscriptions let them.
- `range`: per topic, contiguous ranges. Members are ordered by instance id (static members
  first), then member id; each topic's partitions are split among the members subscribed to it
  in that order, the first `partitions % members` getting one more. With the same subscription
  and equal partition counts, member i gets the same partition numbers of every topic
  (co-partitioning). Not sticky, as in Kafka.

An assignor sees `AssignmentSpec`: the members (subscribed topic ids, instance id, current
target) and each subscribed topic's partition count; topics that do not exist are not in it.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

TopicPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True)
class MemberSpec:
    topics: frozenset[uuid.UUID]                 # subscribed topics that exist
    instance_id: str | None = None
    current: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)   # its target so far


@dataclass(frozen=True)
class AssignmentSpec:
    members: dict[str, MemberSpec]
    partitions: dict[uuid.UUID, int]             # topic id -> partition count


Result = dict[str, dict[uuid.UUID, frozenset[int]]]


def _as_result(owned: dict[str, list[TopicPartition]]) -> Result:
    out: Result = {}
    for member, tps in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, set()).add(p)
        out[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: AssignmentSpec) -> Result:
        members = sorted(spec.members)
        rank = {m: i for i, m in enumerate(members)}
        eligible: dict[TopicPartition, list[str]] = {}
        for t, count in sorted(spec.partitions.items()):
            subscribers = [m for m in members if t in spec.members[m].topics]
            if subscribers:
                for p in range(count):
                    eligible[(t, p)] = subscribers
        owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
        taken: set[TopicPartition] = set()
        # Stickiness: each member keeps its current partitions it may still have.
        for m in members:
            for t, parts in sorted(spec.members[m].current.items()):
                for p in sorted(parts):
                    tp = (t, p)
                    if tp in eligible and m in eligible[tp] and tp not in taken:
                        owned[m].append(tp)
                        taken.add(tp)
        # A balanced share per member, from the total of what its subscription can reach.
        quota = self._quotas(members, rank, eligible, owned)
        for m in members:               # what is over a member's share goes back to the pool
            while len(owned[m]) > quota[m]:
                taken.discard(owned[m].pop())
        # The rest, the partitions with the fewest candidates first, to the least loaded candidate.
        for tp in sorted((tp for tp in eligible if tp not in taken), key=lambda tp: (len(eligible[tp]), tp)):
            target = min(eligible[tp], key=lambda m: (len(owned[m]) >= quota[m], len(owned[m]), rank[m]))
            owned[target].append(tp)
            taken.add(tp)
        self._balance(owned, eligible, members, rank)
        return _as_result(owned)

    @staticmethod
    def _quotas(members: list[str], rank: dict[str, int], eligible: dict[TopicPartition, list[str]],
                owned: dict[str, list[TopicPartition]]) -> dict[str, int]:
        """The most partitions each member should hold: with one subscription for all, the
        total split evenly, the `total % n` extra ones to the members keeping the most already
        (fewer moves); otherwise an even split of what each member can reach, rounded up
        (balancing evens out the rest)."""
        total = len(eligible)
        if not members:
            return {}
        homogeneous = all(len(c) == len(members) for c in eligible.values())
        if homogeneous:
            base, extra = divmod(total, len(members))
            by_kept = sorted(members, key=lambda m: (-len(owned[m]), rank[m]))
            return {m: base + (1 if i < extra else 0) for i, m in enumerate(by_kept)}
        reach = {m: 0 for m in members}
        for candidates in eligible.values():
            for m in candidates:
                reach[m] += 1.0 / len(candidates)
        return {m: max(1, int(-(-reach[m] // 1))) if reach[m] else 0 for m in members}

    @staticmethod
    def _balance(owned: dict[str, list[TopicPartition]], eligible: dict[TopicPartition, list[str]],
                 members: list[str], rank: dict[str, int]) -> None:
        """Move partitions from a member to a candidate holding two or more fewer, until none
        can move (each move lowers the sum of squared loads, so this ends)."""
        moved = True
        while moved:
            moved = False
            for m in sorted(members, key=lambda x: (-len(owned[x]), rank[x])):
                for tp in reversed(list(owned[m])):
                    lighter = [c for c in eligible[tp] if len(owned[c]) < len(owned[m]) - 1]
                    if lighter:
                        target = min(lighter, key=lambda c: (len(owned[c]), rank[c]))
                        owned[m].remove(tp)
                        owned[target].append(tp)
                        moved = True
                        break
                if moved:
                    break


class RangeAssignor:
    name = "range"

    def assign(self, spec: AssignmentSpec) -> Result:
        order = sorted(spec.members, key=lambda m: (spec.members[m].instance_id is None,
                                                    spec.members[m].instance_id or "", m))
        out: Result = {m: {} for m in order}
        for t, count in sorted(spec.partitions.items()):
            subscribers = [m for m in order if t in spec.members[m].topics]
            if not subscribers:
                continue
            base, extra = divmod(count, len(subscribers))
            start = 0
            for i, m in enumerate(subscribers):
                end = min(start + base + (1 if i < extra else 0), count)
                if start < end:
                    out[m][t] = frozenset(range(start, end))
                start = end
        return out


ASSIGNORS = {a.name: a for a in (UniformAssignor(), RangeAssignor())}

# Kafka's group.consumer.assignors takes class names too; these are its two.
CLASS_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
               "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def assignor_name(configured: str) -> str:
    """The assignor a `group.consumer.assignors` entry names (a short name or Kafka's class name);
    ValueError when it is neither."""
    name = CLASS_NAMES.get(configured, configured)
    if name not in ASSIGNORS:
        raise ValueError(f"unknown consumer group assignor {configured!r}: this broker has "
                         + ", ".join(sorted(ASSIGNORS)) + " (or Kafka's class names of them)")
    return name
