"""Durability on local disk: flush.messages / flush.ms, commit(), the root checkpoints that commit
writes, and the clean-shutdown marker."""
from __future__ import annotations

import os

import pytest

from logcore.log.checkpoint import OffsetCheckpoint
from logcore.log.log import CLEAN_SHUTDOWN
from logcore.log.log_root import LogRoot
from logcore.log.partition_state import HW_CHECKPOINT, RECOVERY_POINT_CHECKPOINT

T0 = 1_700_000_000_000


@pytest.fixture
def root(tmp_path):
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    yield root
    root.close()


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
