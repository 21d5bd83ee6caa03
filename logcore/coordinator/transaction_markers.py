"""The transaction marker writer: COMMIT or ABORT markers to every partition of a transaction,
each at that partition's leader, retried until every leader has written it.

Every partition's marker is written at once: those led here appended in one worker-thread job,
then each waits for its own ISR; the others sent to their leaders at the same time. A partition
led here gets its marker appended directly (`write_local`, which the broker's
WriteTxnMarkers handler uses too); one led by another broker is sent to it in a
WriteTxnMarkers request over the inter-broker connection. A partition that no longer exists
is dropped (Kafka's answer: its marker is not needed); a leader that is moving, an error or an
unreachable broker is retried with a backoff, as Kafka's TransactionMarkerChannelManager does,
for as long as the caller's `still_valid()` holds (the coordinator still owns the
transactional id at the same tenure: otherwise the new coordinator completes it).
A marker of a partition of `__consumer_offsets` also completes that producer's transactional
offsets there (`on_offsets_marker`, the group coordinator's hook).
"""
from __future__ import annotations

import asyncio
import logging

from logcore.coordinator.transaction_appends import CoordinatorAppender
from logcore.errors import SegLogError
from logcore.log.producer_state import TransactionCoordinatorFencedError
from logcore.wire import error_codes as E
from logcore.wire.api_keys import WRITE_TXN_MARKERS

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
RETRY_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
REQUEST_TIMEOUT_S = 30.0


class MarkerWriter:
    def __init__(self, partitions, placement, *, on_offsets_marker=None, connect=None,
                 commit_timeout_s: float = 5.0):
        """`placement`: transaction_placement's policy (who leads a partition); `connect(node)`:
        an awaitable of an AsyncKafkaConnection to that broker (a cluster member's)."""
        self.partitions = partitions
        self.placement = placement
        self.appender = CoordinatorAppender(partitions)
        self.on_offsets_marker = on_offsets_marker
        self.connect = connect
        self.commit_timeout_s = commit_timeout_s
        self.connections: dict[int, object] = {}

    async def write(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                    committed: bool, partitions: set[tuple[str, int]], still_valid) -> bool:
        """Until every partition has its marker (True), or still_valid() turns False (False)."""
        remaining = set(partitions)
        backoff = RETRY_BACKOFF_S
        while remaining:
            if not still_valid():
                return False
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(remaining):
                if not self.placement.partition_exists(self.partitions, *tp):
                    logger.info("producer %d: %s-%d no longer exists; its marker is dropped", producer_id, *tp)
                    remaining.discard(tp)
                    continue
                leader = self.placement.leader_of(*tp)
                by_leader.setdefault(-2 if leader is None else leader, []).append(tp)
            local = by_leader.pop(-2, [])
            by_leader.pop(-1, None)                # no live leader yet: retried
            # Every partition's marker at once: each waits for its own ISR, so in turn they
            # would cost a replicated round trip apiece before readers see the transaction.
            local_codes, *remote = await asyncio.gather(
                self.write_locals(local, producer_id=producer_id, producer_epoch=producer_epoch,
                                  coordinator_epoch=coordinator_epoch, committed=committed),
                *(self._write_remote(leader, tps, producer_id, producer_epoch, coordinator_epoch, committed)
                  for leader, tps in by_leader.items()))
            for tp, code in zip(local, local_codes):
                if code in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.TRANSACTION_COORDINATOR_FENCED):
                    remaining.discard(tp)
            for done in remote:
                remaining -= done
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        return True

    async def write_local(self, topic: str, p: int, *, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int, committed: bool) -> int:
        """Append the marker to topic-p, led here; in a cluster wait until the ISR has it
        (acks=all). The error code."""
        (code,) = await self.write_locals([(topic, p)], producer_id=producer_id, producer_epoch=producer_epoch,
                                          coordinator_epoch=coordinator_epoch, committed=committed)
        return code

    async def write_locals(self, tps: list[tuple[str, int]], *, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, committed: bool) -> list[int]:
        """The marker on each of `tps`, led here: appended in one go, then (a cluster) each
        waits for its ISR, all at once. Each one's error code."""
        codes: list[int | None] = []
        parts = []
        for topic, p in tps:
            code = self.partitions.replication.partition_error(topic, p)
            part = self.partitions.get(topic, p)
            if code == E.NONE and part is None:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
            codes.append(None if code == E.NONE else code)
            if code == E.NONE:
                parts.append(part)
        appended = iter(await self.appender.append_markers(
            parts, committed=committed, producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch) if parts else [])
        waits = []
        for i, (topic, p) in enumerate(tps):
            if codes[i] is not None:
                continue
            info = next(appended)
            if isinstance(info, BaseException):
                codes[i] = self._refused(topic, p, info, producer_id, committed)
            else:
                waits.append((i, self._acknowledged(topic, p, info, producer_id, committed)))
        for (i, _w), code in zip(waits, await asyncio.gather(*(w for _i, w in waits))):
            codes[i] = code
        return codes

    @staticmethod
    def _refused(topic: str, p: int, exc: BaseException, producer_id: int, committed: bool) -> int:
        """The error code of a marker the log refused."""
        if isinstance(exc, TransactionCoordinatorFencedError):
            # A newer coordinator (a higher epoch of __transaction_state) wrote there: this
            # one's marker is superseded (Kafka's TRANSACTION_COORDINATOR_FENCED).
            logger.info("producer %d: marker for %s-%d fenced: %s", producer_id, topic, p, exc)
            return E.TRANSACTION_COORDINATOR_FENCED
        if isinstance(exc, SegLogError):
            code = E.error_code(exc)
            logger.warning("producer %d: the %s marker for %s-%d was refused (error %d): %s", producer_id,
                           "COMMIT" if committed else "ABORT", topic, p, code, exc)
            # A marker from an older coordinator epoch or producer epoch than the log has seen
            # was superseded: the newer one already ended the transaction there.
            return E.NONE if code == E.INVALID_PRODUCER_EPOCH else code
        # a disk error: retried by the writer
        logger.error("producer %d: writing the marker for %s-%d failed: %s", producer_id, topic, p, exc)
        return E.KAFKA_STORAGE_ERROR

    async def _acknowledged(self, topic: str, p: int, info, producer_id: int, committed: bool) -> int:
        """After the marker's append: in a cluster, wait until the ISR has it; then the offsets
        hook. The error code."""
        if self.partitions.replication.replicates:
            replica_manager = self.partitions.replication
            replica = replica_manager.replicas.get((topic, p))
            if replica is None:
                return E.NOT_LEADER_OR_FOLLOWER
            code = await replica.wait_for_high_watermark(info.last_offset + 1, self.commit_timeout_s)
            if code != E.NONE:
                return code
        if topic == OFFSETS_TOPIC and self.on_offsets_marker is not None:
            self.on_offsets_marker(p, producer_id, committed)
        return E.NONE

    async def _write_remote(self, leader: int, tps: list[tuple[str, int]], producer_id: int,
                            producer_epoch: int, coordinator_epoch: int, committed: bool) -> set:
        """Send the markers of `tps` to broker `leader`; the partitions it wrote (or dropped)."""
        if self.connect is None:
            return set()
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": committed, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}]}
        try:
            conn = self.connections.get(leader)
            if conn is None or not conn.connected:
                conn = self.connections[leader] = await self.connect(leader)
            answer = await conn.request(WRITE_TXN_MARKERS, body, timeout_s=REQUEST_TIMEOUT_S)
        except Exception as exc:   # noqa: BLE001 - unreachable or gone: retried
            logger.info("producer %d: markers to broker %d not sent (retrying): %s", producer_id, leader, exc)
            conn = self.connections.pop(leader, None)
            if conn is not None:
                conn.close()
            return set()
        done = set()
        for marker in answer.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    code = int(part.error_code)
                    # UNKNOWN_TOPIC_OR_PARTITION from a leader whose metadata may lag: retried
                    # until this coordinator sees the partition gone itself (write()).
                    if code in (E.NONE, E.TRANSACTION_COORDINATOR_FENCED):
                        done.add((topic.name, part.partition_index))
                    else:
                        logger.info("producer %d: broker %d answered error %d for the marker of %s-%d",
                                    producer_id, leader, code, topic.name, part.partition_index)
        return done

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()
