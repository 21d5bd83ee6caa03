"""PartUploads (part_uploads.py): a sink task's parts prepared in order on one thread and PUT on
others while the task goes on; the memory bound; errors; close."""
from __future__ import annotations

import threading

import pytest

from pyspark_seglog.part_uploads import PartUploads

WAIT = 10


def test_groups_are_prepared_in_order_while_earlier_puts_run():
    prepared, put = [], []
    first_put_running = threading.Event()
    second_prepared = threading.Event()

    def prepare(group):
        prepared.append([name for name, _ in group])
        if group[0][0] == "b0":
            second_prepared.set()

    def slow_put(name, data):
        if name == "a0":
            first_put_running.set()
            # the next group is prepared while this PUT is still running
            assert second_prepared.wait(WAIT)
        put.append(name)

    uploads = PartUploads(prepare, slow_put, parallel=2, max_bytes=1 << 20)
    uploads.submit([("a0", b"x" * 10)])
    assert first_put_running.wait(WAIT)
    uploads.submit([("b0", b"y" * 10), ("b1", b"z" * 10)])
    uploads.finish()
    uploads.close()
    assert prepared == [["a0"], ["b0", "b1"]]
    assert sorted(put) == ["a0", "b0", "b1"]


def test_a_groups_puts_run_at_the_same_time():
    both = threading.Barrier(2, timeout=WAIT)
    uploads = PartUploads(None, lambda name, data: both.wait(), parallel=2, max_bytes=1 << 20)
    uploads.submit([("a", b"1"), ("b", b"2")])
    uploads.finish()            # a BrokenBarrierError here: the two PUTs ran one after the other
    uploads.close()


def test_a_hand_over_waits_while_the_bytes_in_flight_exceed_the_bound():
    release = threading.Event()
    uploads = PartUploads(None, lambda name, data: release.wait(WAIT), parallel=4, max_bytes=100)
    uploads.submit([("a", b"x" * 80)])
    returned = threading.Event()

    def second():
        uploads.submit([("b", b"x" * 80)])
        returned.set()
    t = threading.Thread(target=second)
    t.start()
    assert not returned.wait(0.3)       # 160 bytes would be in flight: it waits for "a"
    release.set()
    assert returned.wait(WAIT)
    t.join()
    uploads.finish()
    uploads.close()


def test_the_first_error_reaches_the_task_after_every_put_of_its_group():
    done = []

    def put(name, data):
        if name == "bad":
            raise OSError("refused")
        threading.Event().wait(0.1)
        done.append(name)
    uploads = PartUploads(None, put, parallel=2, max_bytes=1 << 20)
    uploads.submit([("bad", b"1"), ("good", b"2")])
    with pytest.raises(OSError, match="refused"):
        uploads.finish()
    assert done == ["good"]             # not left running behind the error
    uploads.close()


def test_close_drops_groups_not_started_and_waits_for_running_puts():
    started, release, done = threading.Event(), threading.Event(), []

    def put(name, data):
        started.set()
        release.wait(WAIT)
        done.append(name)
    uploads = PartUploads(None, put, parallel=1, max_bytes=1 << 20)
    uploads.submit([("running", b"1")])
    assert started.wait(WAIT)
    uploads.submit([("queued", b"2")])
    threading.Timer(0.2, release.set).start()
    uploads.close()
    assert done == ["running"]
