"""The topic catalog: which topics exist, their ids, partition counts and config overrides.

Two implementations fit `TopicCatalog`:
- a log root's JSON catalog (`logcore.log.log_root.LogRoot`, `seglog-topics.json`) already has
  these methods with these signatures, so a LogRoot *is* a TopicCatalog structurally (the test
  checks it with isinstance);
- `ZooKeeperCatalog` below keeps them in ZooKeeper with Kafka's layout (zookeeper_store), choosing
  replica assignments over the registered brokers.

Callers depend on the interface only; which one a process uses follows from its config (a broker
with `zookeeper.connect` uses ZooKeeper).
"""
from __future__ import annotations

import random
from typing import Protocol, runtime_checkable

from logcore.cluster.assignment import assign_replicas, check_assignment
from logcore.cluster.zookeeper_store import ZooKeeperStore
from logcore.errors import InvalidConfigError, InvalidReplicationFactorError, TopicNotFoundError
from logcore.log.config import validate_topic_overrides
from logcore.log.topic_name import validate_topic_name
from logcore.log.log_root import TopicInfo
from logcore.log.partition_metadata import format_topic_id, new_topic_id


@runtime_checkable
class TopicCatalog(Protocol):
    def list_topics(self) -> list[str]:
        """Topic names, sorted."""

    def describe_topic(self, name: str) -> TopicInfo:
        """TopicNotFoundError when absent."""

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> TopicInfo:
        """TopicExistsError when present; InvalidTopicError / InvalidConfigError for bad input."""

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow to `total` partitions (never shrink: InvalidConfigError)."""

    def alter_topic_config(self, name: str, config: dict[str, str]) -> TopicInfo:
        """Merge `config` into the topic's overrides."""

    def delete_topic(self, name: str) -> None:
        """Remove (or, in a cluster, request the removal of) the topic."""


class ZooKeeperCatalog:
    """TopicCatalog over ZooKeeper. New topics get `replication_factor` replicas (Kafka's
    default.replication.factor, 1) assigned over the live brokers with Kafka's algorithm; a
    manual `assignment` may be given instead. Deleting marks the topic in /admin/delete_topics
    (Kafka's ZooKeeper-mode DeleteTopics); it disappears from list_topics at once and its znodes
    go when the controller completes the deletion."""

    def __init__(self, store: ZooKeeperStore, *, replication_factor: int = 1,
                 rng: random.Random | None = None):
        self.store = store
        self.replication_factor = replication_factor
        self._rng = rng or random.Random()

    def list_topics(self) -> list[str]:
        marked = set(self.store.topics_marked_for_deletion())
        return [t for t in self.store.list_topics() if t not in marked]

    def describe_topic(self, name: str) -> TopicInfo:
        if name in self.store.topics_marked_for_deletion():
            raise TopicNotFoundError(f"topic {name!r} is marked for deletion in ZooKeeper ({self.store.hosts})")
        ta = self.store.topic(name)
        config, _ = self.store.topic_config(name)
        return TopicInfo(name, ta.topic_id, len(ta.partitions), config)

    def assignment(self, name: str) -> dict[int, list[int]]:
        return {p: list(r) for p, r in self.store.topic(name).partitions.items()}

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None, *,
                     replication_factor: int | None = None,
                     assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        validate_topic_name(name)
        overrides = validate_topic_overrides({k: str(v) for k, v in (config or {}).items()})
        brokers = sorted(self.store.brokers())
        if assignment is not None:
            check_assignment(assignment, brokers)
        else:
            if not isinstance(partitions, int) or partitions < 1:
                raise InvalidConfigError(f"partitions must be a positive integer, got {partitions!r}")
            rf = self.replication_factor if replication_factor is None else replication_factor
            if not brokers:
                raise InvalidReplicationFactorError(
                    f"replication factor: {rf} larger than available brokers: 0 (none registered"
                    f" under /brokers/ids in {self.store.hosts})")
            assignment = assign_replicas(brokers, partitions, rf, rng=self._rng)
        topic_id = format_topic_id(new_topic_id())
        self.store.create_topic(name, topic_id, assignment, overrides)
        return TopicInfo(name, topic_id, len(assignment), overrides)

    def add_partitions(self, name: str, total: int, assignment: list[list[int]] | None = None, *,
                       validate_only: bool = False) -> TopicInfo:
        """Grow `name` to `total` partitions; `assignment`, when given, has the replicas of each new
        partition in order (Kafka's CreatePartitions assignments), checked as a topic's manual
        assignment is (InvalidConfigError / InvalidReplicationFactorError). `validate_only`
        checks without writing."""
        ta = self.store.topic(name)
        count = len(ta.partitions)
        if not isinstance(total, int) or total <= count:
            raise InvalidConfigError(f"topic {name!r} has {count} partitions; the count can only grow"
                                     f" (asked for {total})")
        brokers = sorted(self.store.brokers())
        merged = {p: list(r) for p, r in ta.partitions.items()}
        if assignment is not None:
            if len(assignment) != total - count:
                raise InvalidConfigError(f"Increasing the number of partitions by {total - count} but"
                                         f" {len(assignment)} assignments provided.")
            merged.update({count + i: [int(b) for b in replicas] for i, replicas in enumerate(assignment)})
            check_assignment(merged, brokers)
        else:
            rf = len(ta.partitions[0])
            # Kafka: continue from the broker that holds partition 0's first replica
            first = ta.partitions[0][0]
            start = brokers.index(first) if first in brokers else self._rng.randrange(len(brokers) or 1)
            merged.update(assign_replicas(brokers, total - count, rf, start_index=start, replica_shift=start,
                                          start_partition=count))
        if validate_only:
            return TopicInfo(name, ta.topic_id, total, self.describe_topic(name).config)
        self.store.set_assignment(ta, merged)
        return self.describe_topic(name)

    def alter_topic_config(self, name: str, config: dict[str, str]) -> TopicInfo:
        current, version = self.store.topic_config(name)
        merged = dict(current)
        merged.update({k: str(v) for k, v in config.items()})
        merged = validate_topic_overrides(merged)
        self.store.set_topic_config(name, merged, version)
        return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self.store.request_topic_deletion(name)
