"""A broker that is not a cluster member: it leads every partition it holds, at its log's own
epoch, and each partition's ISR is this broker alone.

The broker's data path (how logs open, the produce checks, the step after an append, the
leader checks of ListOffsets / OffsetForLeaderEpoch) asks its replication policy, which is this
object or the cluster's ReplicaManager, so it has no single-node branches of its own there. Logs open as path writers whose commit moves the high
watermark (and writes it before any acknowledgement), so an append needs no HW step here, and
acks=all waits for nothing more than the commit; min.insync.replicas above 1 cannot be met by
one replica (Kafka's NOT_ENOUGH_REPLICAS).
"""
from __future__ import annotations

from logcore.wire import error_codes as E


class SingleNode:
    replica_logs = False            # logs open as path writers: their commit moves the HW
    replicates = False              # acks=all needs only the commit
    serves_followers = False        # no follower asks: a request's replica_id is not one

    def __init__(self, partitions):
        self.partitions = partitions            # the broker's PartitionManager

    async def start(self) -> None:
        """Nothing to follow: no ZooKeeper, no fetchers."""

    async def stop(self) -> None:
        pass

    def partition_error(self, topic: str, p: int, current_epoch: int = -1) -> int:
        """Every partition held here is led here (an unknown one is the caller's answer)."""
        return E.NONE

    def produce_check(self, topic: str, p: int, acks_all: bool) -> tuple[int, str | None]:
        return E.NONE, None

    def append_check(self, part, acks_all: bool) -> tuple[int, str | None]:
        """Before appending to `part` (opening its log): acks=all with min.insync.replicas
        above 1 is refused, as Kafka refuses an ISR below it."""
        if acks_all:
            log = part.log_if_open or part.log          # open already on the produce path: no pin
            need = log.config.min_insync_replicas
            if need > 1:
                return E.NOT_ENOUGH_REPLICAS, (
                    f"The size of the current ISR 1 is insufficient to satisfy the min.isr "
                    f"requirement of {need} for partition {part.topic}-{part.index} (this broker"
                    f" keeps one replica per partition)")
        return E.NONE, None

    def appended(self, part) -> None:
        """Nothing: the commit moved the HW."""

    def epoch_start_offset(self, topic: str, p: int) -> int:
        return 0

    def low_watermark(self, topic: str, p: int, leader_start: int) -> int | None:
        """DeleteRecords' low watermark: the one replica's log start offset."""
        return leader_start
