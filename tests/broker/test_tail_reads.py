"""The kept tail reads (logcore/broker/tail_reads.py): a read served again is the read the log
would give now, whatever happened to the log in between."""
from __future__ import annotations

import os
import random
import threading

import pytest

from logcore.broker.tail_reads import KEPT_BYTES, KEPT_RUNS_BYTES, TailReads
from logcore.log.log_root import LogRoot
from logcore.log.segment_flusher import segment_flusher
from logcore.records.batch import build_batch
from random_transaction import RandomTransaction, next_sequence

ISOLATIONS = ("log_end", "read_uncommitted", "read_committed")


def _open(path, segment_bytes: int = 20000):
    root = LogRoot.open(str(path), create=True)
    root.create_topic("t", config={"segment.bytes": str(segment_bytes), "index.interval.bytes": "4096"})
    return root.log("t", 0, writer=True)


def _direct(log, offset, budget, isolation, min_one_batch):
    """What the log itself answers (a copied read, nothing kept)."""
    got = log.read(offset, budget, isolation=isolation, min_one_batch=min_one_batch)
    data = got.data.read() if hasattr(got.data, "read") else bytes(got.data)
    return (data, got.high_watermark, got.last_stable_offset, got.log_start_offset,
            [(a.producer_id, a.first_offset) for a in got.aborted])


def _through(tail, log, offset, budget, isolation, min_one_batch):
    got = tail.read_nowait("t-0", log, offset, budget, isolation, min_one_batch)
    if got is None:
        return None
    data = got.data
    if hasattr(data, "read"):
        with data:
            data = data.read()
    return (bytes(data), got.high_watermark, got.last_stable_offset, got.log_start_offset,
            [(a.producer_id, a.first_offset) for a in got.aborted])


class _Marker:
    """A no-op entry of the flusher's queue: its callback runs once every entry before it ran."""
    source = "marker"

    def sync(self) -> None:
        pass


def _background_flushes_done():
    """Wait until the flusher thread has recorded every rolled segment's sync: it takes the
    log's lock to do so, and a read_nowait that finds the lock busy answers None (a thread)."""
    done = threading.Event()
    segment_flusher().submit(_Marker(), lambda _pending: done.set())
    assert done.wait(30)


def _records(rng, n, step):
    return [(b"k%d" % step, os.urandom(rng.randrange(10, 1500)), (), 1_700_000_000_000 + step) for _ in range(n)]


def _random_change(log, txn, rng, step, op, cuts, most):
    """One change of the log chosen by `op` against the cumulative `cuts` (append of up to
    `most` - 1 records, a transaction's step, an HW move, a truncation above the HW, a
    deletion of records below it); nothing when `op` falls past them or a change cannot apply."""
    append, transaction, high_watermark, truncate, delete = cuts
    if op < append:
        log.append_records(_records(rng, rng.randrange(1, most), step))
    elif op < transaction:
        txn.step(log, lambda: _records(rng, 2, step))
    elif op < high_watermark:
        log.maybe_increment_high_watermark(rng.randrange(log.high_watermark, log.log_end_offset + 1))
    elif op < truncate and log.log_end_offset > log.high_watermark and not txn.open:
        log.truncate_to(rng.randrange(log.high_watermark, log.log_end_offset))
        txn.sequence = next_sequence(log, txn.producer_id)
    elif op < delete and log.high_watermark > log.log_start_offset:
        log.delete_records_before(rng.randrange(log.log_start_offset, log.high_watermark + 1))


def _random_read(rng, log, span):
    """(offset, budget, isolation, min_one_batch) of a read within `span` offsets below its
    isolation's bound, or None when the log holds none there."""
    isolation = rng.choice(ISOLATIONS)
    bound = log.bound(isolation)
    low = max(log.log_start_offset, bound - span)
    if low > bound:
        return None
    offset = rng.randint(low, bound)
    return offset, rng.choice([1 << 20, 2000]), isolation, rng.random() < 0.8


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_read_served_again_is_what_the_log_answers_now(tmp_path, seed):
    rng = random.Random(seed)
    log = _open(tmp_path)
    tail = TailReads()
    txn = RandomTransaction(rng)
    for step in range(300):
        _random_change(log, txn, rng, step, rng.random(), (0.3, 0.38, 0.55, 0.6, 0.62), 4)
        # A few reads, mostly at the tail and of the same range again (as the followers' and
        # a consumer's fetches of one batch are), compared with the log's own answer.
        for _ in range(3):
            read = _random_read(rng, log, 3)
            if read is None:
                continue
            offset, budget, isolation, first = read
            for _again in range(2):
                got = _through(tail, log, offset, budget, isolation, first)
                if got is None:          # before the active segment, or the log's lock busy (a
                    break                # roll's work in a thread): the broker reads in a thread
                assert got == _direct(log, offset, budget, isolation, first), (step, offset, isolation)
    assert tail.served > 50


def test_only_small_copied_ranges_are_kept(tmp_path):
    log = _open(tmp_path, segment_bytes=1 << 20)
    log.append_records([(None, os.urandom(KEPT_BYTES), (), 1)])
    log.maybe_increment_high_watermark(log.log_end_offset)
    tail = TailReads()
    for _ in range(2):
        got = tail.read_nowait("t-0", log, 0, 1 << 20, "read_uncommitted", True, copy_below=1 << 20)
        assert len(got.data) > KEPT_BYTES
    big = tail.read_nowait("t-0", log, 0, 1 << 20, "read_uncommitted", True, copy_below=1024)
    assert hasattr(big.data, "close")        # a file range for sendfile, not kept
    big.data.close()
    assert tail.served == 0


def test_a_busy_log_lock_reads_nothing(tmp_path):
    import threading
    log = _open(tmp_path)
    log.append_records([(None, b"v", (), 1)])
    log.maybe_increment_high_watermark(1)
    tail = TailReads()
    assert tail.read_nowait("t-0", log, 0, 1 << 20, "read_uncommitted", True).data
    held, release = threading.Event(), threading.Event()

    def hold():
        with log.lock:
            held.set()
            release.wait(10)
    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    try:
        assert tail.read_nowait("t-0", log, 0, 1 << 20, "read_uncommitted", True) is None
    finally:
        release.set()
        thread.join()


def test_a_truncation_back_to_the_same_end_is_not_served_from_before(tmp_path):
    # A follower's log cut above its HW and grown again to the same end offset with other
    # bytes (a new leader's): the read of that range must give the new bytes.
    log = _open(tmp_path)
    log.append_records([(None, b"old", (), 1)])
    tail = TailReads()
    before = tail.read_nowait("t-0", log, 0, 1 << 20, "log_end", True)
    assert b"old" in before.data
    log.truncate_to(0)
    log.append_records([(None, b"new", (), 1)])
    after = tail.read_nowait("t-0", log, 0, 1 << 20, "log_end", True)
    assert b"new" in after.data and tail.served == 0
    assert tail.read_nowait("t-0", log, 0, 1 << 20, "log_end", True).data == after.data
    assert tail.served == 1


def _client_batches(rng, step):
    return [memoryview(bytearray(build_batch(_records(rng, rng.randrange(1, 3), step), base_offset=0)))
            for _ in range(rng.randrange(1, 4))]


def _append_run(tail, log, batches):
    """A produce round's append as the partitions make it: the run kept as written."""
    truncations = log.truncations
    written: list = []
    results, _committed = log.append_and_commit_nowait(batches, written)
    if written and len(written) == len(results):
        tail.appended("t-0", log, results[0].first_offset, results[-1].last_offset + 1, written, truncations)
    for b in batches:                   # the request frame's bytes are reused after the round
        b[:] = bytes(len(b))
    return results


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_an_appended_run_served_is_what_the_log_answers_now(tmp_path, seed):
    rng = random.Random(seed)
    log = _open(tmp_path, segment_bytes=30000)
    tail = TailReads()
    txn = RandomTransaction(rng)
    from_runs = 0
    for step in range(300):
        op = rng.random()
        if op < 0.45:
            results = _append_run(tail, log, _client_batches(rng, step))
            if results and not isinstance(results[0], Exception):
                # the first follower's fetch of the run: no read of the log made it
                served = tail.served
                start = results[0].first_offset
                got = _through(tail, log, start, 1 << 20, "log_end", True)
                if got is not None:      # None: the log's lock busy or a read that would block
                    assert got == _direct(log, start, 1 << 20, "log_end", True)
                from_runs += tail.served - served
        else:
            _random_change(log, txn, rng, step, op, (0.55, 0.6, 0.7, 0.76, 0.78), 3)
        # The followers' and a consumer's fetches of the tail, as at a leader after a produce.
        for _ in range(3):
            read = _random_read(rng, log, 4)
            if read is None:
                continue
            offset, budget, isolation, first = read
            got = _through(tail, log, offset, budget, isolation, first)
            if got is not None:
                assert got == _direct(log, offset, budget, isolation, first), (step, offset, isolation)
    assert from_runs > 60


def test_a_follower_reads_a_produced_run_without_a_log_read(tmp_path, monkeypatch):
    log = _open(tmp_path, segment_bytes=1 << 20)
    log.append_records([(None, b"before", (), 1_700_000_000_000)])
    log.commit()                 # the root files written: the next commit is one the loop makes
    tail = TailReads()
    rng = random.Random(7)
    results = _append_run(tail, log, _client_batches(rng, 1))
    start = results[0].first_offset
    # A second produce request in flight: its run is appended before the followers' fetches.
    results = _append_run(tail, log, _client_batches(rng, 2))
    second, end = results[0].first_offset, results[-1].last_offset + 1
    expected = _direct(log, start, 1 << 20, "log_end", True)
    monkeypatch.setattr(log, "read_nowait", lambda *a, **k: pytest.fail("read the log"))
    for _follower in range(2):
        assert _through(tail, log, start, 1 << 20, "log_end", True) == expected
    assert _through(tail, log, second, 1 << 20, "log_end", True) == _direct(log, second, 1 << 20, "log_end", True)
    assert tail.served == 3
    monkeypatch.undo()
    # Anything appended after the run: the run is not the whole answer any more.
    log.append_records([(None, b"after", (), 1_700_000_000_002)])
    assert _through(tail, log, start, 1 << 20, "log_end", True) == _direct(log, start, 1 << 20, "log_end", True)
    assert log.log_end_offset > end and tail.served == 3


def test_a_follower_behind_five_requests_in_flight_reads_no_log(tmp_path, monkeypatch):
    """The Java producer's default: five requests in flight, a 16 KiB batch each. The leader
    appends all five before a follower's fetch from the first arrives: served from the kept runs."""
    log = _open(tmp_path, segment_bytes=1 << 22)
    log.append_records([(None, b"before", (), 1_700_000_000_000)])
    log.commit()
    tail = TailReads()
    starts = []
    for i in range(5):
        batch = build_batch([(None, os.urandom(1000), (), 1_700_000_000_001 + i) for _ in range(16)],
                            base_offset=0)
        starts.append(_append_run(tail, log, [memoryview(bytearray(batch))])[0].first_offset)
    assert 5 * 16 * 1000 > KEPT_BYTES
    expected = {s: _direct(log, s, 1 << 20, "log_end", True) for s in starts}
    monkeypatch.setattr(log, "read_nowait", lambda *a, **k: pytest.fail("read the log"))
    for s in starts:
        assert _through(tail, log, s, 1 << 20, "log_end", True) == expected[s]
    assert tail.served == 5
    monkeypatch.undo()
    # Past KEPT_RUNS_BYTES the oldest runs are dropped: a follower that far behind reads the log.
    for i in range(KEPT_RUNS_BYTES // (16 * 1000) + 1):
        batch = build_batch([(None, os.urandom(1000), (), 1_700_000_000_010 + i) for _ in range(16)],
                            base_offset=0)
        _append_run(tail, log, [memoryview(bytearray(batch))])
    assert _through(tail, log, starts[0], 1 << 22, "log_end", True) == _direct(log, starts[0], 1 << 22, "log_end", True)
    assert tail.served == 5


def test_a_produced_run_cut_and_written_again_to_the_same_end_is_not_served(tmp_path):
    log = _open(tmp_path, segment_bytes=1 << 20)
    log.append_records([(None, b"before", (), 1_700_000_000_000)])
    log.commit()
    tail = TailReads()
    results = _append_run(tail, log, [memoryview(bytearray(build_batch([(None, b"old", (), 1_700_000_000_001)],
                                                                        base_offset=0)))])
    start = results[0].first_offset
    log.truncate_to(start, below_high_watermark=True)       # as a deposed leader's log is cut
    log.append_records([(None, b"new", (), 1_700_000_000_002)])
    assert log.log_end_offset == results[-1].last_offset + 1
    got = _through(tail, log, start, 1 << 20, "log_end", True)
    assert b"new" in got[0] and tail.served == 0


def test_a_read_at_the_bound_is_answered_on_the_loop_as_the_log_answers_it(tmp_path):
    """A parked fetch's first read is at its bound (a follower at the LEO, a consumer at the
    HW): answered empty with the log's HW, LSO and log start offset, also when the HW lies
    before the active segment (a read there would otherwise go to a thread)."""
    log = _open(tmp_path, segment_bytes=4096)
    for step in range(12):
        log.append_records([(None, os.urandom(1000), (), 1_700_000_000_000 + step)])
    log.maybe_increment_high_watermark(3)
    assert len(log.bases) > 2 and log.high_watermark < log.bases[-1]
    _background_flushes_done()
    tail = TailReads()
    for offset, isolation in ((log.log_end_offset, "log_end"), (3, "read_uncommitted"), (3, "read_committed")):
        got = _through(tail, log, offset, 1 << 20, isolation, True)
        assert got == _direct(log, offset, 1 << 20, isolation, True) and got[0] == b"", (offset, isolation)
    assert log.read_nowait(3, 1 << 20, isolation="read_uncommitted") is None    # the log's own: a thread
