"""The log end offset read by another thread without the log's lock (the cleaner does, at the start
of every pass) while the writer rolls and appends: the reading thread must never change what the
writer's next append gets.

The interleaving is forced with hooks: the other thread reads the LEO of the segment the writer
has just rolled to, and the writer's first append into it happens while that read is in flight.
A lazily computed next offset stored after the append used to put the LEO back to the segment's
base, so the next append got an offset already handed out (two batches with one base offset).
"""
from __future__ import annotations

import threading

import pytest

from logcore.log.segment import LogSegment

both = pytest.mark.parametrize("root_target", ["local", "memory"], indirect=True)
WAIT_S = 10


@both
def test_leo_read_during_the_first_append_after_a_roll(open_root, monkeypatch):
    root = open_root()
    root.create_topic("t", config={"segment.bytes": "1000"})
    log = root.log("t", 0, writer=True)
    rolled, computed, appended = threading.Event(), threading.Event(), threading.Event()
    seen = {}
    real_append, real_read_next = LogSegment.append, LogSegment._read_next_offset

    def append(seg, data, headers):
        if seg.base_offset > 0 and seg.size() == 0 and not rolled.is_set():
            # The first append into the segment the writer just rolled to.
            seen["filled"] = (seg.indexes.offset_loaded, seg.indexes.time_loaded, seg._next_offset)
            rolled.set()
            assert computed.wait(WAIT_S), "the other thread did not read the LEO"
            try:
                return real_append(seg, data, headers)
            finally:
                appended.set()
        return real_append(seg, data, headers)

    def read_next_offset(seg):
        result = real_read_next(seg)
        if threading.current_thread() is other and seg.size() == 0:
            # Computed from the segment before the writer's append; returned after it.
            computed.set()
            appended.wait(WAIT_S)
        return result

    def read_leo():
        assert rolled.wait(WAIT_S)
        seen["leo"] = log.log_end_offset
        computed.set()

    monkeypatch.setattr(LogSegment, "append", append)
    monkeypatch.setattr(LogSegment, "_read_next_offset", read_next_offset)
    other = threading.Thread(target=read_leo)
    other.start()
    offsets: list[int] = []

    def append_next() -> None:
        n = len(offsets)
        offsets.append(log.append_records([(b"k%d" % n, b"value-%d" % n, (), 1_000 + n)]).first_offset)

    try:
        while not rolled.is_set():
            append_next()       # the last of these rolled and was the first append after it
        append_next()
        append_next()
    finally:
        other.join(WAIT_S)
    monkeypatch.undo()
    assert offsets == list(range(len(offsets))), offsets
    assert log.log_end_offset == len(offsets)
    assert seen["leo"] == len(offsets) - 3      # the new segment's base: read before the append
    # What other threads would otherwise fill lazily was there before the segment was published.
    assert seen["filled"] == (True, True, len(offsets) - 3)
    log.commit()
    records = [(r.offset, r.value) for r in log.read_records(0)]
    assert records == [(n, b"value-%d" % n) for n in range(len(offsets))]
