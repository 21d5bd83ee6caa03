"""DeleteRecords (API 21): move the log start offset of partitions, as kafka-delete-records and
the admin client's deleteRecords ask.

The partition's leader moves its own log start (`Log.delete_records_before`: offset -1 is the
high watermark, above it OFFSET_OUT_OF_RANGE, a topic without the `delete` cleanup policy
POLICY_VIOLATION; the log-start-offset checkpoint is written before any segment goes, so the
move survives a restart). In a cluster the followers follow: each takes the leader's log start
from its fetch responses and moves its own (replica_fetcher / replica_catchup.follow_log_start),
and reports it in its next fetch. As Kafka's delayed DeleteRecords, the answer waits (up to the
request's timeout) until the low watermark, the smallest log start of the leader and its in-sync
followers, reaches the new start; it gives that low watermark, or REQUEST_TIMED_OUT.
"""
from __future__ import annotations

import asyncio
import logging
import time

from logcore.coordinator import offsets_topic as OT
from logcore.coordinator import transaction_log as TL
from logcore.errors import SegLogError
from logcore.wire import error_codes as E
from logcore.wire.protocol import Request

logger = logging.getLogger("logcore.broker.broker")

INTERNAL_TOPICS = (OT.TOPIC, TL.TOPIC)
POLL_S = 0.02      # how often a waiting answer looks at the followers' log starts again


class RecordsHandlers:
    """Over the broker's PartitionManager (its `replication` says who leads a partition and
    what the followers have reported)."""

    def __init__(self, partitions):
        self.partitions = partitions

    async def delete_records(self, req: Request) -> dict:
        body = req.body
        timeout_s = max(0.0, body.timeout.total_seconds())
        moved: list[tuple[str, dict, int]] = []        # (topic, the partition's answer, its new start)
        topics = []
        for t in body.topics:
            results = []
            for p in t.partitions:
                answer = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": E.NONE}
                code, start = await self._delete(t.name, p.partition_index, p.offset)
                if code != E.NONE:
                    answer["error_code"] = code
                else:
                    moved.append((t.name, answer, start))
                results.append(answer)
            topics.append({"name": t.name, "partitions": results})
        deadline = time.monotonic() + timeout_s
        replication = self.partitions.replication
        for topic, answer, start in moved:
            while True:
                low = replication.low_watermark(topic, answer["partition_index"], start)
                if low is None:
                    answer["error_code"] = E.NOT_LEADER_OR_FOLLOWER
                    break
                if low >= start:
                    answer["low_watermark"] = low
                    break
                if time.monotonic() >= deadline:
                    answer["error_code"] = E.REQUEST_TIMED_OUT
                    break
                await asyncio.sleep(POLL_S)
        return {"throttle_time": 0, "topics": topics}

    async def _delete(self, topic: str, index: int, offset: int) -> tuple[int, int]:
        """(error, the new log start) for one partition."""
        if offset < -1:
            return E.OFFSET_OUT_OF_RANGE, -1
        if topic in INTERNAL_TOPICS:
            return E.INVALID_TOPIC_EXCEPTION, -1     # as Kafka: an internal topic's records stay
        part = self.partitions.get(topic, index)
        code = self.partitions.replication.partition_error(topic, index)
        if code != E.NONE:
            return code, -1
        if part is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION, -1
        try:
            start = await asyncio.to_thread(self._delete_before, part, offset)
        except SegLogError as exc:
            logger.info("DeleteRecords of %s-%d before %d refused: %s", topic, index, offset, exc)
            return E.error_code(exc), -1
        logger.info("DeleteRecords: %s-%d starts at offset %d", topic, index, start)
        self.partitions.notify(part)        # the followers' parked fetches learn the new start
        return E.NONE, start

    def _delete_before(self, part, offset: int) -> int:
        """In a worker thread: move the log start; the log start it has now."""
        try:
            log = part.log
            log.delete_records_before(offset)
            return log.log_start_offset
        finally:
            self.partitions.unpin_thread()
