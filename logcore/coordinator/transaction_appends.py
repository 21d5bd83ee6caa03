"""Appends the coordinators make to a partition's log outside the clients' produce path:
end-transaction markers (COMMIT/ABORT control batches) and the transactional batches of
TxnOffsetCommit in `__consumer_offsets`.

A client batch goes through the partition's append queue, which validates it as a client's
(no control batches; sequence numbers checked). These are the coordinator's own (Kafka's
AppendOrigin.COORDINATOR): a marker is built here, and an offsets batch carries the sequence
that continues its producer on that partition (Kafka writes 0 and skips the check; the log
here checks every leader append, so the next sequence is taken under the log's lock). Each
runs in a worker thread, appends and commits like the queue's rounds (the HW checkpoint of a
single broker; a cluster's HW moves with replication), then tells replication and the
waiting fetches, as the queue does.
"""
from __future__ import annotations

import asyncio
import time

from logcore.records.batch import build_batch, build_control_batch
from logcore.records.control import ControlType


def marker_batch(committed: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> bytes:
    return build_control_batch(ControlType.COMMIT if committed else ControlType.ABORT, producer_id=producer_id,
                               producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
                               timestamp_ms=int(time.time() * 1000))


class CoordinatorAppender:
    """Appends to the partitions of a broker's PartitionManager as their coordinator."""

    def __init__(self, partitions):
        self.partitions = partitions

    async def append_marker(self, part, *, committed: bool, producer_id: int, producer_epoch: int,
                            coordinator_epoch: int):
        """Write one end-transaction marker; its AppendInfo."""
        (info,) = await self.append_markers([part], committed=committed, producer_id=producer_id,
                                            producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch)
        if isinstance(info, BaseException):
            raise info
        return info

    async def append_markers(self, parts: list, *, committed: bool, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int) -> list:
        """One end-transaction marker on each of `parts` in one worker-thread job (a
        transaction's partitions here: one hop of the thread pool that followers' appends and
        fetch reads share, not one each); for each, its AppendInfo or the exception it raised."""
        control = ControlType.COMMIT if committed else ControlType.ABORT
        partitions = self.partitions

        def run():
            out = []
            try:
                for part in parts:
                    try:
                        log = part.log
                        info = log.append_control(control, producer_id=producer_id, producer_epoch=producer_epoch,
                                                  coordinator_epoch=coordinator_epoch)
                        if log.high_watermark < log.log_end_offset:
                            log.commit(durable=False)
                        out.append(info)
                    except Exception as exc:   # noqa: BLE001 - the caller maps each one's error
                        out.append(exc)
                return out
            finally:
                partitions.unpin_thread()
        try:
            return await asyncio.to_thread(run)
        finally:
            for part in parts:
                partitions.replication.appended(part)
                partitions.notify(part)

    async def append_transactional(self, part, records: list[tuple[bytes, bytes | None]], *,
                                   producer_id: int, producer_epoch: int):
        """Write `records` (key, value) as one transactional batch of the producer; its AppendInfo."""
        now = int(time.time() * 1000)

        def write(log):
            with log.lock:
                entry = log.producer_state.last_entry(producer_id)
                sequence = 0
                if entry is not None and entry.producer_epoch == producer_epoch and not entry.is_empty:
                    sequence = (entry.last_seq + 1) & 0x7FFFFFFF
                batch = build_batch([(k, v, (), now) for k, v in records], producer_id=producer_id,
                                    producer_epoch=producer_epoch, base_sequence=sequence, is_transactional=True)
                return log.append_batch(batch)
        return await self._run(part, write)

    async def _run(self, part, write):
        partitions = self.partitions

        def run():
            try:
                log = part.log
                info = write(log)
                if log.high_watermark < log.log_end_offset:
                    log.commit(durable=False)
                return info
            finally:
                partitions.unpin_thread()
        try:
            return await asyncio.to_thread(run)
        finally:
            partitions.replication.appended(part)
            partitions.notify(part)
