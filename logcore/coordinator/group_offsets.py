"""The committed offsets of the groups (OffsetCommit, OffsetFetch, TxnOffsetCommit), as the
group coordinator keeps them in `__consumer_offsets`.

A plain commit is appended to the group's partition and applies once acknowledged. A
transactional one (TxnOffsetCommit) is appended in the producer's transaction and stays
pending (PendingTxnOffsets), invisible to OffsetFetch, until the transaction's COMMIT marker
reaches the partition (applied) or its ABORT marker (dropped). Loading a partition replays its
log by the same rules; a marker written while the partition loads may come after the end of
that read, so it is held and applied once the load has replayed the log (completing what is no
longer pending is a no-op).

The appends themselves, and where a group lives, are the GroupCoordinator's: it hands them in.
"""
from __future__ import annotations

import logging
from typing import Awaitable, Callable

from logcore.wire import error_codes as E
from logcore.coordinator import offsets_topic as OT
from logcore.coordinator.transaction_offsets import LogEntry, PendingTxnOffsets
from logcore.errors import SegLogError

logger = logging.getLogger(__name__)

OFFSET_METADATA_MAX_BYTES = 4096        # Kafka's offset.metadata.max.bytes

TopicPartition = tuple[str, int]
# (group id, records, (producer id, epoch) for a transactional append or None) -> error code
Append = Callable[[str, list[tuple[bytes, bytes | None]], tuple[int, int] | None], Awaitable[int]]


class GroupOffsets:
    def __init__(self, partition_of: Callable[[str], int], append: Append, found: Callable[[str], object]):
        self._partition_of = partition_of     # group id -> its partition of __consumer_offsets
        self._append = append                 # appends to the group's partition, awaits the commit
        self._found = found                   # a group has offsets: the coordinator knows it
        self._committed: dict[str, dict[TopicPartition, OT.CommittedOffset]] = {}
        self._pending = PendingTxnOffsets()   # TxnOffsetCommit: applied by their COMMIT marker
        self._deferred: dict[int, list[tuple[int, bool]]] = {}   # partition loading -> its markers

    # ------------------------------------------------------------------ OffsetCommit / TxnOffsetCommit
    async def commit(self, group_id: str, offsets: dict[TopicPartition, OT.CommittedOffset]) -> int:
        """Append the offsets and wait for their commit; the error code for all of them."""
        if not group_id:
            return E.INVALID_GROUP_ID
        if not offsets:
            return E.NONE
        code = await self._append(group_id, _records(group_id, offsets), None)
        if code != E.NONE:
            return code
        self._update(group_id, offsets)
        return E.NONE

    async def commit_txn(self, group_id: str, producer_id: int, producer_epoch: int,
                         offsets: dict[TopicPartition, OT.CommittedOffset]) -> int:
        """Append the offsets in the producer's transaction; they apply when its COMMIT marker
        reaches the group's partition (on_marker)."""
        if not group_id:
            return E.INVALID_GROUP_ID
        if not offsets:
            return E.NONE
        code = await self._append(group_id, _records(group_id, offsets), (producer_id, producer_epoch))
        if code == E.NONE:
            self._pending.add(self._partition_of(group_id), producer_id, group_id, offsets)
        return code

    def on_marker(self, p: int, producer_id: int, committed: bool) -> None:
        """A COMMIT or ABORT marker of `producer_id` was written to partition p."""
        if p in self._deferred:
            self._deferred[p].append((producer_id, committed))
            return
        self._complete(p, producer_id, committed)

    def _complete(self, p: int, producer_id: int, committed: bool) -> None:
        for group_id, offsets in self._pending.complete(p, producer_id, committed).items():
            self._update(group_id, offsets)

    def _update(self, group_id: str, offsets: dict[TopicPartition, OT.CommittedOffset]) -> None:
        self._found(group_id)
        self._committed.setdefault(group_id, {}).update(offsets)

    # ------------------------------------------------------------------ OffsetFetch
    def committed(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                  ) -> list[tuple[str, list[tuple[int, OT.CommittedOffset | None]]]]:
        """The group's offsets for `topics` (None for an offset never committed), or all of them."""
        stored = self._committed.get(group_id, {})
        if topics is None:
            by_topic: dict[str, list] = {}
            for (t, p), c in sorted(stored.items()):
                by_topic.setdefault(t, []).append((p, c))
            return list(by_topic.items())
        return [(t, [(p, stored.get((t, p))) for p in parts]) for t, parts in topics]

    def group_ids(self) -> list[str]:
        """The groups with committed offsets here (the broker's lag metrics list them)."""
        return list(self._committed)

    def unstable(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset of this group for topic-partition."""
        return self._pending.has_pending(group_id, (topic, partition))

    def has_offsets(self, group_id: str) -> bool:
        """Whether the group has a committed offset, or one an open transaction may commit."""
        return bool(self._committed.get(group_id)) or group_id in self._pending.groups_pending()

    def expired(self, group_id: str, now_ms: int, retention_ms: int, base_ms: Callable[[OT.CommittedOffset], int],
                keep_topics: set[str] = frozenset()) -> list[TopicPartition]:
        """The group's offsets older than the retention (`base_ms(offset)`: when its retention
        started), outside `keep_topics`, with no transactional commit pending on them."""
        return [tp for tp, c in self._committed.get(group_id, {}).items()
                if tp[0] not in keep_topics and not self._pending.has_pending(group_id, tp)
                and now_ms - base_ms(c) >= retention_ms]

    async def delete(self, group_id: str, tps: list[TopicPartition], group_too: bool = False) -> int:
        """Write tombstones for these offsets (and for the group's metadata with `group_too`),
        then forget them; the error code of the append."""
        records: list[tuple[bytes, bytes | None]] = [(OT.offset_key(group_id, t, p), None) for t, p in tps]
        if group_too:
            records.append((OT.group_key(group_id), None))
        if not records:
            return E.NONE
        code = await self._append(group_id, records, None)
        if code == E.NONE:
            stored = self._committed.get(group_id, {})
            for tp in tps:
                stored.pop(tp, None)
            if not stored:
                self._committed.pop(group_id, None)
        return code

    # ------------------------------------------------------------------ load and drop
    def replay(self, p: int, entries: list[LogEntry],
               group_record: Callable[[OT.GroupKey, bytes | None, str], None]) -> None:
        """Apply a partition's records in log order: plain offsets at once, transactional ones at
        their transaction's COMMIT marker (dropped at ABORT; pending while neither is there);
        group records (classic metadata, consumer-protocol groups' records) go to
        `group_record` (key, value, where)."""
        for e in entries:
            if e.marker is not None:
                self._complete(p, e.producer_id, e.marker)
                continue
            if e.key is None or (e.transactional and e.value is None):
                continue
            where = f"{OT.TOPIC}-{p} offset {e.offset}"
            try:
                key = OT.parse_key(e.key, where)
                if isinstance(key, OT.OffsetKey):
                    tp = (key.topic, key.partition)
                    if e.transactional:
                        self._pending.add(p, e.producer_id, key.group, {tp: OT.parse_offset_value(e.value, where)})
                    else:
                        self._apply(key.group, tp, e.value, where)
                elif key is not None and not e.transactional:      # a group's own records
                    group_record(key, e.value, where)
            except SegLogError as exc:     # one bad record must not keep the broker from starting
                logger.warning("skipping a record of %s: %s", OT.TOPIC, exc)

    def _apply(self, group_id: str, tp: TopicPartition, value: bytes | None, where: str) -> None:
        self._found(group_id)
        stored = self._committed.setdefault(group_id, {})
        if value is None:
            stored.pop(tp, None)
        else:
            stored[tp] = OT.parse_offset_value(value, where)

    def defer_markers(self, p: int) -> None:
        """Partition p starts loading: hold the markers written to it until `apply_deferred`."""
        self._deferred[p] = []

    def apply_deferred(self, p: int) -> None:
        """Partition p has replayed its log: apply the markers written meanwhile."""
        for producer_id, committed in self._deferred.pop(p, ()):
            self._complete(p, producer_id, committed)

    def discard_deferred(self, p: int) -> None:
        """Partition p is no longer ours (its load abandoned)."""
        self._deferred.pop(p, None)

    def drop_group(self, group_id: str) -> None:
        """The group's metadata tombstone: its offsets go with it."""
        self._committed.pop(group_id, None)

    def drop_partition(self, p: int) -> None:
        """Forget the offsets, pending ones too, of the groups of partition p."""
        self._pending.drop_partition(p)
        for group_id in [g for g in self._committed if self._partition_of(g) == p]:
            del self._committed[group_id]


def _records(group_id: str, offsets: dict[TopicPartition, OT.CommittedOffset]) -> list[tuple[bytes, bytes]]:
    return [(OT.offset_key(group_id, t, p), OT.offset_value(c)) for (t, p), c in offsets.items()]
