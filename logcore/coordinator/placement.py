"""Where a coordinator may coordinate the keys of its internal topic (`__consumer_offsets` for
groups, `__transaction_state` for transactions): the policy it is given, chosen by the broker.

`SingleNode`: the one broker coordinates every key, an append to the topic is committed once
written, and the state is loaded when the broker opens. `Cluster(replica_manager, topic)`: only
the keys of the topic's partitions this broker leads (loaded as it becomes leader), an append
is committed when the partition's high watermark passes it.
"""
from __future__ import annotations

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


class Cluster:
    def __init__(self, replica_manager, topic: str):
        self.replica_manager = replica_manager
        self.topic = topic

    def partition_count(self, default: int) -> int:
        """The topic's own count once it exists."""
        ta = self.replica_manager.assignments.get(self.topic)
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
        return False                # partition by partition, as this broker becomes leader

    def write_check(self, p: int, owned: set[int]) -> tuple[int, str | None]:
        if p not in owned:
            return E.NOT_COORDINATOR, None
        return self.replica_manager.produce_check(self.topic, p, True)

    async def commit(self, p: int, end_offset: int, timeout_s: float, still_leading) -> int:
        replica = self.replica_manager.replicas.get((self.topic, p))
        if replica is None:
            return E.NOT_COORDINATOR
        code = await replica.wait_for_high_watermark(end_offset, timeout_s)
        if code == E.NONE and not still_leading():
            code = E.NOT_LEADER_OR_FOLLOWER       # leadership moved (and maybe came back) meanwhile
        return code
