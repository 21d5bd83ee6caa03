"""Log.append_and_commit_nowait: the broker's event-loop append. It does only what needs no fsync,
roll, root checkpoint write or lock wait, and leaves the rest (unchanged) to the blocking path."""
from __future__ import annotations

import os
import threading

import pytest

from logcore.errors import InvalidRecordError
from logcore.log.log_root import LogRoot
from logcore.records.batch import build_batch, iter_batches

T0 = 1_700_000_000_000


def client_batch(i: int, *, size: int = 10, producer_id: int = -1, sequence: int = -1) -> bytes:
    return build_batch([(b"k%d" % i, b"v" * size, (), T0 + i)], base_offset=0, producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence)


def test_appends_and_commits_without_fsync(root, monkeypatch):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records([(b"a", b"b", (), T0)])
    log.commit()                                  # root checkpoint written: the next one is 5 s away
    syncs = []
    monkeypatch.setattr(os, "fsync", lambda fd: syncs.append(fd))
    results, committed = log.append_and_commit_nowait([client_batch(i) for i in range(3)])
    assert committed and not syncs
    assert [(r.first_offset, r.last_offset) for r in results] == [(1, 1), (2, 2), (3, 3)]
    assert log.high_watermark == log.log_end_offset == 4
    assert [h.base_offset for _, h in iter_batches(log.read(0).data)] == [0, 1, 2, 3]
    # The committed HW survives a crash of the process: a new writer keeps it.
    log2 = LogRoot.open(root.url).log("t", 0, writer=True)
    assert log2.high_watermark == 4


def test_a_bad_batch_gets_its_own_error(root):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records([(b"a", b"b", (), T0)])
    log.commit()
    corrupt = bytearray(client_batch(1))
    corrupt[-1] ^= 0xFF
    results, committed = log.append_and_commit_nowait([client_batch(0), bytes(corrupt), client_batch(2)])
    assert committed
    assert results[0].first_offset == 1 and results[2].first_offset == 2
    assert isinstance(results[1], Exception) and "CRC" in str(results[1]).upper()


def test_duplicates_of_an_idempotent_producer(root):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.commit()
    batch = client_batch(0, producer_id=7, sequence=0)
    results, committed = log.append_and_commit_nowait([batch, batch])
    assert committed and results[1].duplicate and results[1].first_offset == results[0].first_offset == 0
    results, _ = log.append_and_commit_nowait([client_batch(1, producer_id=7, sequence=5)])
    assert isinstance(results[0], InvalidRecordError)
    assert log.log_end_offset == log.high_watermark == 1


def test_stops_before_a_roll(root):
    root.create_topic("t", config={"segment.bytes": "1000"})
    log = root.log("t", 0, writer=True)
    log.commit()
    batches = [client_batch(i, size=300) for i in range(4)]
    results, committed = log.append_and_commit_nowait(batches)
    assert not committed and 1 <= len(results) < 4
    assert len(log.segments) == 1                 # the roll is left to the blocking path
    assert log.high_watermark == 0                # nothing is committed either
    for batch in batches[len(results):]:
        log.append_batch(batch)
    log.commit(durable=False)
    assert log.high_watermark == 4 and len(log.segments) > 1


def test_stops_before_a_flush(root):
    root.create_topic("t", config={"flush.messages": "3"})
    log = root.log("t", 0, writer=True)
    log.commit()
    results, committed = log.append_and_commit_nowait([client_batch(i) for i in range(5)])
    assert len(results) == 2 and not committed


def test_durable_recovery_point_and_root_write_go_to_the_blocking_path(root):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    # First commit of this writer: its root checkpoint write is due.
    results, committed = log.append_and_commit_nowait([client_batch(0)])
    assert len(results) == 1 and not committed and log.high_watermark == 0
    log.commit(durable=False)                     # writes the root files: not due for 5 s now
    results, committed = log.append_and_commit_nowait([client_batch(1)])
    assert committed and log.high_watermark == 2
    log.flush()                                   # the recovery point moved: written durably next
    results, committed = log.append_and_commit_nowait([client_batch(1)])
    assert len(results) == 1 and not committed and log.high_watermark == 2


def test_a_lock_held_elsewhere_is_not_waited_for(root):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.commit()
    held, release = threading.Event(), threading.Event()

    def hold():
        with log.critical():
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        held.wait(10)
        assert log.append_and_commit_nowait([client_batch(0)]) == ([], False)
        assert log.log_end_offset == 0
    finally:
        release.set()
        t.join()
    assert log.append_and_commit_nowait([client_batch(0)])[1]


def test_object_store_logs_always_take_the_blocking_path(tmp_path):
    root = LogRoot.open("memory://nowait-test", create=True)
    try:
        root.create_topic("t")
        log = root.log("t", 0, writer=True)
        assert log.append_and_commit_nowait([client_batch(0)]) == ([], False)
    finally:
        root.close()


def test_writable_buffers_are_stamped_in_place(root):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records([(b"a", b"b", (), T0)])
    log.commit()
    frame = bytearray(b"head") + bytearray(client_batch(0)) + bytearray(client_batch(1))
    size = len(client_batch(0))
    views = [memoryview(frame)[4:4 + size], memoryview(frame)[4 + size:]]
    results, committed = log.append_and_commit_nowait(views)
    assert committed and [r.first_offset for r in results] == [1, 2]
    stamped = [h.base_offset for _, h in iter_batches(bytes(frame[4:]))]
    assert stamped == [1, 2]                      # the caller's buffer holds what was written
    assert log.read(1).data == bytes(frame[4:])
    # Read-only buffers are copied, never written to.
    original = client_batch(2)
    log.append_and_commit_nowait([memoryview(original)])
    assert original == client_batch(2)


@pytest.mark.parametrize("rows", [3, 40])        # the small-batch loop and the numpy check
def test_wrong_offset_delta_is_rejected(root, rows):
    import struct

    from logcore.records.batch import encode_record
    from logcore.records.crc import crc32c
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.commit()
    good = bytearray(build_batch([(b"k", b"v", (), T0)] * rows, base_offset=0))
    # Re-encode the last record with offset delta rows (not rows - 1): same length, new CRC.
    last = encode_record(rows - 1, 0, b"k", b"v", ())
    wrong = encode_record(rows, 0, b"k", b"v", ())
    assert len(last) == len(wrong) and good.endswith(last)
    bad = good[:-len(last)] + wrong
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    results, _ = log.append_and_commit_nowait([bytes(bad)])
    assert isinstance(results[0], InvalidRecordError)
    assert f"record {rows - 1} has offset delta {rows}, expected {rows - 1}" in str(results[0])
    assert log.log_end_offset == 0


def test_a_changed_topic_config_reaches_the_appends_at_once(root):
    """The append path keeps copies of the timestamp bounds and type: reconfigure refreshes them."""
    from logcore.log.config import LogConfig
    from logcore.records.batch import TimestampType

    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records([(b"a", b"b", (), T0)])
    log.commit()                                  # root checkpoint written: the next one is 5 s away
    results, committed = log.append_and_commit_nowait([client_batch(0)])
    assert committed and results[0].first_offset == 1 and results[0].log_append_time == -1
    log.reconfigure(LogConfig.from_props({"message.timestamp.before.max.ms": "3600000"}))
    results, _ = log.append_and_commit_nowait([client_batch(1)])      # T0 is years old
    assert isinstance(results[0], Exception) and "timestamp" in str(results[0]).lower()
    log.reconfigure(LogConfig.from_props({"message.timestamp.type": "LogAppendTime"}))
    # Stamped now, the batch is years after the segment's first: it rolls, in the blocking path.
    results, committed = log.append_and_commit_nowait([client_batch(2)])
    assert results == [] and not committed
    info = log.append_batch(client_batch(2))
    assert info.first_offset == 2 and info.log_append_time > T0
    log.commit()
    last = [h for _, h in iter_batches(log.read(2).data)][-1]
    assert last.timestamp_type == TimestampType.LOG_APPEND_TIME
