"""Offsets in the Kafka source's JSON shape and the arithmetic on offset ranges.

A Spark offset is `{"topic": {"0": 23}}`: partition keys are strings and 23 is the next offset to
read. Inside the connector offsets are `{(topic, partition): offset}`. Range arithmetic follows
Spark's Kafka source: the per-trigger limit is shared across partitions in proportion to their
backlog, and `minPartitions` / `maxRecordsPerPartition` split a partition's range into tasks.
`resolve` turns an offset option (startingOffsets, endingOffsets, by timestamp) into offsets on
the subscribed partitions' logs.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logcore.errors import InvalidConfigError
from logcore.wire.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from pyspark_seglog.data_loss import data_loss

if TYPE_CHECKING:          # source_options imports this module
    from pyspark_seglog.source_options import OffsetSpec, SourceOptions

TopicPartition = tuple  # (topic: str, partition: int)
INT64_MAX = (1 << 63) - 1


def to_spark(offsets: dict) -> dict:
    """{(topic, partition): offset} -> {"topic": {"partition": offset}} (sorted, string keys)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_spark(offsets) -> dict:
    """Spark's offset (a dict, or its JSON text) -> {(topic, partition): offset}."""
    if offsets is None:
        return {}
    if isinstance(offsets, (str, bytes)):
        offsets = json.loads(offsets)
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def offsets_json(offsets: dict) -> str:
    return json.dumps(to_spark(offsets), sort_keys=True)


def _load(raw: str, option: str, shape: str):
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InvalidConfigError(
            f"option {option}={raw!r}: not valid JSON ({exc}); expected {shape}") from None


def _partition_number(p, raw: str, option: str) -> int:
    try:
        number = int(p)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or (isinstance(p, str) and not p.strip().isdigit()) or isinstance(p, (bool, float)):
        raise InvalidConfigError(
            f"option {option}={raw!r}: partition {p!r} is not a partition number (an integer >= 0)")
    return number


def parse_assign(raw: str, option: str = "assign") -> list:
    """`{"topicA": [0, 1], "topicB": [2]}` -> [(topic, partition), ...] (sorted, no repeats)."""
    shape = 'a JSON object of topic -> list of partitions, e.g. {"t": [0, 1]}'
    doc = _load(raw, option, shape)
    if not isinstance(doc, dict) or not doc:
        raise InvalidConfigError(f"option {option}={raw!r}: expected {shape}")
    out = set()
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not parts:
            raise InvalidConfigError(
                f"option {option}={raw!r}: topic {topic!r} needs a non-empty list of partitions; expected {shape}")
        for p in parts:
            out.add((topic, _partition_number(p, raw, option)))
    return sorted(out)


def parse_partition_map(raw: str, option: str, *, minimum: int, what: str) -> dict:
    """`{"topic": {"0": 23}}` -> {(topic, 0): 23}, each value an integer >= minimum."""
    shape = f'a JSON object of topic -> {{partition: value}}, e.g. {{"t": {{"0": 23}}}}, with {what}'
    doc = _load(raw, option, shape)
    if not isinstance(doc, dict) or not doc:
        raise InvalidConfigError(f"option {option}={raw!r}: expected {shape}")
    out = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not parts:
            raise InvalidConfigError(f"option {option}={raw!r}: topic {topic!r}: expected {shape}")
        for p, value in parts.items():
            number = _partition_number(p, raw, option)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidConfigError(
                    f"option {option}={raw!r}: {topic}-{p} has {value!r}; expected {what}")
            out[(topic, number)] = value
    return out


def prorate(start: dict, latest: dict, limit: int) -> dict:
    """End offsets for at most ~`limit` records, shared across partitions by backlog (Spark's rule).

    A partition's share is limit * backlog / total backlog, rounded up when below one (a small
    partition is never starved) and down otherwise; never past `latest`.
    """
    backlog = {tp: latest[tp] - start[tp] for tp in latest if tp in start and latest[tp] > start[tp]}
    total = sum(backlog.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in backlog:
            out[tp] = end
            continue
        share = limit * (backlog[tp] / total)
        count = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, start[tp] + count) if count <= INT64_MAX - start[tp] else end
    return out


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int          # first offset to read
    until: int          # exclusive

    @property
    def size(self) -> int:
        return self.until - self.start


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`parts` contiguous near-equal pieces; the last takes the rounding remainder."""
    remaining, left, start, out = r.size, parts, r.start, []
    for _ in range(parts):
        piece = remaining // left
        remaining -= piece
        left -= 1
        end = min(start + piece, r.until)
        out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return [p for p in out if p.size > 0]


def split_ranges(ranges: list[OffsetRange], *, min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Spark tasks for offset ranges (empty ranges dropped), per Spark's Kafka range calculator.

    maxRecordsPerPartition: a range larger than it becomes ceil(size / max) pieces. minPartitions:
    when there are fewer ranges than asked, each range becomes round(size / (total / minPartitions))
    pieces (at least one), so large ranges are split and small ones stay whole.
    """
    ranges = [r for r in ranges if r.size > 0]
    if max_records_per_partition is None and (min_partitions is None or len(ranges) >= min_partitions):
        return ranges
    if max_records_per_partition is not None:
        divided = []
        for r in ranges:
            if r.size > max_records_per_partition:
                divided.extend(_divide(r, math.ceil(r.size / max_records_per_partition)))
            else:
                divided.append(r)
        ranges = divided
    if min_partitions is not None and min_partitions > len(ranges):
        total = sum(r.size for r in ranges)
        ideal = total / min_partitions
        out = []
        for r in ranges:
            out.extend(_divide(r, max(_round_half_up(r.size / ideal), 1)))
        ranges = out
    return ranges


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


# ------------------------------------------------------------------------------- resolving an option

def _check_covers(spec: OffsetSpec, tps: list) -> None:
    """A JSON of offsets/timestamps must name exactly the subscribed partitions (as Spark asks)."""
    named, current = set(spec.offsets), set(tps)
    missing = sorted(current - named)
    extra = sorted(named - current)
    if missing:
        t, p = missing[0]
        raise InvalidConfigError(
            f"option {spec.option} gives no value for {t}-{p}; give every partition of the subscribed"
            f" topics ({', '.join(f'{a}-{b}' for a, b in sorted(current))}): -2 means earliest, -1 latest")
    if extra:
        t, p = extra[0]
        raise InvalidConfigError(
            f"option {spec.option} names {t}-{p}, which is not a partition of the subscribed topics"
            f" ({', '.join(f'{a}-{b}' for a, b in sorted(current)) or 'none exist yet'})")


def resolve(spec: OffsetSpec, tps: list, logs, opts: SourceOptions, *, starting: bool) -> dict:
    """Offsets for `spec` over `tps`: {(topic, partition): offset}, never above latest."""
    out = {}
    if spec.kind in ("offsets", "timestamps"):
        _check_covers(spec, tps)
    for tp in tps:
        earliest, latest = logs.earliest(tp), logs.latest(tp)
        if spec.kind == "earliest":
            out[tp] = earliest
        elif spec.kind == "latest":
            out[tp] = latest
        elif spec.kind == "offsets":
            wanted = spec.offsets[tp]
            if wanted == EARLIEST_TIMESTAMP:
                out[tp] = earliest
            elif wanted == LATEST_TIMESTAMP:
                out[tp] = latest
            elif wanted < earliest:
                out[tp] = data_loss(tp[0], tp[1], wanted, earliest, opts.fail_on_data_loss,
                                    f" (option {spec.option})")
            elif not starting:
                out[tp] = min(wanted, latest)       # never past the HW (LSO)
            else:
                out[tp] = wanted
        else:
            ts = spec.timestamp if spec.kind == "timestamp" else spec.offsets[tp]
            found = logs.offset_for_timestamp(tp, ts)
            if found is not None:
                out[tp] = max(earliest, min(found[0], latest))
            elif not starting or opts.timestamp_strategy == "latest":
                out[tp] = latest
            else:
                raise InvalidConfigError(
                    f"option {spec.option}: no record of {tp[0]}-{tp[1]} has a timestamp >= {ts};"
                    " set startingOffsetsByTimestampStrategy=latest to start at the latest offset instead")
    return out
