"""Where the transaction coordinator may coordinate: the policy the broker gives it.

`SingleNode`: the one broker coordinates every transactional id, a write to
`__transaction_state` is committed once appended, state is loaded when the broker opens, and
every partition a transaction touches is led here. `Cluster`: only the ids of the
`__transaction_state` partitions this broker leads (loaded as it becomes leader), a write is
committed when the partition's high watermark passes it (acks=all), and a transaction's
partitions are led by whichever broker the cluster metadata names.
"""
from __future__ import annotations

from logcore.coordinator.transaction_log import TOPIC
from logcore.wire import error_codes as E


class SingleNode:
    def partition_count(self, default: int) -> int:
        return default

    def coordinator_error(self, p: int, owned: set[int], loading: set[int]) -> int:
        return E.NONE

    def loads_at_open(self) -> bool:
        return True

    def write_check(self, p: int, owned: set[int]) -> tuple[int, str | None]:
        return E.NONE, None

    async def commit(self, p: int, end_offset: int, timeout_s: float, still_leading) -> int:
        return E.NONE

    def leader_of(self, topic: str, p: int) -> int | None:
        return None                 # None: this broker

    def partition_exists(self, partitions, topic: str, p: int) -> bool:
        return partitions.get(topic, p) is not None


class Cluster:
    def __init__(self, replica_manager):
        self.replica_manager = replica_manager

    def partition_count(self, default: int) -> int:
        ta = self.replica_manager.assignments.get(TOPIC)
        if ta is not None and ta.partitions:
            return max(ta.partitions) + 1
        return default

    def coordinator_error(self, p: int, owned: set[int], loading: set[int]) -> int:
        if p in owned:
            return E.NONE
        if p in loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NOT_COORDINATOR

    def loads_at_open(self) -> bool:
        return False

    def write_check(self, p: int, owned: set[int]) -> tuple[int, str | None]:
        if p not in owned:
            return E.NOT_COORDINATOR, None
        return self.replica_manager.produce_check(TOPIC, p, True)

    async def commit(self, p: int, end_offset: int, timeout_s: float, still_leading) -> int:
        replica = self.replica_manager.replicas.get((TOPIC, p))
        if replica is None:
            return E.NOT_COORDINATOR
        code = await replica.wait_for_high_watermark(end_offset, timeout_s)
        if code == E.NONE and not still_leading():
            code = E.NOT_LEADER_OR_FOLLOWER
        return code

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
