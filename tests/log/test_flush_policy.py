"""Durability on local disk: flush.messages / flush.ms, commit(), the root checkpoints that commit
writes, and the clean-shutdown marker."""
from __future__ import annotations

import os
import time

import pytest

from logcore.log.checkpoint import OffsetCheckpoint
from logcore.log.log_loader import CLEAN_SHUTDOWN
from logcore.log.log_root import LogRoot
from logcore.log.partition_state import HW_CHECKPOINT, HW_FILE, RECOVERY_POINT_CHECKPOINT
from logcore.records.batch import iter_batches

T0 = 1_700_000_000_000


class SyncCounter:
    """Counts fsync/fdatasync calls on one file (by inode), passing them through."""

    def __init__(self, monkeypatch):
        self.inodes: list[int] = []
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)

            def counted(fd, _real=real):
                self.inodes.append(os.fstat(fd).st_ino)
                return _real(fd)

            monkeypatch.setattr(os, name, counted)

    def on(self, path) -> int:
        inode = os.stat(path).st_ino
        return sum(1 for i in self.inodes if i == inode)


def active_log_file(log) -> str:
    return log.storage.local_path(log.segments[-1].log_path)


def append_one(log, i: int) -> None:
    log.append_records([(b"k%d" % i, b"v%d" % i, (), T0 + i)])


@pytest.mark.parametrize("config", [{"flush.messages": "1"}, {"flush.ms": "0"}])
def test_every_append_fsyncs(root, monkeypatch, config):
    root.create_topic("t", config=config)
    log = root.log("t", 0, writer=True)
    syncs = SyncCounter(monkeypatch)
    path = active_log_file(log)
    for i in range(5):
        before = syncs.on(path)
        append_one(log, i)
        assert syncs.on(path) == before + 1
        assert log.recovery_point == log.log_end_offset == i + 1
    # Durable is not visible: the HW moves only at commit.
    assert log.high_watermark == 0
    log.commit()
    assert log.high_watermark == 5


def test_flush_messages_counts_records(root, monkeypatch):
    root.create_topic("t", config={"flush.messages": "3"})
    log = root.log("t", 0, writer=True)
    syncs = SyncCounter(monkeypatch)
    path = active_log_file(log)
    points = []
    for i in range(7):
        append_one(log, i)
        points.append((syncs.on(path), log.recovery_point))
    # fsync once 3 records are unflushed: after the 3rd and the 6th append.
    assert points == [(0, 0), (0, 0), (1, 3), (1, 3), (1, 3), (2, 6), (2, 6)]
    # A batch of many records counts them all.
    log.append_records([(b"k", b"v", (), T0)] * 4)
    assert (syncs.on(path), log.recovery_point) == (3, 11)


def test_defaults_do_not_fsync_until_commit(root, monkeypatch):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    syncs = SyncCounter(monkeypatch)
    path = active_log_file(log)
    for i in range(20):
        append_one(log, i)
    assert syncs.on(path) == 0
    assert log.recovery_point == 0
    rp = OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT)
    assert rp.read().get(("t", 0), 0) == 0
    log.commit()
    assert syncs.on(path) >= 1
    assert log.recovery_point == log.high_watermark == 20
    assert rp.read()[("t", 0)] == 20


def test_commit_writes_kafka_format_root_checkpoints(root, tmp_path):
    root.create_topic("t", partitions=2)
    root.create_topic("a")
    hw = OffsetCheckpoint(root.storage, HW_CHECKPOINT)
    rp = OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT)
    t1 = root.log("t", 1, writer=True)
    for i in range(3):
        append_one(t1, i)
    t1.commit()
    assert hw.read() == {("t", 1): 3}
    assert rp.read() == {("t", 1): 3}
    a0 = root.log("a", 0, writer=True)
    for i in range(5):
        append_one(a0, i)
    # Appended, not committed: the checkpoints do not move.
    assert hw.read() == {("t", 1): 3}
    a0.commit()
    append_one(t1, 3)
    t1.commit()
    assert hw.read() == {("a", 0): 5, ("t", 1): 4}
    assert rp.read() == {("a", 0): 5, ("t", 1): 4}
    # Kafka's text format: version 0, the entry count, then `topic partition offset` lines.
    for name in (HW_CHECKPOINT, RECOVERY_POINT_CHECKPOINT):
        text = (tmp_path / "root" / name).read_text()
        assert text == "0\n2\na 0 5\nt 1 4\n"
    # Another process sees the committed HW from the checkpoint.
    reader = LogRoot.open(str(tmp_path / "root")).log("t", 1)
    assert reader.high_watermark == 4
    assert [r.offset for r in reader.read_records(0)] == [0, 1, 2, 3]


def test_flush_moves_the_recovery_point_but_not_the_high_watermark(root):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    for i in range(4):
        append_one(log, i)
    log.flush()
    assert log.recovery_point == 4 and log.high_watermark == 0
    assert OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 4}
    assert OffsetCheckpoint(root.storage, HW_CHECKPOINT).read().get(("t", 0), 0) == 0


def test_clean_close_writes_the_marker_and_the_next_writer_removes_it(root, tmp_path):
    root.create_topic("t")
    marker = tmp_path / "root" / "t-0" / CLEAN_SHUTDOWN
    log = root.log("t", 0, writer=True)
    assert not marker.exists()
    for i in range(6):
        append_one(log, i)
    log.commit()
    log.close()
    assert marker.read_text() == "6"
    assert OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 6}
    # A reader never writes: the marker stays.
    reader = LogRoot.open(str(tmp_path / "root")).log("t", 0)
    assert reader.log_end_offset == 6
    reader.close()
    assert marker.exists()
    # The next writer trusts the clean shutdown (no recovery) and removes the marker at once, so
    # a crash from now on is seen as unclean.
    writer = LogRoot.open(str(tmp_path / "root")).log("t", 0, writer=True)
    assert not marker.exists()
    assert writer.recovery.truncated == [] and writer.recovery.rebuilt_indexes == []
    assert writer.log_end_offset == writer.high_watermark == 6
    append_one(writer, 6)
    writer.commit()
    writer.close()
    assert marker.read_text() == "7"


def test_unclean_shutdown_recovers_from_the_recovery_point(root, tmp_path):
    """Without the marker, the writer validates the log; a torn tail after the last fsync goes."""
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    for i in range(5):
        append_one(log, i)
    log.commit()
    path = active_log_file(log)
    log.close()
    (tmp_path / "root" / "t-0" / CLEAN_SHUTDOWN).unlink()
    with open(path, "ab") as f:          # half a batch, as if the process died mid-write
        f.write(b"\x00" * 30)
    writer = LogRoot.open(str(tmp_path / "root")).log("t", 0, writer=True)
    assert [t[2] for t in writer.recovery.truncated] == [30]
    assert writer.log_end_offset == 5
    assert [r.value for r in writer.read_records(0)] == [b"v%d" % i for i in range(5)]


# ---------------------------------------------------------------- commit(durable=False)
def hw_checkpoint_file(tmp_path) -> str:
    return str(tmp_path / "root" / HW_CHECKPOINT)


def test_commit_without_fsync_is_visible_and_survives_a_process_crash(root, tmp_path, monkeypatch):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    syncs = SyncCounter(monkeypatch)
    for i in range(5):
        append_one(log, i)
    log.commit(durable=False)
    assert log.high_watermark == 5
    assert syncs.inodes == []                      # no fsync at all: data nor checkpoints
    assert log.recovery_point == 0
    append_one(log, 5)                             # appended, never committed
    # Another process sees the committed HW at once.
    reader = LogRoot.open(str(tmp_path / "root")).log("t", 0)
    assert reader.high_watermark == 5
    reader.close()
    # The process dies (no close): the next writer validates the unflushed tail from the
    # recovery point, keeps what was committed and cuts only the uncommitted record.
    writer = LogRoot.open(str(tmp_path / "root")).log("t", 0, writer=True)
    assert writer.log_end_offset == writer.high_watermark == 5
    assert [r.value for r in writer.read_records(0)] == [b"v%d" % i for i in range(5)]


def test_a_commit_marker_needs_a_durable_commit(root):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    append_one(log, 0)
    with pytest.raises(ValueError, match="durable"):
        log.commit({"batch": 1}, durable=False)
    assert log.high_watermark == 0


def test_close_makes_commits_without_fsync_durable(root, tmp_path, monkeypatch):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    for i in range(4):
        append_one(log, i)
        log.commit(durable=False)
    syncs = SyncCounter(monkeypatch)
    data = active_log_file(log)
    log.close()
    assert syncs.on(data) >= 1
    assert syncs.on(hw_checkpoint_file(tmp_path)) >= 1
    assert OffsetCheckpoint(root.storage, HW_CHECKPOINT).read() == {("t", 0): 4}
    assert OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 4}
    assert (tmp_path / "root" / "t-0" / CLEAN_SHUTDOWN).read_text() == "4"


def test_a_flush_by_policy_makes_the_commit_durable(root, tmp_path, monkeypatch):
    """flush.messages=1: the data is fsynced at the append and the commit that follows writes
    the checkpoints durably, so every acknowledged batch of such a topic is on disk."""
    root.create_topic("t", config={"flush.messages": "1"})
    log = root.log("t", 0, writer=True)
    syncs = SyncCounter(monkeypatch)
    for i in range(3):
        append_one(log, i)
        log.commit(durable=False)
        assert syncs.on(active_log_file(log)) == i + 1
        assert syncs.on(hw_checkpoint_file(tmp_path)) >= 1      # the file this commit wrote
        assert OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): i + 1}


def test_a_roll_moves_the_recovery_point(root):
    root.create_topic("t", config={"segment.bytes": "300"})
    log = root.log("t", 0, writer=True)
    for i in range(12):
        log.append_records([(b"k", b"x" * 100, (), T0 + i)])
    assert len(log.segments) > 2
    # Each roll has the segment it sealed fsynced in the background: once that is done, the
    # recovery point is the active segment's base.
    deadline = time.monotonic() + 10
    while log.recovery_point != log.segments[-1].base_offset and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.recovery_point == log.segments[-1].base_offset
    log.commit(durable=False)
    assert OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): log.recovery_point}


def test_a_torn_high_watermark_file_falls_back_to_the_root_checkpoint(root, tmp_path):
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    for i in range(3):
        append_one(log, i)
    log.commit()
    for i in range(3, 5):
        append_one(log, i)
    log.commit(durable=False)
    hw_file = tmp_path / "root" / "t-0" / HW_FILE
    reader = LogRoot.open(str(tmp_path / "root")).log("t", 0)
    assert reader.high_watermark == 5
    reader.close()
    hw_file.write_bytes(hw_file.read_bytes()[:8] + b"\xff" * 8)   # a power cut's torn write
    reader = LogRoot.open(str(tmp_path / "root")).log("t", 0)
    assert reader.high_watermark == 3
    reader.close()


def test_a_stored_high_watermark_above_the_log_end_comes_down(root, tmp_path):
    """After a power cut took committed but unflushed data, the stored HW must not cover
    offsets that a later writer appends and never commits."""
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    for i in range(6):
        append_one(log, i)
    log.commit(durable=False)
    path = active_log_file(log)
    ends = [pos + h.size for pos, h in iter_batches(open(path, "rb").read())]
    # The process dies (no close: nothing was fsynced, the recovery point stays below).
    os.truncate(path, ends[2])                   # only 3 batches reached the disk
    writer = LogRoot.open(str(tmp_path / "root")).log("t", 0, writer=True)
    assert writer.log_end_offset == writer.high_watermark == 3
    append_one(writer, 3)                        # appended, never committed; the process dies
    again = LogRoot.open(str(tmp_path / "root")).log("t", 0, writer=True)
    assert again.log_end_offset == again.high_watermark == 3
