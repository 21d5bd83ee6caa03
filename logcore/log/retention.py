"""Retention policy: which of a log's oldest segments go (Kafka's `deleteOldSegments`).

Pure: it looks at a description of the segments and the log's offsets and says how many of the
oldest segments are deletable and why; `Log.apply_retention` does the deleting. Kafka applies
three breaches in order, each a walk from the oldest segment that stops at the first segment that
does not qualify: the log start offset (a segment wholly below it), the size limit
(`retention.bytes`) and the time limit (`retention.ms`, by the segment's largest timestamp).
A segment is never deletable unless all of it is below the high watermark, and an empty last
segment never goes (a log keeps at least one segment; the caller rolls a new empty one when
every segment goes).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

BREACH_LOG_START = "log start offset"
BREACH_SIZE = "retention.bytes"
BREACH_TIME = "retention.ms"


@dataclass(frozen=True)
class SegmentInfo:
    """What the policy needs to know of one segment."""
    base_offset: int
    next_offset: int              # the offset after its last batch (its base when empty)
    size: int                     # bytes of its .log
    largest_timestamp: int        # ms; the file's modification time when no record has one


@dataclass(frozen=True)
class RetentionDecision:
    count: int                                      # the oldest `count` segments go
    reasons: tuple[str, ...] = ()                   # one breach name per deleted segment


@dataclass(frozen=True)
class RetentionResult:
    """What one retention pass (or delete_records_before) did to a partition."""
    segments_deleted: int
    bytes_deleted: int
    log_start_offset: int                           # the log start offset after the pass
    deleted_base_offsets: tuple[int, ...] = ()
    reasons: tuple[str, ...] = field(default_factory=tuple)


def deletable_segments(segments: Sequence[SegmentInfo], *, high_watermark: int,
                       log_start_offset: int, now_ms: int, retention_ms: int,
                       retention_bytes: int, delete_policy: bool) -> RetentionDecision:
    """How many of the oldest `segments` (ascending base offsets) retention deletes.

    With `delete_policy` False (a `compact`-only topic) only the log-start-offset breach applies.
    """
    reasons: list[str] = []
    start = 0

    def walk(predicate, reason: str) -> None:
        nonlocal start
        i = start
        while i < len(segments):
            seg = segments[i]
            upper = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
            last = i == len(segments) - 1
            if high_watermark < upper or (last and seg.size == 0) or not predicate(i, seg):
                break
            reasons.append(reason)
            i += 1
        start = i

    walk(lambda i, seg: i + 1 < len(segments) and segments[i + 1].base_offset <= log_start_offset,
         BREACH_LOG_START)
    if delete_policy and retention_bytes >= 0:
        total = sum(s.size for s in segments[start:])
        excess = total - retention_bytes

        def over_size(_i: int, seg: SegmentInfo) -> bool:
            nonlocal excess
            if excess - seg.size < 0:
                return False
            excess -= seg.size
            return True

        if excess >= 0:
            walk(over_size, BREACH_SIZE)
    if delete_policy and retention_ms >= 0:
        walk(lambda _i, seg: now_ms - seg.largest_timestamp > retention_ms, BREACH_TIME)
    return RetentionDecision(start, tuple(reasons))
