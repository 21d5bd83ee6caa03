"""The commit marker becomes visible exactly with its commit's high watermark."""
from __future__ import annotations

import json

import pytest

from logcore.log.partition_state import COMMIT_MARKER


def test_marker_follows_commits(open_root):
    root = open_root()
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    assert log.commit_marker is None
    log.append_records([(b"k", b"v", (), 1)])
    log.commit({"query": "q1", "batch": 0})
    log.append_records([(b"k", b"v", (), 2)])
    log.commit({"query": "q1", "batch": 1})
    log.append_records([(b"k", b"v", (), 3)])
    log.commit()                         # no marker: the last one stays
    assert log.commit_marker == {"query": "q1", "batch": 1}
    log.close()
    again = open_root(create=False).log("t", 0, writer=True)
    assert again.commit_marker == {"query": "q1", "batch": 1}
    assert again.high_watermark == 3


def test_marker_written_but_hw_not_moved_is_not_visible(tmp_path, monkeypatch):
    """A crash between writing the marker and moving the HW leaves the previous marker in force."""
    from logcore.log.log_root import LogRoot
    root = LogRoot.open(str(tmp_path / "r"), create=True)
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records([(b"k", b"v", (), 1)])
    log.commit({"batch": 0})
    log.append_records([(b"k", b"v", (), 2)])

    class Crash(Exception):
        pass

    from logcore.log import partition_state
    original = partition_state._RootCheckpoints._write

    def crash_on_hw(self, batch, durable):   # the checkpoint write of every committing partition
        raise Crash()

    monkeypatch.setattr(partition_state._RootCheckpoints, "_write", crash_on_hw)
    with pytest.raises(Crash):
        log.commit({"batch": 1})
    monkeypatch.setattr(partition_state._RootCheckpoints, "_write", original)
    marker_file = tmp_path / "r" / "t-0" / COMMIT_MARKER
    assert json.loads(marker_file.read_text())["current"]["marker"] == {"batch": 1}
    # A new writer (the restarted driver) sees the HW of batch 0 and batch 0's marker.
    again = LogRoot.open(str(tmp_path / "r")).log("t", 0, writer=True)
    assert again.high_watermark == 1 and again.log_end_offset == 1
    assert again.commit_marker == {"batch": 0}
    again.append_records([(b"k", b"v", (), 2)])
    again.commit({"batch": 1})
    assert LogRoot.open(str(tmp_path / "r")).log("t", 0, writer=True).commit_marker == {"batch": 1}


def test_append_staged_assigns_offsets(open_root):
    from logcore.records.batch import build_batch, iter_batches
    root = open_root()
    root.create_topic("t")
    log = root.log("t", 0, writer=True)
    log.append_records([(b"k", b"v", (), 1)])
    staged = build_batch([(b"a", b"1", (), 5), (b"b", b"2", (), 6)]) + build_batch([(b"c", b"3", (), 7)])
    assert log.append_staged(staged) == (1, 3)
    log.commit()
    data = log.read(0).data
    assert [h.base_offset for _, h in iter_batches(data)] == [0, 1, 3]
    assert [r.value for r in log.read_records(0)] == [b"v", b"1", b"2", b"3"]


def test_append_staged_rolls_like_single_appends(open_root):
    """A long staged run is cut into segments by the same rules as batch-by-batch appends."""
    from logcore.records.batch import build_batch, iter_batches
    root = open_root()
    root.create_topic("t", config={"segment.bytes": "4000", "index.interval.bytes": "300"})
    log = root.log("t", 0, writer=True)
    staged = b"".join(build_batch([(b"k%d" % (3 * b + i), b"v" * 40, (), 1000 + b) for i in range(3)])
                      for b in range(60))
    assert log.append_staged(staged) == (0, 179)
    log.commit({"batch": 0})
    assert log.commit_marker == {"batch": 0}
    assert len(log.segments) > 3
    for seg in log.segments[:-1]:
        assert seg.size() <= 4000
    offsets = [r.offset for r in log.read_records(0)]
    assert offsets == list(range(180))
    # Every segment's batches carry this writer's epoch and start at its base offset.
    for seg in log.segments:
        headers = [h for _, h in iter_batches(seg.read_bytes(0, seg.size()))]
        if not headers:
            continue                 # an object store's fresh segment after the commit
        assert headers[0].base_offset == seg.base_offset
        assert all(h.partition_leader_epoch == log.leader_epoch for h in headers)
    for offset in (0, 61, 122, 179):
        assert next(log.read_records(offset)).offset == offset
