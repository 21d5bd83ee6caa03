"""Which replica a partition's leader sends a consumer to (KIP-392, `replica.selector.class`).

Two named policies, after Kafka's: `LeaderSelector` (the default: the leader serves every
consumer) and `RackAwareReplicaSelector` (a consumer that names its rack, Fetch v11+ `rack_id`,
is sent to a replica in that rack unless the leader is in it). The candidates are the leader
and the followers the leader knows are in sync and hold the fetch offset (Kafka's
ReplicaManager.findPreferredReadReplica); among several in the consumer's rack the one with the
highest log end offset wins, then the one caught up most recently.
"""
from __future__ import annotations

from dataclasses import dataclass

from logcore.broker.config import RACK_AWARE_SELECTOR


@dataclass(frozen=True)
class ReplicaView:
    """One candidate replica: its broker, that broker's rack, its log end offset and how long
    ago it was last caught up with the leader (ms; 0 for the leader)."""
    node: int
    rack: str | None
    log_end_offset: int
    since_caught_up_ms: float


class LeaderSelector:
    """The default: the leader serves every consumer (no preferred read replica)."""
    name = ""

    @staticmethod
    def select(client_rack: str, leader: ReplicaView, followers: list[ReplicaView]) -> int | None:
        return None


class RackAwareReplicaSelector:
    """A consumer in another rack than the leader's reads from a replica in its own rack."""
    name = RACK_AWARE_SELECTOR

    @staticmethod
    def select(client_rack: str, leader: ReplicaView, followers: list[ReplicaView]) -> int | None:
        """The preferred read replica's broker id, or None for the leader."""
        if not client_rack or leader.rack == client_rack:
            return None
        same = [f for f in followers if f.rack == client_rack]
        if not same:
            return None
        best = max(same, key=lambda f: (f.log_end_offset, -f.since_caught_up_ms))
        return best.node


def replica_selector(class_name: str):
    """The policy a `replica.selector.class` value names (config.py validated it)."""
    return RackAwareReplicaSelector if class_name == RACK_AWARE_SELECTOR else LeaderSelector
