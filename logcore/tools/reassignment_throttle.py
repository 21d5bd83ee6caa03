"""The replication throttle of a reassignment, as Kafka's kafka-reassign-partitions sets and
clears it (KIP-73; the broker side is logcore.quota.replication_quota).

`--execute --throttle R`: every partition moving (those of the plan and the reassignments
already in progress) has sources (its current replicas; for one in progress, its replicas less
those being added) and destinations (the new replicas). Each topic gets
`leader.replication.throttled.replicas` = its `partition:source` entries and
`follower.replication.throttled.replicas` = its `partition:destination` entries, and every
source and destination broker `leader.replication.throttled.rate` =
`follower.replication.throttled.rate` = R, all through IncrementalAlterConfigs (SET), before
the reassignment starts. `--verify`, once nothing of the plan moves any more, DELETEs the rates
(and `replica.alter.log.dirs.io.max.bytes.per.second`) on every live broker and on the plan's
replicas, and the topic throttles on the plan's topics: Kafka's clearAllThrottles, which cannot
know which brokers an earlier reassignment throttled either.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from logcore.wire.config_resources import BROKER_RESOURCE, TOPIC_RESOURCE

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE)
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
SET, DELETE = 0, 1                         # IncrementalAlterConfigs operations
VERIFY_WARNING = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the"
                  " throttle is removed.")


@dataclass(frozen=True)
class PartitionMove:
    sources: frozenset[int]
    destinations: frozenset[int]


def move_map(in_progress, plan, current) -> dict[str, dict[int, PartitionMove]]:
    """Kafka's calculateProposedMoveMap: {topic: {partition: move}} for the reassignments in
    progress ({(t, p): Reassignment}) and the plan ({(t, p): target replicas}) given the
    partitions' current replicas ({(t, p): replicas})."""
    moves: dict[str, dict[int, PartitionMove]] = {}
    for (t, p), r in in_progress.items():
        moves.setdefault(t, {})[p] = PartitionMove(frozenset(r.replicas) - frozenset(r.adding), frozenset(r.adding))
    for (t, p), target in plan.items():
        ongoing = moves.setdefault(t, {}).get(p)
        sources = ongoing.sources if ongoing is not None else frozenset(current[(t, p)])
        moves[t][p] = PartitionMove(sources, frozenset(target) - sources)
    return moves


def topic_throttles(moves) -> dict[str, dict[str, str]]:
    """{topic: {leader/follower throttled replicas: "p:b,..."}}, each list sorted as text (a
    TreeSet of strings in Kafka)."""
    out = {}
    for topic, parts in moves.items():
        leaders = sorted(f"{p}:{b}" for p, m in parts.items() for b in m.sources)
        followers = sorted(f"{p}:{b}" for p, m in parts.items() for b in m.destinations)
        out[topic] = {LEADER_REPLICAS: ",".join(leaders), FOLLOWER_REPLICAS: ",".join(followers)}
    return out


def moving_brokers(moves) -> list[int]:
    return sorted({b for parts in moves.values() for m in parts.values() for b in m.sources | m.destinations})


def set_throttle(configs, moves, rate: int) -> None:
    """The topics' throttled replicas, then the brokers' rates (`configs`: a ConfigAdmin)."""
    for topic, values in sorted(topic_throttles(moves).items()):
        configs.incremental_alter(TOPIC_RESOURCE, topic, [(k, SET, v) for k, v in values.items()])
    for broker in moving_brokers(moves):
        configs.incremental_alter(BROKER_RESOURCE, str(broker), [(LEADER_RATE, SET, str(rate)),
                                                                 (FOLLOWER_RATE, SET, str(rate))])


def clear_throttles(configs, live_brokers, plan, out: TextIO) -> None:
    """Kafka's clearAllThrottles, with its two lines of output."""
    brokers = sorted(set(live_brokers) | {b for replicas in plan.values() for b in replicas})
    out.write(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'}"
              f" {','.join(map(str, brokers))}\n")
    for broker in brokers:
        configs.incremental_alter(BROKER_RESOURCE, str(broker), [(k, DELETE, None) for k in BROKER_THROTTLES])
    topics = sorted({t for t, _ in plan})
    out.write(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}\n")
    for topic in topics:
        configs.incremental_alter(TOPIC_RESOURCE, topic, [(k, DELETE, None) for k in TOPIC_THROTTLES])
