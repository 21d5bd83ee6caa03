"""ListOffsets and OffsetForLeaderEpoch: where a partition's offsets are, answered by its leader."""
from __future__ import annotations

import asyncio

from logcore.errors import SegLogError
from logcore.wire import error_codes as E
from logcore.wire.list_offsets import (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
                                       MAX_TIMESTAMP)
from logcore.wire.protocol import Request


class OffsetHandlers:
    """The offset lookups of the partitions this broker leads (`partitions.replication` says
    which: one broker alone leads all, a cluster member those ZooKeeper gives it)."""

    def __init__(self, partitions):
        self.partitions = partitions

    def leader_partition(self, topic: str, index: int, request):
        """(Partition, NONE) when this broker serves `topic`-`index` to clients, else (None or the
        partition, the error): in a cluster only its leader does, at the epoch the request's
        current_leader_epoch names (replica_manager.partition_error)."""
        part = self.partitions.get(topic, index)
        code = self.partitions.replication.partition_error(topic, index, getattr(request, "current_leader_epoch", -1))
        if code != E.NONE:
            return part, code
        return part, (E.NONE if part is not None else E.UNKNOWN_TOPIC_OR_PARTITION)

    # ------------------------------------------------------------------ ListOffsets
    async def list_offsets(self, req: Request) -> dict:
        return {"throttle_time": 0, "topics": await asyncio.to_thread(self._list_offsets, req.body)}

    def _list_offsets(self, body) -> list[dict]:
        committed = getattr(body, "isolation_level", 0) == 1
        replica_id = getattr(body, "replica_id", -1) if self.partitions.replication.serves_followers else -1
        if any(self.partitions.get(t.name, p.partition_index) is None
               for t in body.topics for p in t.partitions):
            self.partitions.refresh_topics()      # created in the root by another process?
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                res = {"partition_index": p.partition_index, "error_code": E.NONE,
                       "timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []}
                part, code = self.leader_partition(t.name, p.partition_index, p)
                if code != E.NONE:
                    res["error_code"] = code
                else:
                    log = part.log
                    try:
                        if p.timestamp == EARLIEST_TIMESTAMP:
                            res["offset"] = log.log_start_offset
                        elif p.timestamp == EARLIEST_LOCAL_TIMESTAMP:
                            res["offset"] = log.local_log_start_offset
                        elif p.timestamp == LATEST_TIMESTAMP and replica_id >= 0:
                            res["offset"] = log.log_end_offset      # a follower asks the leader's LEO
                        elif p.timestamp == LATEST_TIMESTAMP and \
                                log.high_watermark < self.partitions.replication.epoch_start_offset(t.name, p.partition_index):
                            # A new leader whose HW has not reached its epoch start yet (KIP-207).
                            res["error_code"] = E.OFFSET_NOT_AVAILABLE
                        elif p.timestamp == LATEST_TIMESTAMP:
                            res["offset"] = log.last_stable_offset if committed else log.high_watermark
                        elif p.timestamp == MAX_TIMESTAMP:
                            found = _max_timestamp_offset(log)
                            if found is not None:
                                res["offset"], res["timestamp"] = found
                        elif p.timestamp >= 0:
                            found = log.offset_for_timestamp(p.timestamp)
                            if found is not None:
                                res["offset"], res["timestamp"] = found
                        else:
                            res["error_code"] = E.INVALID_REQUEST
                        if res["offset"] >= 0:
                            res["leader_epoch"] = log.leader_epoch
                    except SegLogError as exc:
                        res["error_code"] = E.error_code(exc)
                parts.append(res)
            topics.append({"name": t.name, "partitions": parts})
        return topics

    async def offset_for_leader_epoch(self, req: Request) -> dict:
        topics = []
        for t in req.body.topics:
            parts = []
            for p in t.partitions:
                res = {"partition": p.partition, "error_code": E.NONE, "leader_epoch": -1, "end_offset": -1}
                part, code = self.leader_partition(t.topic, p.partition, p)
                if code != E.NONE:
                    res["error_code"] = code
                else:
                    log = part.log
                    current = getattr(p, "current_leader_epoch", -1)
                    if current >= 0 and current < log.leader_epoch:
                        res["error_code"] = E.FENCED_LEADER_EPOCH
                    elif current > log.leader_epoch:
                        res["error_code"] = E.UNKNOWN_LEADER_EPOCH
                    else:
                        # From the leader-epoch cache, as Kafka: the end of the requested epoch.
                        epoch, end = log.epoch_cache.end_offset_for(p.leader_epoch, log.log_end_offset)
                        res.update(leader_epoch=epoch, end_offset=end)
                parts.append(res)
            topics.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}


def _max_timestamp_offset(log) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the largest timestamp below the HW (ListOffsets -3)."""
    best = None
    for seg in log.segments:
        ts = seg.largest_timestamp
        if ts >= 0 and (best is None or ts > best.largest_timestamp):
            best = seg
    if best is None:
        return None
    seg = best
    found = seg.find_offset_by_timestamp(seg.largest_timestamp, log.log_start_offset)
    if found is None or found[0] >= log.high_watermark:
        return None
    return found
