"""A rolled segment is fsynced in the background (logcore.log.segment_flusher): the recovery
point passes it only once that fdatasync returned, a failed one is retried by the next flush,
a crash before it loses nothing committed, and a truncation meanwhile is not undone."""
from __future__ import annotations

import errno
import threading
import time

import pytest

from logcore.log import segment_flusher
from logcore.log.checkpoint import OffsetCheckpoint
from logcore.log.partition_state import RECOVERY_POINT_CHECKPOINT

pytestmark = pytest.mark.parametrize("root_target", ["local"], indirect=True)
T0 = 1_700_000_000_000
CONFIG = {"segment.bytes": "1000"}


class HeldSync:
    """Wraps the real fdatasync of the background flusher: the flusher's calls wait until
    `release`, or fail with EIO while `failing`; calls from other threads pass through."""

    def __init__(self, real):
        self.real = real
        self.gate = threading.Event()
        self.failing = False
        self.calls = 0

    def __call__(self, fd: int) -> None:
        if threading.current_thread().name == "segment-flusher":
            self.calls += 1
            if self.failing:
                raise OSError(errno.EIO, "injected I/O error")
            self.gate.wait(10)
        self.real(fd)


@pytest.fixture
def held(monkeypatch):
    sync = HeldSync(segment_flusher._fdatasync)
    monkeypatch.setattr(segment_flusher, "_fdatasync", sync)
    yield sync
    sync.gate.set()


def _rolled_log(open_root, records: int = 12):
    root = open_root()
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    for i in range(records):
        log.append_records([(b"k", b"v" * 100, (), T0 + i)])
    log.commit(durable=False)
    assert len(log.segments) > 2
    return root, log


def _wait_for(predicate, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_recovery_point_waits_for_the_background_fsync(open_root, held):
    root, log = _rolled_log(open_root)
    sealed_end = log.segments[-1].base_offset
    # The rolls returned without fsyncing; nothing moved the recovery point yet.
    assert log.recovery_point == 0
    assert _wait_for(lambda: held.calls >= 1)
    time.sleep(0.05)
    assert log.recovery_point == 0
    held.gate.set()
    assert _wait_for(lambda: log.recovery_point == sealed_end)
    log.commit(durable=False)
    assert OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read()[("t", 0)] == sealed_end
    log.close()


def test_a_failed_background_fsync_is_retried_by_the_next_flush(open_root, held):
    held.failing = True
    root, log = _rolled_log(open_root)
    assert _wait_for(lambda: held.calls >= len(log.segments) - 1)
    time.sleep(0.05)
    assert log.recovery_point == 0                  # nothing synced: nothing counted as durable
    log.flush()                                     # syncs the pending segments itself
    assert log.recovery_point == log.log_end_offset
    assert OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read()[("t", 0)] == log.log_end_offset
    log.close()


def test_a_crash_before_the_background_fsync_loses_nothing_committed(open_root, held):
    root, log = _rolled_log(open_root, records=20)
    assert OffsetCheckpoint(root.storage, RECOVERY_POINT_CHECKPOINT).read()[("t", 0)] == 0
    # The writer dies here (never closed, its flushes never ran): the next one recovers every
    # segment from the checkpointed recovery point and keeps every committed record.
    again = open_root(create=False).log("t", 0, writer=True)
    assert again.recovery.truncated == []
    assert [r.offset for r in again.read_records(0)] == list(range(20))
    held.gate.set()
    again.close()


def test_a_truncation_is_not_undone_by_a_late_background_fsync(open_root, held):
    root, log = _rolled_log(open_root)
    assert _wait_for(lambda: held.calls >= 1)
    log.truncate_to(3, below_high_watermark=True)
    held.gate.set()
    time.sleep(0.2)
    assert log.recovery_point <= 3                  # the pending flushes of the cut segments moved nothing
    log.close()
