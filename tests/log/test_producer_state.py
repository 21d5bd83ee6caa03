"""ProducerStateManager: duplicates, sequence and epoch checks (Kafka 6.9), transactions and
the LSO, expiration, snapshot layout / round trip / corruption, truncate_and_reload."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logcore.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from logcore.log.producer_entry import INT32_MAX, BatchMetadata, ProducerStateEntry, increment_sequence
from logcore.log.producer_snapshot import CorruptSnapshotError, decode_snapshot, encode_snapshot, load_latest_snapshot
from logcore.log.producer_state import (
    AppendOrigin,
    ProducerBatch,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
)
from logcore.log.txn_index import AbortedTxn
from logcore.records import build_batch, build_control_batch, parse_header
from logcore.records.control import ControlType, EndTransactionMarker
from logcore.records.crc import crc32c
from logcore.storage import open_storage

PID = 1000


@pytest.fixture(params=["local", "memory"])
def storage(request, storage_targets):
    target = storage_targets.make(request.param)
    return open_storage(target.url, target.storage_options)


@pytest.fixture
def state(storage):
    return ProducerStateManager(storage, "t-0")


class Log:
    """Assigns offsets like a leader and drives the two-step append."""

    def __init__(self, state: ProducerStateManager):
        self.state = state
        self.next_offset = 0
        self.txn_index: list[AbortedTxn] = []

    def data(self, pid, epoch, first_seq, count, *, txn=False, ts=1000,
             origin=AppendOrigin.CLIENT):
        last_seq = increment_sequence(first_seq, count - 1)
        batch = ProducerBatch(pid, epoch, first_seq, last_seq, self.next_offset,
                              self.next_offset + count - 1, ts, txn)
        return self._append(batch, origin)

    def marker(self, pid, epoch, control_type, *, coordinator_epoch=0, ts=2000,
               origin=AppendOrigin.COORDINATOR):
        batch = ProducerBatch(pid, epoch, -1, -1, self.next_offset, self.next_offset, ts, True,
                              True, EndTransactionMarker(control_type, coordinator_epoch))
        return self._append(batch, origin)

    def _append(self, batch, origin):
        analysis = self.state.analyze([batch], origin)
        if analysis.duplicate is not None:
            return analysis.duplicate
        self.next_offset = batch.last_offset + 1
        aborted = self.state.complete_append(analysis, self.next_offset)
        self.txn_index.extend(aborted)
        return batch


def test_in_sequence_appends_and_duplicates(state):
    log = Log(state)
    log.data(PID, 0, 0, 5)
    log.data(PID, 0, 5, 3)
    dup = log.data(PID, 0, 0, 5)
    assert (dup.first_offset, dup.last_offset, dup.timestamp) == (0, 4, 1000)
    assert log.next_offset == 8   # nothing appended
    dup = log.data(PID, 0, 5, 3)
    assert (dup.first_offset, dup.last_offset) == (5, 7)
    assert state.last_entry(PID).last_seq == 7


def test_only_the_last_five_batches_are_deduplicated(state):
    log = Log(state)
    for i in range(6):
        log.data(PID, 0, i, 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.data(PID, 0, 0, 1)     # evicted: looks like a sequence gap, not a duplicate
    assert log.data(PID, 0, 1, 1).first_offset == 1


def test_out_of_order_sequence(state):
    log = Log(state)
    log.data(PID, 0, 0, 2)
    with pytest.raises(OutOfOrderSequenceError, match="3 \\(incoming seq. number\\), 1"):
        log.data(PID, 0, 3, 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.data(PID, 0, 1, 2)     # overlapping, not an exact duplicate
    assert log.next_offset == 2


def test_unknown_producer_may_start_at_any_sequence(state):
    log = Log(state)
    log.data(PID, 3, 42, 2)
    assert state.last_entry(PID).last_seq == 43


def test_fenced_epoch(state):
    log = Log(state)
    log.data(PID, 5, 0, 1)
    with pytest.raises(InvalidProducerEpochError, match="older than the last seen epoch 5"):
        log.data(PID, 4, 1, 1)


def test_new_epoch_must_restart_at_zero(state):
    log = Log(state)
    log.data(PID, 0, 0, 3)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        log.data(PID, 1, 3, 1)
    log.data(PID, 1, 0, 1)
    entry = state.last_entry(PID)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1   # old epoch's batches dropped


def test_replication_skips_sequence_checks_and_warns_on_old_epochs(state):
    log = Log(state)
    log.data(PID, 2, 0, 1)
    log.data(PID, 2, 50, 1, origin=AppendOrigin.REPLICATION)
    log.data(PID, 1, 0, 1, origin=AppendOrigin.REPLICATION)
    assert log.next_offset == 3


def test_sequence_wraps_after_int_max(state):
    log = Log(state)
    log.data(PID, 0, INT32_MAX - 2, 3)
    assert state.last_entry(PID).last_seq == INT32_MAX
    log.data(PID, 0, 0, 2)
    # a batch spanning the wrap: first seq INT_MAX - 1, last seq 1
    state2 = ProducerStateManager(state.storage, "t-1")
    log2 = Log(state2)
    log2.data(PID, 0, INT32_MAX - 1, 4)
    assert state2.last_entry(PID).last_seq == 1
    assert state2.last_entry(PID).batches[-1].first_seq == INT32_MAX - 1
    dup = log2.data(PID, 0, INT32_MAX - 1, 4)
    assert (dup.first_offset, dup.last_offset) == (0, 3)
    log2.data(PID, 0, 2, 1)


def test_header_from_a_real_batch(state):
    raw = build_batch([(b"k", b"v", (), 1000)] * 3, base_offset=7, producer_id=PID,
                      producer_epoch=2, base_sequence=INT32_MAX - 1, is_transactional=True)
    batch = ProducerBatch.from_header(parse_header(raw))
    assert (batch.first_offset, batch.last_offset, batch.base_sequence, batch.last_sequence) == (
        7, 9, INT32_MAX - 1, 0)
    assert batch.is_transactional and not batch.is_control
    marker = parse_header(build_control_batch(ControlType.COMMIT, producer_id=PID,
                                              producer_epoch=2, base_offset=10, timestamp_ms=5))
    assert ProducerBatch.from_header(marker).is_control


def test_transactions_lso_and_aborted_index(state):
    log = Log(state)
    log.data(1, 0, 0, 2, txn=True)          # offsets 0-1, txn of producer 1 opens at 0
    log.data(2, 0, 0, 1, txn=True)          # offset 2, txn of producer 2 opens at 2
    assert state.first_unstable_offset == 0
    log.marker(1, 0, ControlType.ABORT)     # offset 3
    # producer 2's open txn holds the LSO: the abort records LSO 2
    assert log.txn_index == [AbortedTxn(1, 0, 3, 2)]
    assert state.first_unstable_offset == 0          # completed, but not yet below the HW
    state.on_high_watermark_updated(4)
    assert state.first_unstable_offset == 2
    log.marker(2, 0, ControlType.COMMIT)    # offset 4: committed, no txn index entry
    assert log.txn_index == [AbortedTxn(1, 0, 3, 2)]
    state.on_high_watermark_updated(5)
    assert state.first_unstable_offset is None
    log.data(1, 0, 2, 1, txn=True)          # offset 5
    log.marker(1, 0, ControlType.ABORT)     # offset 6, no other open txn: LSO = 7
    assert log.txn_index[-1] == AbortedTxn(1, 5, 6, 7)


def test_empty_transaction_marker_completes_nothing(state):
    log = Log(state)
    log.marker(PID, 0, ControlType.ABORT)
    assert log.txn_index == [] and state.first_unstable_offset is None


def test_non_transactional_write_during_open_txn(state):
    log = Log(state)
    log.data(PID, 0, 0, 1, txn=True)
    with pytest.raises(InvalidTxnStateError, match="transaction started at offset 0"):
        log.data(PID, 0, 1, 1, txn=False)


def test_zombie_coordinator_is_fenced(state):
    log = Log(state)
    log.data(PID, 0, 0, 1, txn=True)
    log.marker(PID, 0, ControlType.COMMIT, coordinator_epoch=5)
    log.data(PID, 0, 1, 1, txn=True)
    with pytest.raises(TransactionCoordinatorFencedError, match="4 \\(zombie\\), 5 \\(current\\)"):
        log.marker(PID, 0, ControlType.COMMIT, coordinator_epoch=4)


def test_failed_analysis_changes_nothing(state):
    log = Log(state)
    log.data(PID, 0, 0, 1)
    good = ProducerBatch(PID, 0, 1, 1, 1, 1, 1000)
    bad = ProducerBatch(PID, 0, 5, 5, 2, 2, 1000)
    with pytest.raises(OutOfOrderSequenceError):
        state.analyze([good, bad])
    assert state.last_entry(PID).last_seq == 0 and state.map_end_offset == 1


def test_several_batches_of_one_producer_in_one_append(state):
    a = ProducerBatch(PID, 0, 0, 1, 0, 1, 1000)
    b = ProducerBatch(PID, 0, 2, 4, 2, 4, 1001)
    analysis = state.analyze([a, b])
    state.complete_append(analysis, 5)
    assert [m.last_seq for m in state.last_entry(PID).batches] == [1, 4]


def test_remove_expired(state):
    log = Log(state)
    log.data(1, 0, 0, 1, ts=1000)
    log.data(2, 0, 0, 1, ts=1000, txn=True)   # an open transaction never expires
    log.data(3, 0, 0, 1, ts=5000)
    assert state.remove_expired(now_ms=6000, expiration_ms=4000) == [1]
    assert sorted(state.producers) == [2, 3]


def test_snapshot_bytes_against_hand_built_layout():
    entry = ProducerStateEntry(PID, 3, 7, 1234, 40)
    entry.batches.append(BatchMetadata(last_seq=9, last_offset=55, offset_delta=4, timestamp=1234))
    empty = ProducerStateEntry(5, 1, -1, 99, None)
    data = encode_snapshot([entry, empty])
    body = struct.pack(">i", 2) + struct.pack(">qhiqiqiq", 5, 1, -1, -1, 0, 99, -1, -1) + \
        struct.pack(">qhiqiqiq", PID, 3, 9, 55, 4, 1234, 7, 40)
    assert data == struct.pack(">hI", 1, crc32c(body)) + body
    decoded = {e.producer_id: e for e in decode_snapshot(data)}
    assert decoded[PID] == entry
    assert decoded[5].is_empty and decoded[5].last_timestamp == 99


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 32767),
                          st.integers(0, INT32_MAX), st.integers(0, 2**40), st.integers(0, 1000),
                          st.integers(-1, 2**41), st.integers(-1, 1000),
                          st.one_of(st.none(), st.integers(0, 2**40))),
                unique_by=lambda t: t[0], max_size=20))
def test_snapshot_round_trip(rows):
    entries = []
    for pid, epoch, seq, offset, delta, ts, coord, txn in rows:
        entry = ProducerStateEntry(pid, epoch, coord, ts, txn)
        entry.batches.append(BatchMetadata(seq, offset, delta, ts))
        entries.append(entry)
    assert decode_snapshot(encode_snapshot(entries)) == sorted(entries, key=lambda e: e.producer_id)


def test_snapshot_corruption_is_detected():
    data = bytearray(encode_snapshot([ProducerStateEntry(1, 0, 0, 10)]))
    flipped = bytes(data[:20]) + bytes([data[20] ^ 1]) + bytes(data[21:])
    with pytest.raises(CorruptSnapshotError, match="CRC") as info:
        decode_snapshot(flipped, source="t-0/00000000000000000010.snapshot")
    assert info.value.file == "t-0/00000000000000000010.snapshot"
    with pytest.raises(CorruptSnapshotError, match="version 2"):
        decode_snapshot(struct.pack(">h", 2) + bytes(data[2:]))
    with pytest.raises(CorruptSnapshotError, match="shorter"):
        decode_snapshot(bytes(data[:5]))
    truncated = bytes(data[:-4])
    truncated = struct.pack(">hI", 1, crc32c(truncated[6:])) + truncated[6:]
    with pytest.raises(CorruptSnapshotError, match="declares 1 entries"):
        decode_snapshot(truncated)


def test_snapshot_files_and_truncate_and_reload(state, storage):
    log = Log(state)
    log.data(1, 0, 0, 3)                      # 0-2
    state.take_snapshot()                     # 3.snapshot
    log.data(2, 0, 0, 2, txn=True)            # 3-4, open txn
    assert state.take_snapshot() == 5
    assert state.take_snapshot() is None      # nothing new
    log.data(1, 0, 3, 1)                      # 5
    state.write_snapshot()                    # 6.snapshot
    assert state.snapshot_offsets() == [3, 5, 6]
    assert "00000000000000000005.snapshot" in storage.list_dir("t-0")

    fresh = ProducerStateManager(storage, "t-0")
    fresh.truncate_and_reload(0, 5, now_ms=2000)     # log truncated to 5
    assert fresh.snapshot_offsets() == [3, 5]
    assert fresh.map_end_offset == 5
    assert fresh.last_entry(1).last_seq == 2
    assert fresh.ongoing_transactions == {3: 2} and fresh.first_unstable_offset == 3
    # the caller replays the log from map_end_offset; then duplicates are found again
    analysis = fresh.analyze([ProducerBatch(1, 0, 0, 2, 99, 101, 1000)])
    assert analysis.duplicate is not None and analysis.duplicate.last_offset == 2

    fresh.truncate_and_reload(3, 5, now_ms=2000)     # log start moved to 3: 3.snapshot goes
    assert fresh.snapshot_offsets() == [5]
    fresh.truncate_fully_and_start_at(100)
    assert fresh.snapshot_offsets() == [] and fresh.map_end_offset == 100 and not fresh.producers


def test_reload_skips_and_deletes_a_corrupt_latest_snapshot(state, storage):
    log = Log(state)
    log.data(1, 0, 0, 2)
    state.write_snapshot()                    # 2.snapshot, good
    log.data(1, 0, 2, 2)
    path = state.write_snapshot()             # 4.snapshot, corrupted below
    data = bytearray(storage.read(path))
    data[-1] ^= 0xFF
    storage.write_atomic(path, bytes(data))
    fresh = ProducerStateManager(storage, "t-0")
    fresh.truncate_and_reload(0, 4, now_ms=1000)
    assert fresh.map_end_offset == 2 and fresh.last_entry(1).last_seq == 1
    assert fresh.snapshot_offsets() == [2]


def test_reload_on_read_only_storage_deletes_nothing(tmp_path):
    writable = open_storage(str(tmp_path))
    state = ProducerStateManager(writable, "t-0")
    log = Log(state)
    log.data(1, 0, 0, 2)
    state.write_snapshot()
    log.data(1, 0, 2, 2)
    bad = state.write_snapshot()
    writable.write_atomic(bad, b"\x00\x01garbage")
    reader = open_storage(str(tmp_path), read_only=True)
    assert load_latest_snapshot(reader, "t-0", upto_offset=10) is not None
    fresh = ProducerStateManager(reader, "t-0")
    fresh.truncate_and_reload(0, 4, now_ms=1000)
    assert fresh.map_end_offset == 2
    assert state.snapshot_offsets() == [2, 4]      # the corrupt one is still there
    assert fresh.take_snapshot() is None


def test_reload_drops_expired_producers(state, storage):
    log = Log(state)
    log.data(1, 0, 0, 1, ts=1000)
    log.data(2, 0, 0, 1, ts=90_000_000)
    state.write_snapshot()
    fresh = ProducerStateManager(storage, "t-0")
    fresh.truncate_and_reload(0, 2, now_ms=1000 + 86_400_000)
    assert sorted(fresh.producers) == [2]


def test_replay_rebuilds_aborted_transactions(state):
    batches = [ProducerBatch(9, 0, 0, 1, 0, 1, 10, True),
               ProducerBatch(9, 0, -1, -1, 2, 2, 11, True, True,
                             EndTransactionMarker(ControlType.ABORT, 0))]
    aborted = [a for b in batches for a in state.replay(b)]
    assert aborted == [AbortedTxn(9, 0, 2, 3)]
    assert state.map_end_offset == 3


# The managers are made per example and write nothing to the storage: sharing it is safe.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-2, 3), st.integers(1, 4), st.booleans()),
                min_size=1, max_size=25))
def test_next_batch_shortcut_matches_analyze(storage, steps):
    """is_next_batch/append_next_batch (the log's shortcut for an in-sequence batch, plain or
    inside its producer's open transaction) leaves the same state as analyze + complete_append,
    and accepts only batches that analyze accepts without finding a duplicate nor starting a
    transaction."""
    plain, fast = ProducerStateManager(storage, "p-0"), ProducerStateManager(storage, "f-0")
    offset, next_seq = 0, {}
    for epoch, seq_shift, count, txn in steps:
        first_seq = max(0, next_seq.get(epoch, 0) + seq_shift)
        last_seq = increment_sequence(first_seq, count - 1)
        batch = ProducerBatch(PID, epoch, first_seq, last_seq, offset, offset + count - 1, 1000 + offset, txn)
        try:
            analysis = plain.analyze([batch])
        except Exception as exc:  # noqa: BLE001 - the shortcut must not accept what analyze refuses
            assert not fast.is_next_batch(PID, epoch, first_seq, txn), exc
            continue
        shortcut = fast.is_next_batch(PID, epoch, first_seq, txn)
        if analysis.duplicate is not None:
            assert not shortcut
            continue
        if shortcut:
            assert not next(iter(analysis.updates.values())).started_transactions
        plain.complete_append(analysis, offset + count)
        if shortcut:
            fast.append_next_batch(PID, last_seq, offset, offset + count - 1, 1000 + offset)
        else:
            fast.complete_append(fast.analyze([batch]), offset + count)
        offset += count
        next_seq[epoch] = last_seq + 1
        a, b = plain.last_entry(PID), fast.last_entry(PID)
        assert (a.producer_epoch, a.last_timestamp, a.current_txn_first_offset, list(a.batches)) == \
               (b.producer_epoch, b.last_timestamp, b.current_txn_first_offset, list(b.batches))
        assert plain.map_end_offset == fast.map_end_offset
