"""Offsets committed inside transactions (TxnOffsetCommit, KIP-98/KIP-447), held by the group
coordinator until their transaction ends.

The group coordinator appends them to the group's `__consumer_offsets` partition as a
transactional batch of the producer; they are pending, invisible to OffsetFetch (which
answers UNSTABLE_OFFSET_COMMIT for them when asked for stable offsets), until the
transaction's COMMIT marker reaches that partition, which applies them, or its ABORT marker,
which drops them. Loading a partition replays the same rules from the log (`replay`).
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

from logcore.records.batch import decode_records, iter_batches
from logcore.records.control import ControlType, parse_control_type


class PendingTxnOffsets:
    """partition of __consumer_offsets -> producer id -> group -> {(topic, partition): offset}."""

    def __init__(self):
        self.pending: dict[int, dict[int, dict[str, dict[tuple[str, int], object]]]] = {}

    def add(self, p: int, producer_id: int, group: str, offsets: dict) -> None:
        self.pending.setdefault(p, {}).setdefault(producer_id, {}).setdefault(group, {}).update(offsets)

    def complete(self, p: int, producer_id: int, committed: bool) -> dict[str, dict]:
        """The transaction of `producer_id` ended in partition p: its offsets per group when
        committed (to apply), nothing when aborted."""
        by_producer = self.pending.get(p)
        found = by_producer.pop(producer_id, {}) if by_producer else {}
        if by_producer is not None and not by_producer:
            del self.pending[p]
        return found if committed else {}

    def has_pending(self, group: str, tp: tuple[str, int]) -> bool:
        for by_producer in self.pending.values():
            for groups in by_producer.values():
                if tp in groups.get(group, ()):
                    return True
        return False

    def groups_pending(self) -> set[str]:
        return {g for by_producer in self.pending.values() for groups in by_producer.values() for g in groups}

    def drop_partition(self, p: int) -> None:
        self.pending.pop(p, None)


class LogEntry(NamedTuple):
    """One record of a coordinator's log, or one end-transaction marker (`marker`: True for
    COMMIT, False for ABORT, None for a data record)."""
    offset: int
    producer_id: int
    transactional: bool
    key: bytes | None
    value: bytes | None
    marker: bool | None = None


def replay(log, start: int, isolation: str = "log_end", max_bytes: int = 1 << 20) -> Iterator[LogEntry]:
    """Every data record and end-transaction marker of `log` from `start` to the isolation's
    bound, in log order (aborted data included: the markers say what it became)."""
    position = max(start, log.log_start_offset)
    while True:
        fetch = log.read(position, max_bytes, isolation=isolation)
        if not fetch.data:
            return
        where = {"source": fetch.source or f"{log.topic}-{log.partition}", "base_position": fetch.position}
        next_position = position
        for pos, header in iter_batches(fetch.data, **where):
            next_position = header.next_offset
            if header.last_offset < position:
                continue
            records = decode_records(fetch.data, pos, header, **where)
            if header.is_control:
                for record in records:
                    kind = parse_control_type(record.key)
                    if kind in (ControlType.COMMIT, ControlType.ABORT):
                        yield LogEntry(record.offset, header.producer_id, True, None, None, kind == ControlType.COMMIT)
                continue
            for record in records:
                if record.offset >= position:
                    yield LogEntry(record.offset, header.producer_id, header.is_transactional, record.key, record.value)
        if next_position <= position:
            return
        position = next_position
