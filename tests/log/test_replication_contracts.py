"""The replication contracts of `Log`: a follower keeps the leader's bytes, the HW as its own
operation (leader: never backwards, never past the LEO; follower: min(leader HW, own LEO)),
leadership at an epoch given from outside, and truncation at an epoch boundary."""
from __future__ import annotations

import os
import random

import pytest

from logcore.errors import FencedWriterError, InvalidRecordError, OffsetOutOfRangeError
from logcore.log.log_root import LogRoot
from logcore.records.batch import iter_batches
from logcore.records.control import ControlType
from random_transaction import RandomTransaction, next_sequence

CONFIG = {"segment.bytes": "3000", "segment.index.bytes": "4096", "index.interval.bytes": "200"}


def _open(path, config=CONFIG):
    root = LogRoot.open(str(path), create=True)
    root.create_topic("t", config=config)
    return root, root.log("t", 0, writer=True)


def _fetch(leader, offset: int) -> bytes:
    """What a follower's fetch gets: the leader's bytes from `offset` up to its LEO."""
    out = bytearray()
    while offset < leader.log_end_offset:
        result = leader.read(offset, 1 << 20, isolation="log_end")
        data = result.data.read() if hasattr(result.data, "read") else bytes(result.data)
        if hasattr(result.data, "close"):
            result.data.close()
        assert data, f"no bytes at {offset}"
        out += data
        offset = [h for _p, h in iter_batches(data)][-1].next_offset
    return bytes(out)


def _replicate(leader, follower, nowait: dict | None = None) -> None:
    """One follower round. With `nowait` (a counter), as the broker's replica fetcher does it:
    append_as_follower_nowait first, the blocking append only when that declines."""
    data = _fetch(leader, follower.log_end_offset)
    if data:
        if nowait is None:
            follower.append_as_follower(data)
        elif follower.append_as_follower_nowait(data) is None:
            nowait["declined"] += 1
            follower.append_as_follower(data)
        else:
            nowait["appended"] += 1
    follower.update_high_watermark(leader.high_watermark)


def _segment_files(log, suffix=".log") -> dict[str, bytes]:
    folder = log.storage.local_path(log.dir)
    return {name: open(os.path.join(folder, name), "rb").read()
            for name in sorted(os.listdir(folder)) if name.endswith(suffix)}


def _epoch_starts(log) -> list[tuple[int, int]]:
    """(epoch, first offset) of each run of batches with one partition leader epoch."""
    starts = []
    for batch in iter_batches(_fetch(log, log.log_start_offset)):
        header = batch[1]
        if not starts or starts[-1][0] != header.partition_leader_epoch:
            starts.append((header.partition_leader_epoch, header.base_offset))
    return starts


def _records(rng, n, start):
    return [(f"k{start + i}".encode(), os.urandom(rng.randrange(10, 300)), (), 1_700_000_000_000 + start + i)
            for i in range(n)]


@pytest.mark.parametrize("seed,nowait", [(1, False), (2, False), (3, False), (1, True), (2, True)])
def test_follower_segments_are_the_leaders_bytes(tmp_path, seed, nowait):
    rng = random.Random(seed)
    counts = {"appended": 0, "declined": 0} if nowait else None
    _ra, leader = _open(tmp_path / "leader")
    _rb, follower = _open(tmp_path / "follower")
    sequence = 0
    txn = RandomTransaction(rng)
    epoch = leader.leader_epoch
    for step in range(120):
        op = rng.random()
        if op < 0.45:
            leader.append_records(_records(rng, rng.randrange(1, 6), step))
        elif op < 0.7:
            n = rng.randrange(1, 4)
            leader.append_records(_records(rng, n, step), producer_id=7, producer_epoch=0,
                                  base_sequence=sequence)
            sequence += n
        elif op < 0.75:
            txn.step(leader, lambda: _records(rng, 2, step))
        elif op < 0.8:
            epoch += 1
            leader.become_leader(epoch)
        elif op < 0.9:
            leader.maybe_increment_high_watermark(
                rng.randrange(leader.high_watermark, leader.log_end_offset + 1))
        else:
            # A truncation above the HW (uncommitted data goes); the follower follows it.
            if leader.log_end_offset > leader.high_watermark:
                cut = rng.randrange(leader.high_watermark, leader.log_end_offset)
                leader.truncate_to(cut)
                if follower.log_end_offset > leader.log_end_offset:
                    follower.truncate_to(leader.log_end_offset)
                # the producers go on from what the leader kept
                sequence = next_sequence(leader, 7)
                txn.resume_from(leader)
        if rng.random() < 0.5:
            _replicate(leader, follower, counts)
    _replicate(leader, follower, counts)
    if nowait:
        # rounds append on the caller's thread, except rolls (3000-byte segments here) and
        # new epochs, which are declined and appended by the blocking call
        assert counts["appended"] > 0 and counts["declined"] > 0, counts
    assert len(_segment_files(leader)) > 2
    assert _segment_files(follower) == _segment_files(leader)
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.high_watermark == leader.high_watermark
    # the follower learns each epoch at its first batch; the leader has those entries too
    # (and perhaps epochs it led without appending)
    starts = _epoch_starts(leader)
    assert len(starts) > 2
    assert follower.epoch_cache.entries == starts
    assert set(starts) <= set(leader.epoch_cache.entries)
    assert _segment_files(follower, ".txnindex") == _segment_files(leader, ".txnindex")
    assert follower.producer_last_offsets() == leader.producer_last_offsets()
    # every producer's retained batches, epoch and open transaction, whichever way the
    # follower appended them (one write per run of next batches, or analysed one by one)
    assert follower.producer_state.producers == leader.producer_state.producers
    assert [r.offset for r in follower.read_records(0, isolation="log_end")] == \
        [r.offset for r in leader.read_records(0, isolation="log_end")]


def test_follower_append_keeps_transactions_and_rejects_gaps_and_overlaps(tmp_path):
    _ra, leader = _open(tmp_path / "leader")
    _rb, follower = _open(tmp_path / "follower")
    rng = random.Random(5)
    leader.append_records(_records(rng, 3, 0))
    leader.append_records(_records(rng, 2, 3), producer_id=11, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
    leader.append_control(ControlType.ABORT, producer_id=11, producer_epoch=0)
    leader.append_records(_records(rng, 2, 6))
    data = _fetch(leader, 0)
    batches = [(p, h) for p, h in iter_batches(data)]
    first = data[:batches[1][0]]
    rest = data[batches[1][0]:]
    # a gap: the second batch first
    with pytest.raises(InvalidRecordError, match="gap"):
        follower.append_as_follower(data[batches[1][0]:batches[2][0]])
    assert follower.log_end_offset == 0
    follower.append_as_follower(first)
    # an overlap: the first batch again, then the rest (nothing of it is written)
    with pytest.raises(InvalidRecordError, match="overlap"):
        follower.append_as_follower(first + rest)
    assert follower.log_end_offset == 3
    follower.append_as_follower(rest)
    assert _segment_files(follower) == _segment_files(leader)
    assert _segment_files(follower, ".txnindex") == _segment_files(leader, ".txnindex")
    leader.maybe_increment_high_watermark(leader.log_end_offset)
    follower.update_high_watermark(leader.high_watermark)
    # the aborted transaction is hidden on the follower as on the leader
    assert [r.offset for r in follower.read_records(0)] == [r.offset for r in leader.read_records(0)] \
        == [0, 1, 2, 6, 7]


def test_leader_high_watermark_never_moves_back_nor_past_the_leo(tmp_path):
    _r, log = _open(tmp_path / "a")
    rng = random.Random(2)
    for i in range(10):
        log.append_records(_records(rng, 1, i))     # one batch each: a replica's LEO ends a batch
    assert log.high_watermark == 0
    assert log.maybe_increment_high_watermark(4) is True
    assert log.high_watermark == 4
    assert log.maybe_increment_high_watermark(2) is False
    assert log.maybe_increment_high_watermark(4) is False
    assert log.high_watermark == 4
    with pytest.raises(OffsetOutOfRangeError, match="past the log end offset 10"):
        log.maybe_increment_high_watermark(11)
    assert log.high_watermark == 4
    # readers see up to the HW only
    assert [r.offset for r in log.read_records(0, isolation="read_uncommitted")] == [0, 1, 2, 3]
    # the single-node policy on top: a commit moves the HW to the LEO
    log.commit()
    assert log.high_watermark == 10


def test_follower_high_watermark_is_the_leaders_capped_at_its_own_leo(tmp_path):
    _ra, leader = _open(tmp_path / "leader")
    _rb, follower = _open(tmp_path / "follower")
    rng = random.Random(3)
    leader.append_records(_records(rng, 5, 0))
    follower.append_as_follower(_fetch(leader, 0))
    leader.append_records(_records(rng, 5, 5))
    leader.maybe_increment_high_watermark(8)
    assert follower.update_high_watermark(leader.high_watermark) == 5      # its own LEO
    follower.append_as_follower(_fetch(leader, 5))
    assert follower.update_high_watermark(leader.high_watermark) == 8


def test_become_leader_records_the_epoch_at_the_leo(tmp_path):
    _r, log = _open(tmp_path / "a")
    first = log.leader_epoch
    log.append_records(_records(random.Random(1), 4, 0))
    log.become_leader(first + 3)
    assert log.epoch_cache.entries[-1] == (first + 3, 4)
    info = log.append_records(_records(random.Random(1), 1, 4))
    batch = log.read(info.first_offset, isolation="log_end").data
    data = batch.read() if hasattr(batch, "read") else bytes(batch)
    assert int.from_bytes(data[12:16], "big") == first + 3       # partitionLeaderEpoch
    log.become_leader(first + 3)                                 # again: nothing changes
    assert log.epoch_cache.entries[-1] == (first + 3, 4)
    with pytest.raises(FencedWriterError, match=f"older than the latest epoch {first + 3}"):
        log.become_leader(first + 1)
    assert log.leader_epoch == first + 3


def test_truncation_to_an_epoch_boundary(tmp_path):
    """A follower that holds offsets of an old epoch the new leader never got asks the leader
    where that epoch ends, truncates there and then holds the leader's bytes."""
    rng = random.Random(4)
    _ra, leader = _open(tmp_path / "leader")
    _rb, follower = _open(tmp_path / "follower")
    e = max(leader.leader_epoch, follower.leader_epoch) + 1
    leader.become_leader(e)
    leader.append_records(_records(rng, 6, 0))
    follower.append_as_follower(_fetch(leader, 0))
    # The follower leads at e + 1 for a while; its appends never reach the other replica.
    follower.become_leader(e + 1)
    follower.append_records(_records(rng, 4, 6))
    # The old leader comes back at e + 2 and appends.
    leader.become_leader(e + 2)
    leader.append_records(_records(rng, 3, 6))
    leader.maybe_increment_high_watermark(6)
    follower.update_high_watermark(leader.high_watermark)
    # divergence: the leader's end of the follower's latest epoch
    asked, end = leader.end_offset_for_epoch(follower.epoch_cache.latest_epoch)
    assert (asked, end) == (e, 6)
    follower.truncate_to(end)
    assert follower.log_end_offset == 6 and follower.epoch_cache.latest_epoch == e
    follower.append_as_follower(_fetch(leader, 6))
    assert _segment_files(follower) == _segment_files(leader)
    # never below the HW without saying so
    with pytest.raises(OffsetOutOfRangeError, match="below the high watermark 6"):
        follower.truncate_to(3)
    assert follower.log_end_offset == 9
    follower.truncate_to(0, below_high_watermark=True)
    assert follower.log_end_offset == 0 and follower.high_watermark == 0


def test_nowait_append_and_read_decline_what_would_block(tmp_path):
    """The event loop's variants: nothing is written or read when the log's lock is held
    elsewhere; a follower append that would roll a segment or start a new epoch, and a read
    before the active segment, are left to the blocking calls."""
    import threading

    _ra, leader = _open(tmp_path / "leader")
    _rb, follower = _open(tmp_path / "follower")
    leader.become_leader(leader.leader_epoch + 1)
    leader.append_records([(b"k", b"v" * 100, (), 1_700_000_000_000)])
    data = _fetch(leader, 0)
    held, release = threading.Event(), threading.Event()

    def hold():
        with follower.lock, leader.lock:
            held.set()
            release.wait(10)
    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        assert follower.append_as_follower_nowait(data) is None
        assert leader.read_nowait(0, 1 << 20, isolation="log_end") is None
    finally:
        release.set()
        holder.join()
    assert follower.log_end_offset == 0
    # the first batch carries the leader's epoch, new to the follower's cache: declined
    assert follower.append_as_follower_nowait(data) is None
    follower.append_as_follower(data)
    leader.append_records([(b"k", b"v" * 100, (), 1_700_000_000_001)])
    more = _fetch(leader, 1)
    assert follower.append_as_follower_nowait(more) == (1, 1)
    assert _segment_files(follower) == _segment_files(leader)
    # enough to fill the 3000-byte segment: a roll is due, declined with nothing written
    for i in range(30):
        leader.append_records([(b"k", b"v" * 100, (), 1_700_000_000_002 + i)])
    rest = _fetch(leader, 2)
    assert follower.append_as_follower_nowait(rest) is None
    assert follower.log_end_offset == 2
    follower.append_as_follower(rest)
    assert _segment_files(follower) == _segment_files(leader)
    # reads: the active segment's tail on the caller's thread, older segments declined
    assert len(leader.segments) > 1
    tail = leader.segments[-1].base_offset
    assert leader.read_nowait(0, 1 << 20, isolation="log_end") is None
    got = leader.read_nowait(tail, 1 << 20, isolation="log_end")
    want = leader.read(tail, 1 << 20, isolation="log_end")
    assert bytes(got.data) == bytes(want.data) and got.high_watermark == want.high_watermark


def test_follower_run_of_next_batches_is_one_write(tmp_path, monkeypatch):
    """On the event loop, a follower writes a run of batches that each continue their producer
    (or have none, or continue an open transaction) in one write; a run with a transaction's
    first batch goes batch by batch through the producer state's analysis. Both leave the
    leader's bytes and producer state."""
    config = {**CONFIG, "segment.bytes": "1000000"}
    _ra, leader = _open(tmp_path / "leader", config)
    _rb, follower = _open(tmp_path / "follower", config)
    ts = 1_700_000_000_000
    leader.append_records([(b"k", b"v", (), ts)], producer_id=7, producer_epoch=0, base_sequence=0)
    follower.append_as_follower(_fetch(leader, 0))      # learns the epoch and producer 7
    for i in range(3):
        leader.append_records([(b"k", b"v" * 50, (), ts + i)] * 2, producer_id=7, producer_epoch=0,
                              base_sequence=1 + 2 * i)
    leader.append_records([(b"k", b"plain", (), ts)])
    writes: list[int] = []
    data = follower.segments[-1].data
    real_append = data.append
    monkeypatch.setattr(data, "append", lambda b: writes.append(len(b)) or real_append(b))
    run = _fetch(leader, 1)
    assert follower.append_as_follower_nowait(run) == (1, 7)
    assert writes == [len(run)]
    assert follower.producer_state.producers == leader.producer_state.producers
    # a transaction's first batch needs the analysis: every batch is written on its own
    leader.append_records([(b"k", b"t", (), ts)], producer_id=9, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
    leader.append_records([(b"k", b"v", (), ts)], producer_id=7, producer_epoch=0, base_sequence=7)
    writes.clear()
    assert follower.append_as_follower_nowait(_fetch(leader, 8)) == (8, 9)
    assert len(writes) == 2
    assert follower.producer_state.producers == leader.producer_state.producers
    assert follower.producer_state.producers[9].current_txn_first_offset == 8
    # the same transaction's next batches continue it: one write again
    for i in range(2):
        leader.append_records([(b"k", b"t2", (), ts)], producer_id=9, producer_epoch=0, base_sequence=1 + i,
                              is_transactional=True)
    writes.clear()
    assert follower.append_as_follower_nowait(_fetch(leader, 10)) == (10, 11)
    assert len(writes) == 1
    assert follower.producer_state.producers == leader.producer_state.producers
    assert follower.producer_state.producers[9].current_txn_first_offset == 8
    assert follower.producer_state.ongoing_transactions == leader.producer_state.ongoing_transactions == {8: 9}
    # a producer's new epoch is analysed too, and the states still agree
    leader.append_records([(b"k", b"v", (), ts)], producer_id=7, producer_epoch=1, base_sequence=0)
    assert follower.append_as_follower_nowait(_fetch(leader, 12)) == (12, 12)
    assert follower.producer_state.producers == leader.producer_state.producers
    assert _segment_files(follower) == _segment_files(leader)
