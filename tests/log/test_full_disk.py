"""Appends and checkpoint writes on a really full filesystem (a small tmpfs filled with a
ballast file): a failed write leaves the log exactly as it was, and once space returns the
log takes writes again and holds everything that was acknowledged."""
from __future__ import annotations

import errno
import os
import subprocess

import pytest

from logcore.log.log_root import LogRoot
from logcore.records.batch import build_batch, iter_batches

_CHUNK = 64 * 1024


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs of its own (root only); unmounted at the end."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


class Ballast:
    """A file that takes all the free space of its filesystem but `leave` bytes."""

    def __init__(self, path, leave: int = 0):
        self.path = str(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        size = 0
        try:
            while True:
                try:
                    size += os.write(fd, b"\0" * _CHUNK)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
            if leave:
                os.ftruncate(fd, size - leave)
                size -= leave
        finally:
            os.close(fd)
        self.size = size

    def remove(self) -> None:
        os.unlink(self.path)


def _root(path, **config):
    root = LogRoot.open(str(path), create=True)
    if "t" not in root.list_topics():
        root.create_topic("t", config={k.replace("_", "."): str(v) for k, v in config.items()})
    return root


def _offsets(root):
    log = root.log("t", 0)
    found, offset = [], 0
    while offset < log.log_end_offset:      # a read returns batches of one segment
        data = log.read(offset, 1 << 22, isolation="log_end").data
        data = data.read() if hasattr(data, "read") else bytes(data)
        found += [(h.base_offset, h.last_offset) for _p, h in iter_batches(data)]
        offset = found[-1][1] + 1
    return found


def _enospc(call, *args, **kwargs):
    with pytest.raises(OSError) as caught:
        call(*args, **kwargs)
    assert caught.value.errno == errno.ENOSPC or isinstance(caught.value.__cause__, OSError), caught.value


def test_a_batch_cut_short_by_a_full_disk_leaves_no_partial_bytes(small_fs):
    root = _root(small_fs / "root", segment_bytes=1_000_000)
    log = root.log("t", 0, writer=True)
    for i in range(10):
        log.append_records([(b"k", b"v%d" % i, (), None)])
    log.commit()
    seg = log.segments[-1]
    size, leo = seg.size(), log.log_end_offset
    ballast = Ballast(small_fs / "ballast", leave=3 * 4096)   # the batch is written in part
    _enospc(log.append_records, [(b"k", os.urandom(60_000), (), None)])
    assert log.log_end_offset == leo and seg.size() == size
    assert os.path.getsize(seg.log_path if os.path.isabs(seg.log_path)
                           else small_fs / "root" / seg.log_path) == size    # cut back on disk too
    small = log.append_records([(b"k", b"small", (), None)])           # fits in what is left
    assert small.first_offset == leo
    ballast.remove()
    big = log.append_records([(b"k", os.urandom(60_000), (), None)])
    assert big.first_offset == leo + 1
    log.commit()
    root.close()

    root = _root(small_fs / "root")
    assert _offsets(root) == [(i, i) for i in range(leo + 2)]
    root.close()


def test_an_index_entry_that_finds_no_space_takes_its_batch_back_out(small_fs):
    root = _root(small_fs / "root", segment_bytes=1_000_000, index_interval_bytes=4096)
    log = root.log("t", 0, writer=True)
    while log.segments[-1].size() <= 4096:          # the next batch is due an index entry
        log.append_records([(b"k", b"v", (), None)])
    log.commit()
    seg, leo = log.segments[-1], log.log_end_offset
    size = seg.size()
    assert seg.offset_index.entries == 0 and size % 4096 < 3000
    ballast = Ballast(small_fs / "ballast")          # the .log's last page has room; the index none
    _enospc(log.append_records, [(b"k", b"v", (), None)])
    assert seg.size() == size and log.log_end_offset == leo and seg.offset_index.entries == 0
    ballast.remove()
    info = log.append_records([(b"k", b"v", (), None)])
    assert info.first_offset == leo and seg.offset_index.entries == 1
    assert seg.offset_index.last_entry == (leo, size)
    log.commit()
    root.close()
    root = _root(small_fs / "root")
    assert [b for b, _ in _offsets(root)] == list(range(leo + 1))
    root.close()


def test_a_roll_and_a_new_epoch_on_a_full_disk(small_fs):
    root = _root(small_fs / "root", segment_bytes=4000)
    log = root.log("t", 0, writer=True, replica=True)
    log.become_leader(1)
    while len(log.segments) < 2:
        log.append_records([(b"k", b"x" * 200, (), None)])
    log.maybe_increment_high_watermark(log.log_end_offset)
    log.checkpoint_high_watermark()
    epochs = log.epoch_cache.entries
    hw_file = small_fs / "root" / "replication-offset-checkpoint"
    hw_before = hw_file.read_bytes()
    log.append_records([(b"k", b"z", (), None)])       # above the HW: the HW has somewhere to go
    ballast = Ballast(small_fs / "ballast")
    # A new leader epoch: its checkpoint cannot be written, so neither is the batch.
    log.become_leader(2)
    leo = log.log_end_offset
    _enospc(log.append_records, [(b"k", b"y", (), None)])
    assert log.log_end_offset == leo and log.epoch_cache.entries == epochs
    # The HW checkpoint is replaced whole or not at all, and leaves no temp file behind.
    assert log.maybe_increment_high_watermark(leo)
    _enospc(log.checkpoint_high_watermark)
    assert hw_file.read_bytes() == hw_before
    assert not [n for n in os.listdir(small_fs / "root") if "tmp" in n]
    ballast.remove()
    while len(log.segments) < 4:        # rolls again, now with space
        log.append_records([(b"k", b"x" * 200, (), None)])
    assert log.epoch_cache.entries == epochs + [(2, leo)]
    log.maybe_increment_high_watermark(log.log_end_offset)
    log.checkpoint_high_watermark()
    end = log.log_end_offset
    root.close()
    root = _root(small_fs / "root")
    assert [b for b, _ in _offsets(root)] == list(range(end))
    root.close()


def test_a_follower_append_on_a_full_disk_is_retried_from_the_same_offset(small_fs):
    root = _root(small_fs / "root", segment_bytes=1_000_000)
    log = root.log("t", 0, writer=True, replica=True)
    log.become_follower(1)
    batches = [build_batch([(b"k", os.urandom(3000), (), None)], base_offset=i, partition_leader_epoch=1)
               for i in range(40)]
    log.append_as_follower(batches[:5], follower_at=1)
    ballast = Ballast(small_fs / "ballast", leave=8192)
    with pytest.raises(OSError):
        log.append_as_follower(batches[5:], follower_at=1)     # some fit, then the disk is full
    leo = log.log_end_offset
    assert 5 <= leo < 40
    assert log.segments[-1].size() == sum(len(b) for b in batches[:leo])
    ballast.remove()
    log.append_as_follower(batches[leo:], follower_at=1)
    assert log.log_end_offset == 40
    log.update_high_watermark(40, follower_at=1)
    log.checkpoint_high_watermark()
    root.close()
    root = _root(small_fs / "root")
    assert [b for b, _ in _offsets(root)] == list(range(40))
    root.close()
