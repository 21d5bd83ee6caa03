"""The Jepsen-style checker of a replicated-log history (replication reference note, section 6.4).

Input: a history (a list of dict events, or a JSONL file of them) and a final read of every
partition. Events, one per line (`t` is time.monotonic_ns() of the recording process):

    {"t", "proc", "type": "invoke", "f": "send", "key": k, "value": v}
    {"t", "proc", "type": "ok",     "f": "send", "key": k, "value": v, "offset": o, "leader_epoch": e?}
    {"t", "proc", "type": "fail",   "f": "send", "key": k, "value": v, "error": name}   # nothing appended
    {"t", "proc", "type": "info",   "f": "send", "key": k, "value": v, "error": name}   # indeterminate
    {"t", "proc", "type": "ok",     "f": "assign", "key": k, "offset": start}            # new assignment epoch
    {"t", "proc", "type": "ok",     "f": "poll", "key": k, "offset": o, "value": v, "hw": h?}
    {"t", "proc", "type": "fail",   "f": "poll", "key": k, "error": name}
    {"t", "proc", "type": "ok",     "f": "hw", "key": k, "offset": hw, "leader_epoch": e}
    {"t", "proc", "type": "info",   "f": "nemesis", "value": "kill 2" | "heal" | ...}

`key` is the partition, `value` a unique integer per send. A poll's `hw` is the high watermark
the consumer had been told (librdkafka's cached high watermark) when it got the record.

The final read is {key: {"start": log start offset, "records": [[offset, value], ...],
"complete": bool}} with records contiguous from start to the final high watermark.

`check(history, final)` returns a Result: `anomalies` (name -> list of examples; any entry makes
the run invalid) and `stats` (counts and liveness figures, reported, never failing). The points:

1. lost         an ok send (v, o) whose final read does not hold v at o (`unseen` instead when
                the final read of that partition could not finish); an ok send without an
                offset (librdkafka acknowledges a DUPLICATE_SEQUENCE_NUMBER answer so) whose
                value is nowhere in its partition's final read
2. inconsistent-offsets  one (key, offset) seen with two values, or a polled (o, v) that the
                final read no longer has (the record changed or vanished)
3. duplicate    one value at two offsets (sends, polls and the final read together); for
                values whose invoke says "idempotent": false only counted in stats (Kafka
                allows a producer without idempotence to write a record twice)
4. aborted-read a value whose send definitely failed, seen in a poll or in the final read
5. poll-skip / nonmonotonic-poll / poll-above-hw  per consumer and key, within one assignment;
                offset-out-of-range: a consumer positioned at an offset it had read (so at or
                below a high watermark it was told) was refused with OFFSET_OUT_OF_RANGE (the
                consumers run with auto.offset.reset=error so that this surfaces; S7)
6. nonmonotonic-send  a producer's acknowledged offsets of one key not increasing in send order
7. hw-regression  the high watermark of one key going back within one leader epoch
8. replica-divergence (check_replicas)  after healing, each replica's batches up to the high
                watermark identical (base offset, last offset, leader epoch, CRC); epoch caches
                agree up to the HW; replication-offset-checkpoint <= log end offset
9. liveness     (stats) per fault, the time to the first acknowledged send of each key after it;
                errors by name; partitions that were never writable after a fault
10. commit-regression / commit-lost  (consumer groups) a group's committed offset of a key read
                back (f "committed": {"group", "key", "offset", "since": when the read began})
                below the offset of the latest commit acknowledged (f "commit", type ok) before
                the read began, or absent (negative) after one was
11. unclean elections  `check(..., allowed_loss=True)` (a topic with
                unclean.leader.election.enable=true) and an event {"f": "unclean-election",
                "key": k, "leader": b} (a controller elected b outside the ISR of k, as its log
                says): Kafka documents that acknowledged records may then be lost, so on that key
                only, what such an election does is counted in `expected`, not as an anomaly:
                lost acknowledged sends, offsets seen with another value or vanished, a consumer
                refused with OFFSET_OUT_OF_RANGE, a producer's later offset at or below one of its
                lost records, and a value seen at a vanished offset and once in the final read.
                Everything else stays an anomaly (a value twice in the final read, aborted reads,
                polls, HW, commits, replicas); without such an event every loss is one.
"""
from __future__ import annotations

import bisect
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

MAX_EXAMPLES = 20          # examples kept per anomaly kind (the count is always exact)


@dataclass
class Result:
    anomalies: dict = field(default_factory=dict)      # kind -> list of example dicts
    counts: dict = field(default_factory=dict)         # kind -> number of occurrences
    stats: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)       # kind -> occurrences Kafka documents (point 11)
    expected_examples: dict = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.counts

    def add(self, kind: str, **example) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        examples = self.anomalies.setdefault(kind, [])
        if len(examples) < MAX_EXAMPLES:
            examples.append(example)

    def allow(self, kind: str, **example) -> None:
        """An occurrence Kafka documents as possible in this run (point 11): counted apart,
        never making the run invalid."""
        self.expected[kind] = self.expected.get(kind, 0) + 1
        examples = self.expected_examples.setdefault(kind, [])
        if len(examples) < MAX_EXAMPLES:
            examples.append(example)

    def merge(self, other: "Result") -> None:
        for kind, n in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + n
            room = MAX_EXAMPLES - len(self.anomalies.setdefault(kind, []))
            self.anomalies[kind].extend(other.anomalies.get(kind, [])[:max(room, 0)])
        for kind, n in other.expected.items():
            self.expected[kind] = self.expected.get(kind, 0) + n
            room = MAX_EXAMPLES - len(self.expected_examples.setdefault(kind, []))
            self.expected_examples[kind].extend(other.expected_examples.get(kind, [])[:max(room, 0)])
        self.stats.update(other.stats)

    def summary(self) -> str:
        lines = ["valid: no anomalies"] if self.valid else [f"INVALID: {sum(self.counts.values())} anomalies"]
        for kind, n in sorted(self.counts.items()):
            lines.append(f"  {kind}: {n}")
            for ex in self.anomalies[kind][:3]:
                lines.append(f"    e.g. {json.dumps(ex, sort_keys=True)}")
        if self.stats.get("unclean_elections") or self.stats.get("unclean_allowed"):
            lines.append(f"unclean elections: {self.stats['unclean_elections']} (keys "
                         f"{self.stats.get('unclean_keys')}); expected after them, as Kafka documents:")
            lines.append(f"  lost after unclean election: {self.expected.get('lost-after-unclean-election', 0)}")
            for kind, n in sorted(self.expected.items()):
                if kind != "lost-after-unclean-election":
                    lines.append(f"  {kind}: {n}")
            for ex in self.expected_examples.get("lost-after-unclean-election", [])[:2]:
                lines.append(f"    e.g. {json.dumps(ex, sort_keys=True)}")
        return "\n".join(lines)


def load_history(path: str | os.PathLike) -> list[dict]:
    """The events of a JSONL history file; a line that is not JSON raises ValueError naming the
    file and the line number."""
    events = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {n} is not JSON: {e}") from None
    return events


def _final_maps(final: dict) -> dict:
    """key -> (offset -> value, start, end, complete); keys as ints."""
    out = {}
    for key, part in final.items():
        records = {int(o): v for o, v in part.get("records", [])}
        start = int(part.get("start", min(records) if records else 0))
        end = start + len(records)
        for o in range(start, end):
            if o not in records:
                raise ValueError(f"final read of key {key} is not contiguous: offset {o} missing "
                                 f"between start {start} and {end}")
        out[int(key)] = (records, start, end, bool(part.get("complete", True)))
    return out


def check(history: list[dict], final: dict, allowed_loss: bool = False) -> Result:
    """`allowed_loss`: the topic allows unclean elections (point 11)."""
    res = Result()
    finals = _final_maps(final)
    elections = [ev for ev in history if ev.get("f") == "unclean-election"]
    unclean = {ev.get("key") for ev in elections} if allowed_loss else set()
    res.stats["unclean_elections"] = len(elections)
    res.stats["unclean_allowed"] = allowed_loss
    res.stats["unclean_keys"] = sorted(unclean, key=str)

    def flag(kind, expected_kind, key, **ex):
        """An anomaly, or (on a key with an unclean election) what that election may do."""
        if key in unclean:
            res.allow(expected_kind, key=key, **ex)
        else:
            res.add(kind, key=key, **ex)
    sends_ok, sends_ok_unplaced, sends_fail, sends_info, invoked = [], [], [], [], 0
    observed = defaultdict(lambda: defaultdict(set))     # key -> offset -> {values}
    where = defaultdict(set)                             # value -> {(key, offset)}
    errors = Counter()

    for i, ev in enumerate(history):
        f, typ = ev.get("f"), ev.get("type")
        if f == "send":
            if typ == "invoke":
                invoked += 1
            elif typ == "ok" and (ev.get("offset") is None or ev["offset"] < 0):
                # acknowledged without an offset (librdkafka's success on DUPLICATE_SEQUENCE_NUMBER)
                sends_ok_unplaced.append((i, ev))
            elif typ == "ok":
                sends_ok.append((i, ev))
                observed[ev["key"]][ev["offset"]].add(ev["value"])
                where[ev["value"]].add((ev["key"], ev["offset"]))
            elif typ == "fail":
                sends_fail.append(ev)
                errors["send:" + str(ev.get("error"))] += 1
            elif typ == "info":
                sends_info.append(ev)
                errors["send:" + str(ev.get("error"))] += 1
        elif f == "poll":
            if typ == "ok":
                observed[ev["key"]][ev["offset"]].add(ev["value"])
                where[ev["value"]].add((ev["key"], ev["offset"]))
            elif typ in ("fail", "info"):
                errors["poll:" + str(ev.get("error"))] += 1
                if "OFFSET_OUT_OF_RANGE" in str(ev.get("error")) or "AUTO_OFFSET_RESET" in str(ev.get("error")):
                    flag("offset-out-of-range", "out-of-range-after-unclean-election", ev.get("key"),
                         proc=ev.get("proc"), error=ev.get("error"), message=ev.get("message"), index=i)
    for key, (records, _start, _end, _c) in finals.items():
        for o, v in records.items():
            where[v].add((key, o))

    # 1. lost acknowledged writes
    unseen = 0
    lost_unclean = set()          # values lost on a key with an unclean election
    LOST = "lost-after-unclean-election"
    for i, ev in sends_ok:
        key, o, v = ev["key"], ev["offset"], ev["value"]
        records, start, end, complete = finals.get(key, ({}, 0, 0, False))
        if key in unclean and (o in records and records[o] != v or o not in records and (complete or o < start)):
            lost_unclean.add(v)
        if o in records:
            if records[o] != v:
                flag("lost", LOST, key, offset=o, value=v, final_value=records[o], proc=ev.get("proc"), index=i)
        elif o < start:
            flag("lost", LOST, key, offset=o, value=v, final_value=None, reason="below log start",
                 proc=ev.get("proc"), index=i)
        elif complete:
            flag("lost", LOST, key, offset=o, value=v, final_value=None,
                 reason=f"beyond the final high watermark {end}", proc=ev.get("proc"), index=i)
        else:
            unseen += 1
            res.add("unseen", key=key, offset=o, value=v, reason="final read did not finish")

    final_values = {key: set(records.values()) for key, (records, *_rest) in finals.items()}
    for i, ev in sends_ok_unplaced:
        key, v = ev["key"], ev["value"]
        if v in final_values.get(key, ()):
            continue
        if finals.get(key, (None, 0, 0, False))[3]:
            flag("lost", LOST, key, offset=None, value=v, final_value=None,
                 reason="acknowledged without an offset, absent from the final read", proc=ev.get("proc"),
                 index=i)
        else:
            unseen += 1
            res.add("unseen", key=key, offset=None, value=v, reason="final read did not finish")

    # 2. inconsistent offsets
    acked = defaultdict(set)
    for _i, ev in sends_ok:
        acked[ev["key"]].add(ev["offset"])
    for key, offsets in observed.items():
        records, start, end, complete = finals.get(key, ({}, 0, 0, False))
        for o, values in offsets.items():
            REPLACED = "replaced-after-unclean-election"
            if len(values) > 1:
                flag("inconsistent-offsets", REPLACED, key, offset=o, values=sorted(values, key=str),
                     final_value=records.get(o))
            elif o in records and records[o] not in values:
                flag("inconsistent-offsets", REPLACED, key, offset=o, values=sorted(values, key=str),
                     final_value=records[o], reason="seen value changed")
            elif o not in records and (complete or o < start) and o not in acked.get(key, ()):
                # an acknowledged send missing from the final read is already `lost`
                flag("inconsistent-offsets", REPLACED, key, offset=o, values=sorted(values, key=str),
                     final_value=None, reason=f"polled record vanished (final read {start}..{end})")

    # 3. duplicates (a value sent by a producer without idempotence may legitimately land twice:
    # the client re-sends on its own, e.g. librdkafka re-queues a request that was in flight to
    # a broker that left the Metadata as "not persisted"; those are counted, not failed)
    plain = {ev["value"] for ev in history
             if ev.get("f") == "send" and ev.get("type") == "invoke" and ev.get("idempotent") is False}
    plain_dups = []
    for v, places in where.items():
        if len(places) > 1:
            # on keys with an unclean election: a value once in the final read and otherwise only
            # at offsets that no longer hold it (a record lost there, written again by its producer)
            in_final = [(k, o) for k, o in places if finals.get(k, ({},))[0].get(o) == v]
            if v in plain:
                plain_dups.append({"value": v, "at": sorted(places)})
            elif len(in_final) <= 1 and all(k in unclean for k, _o in places):
                res.allow("moved-after-unclean-election", value=v, at=sorted(places))
            else:
                res.add("duplicate", value=v, at=sorted(places))
    res.stats["duplicates_without_idempotence"] = len(plain_dups)
    res.stats["duplicates_without_idempotence_examples"] = plain_dups[:MAX_EXAMPLES]

    # 4. aborted reads
    failed = {ev["value"]: ev for ev in sends_fail}
    for v, ev in failed.items():
        if v in where:
            res.add("aborted-read", value=v, error=ev.get("error"), key=ev.get("key"), at=sorted(where[v]))

    _check_polls(history, res)
    _check_send_order(history, sends_ok, res, lost_unclean)
    _check_hw(history, res)
    _check_commits(history, res)

    res.stats.update({
        "sends_invoked": invoked, "sends_ok": len(sends_ok) + len(sends_ok_unplaced),
        "sends_ok_without_offset": len(sends_ok_unplaced), "sends_fail": len(sends_fail),
        "sends_info": len(sends_info), "polled": sum(1 for e in history if e.get("f") == "poll"
                                                      and e.get("type") == "ok"),
        "final_records": sum(len(r[0]) for r in finals.values()), "unseen": unseen,
        "errors": dict(sorted(errors.items())),
        "info_sends_in_final": sum(1 for ev in sends_info if ev["value"] in where),
    })
    res.stats["liveness"] = liveness(history)
    return res


def _check_polls(history: list[dict], res: Result) -> None:
    """Point 5: per consumer and key, polls within one assignment are contiguous and increasing,
    start at the assigned offset, and stay below the high watermark the consumer was told."""
    state = {}       # (proc, key) -> [next expected offset or None, max hw seen or None]
    for i, ev in enumerate(history):
        if ev.get("type") != "ok":
            continue
        k = (ev.get("proc"), ev.get("key"))
        if ev.get("f") == "assign":
            start = ev.get("offset")
            state[k] = [start if start is not None and start >= 0 else None, None]
        elif ev.get("f") == "poll":
            st = state.setdefault(k, [None, None])
            o = ev["offset"]
            if ev.get("hw") is not None and ev["hw"] >= 0:
                st[1] = ev["hw"] if st[1] is None else max(st[1], ev["hw"])
                if o >= st[1]:
                    res.add("poll-above-hw", proc=k[0], key=k[1], offset=o, hw=st[1], index=i)
            expected = st[0]
            if expected is not None:
                if o > expected:
                    res.add("poll-skip", proc=k[0], key=k[1], expected=expected, offset=o, index=i)
                elif o < expected:
                    res.add("nonmonotonic-poll", proc=k[0], key=k[1], expected=expected, offset=o, index=i)
            st[0] = o + 1


def _check_commits(history: list[dict], res: Result) -> None:
    """Point 10: a committed offset read back is never below the latest one acknowledged before
    the read began."""
    acked = defaultdict(list)       # (group, key) -> [(t, offset)] of acknowledged commits, in order
    reads = 0
    for i, ev in enumerate(history):
        if ev.get("type") != "ok":
            continue
        if ev.get("f") == "commit":
            acked[(ev.get("group"), ev["key"])].append((ev.get("t", 0), ev["offset"]))
        elif ev.get("f") == "committed" and ev.get("key") is not None:
            reads += 1
            since = ev.get("since", ev.get("t", 0))
            before = [o for t, o in acked[(ev.get("group"), ev["key"])] if t < since]
            if not before:
                continue
            # the latest acknowledged commit, not the highest: a member may commit a lower offset
            # on purpose (it was reset to one after an OFFSET_OUT_OF_RANGE, say)
            best, got = before[-1], ev.get("offset")
            if got is None or got < 0:
                res.add("commit-lost", group=ev.get("group"), key=ev["key"], committed=best, read=got,
                        proc=ev.get("proc"), index=i)
            elif got < best:
                res.add("commit-regression", group=ev.get("group"), key=ev["key"], committed=best, read=got,
                        proc=ev.get("proc"), index=i)
    res.stats["commits_ok"] = sum(len(v) for v in acked.values())
    res.stats["committed_reads"] = reads


def _check_send_order(history: list[dict], sends_ok, res: Result, lost_unclean=frozenset()) -> None:
    """Point 6: a producer's acknowledged sends of one key, taken in the order the producer
    invoked them (completions may be recorded in another order), land at increasing offsets
    (point 11: unless the earlier record was lost by an unclean election)."""
    invoked_at = {ev["value"]: i for i, ev in enumerate(history)
                  if ev.get("f") == "send" and ev.get("type") == "invoke"}
    by_proc = defaultdict(list)
    for i, ev in sends_ok:
        by_proc[(ev.get("proc"), ev["key"])].append((invoked_at.get(ev["value"], i), ev["offset"], ev["value"]))
    for (proc, key), items in by_proc.items():
        items.sort()
        for (s1, o1, v1), (s2, o2, v2) in zip(items, items[1:]):
            if o2 <= o1 and v1 in lost_unclean:
                res.allow("reused-offset-after-unclean-election", proc=proc, key=key, first=[v1, o1], later=[v2, o2])
            elif o2 <= o1:
                res.add("nonmonotonic-send", proc=proc, key=key, first=[v1, o1], later=[v2, o2])


def _check_hw(history: list[dict], res: Result) -> None:
    """Point 7: within one leader epoch of a key, the reported HW never decreases. Across epochs
    a dip is counted in stats (Kafka allows it for one fetch round)."""
    last = {}        # (key, epoch) -> highest HW seen
    latest = {}      # key -> (epoch, hw) of the previous observation
    dips = 0
    for i, ev in enumerate(history):
        if ev.get("f") != "hw" or ev.get("type") != "ok":
            continue
        key, hw, epoch = ev["key"], ev["offset"], ev.get("leader_epoch", -1)
        if epoch is None or epoch < 0:
            continue
        prev = last.get((key, epoch))
        if prev is not None and hw < prev:
            res.add("hw-regression", key=key, leader_epoch=epoch, hw=hw, previous=prev, index=i)
        last[(key, epoch)] = hw if prev is None else max(prev, hw)
        if key in latest and latest[key][0] != epoch and hw < latest[key][1]:
            dips += 1
        latest[key] = (epoch, hw)
    res.stats["hw_dips_across_epochs"] = dips


def liveness(history: list[dict]) -> dict:
    """Point 9 (reported, never failing): for each fault the nemesis started, seconds until each
    key's first acknowledged send completed after it; the worst and the median over faults."""
    faults = [(ev["t"], ev.get("value")) for ev in history
              if ev.get("f") == "nemesis" and ev.get("phase", "start") == "start" and "t" in ev]
    oks = defaultdict(list)
    for ev in history:
        if ev.get("f") == "send" and ev.get("type") == "ok" and "t" in ev:
            oks[ev["key"]].append(ev["t"])
    for ts in oks.values():
        ts.sort()
    recoveries, never = [], 0
    for t0, _what in faults:
        for key, ts in oks.items():
            j = bisect.bisect_left(ts, t0)
            if j < len(ts):
                recoveries.append((ts[j] - t0) / 1e9)
            else:
                never += 1
    recoveries.sort()
    return {
        "faults": len(faults),
        "max_s_to_first_ok_send": round(recoveries[-1], 3) if recoveries else None,
        "median_s_to_first_ok_send": round(recoveries[len(recoveries) // 2], 3) if recoveries else None,
        "key_faults_never_writable_after": never,
    }


# ------------------------------------------------------------------ replicas (point 8)

@dataclass
class ReplicaState:
    batches: list            # [(base_offset, last_offset, partition_leader_epoch, crc)] in log order
    log_end_offset: int
    epochs: list             # leader-epoch-checkpoint entries [(epoch, start_offset)]
    checkpoint_hw: int | None   # this partition's line of replication-offset-checkpoint


def read_replica(log_dir: str | os.PathLike, topic: str, partition: int) -> ReplicaState | None:
    """One replica's batches, epoch cache and checkpointed HW, read from a broker's log.dirs with
    logcore's record reader (every batch's CRC verified). None when the broker has no such
    partition directory."""
    from logcore.log.checkpoint import LeaderEpochCheckpoint, OffsetCheckpoint
    from logcore.records.batch import iter_batches

    root = Path(log_dir)
    pdir = root / f"{topic}-{partition}"
    if not pdir.is_dir():
        return None
    batches = []
    leo = None
    for seg in sorted(pdir.glob("*.log")):
        data = seg.read_bytes()
        for _pos, h in iter_batches(data, source=str(seg)):
            batches.append((h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc))
            leo = h.next_offset
    if leo is None:
        logs = sorted(pdir.glob("*.log"))
        leo = int(logs[-1].stem) if logs else 0
    epochs_file = pdir / "leader-epoch-checkpoint"
    epochs = (LeaderEpochCheckpoint.decode(epochs_file.read_bytes(), source=str(epochs_file))
              if epochs_file.exists() else [])
    hw = None
    cp = root / "replication-offset-checkpoint"
    if cp.exists():
        hw = OffsetCheckpoint.decode(cp.read_bytes(), source=str(cp)).get((topic, partition))
    return ReplicaState(batches, leo, [tuple(e) for e in epochs], hw)


def batch_at(log_dir: str | os.PathLike, topic: str, partition: int, offset: int) -> dict | None:
    """The header of the batch holding `offset` in one replica's files (producer id, producer
    epoch, base sequence, leader epoch), or None. Used to explain anomalies white-box."""
    from logcore.records.batch import iter_batches
    pdir = Path(log_dir) / f"{topic}-{partition}"
    for seg in sorted(pdir.glob("*.log")):
        data = seg.read_bytes()
        for _pos, h in iter_batches(data, source=str(seg)):
            if h.base_offset <= offset <= h.last_offset:
                return {"offset": offset, "base_offset": h.base_offset, "leader_epoch": h.partition_leader_epoch,
                        "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                        "base_sequence": h.base_sequence, "records": h.records_count}
    return None


def explain_duplicates(res: Result, log_dir_of_key, topic: str) -> None:
    """Attach to each duplicate example the batches holding its copies (read from
    log_dir_of_key(key)) and a cause when the headers show one: the same producer id with a
    bumped producer epoch means the client re-sent the record after an epoch bump (librdkafka
    drains and bumps the epoch when messages time out), which no broker can deduplicate; the
    same producer id, epoch and sequence twice means the broker appended a retry it should have
    recognised. The anomaly stays counted either way."""
    for ex in res.anomalies.get("duplicate", []):
        batches = [batch_at(log_dir_of_key(key), topic, key, off) for key, off in ex["at"]]
        ex["batches"] = batches
        known = [b for b in batches if b]
        if len(known) < 2 or len({b["producer_id"] for b in known}) != 1 or known[0]["producer_id"] < 0:
            continue
        if len({(b["producer_epoch"], b["base_sequence"]) for b in known}) == 1:
            ex["cause"] = "broker appended a retried batch twice (same producer id, epoch and sequence)"
        elif len({b["producer_epoch"] for b in known}) > 1:
            ex["cause"] = "client re-sent after a producer epoch bump (same producer id, new epoch)"


def check_replicas(replicas: dict, high_watermarks: dict) -> Result:
    """Point 8. `replicas`: key -> {broker id: ReplicaState}; `high_watermarks`: key -> the
    leader's HW after healing. Every replica must hold the batches below the HW, identical in
    (base offset, last offset, leader epoch, CRC); their epoch caches must agree on the entries
    that start below the HW; a checkpointed HW must not exceed the replica's log end offset."""
    res = Result()
    compared = 0
    for key, by_broker in replicas.items():
        hw = high_watermarks[key]
        views = {}
        for broker, st in by_broker.items():
            if st is None:
                res.add("replica-missing", key=key, broker=broker)
                continue
            if st.log_end_offset < hw:
                res.add("replica-behind-hw", key=key, broker=broker, log_end_offset=st.log_end_offset, hw=hw)
            if st.checkpoint_hw is not None and st.checkpoint_hw > st.log_end_offset:
                res.add("checkpoint-beyond-leo", key=key, broker=broker, checkpoint=st.checkpoint_hw,
                        log_end_offset=st.log_end_offset)
            views[broker] = ([b for b in st.batches if b[0] < hw],
                             [e for e in st.epochs if e[1] < hw])
        brokers = sorted(views)
        for b in brokers[1:]:
            compared += 1
            ref, other = views[brokers[0]], views[b]
            if ref[0] != other[0]:
                diff = next((i for i, (x, y) in enumerate(zip(ref[0], other[0])) if x != y),
                            min(len(ref[0]), len(other[0])))
                res.add("replica-divergence", key=key, brokers=[brokers[0], b], hw=hw, batch_index=diff,
                        batches=[ref[0][diff] if diff < len(ref[0]) else None,
                                 other[0][diff] if diff < len(other[0]) else None])
            if ref[1] != other[1]:
                res.add("epoch-cache-divergence", key=key, brokers=[brokers[0], b], hw=hw,
                        epochs=[ref[1], other[1]])
    res.stats["replica_pairs_compared"] = compared
    return res
