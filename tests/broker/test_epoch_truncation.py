"""The reference scenarios of leader-epoch truncation (KIP-101, KIP-279), each played three ways
on real replica logs (`LogRoot.log(..., replica=True)`) with the broker's own pieces: the
leader's divergence check (`cluster_fetch.diverging_epoch`), the follower's cut
(`replica_fetcher.truncation_offset`), follower appends and HW updates.

  "epoch"   what the seglog broker does: a follower never truncates on becoming a follower; a
            fetch carrying its last epoch gets the leader's (epoch, end) where they diverge,
            and it cuts where both logs agree;
  "kip101"  the leader's answer carries only an end offset (OffsetForLeaderEpoch v0, before
            KIP-279): the follower cuts to min(end, own LEO);
  "hw"      before KIP-101: a replica that becomes a follower truncates to its high watermark,
            and fetches from there.

S1 (acknowledged write lost) and S2 (logs diverge after a lost unflushed tail) fail with "hw";
S3 and S4 (fast leader changes) fail with "kip101"; all pass with "epoch".
"""
from __future__ import annotations

import pytest

from logcore.broker.cluster_fetch import diverging_epoch
from logcore.replication.replica_fetcher import truncation_offset
from logcore.log.log_root import LogRoot
from logcore.records.batch import iter_batches

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


class Replica:
    def __init__(self, base, name: str, mode: str):
        self.name, self.mode = name, mode
        self.root = LogRoot.open(str(base / name), create=True)
        self.root.create_topic("t", config={"segment.bytes": "100000"}, topic_id=TOPIC_ID)
        self.log = self.root.log("t", 0, writer=True, replica=True)
        self.epoch = -1

    # -- roles (the controller's decisions, given from outside) --------------------------------
    def lead(self, epoch: int) -> None:
        self.epoch = epoch
        self.log.become_leader(epoch)

    def follow(self, epoch: int) -> None:
        self.epoch = epoch
        self.log.become_follower(epoch)
        if self.mode == "hw":
            self.log.truncate_to(self.log.high_watermark)

    def produce(self, value: bytes) -> int:
        return self.log.append_records([(None, value, (), None)]).first_offset

    # -- one follower fetch round against `leader` ----------------------------------------------
    def fetch_from(self, leader: "Replica", *, take_hw: bool = True) -> None:
        for _ in range(10):                       # divergence rounds, then the data
            log, lead = self.log, leader.log
            latest = log.epoch_cache.latest_epoch
            offset = log.log_end_offset
            if self.mode == "epoch" and latest is not None:
                diverging = diverging_epoch(lead, latest, offset)
                if diverging is not None:
                    target = truncation_offset(log, *diverging)
                    log.truncate_to(target, below_high_watermark=target < log.high_watermark)
                    continue
            elif self.mode == "kip101" and latest is not None:
                _epoch, end = lead.end_offset_for_epoch(latest)
                if 0 <= end < offset:
                    log.truncate_to(end, below_high_watermark=end < log.high_watermark)
                    continue
            if offset > lead.log_end_offset:     # out of range: cut to the leader's end
                log.truncate_to(lead.log_end_offset, below_high_watermark=True)
                continue
            break
        data = _read(leader.log, self.log.log_end_offset)
        if data:
            self.log.append_as_follower(data)
        if take_hw:
            self.log.update_high_watermark(leader.log.high_watermark)

    def values(self) -> list[bytes]:
        return [r.value for r in self.log.read_records(0, isolation="log_end")]

    def batches(self) -> list[tuple[int, int, int]]:
        return [(h.base_offset, h.partition_leader_epoch, h.crc) for _p, h in iter_batches(_read(self.log, 0))]

    def close(self) -> None:
        self.root.close()


def _read(log, offset: int) -> bytes:
    out = bytearray()
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, isolation="log_end").data
        data = data.read() if hasattr(data, "read") else bytes(data)
        out += data
        offset = [h for _p, h in iter_batches(data)][-1].next_offset
    return bytes(out)


@pytest.fixture
def replicas(tmp_path):
    made = []

    def make(mode, *names):
        out = [Replica(tmp_path / mode, n, mode) for n in names]
        made.extend(out)
        return out
    yield make
    for r in made:
        r.close()


def s1_acknowledged_write_survives(make, mode) -> bool:
    """RF 3 [A, B, C], leader A, min.insync.replicas 2, acks=all."""
    a, b, c = make(mode, "a", "b", "c")
    a.lead(0)
    b.follow(0)
    c.follow(0)
    a.produce(b"m1")
    for f in (b, c):
        f.fetch_from(a)
    a.log.maybe_increment_high_watermark(1)
    for f in (b, c):
        f.fetch_from(a)                          # B and C learn HW 1
    a.produce(b"m2")
    for f in (b, c):
        f.fetch_from(a, take_hw=False)           # they hold m2; the answer with HW 2 is lost
    a.log.maybe_increment_high_watermark(2)      # their next fetches said LEO 2: m2 is acked
    assert b.log.high_watermark == 1
    # C dies; the controller takes it out of the ISR with a new epoch; B follows A again.
    b.follow(1)
    a.lead(1)
    # A dies; B is the first live ISR member and leads.
    b.lead(2)
    return b.values()[:2] == [b"m1", b"m2"]


def s2_logs_identical_after_lost_tail(make, mode) -> bool:
    """RF 2 {A, B}, min.insync.replicas 1. A loses its unflushed tail in a power cut."""
    a, b = make(mode, "a", "b")
    a.lead(0)
    b.follow(0)
    for i in range(10):
        a.produce(b"e0-%d" % i)
    b.fetch_from(a)
    a.log.maybe_increment_high_watermark(10)
    b.fetch_from(a)
    assert b.log.high_watermark == 10
    # B stops, then A; A comes back with only 5 of its 10 batches (recovery cut the rest).
    a.log.truncate_to(5, below_high_watermark=True)
    a.lead(1)                                    # the last ISR member leads again
    for i in range(10):
        a.produce(b"e1-%d" % i)
    b.follow(1)                                  # B comes back
    for _ in range(3):
        b.fetch_from(a)
    return b.batches() == a.batches()


def s3_fast_failover_agrees(make, mode, *, new_leader_writes: bool = True) -> bool:
    """RF 3 {A, B, C}, acks=1: A writes x; only C gets it; B leads and writes y; then C leads."""
    a, b, c = make(mode, "a", "b", "c")
    a.lead(1)
    b.follow(1)
    c.follow(1)
    a.produce(b"zero")
    for f in (b, c):
        f.fetch_from(a)
    a.produce(b"x")                              # B's fetches are blocked
    c.fetch_from(a)                              # C gets x, then is blocked too
    b.lead(2)                                    # A dies; B is elected
    b.produce(b"y")
    c.lead(3)                                    # B dies; C is elected
    if new_leader_writes:
        c.produce(b"z")
    b.follow(3)                                  # B comes back
    for _ in range(3):
        b.fetch_from(c)
    return b.values()[:2] == c.values()[:2] == [b"zero", b"x"] and b.batches() == c.batches()


@pytest.mark.parametrize("mode,survives", [("epoch", True), ("kip101", True), ("hw", False)])
def test_s1_hw_truncation_loses_an_acknowledged_write(replicas, mode, survives):
    assert s1_acknowledged_write_survives(replicas, mode) is survives


@pytest.mark.parametrize("mode,identical", [("epoch", True), ("kip101", True), ("hw", False)])
def test_s2_divergent_logs_after_a_lost_tail(replicas, mode, identical):
    assert s2_logs_identical_after_lost_tail(replicas, mode) is identical


@pytest.mark.parametrize("mode,agrees", [("epoch", True), ("kip101", False)])
def test_s3_fast_leader_failover(replicas, mode, agrees):
    assert s3_fast_failover_agrees(replicas, mode) is agrees


@pytest.mark.parametrize("mode,agrees", [("epoch", True), ("kip101", False)])
def test_s4_new_leader_that_has_not_written(replicas, mode, agrees):
    """Without "cache (epoch, LEO) on becoming leader" C could not answer B's probe for epoch 2."""
    assert s3_fast_failover_agrees(replicas, mode, new_leader_writes=False) is agrees


def test_s6_follower_truncates_before_it_takes_the_hw(replicas):
    """KAFKA-14704: a diverging answer never moves the follower's HW; the next fetch asks from
    the cut with the epoch both logs share."""
    a, b = replicas("epoch", "a", "b")
    a.lead(0)
    b.follow(0)
    for i in range(5):
        a.produce(b"c%d" % i)
    b.fetch_from(a)
    a.log.maybe_increment_high_watermark(5)
    b.fetch_from(a)
    b.lead(1)                                    # B leads for a moment and writes 3 records
    for i in range(3):
        b.produce(b"u%d" % i)
    a.lead(2)                                    # A leads again, then writes 3 of its own
    for i in range(3):
        a.produce(b"w%d" % i)
    a.log.maybe_increment_high_watermark(8)
    b.follow(2)
    diverging = diverging_epoch(a.log, b.log.epoch_cache.latest_epoch, b.log.log_end_offset)
    assert diverging == (0, 5)                   # A never had epoch 1
    assert b.log.high_watermark == 5
    target = truncation_offset(b.log, *diverging)
    assert target == 5 and b.log.high_watermark == 5
    b.log.truncate_to(target)
    assert b.log.epoch_cache.latest_epoch == 0 and b.log.log_end_offset == 5
    b.fetch_from(a)
    assert b.log.high_watermark == 8 and b.batches() == a.batches()
