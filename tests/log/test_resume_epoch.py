"""A writer that takes its partition back per commit (`LogRoot.log(..., resume=)`) keeps its
leader epoch when nobody took the partition in between: one leader-epoch entry, not one per
commit; a takeover in between makes the next open bump (and fences as always); and an
uncommitted tail left by a crashed commit is still cut when the epoch is resumed."""
from __future__ import annotations

import sys

import pytest

from logcore.errors import FencedWriterError
from logcore.log.log_root import LogRoot
from logcore.records.batch import iter_batches
import broker_spawner

T0 = 1_700_000_000_000


def recs(tag: str, start: int, n: int):
    return [(b"k", f"{tag}{i}".encode(), (), T0 + i) for i in range(start, start + n)]


def values(log) -> list[bytes]:
    return [r.value for r in log.read_records(0)]


def commit_cycle(root, tag: str, start: int, n: int, token):
    """One sink-like commit: open (resuming), append, commit with a marker, close."""
    log = root.log("t", 0, writer=True, resume=token)
    resumed = log.fence.resumed
    log.append_records(recs(tag, start, n))
    log.commit({"query": "q", "batch": start})
    log.close()
    return (log.leader_epoch, log.fence.writer_id), resumed


def test_commits_that_resume_leave_one_epoch_entry(open_root):
    root = open_root()
    root.create_topic("t")
    token, resumed = commit_cycle(root, "a", 0, 2, None)
    assert not resumed
    for i in range(1, 8):
        again, resumed = commit_cycle(root, "a", 2 * i, 2, token)
        assert resumed and again == token
    with root.log("t", 0, writer=True, resume=token) as log:
        assert log.epoch_cache.entries == [(token[0], 0)]
        assert log.high_watermark == 16
    # the epoch stamped on every batch is the same one
    with open_root(create=False).log("t", 0) as reader:
        data = bytes(reader.read(0, max_bytes=1 << 20).data)
        assert {h.partition_leader_epoch for _, h in iter_batches(data)} == {token[0]}


def test_a_takeover_in_between_makes_the_next_open_bump(open_root):
    root = open_root()
    root.create_topic("t")
    token, _ = commit_cycle(root, "a", 0, 2, None)
    # another writer (a broker, a second query, a tool) takes the partition and writes
    other = open_root(create=False).log("t", 0, writer=True)
    assert other.leader_epoch == token[0] + 1
    other.append_records(recs("b", 2, 1))
    other.commit()
    # the sink comes back with its old token: a takeover, which fences the other writer
    mine = root.log("t", 0, writer=True, resume=token)
    assert not mine.fence.resumed and mine.leader_epoch == token[0] + 2
    with pytest.raises(FencedWriterError):    # local disk: at the append; object stores: the commit
        other.append_records(recs("b", 3, 1))
        other.commit()
    mine.append_records(recs("a", 3, 1))
    mine.commit()
    assert mine.epoch_cache.entries == [(token[0], 0), (token[0] + 1, 2), (token[0] + 2, 3)]
    mine.close()
    assert values(open_root(create=False).log("t", 0)) == [b"a0", b"a1", b"b2", b"a3"]


def test_crashed_commit_tail_is_cut_when_the_epoch_is_resumed(open_root, monkeypatch):
    root = open_root()
    root.create_topic("t")
    token, _ = commit_cycle(root, "a", 0, 3, None)
    log = root.log("t", 0, writer=True, resume=token)
    assert log.fence.resumed
    log.append_records(recs("x", 3, 4))

    class Crash(Exception):
        pass

    def crash(**kwargs):
        raise Crash()

    # dies in the commit: on object stores after publishing the segment, before the HW moves
    monkeypatch.setattr(log.state_store, "commit", crash)
    with pytest.raises(Crash):
        log.commit({"query": "q", "batch": 3})
    log.fence.close()       # as a dead process: local flocks gone, nothing released
    again = open_root(create=False).log("t", 0, writer=True, resume=token)
    # local disk: free, so resumed; object stores: never released, so a takeover
    assert again.fence.resumed == again.storage.is_local
    assert again.high_watermark == again.log_end_offset == 3
    assert again.commit_marker == {"query": "q", "batch": 0}
    assert again.epoch_cache.latest_entry[0] == again.leader_epoch
    again.append_records(recs("a", 3, 1))
    again.commit({"query": "q", "batch": 3})
    again.close()
    assert values(open_root(create=False).log("t", 0)) == [b"a0", b"a1", b"a2", b"a3"]


CRASH_BEFORE_COMMIT = r"""
import os, sys
from logcore.log.log_root import LogRoot
from logcore.records.batch import iter_batches
root = LogRoot.open(sys.argv[1])
log = root.log("t", 0, writer=True, resume=(int(sys.argv[2]), sys.argv[3]))
assert log.fence.resumed
log.append_records([(b"k", b"uncommitted%d" % i, (), 1) for i in range(50)])
log.append_records([(b"k", b"more", (), 2)])
print(log.log_end_offset, flush=True)
os._exit(9)                 # dies before commit: the appends are above the HW
"""


def test_process_killed_before_commit_then_resumed_cuts_the_tail(tmp_path):
    with LogRoot.open(str(tmp_path), create=True) as root:
        root.create_topic("t")
        token, _ = commit_cycle(root, "a", 0, 2, None)
    out = broker_spawner.run([sys.executable, "-c", CRASH_BEFORE_COMMIT, str(tmp_path), str(token[0]), token[1]],
                             timeout=60)
    assert out.returncode == 9, out.stderr
    assert out.stdout.strip() == "53"
    with LogRoot.open(str(tmp_path)) as root:
        with root.log("t", 0, writer=True, resume=token) as log:
            assert log.fence.resumed and log.leader_epoch == token[0]
            assert log.high_watermark == log.log_end_offset == 2
            assert log.commit_marker == {"query": "q", "batch": 0}
            assert log.epoch_cache.entries == [(token[0], 0)]
            log.append_records(recs("a", 2, 1))
            log.commit({"query": "q", "batch": 2})
        with root.log("t", 0) as reader:
            assert values(reader) == [b"a0", b"a1", b"a2"]
