"""Where the transaction coordinator may coordinate: `placement`'s policy over
`__transaction_state`, plus who leads the partitions a transaction touches.

`SingleNode`: the one broker coordinates every transactional id and leads every partition a
transaction touches. `Cluster`: only the ids of the `__transaction_state` partitions this broker
leads, a write committed when the partition's high watermark passes it (acks=all), and a
transaction's partitions led by whichever broker the cluster metadata names.
"""
from __future__ import annotations

from logcore.coordinator import placement
from logcore.coordinator.transaction_log import TOPIC
from logcore.wire import error_codes as E


class SingleNode(placement.SingleNode):
    def leader_of(self, topic: str, p: int) -> int | None:
        return None                 # None: this broker

    def partition_exists(self, partitions, topic: str, p: int) -> bool:
        return partitions.get(topic, p) is not None


class Cluster(placement.Cluster):
    def __init__(self, replica_manager):
        super().__init__(replica_manager, TOPIC)

    def leader_of(self, topic: str, p: int) -> int | None:
        """The broker leading topic-p: None when it is this one, -1 when none is known."""
        rm = self.replica_manager
        replica = rm.replicas.get((topic, p))
        if replica is not None and rm.partition_error(topic, p) == E.NONE:
            return None
        state = rm.states.get((topic, p))
        if state is None or state.leader < 0 or state.leader == rm.me:
            return -1
        return state.leader

    def partition_exists(self, partitions, topic: str, p: int) -> bool:
        ta = self.replica_manager.assignments.get(topic)
        return ta is not None and p in ta.partitions
