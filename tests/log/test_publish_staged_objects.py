"""Object store: staged objects whose batches carry their offsets become segments by a
server-side copy (`Log.publish_staged_objects`), with gaps allowed between them."""
from __future__ import annotations

import uuid

import pytest

from logcore.errors import FencedWriterError
from logcore.log.adoption import stamp_offsets
from logcore.log.log_root import LogRoot
from logcore.records.batch import F_BASE_OFFSET, batch_fields, build_batch, parse_header

T0 = 1_700_000_000_000


def _staged(storage, path: str, first: int, epoch: int, records: list[list[bytes]]):
    """Batches of `records` staged at `path` with offsets from `first`: their batch_fields."""
    buf = bytearray(b"".join(build_batch([(b"k", v, (), T0 + i) for i, v in enumerate(batch)])
                             for batch in records))
    fields = batch_fields(buf)
    stamp_offsets(buf, fields, first, epoch)
    storage.write_atomic(path, bytes(buf))
    return fields


@pytest.fixture
def root():
    with LogRoot.open(f"memory://publish-{uuid.uuid4().hex[:8]}/root", create=True) as root:
        root.create_topic("t", 1)
        yield root


def test_staged_objects_become_segments_with_gaps_and_read_back(root):
    log = root.log("t", 0, writer=True)
    log.append_records([(b"k", b"before", (), T0)])
    log.commit()
    epoch, storage = log.leader_epoch, root.storage
    a = _staged(storage, "staging/a", 5, epoch, [[b"a0", b"a1"], [b"a2"]])
    b = _staged(storage, "staging/b", 8, epoch, [[b"b0"]])
    assert log.publish_staged_objects([("staging/a", a), ("staging/b", b)]) == [(5, 7), (8, 8)]
    assert log.log_end_offset == 9 and log.high_watermark == 1      # not committed yet
    log.commit()
    log.append_records([(b"k", b"after", (), T0)])
    log.commit()
    log.close()
    with LogRoot.open(root.url) as again:
        reader = again.log("t", 0)
        got = [(r.offset, r.value) for r in reader.read_records(0)]
        head = parse_header(again.storage.read("t-0/00000000000000000005.log", 0, 61))
        reader.close()
    assert got == [(0, b"before"), (5, b"a0"), (6, b"a1"), (7, b"a2"), (8, b"b0"), (9, b"after")]
    assert head.partition_leader_epoch == epoch and head.base_offset == 5
    assert a[:, F_BASE_OFFSET].tolist() == [5, 7]


def test_parts_that_do_not_fit_are_left_to_the_caller(root):
    log = root.log("t", 0, writer=True)
    log.append_records([(b"k", b"x", (), T0)] * 3)
    log.commit()
    storage = root.storage
    below = _staged(storage, "staging/below", 2, log.leader_epoch, [[b"v"]])      # under the LEO (3)
    assert log.publish_staged_objects([("staging/below", below)]) is None
    ok = _staged(storage, "staging/ok", 3, log.leader_epoch, [[b"v"]])
    log.append_records([(b"k", b"pending", (), T0)])        # appended, not yet published
    assert log.publish_staged_objects([("staging/ok", ok)]) is None
    log.commit()
    assert log.log_end_offset == 4 and storage.list_dir("t-0") == sorted(storage.list_dir("t-0"))
    log.close()


def test_a_stale_writer_cannot_publish_and_a_crashed_writers_leftover_is_not_committed(root):
    old = root.log("t", 0, writer=True)
    fields = _staged(root.storage, "staging/old", 0, old.leader_epoch, [[b"old"]])
    assert old.publish_staged_objects([("staging/old", fields)]) == [(0, 0)]   # crashed before its commit
    new = root.log("t", 0, writer=True)
    assert new.log_end_offset == 0          # the open dropped what no commit covered
    later = _staged(root.storage, "staging/later", 1, old.leader_epoch, [[b"late"]])
    with pytest.raises(FencedWriterError):
        old.publish_staged_objects([("staging/later", later)])
    mine = _staged(root.storage, "staging/new", 0, new.leader_epoch, [[b"new"]])
    assert new.publish_staged_objects([("staging/new", mine)]) == [(0, 0)]
    new.commit()
    new.close()
    old.close()
    with LogRoot.open(root.url) as again:
        reader = again.log("t", 0)
        assert [r.value for r in reader.read_records(0)] == [b"new"]
        reader.close()


def test_a_fenced_writers_copy_that_landed_after_the_open_is_replaced(root):
    old = root.log("t", 0, writer=True)
    new = root.log("t", 0, writer=True)
    # the fenced writer's copy reached the segment name after the new writer's open listed it
    _staged(root.storage, "t-0/00000000000000000000.log", 0, old.leader_epoch, [[b"stale"]])
    mine = _staged(root.storage, "staging/mine", 0, new.leader_epoch, [[b"mine"]])
    assert new.publish_staged_objects([("staging/mine", mine)]) == [(0, 0)]
    new.commit()
    new.close()
    old.close()
    with LogRoot.open(root.url) as again:
        reader = again.log("t", 0)
        assert [r.value for r in reader.read_records(0)] == [b"mine"]
        reader.close()


def test_the_refusal_says_why_and_place_publishes_from_any_source(root):
    """`staged_objects_refusal` names what stops a publish; `place` is how a part's `.log` gets
    to its name (here a PUT of bytes held in memory, as a completed upload would be)."""
    log = root.log("t", 0, writer=True)
    log.append_records([(b"k", b"x", (), T0)] * 3)
    log.commit()
    storage = root.storage
    below = _staged(storage, "staging/below", 2, log.leader_epoch, [[b"v"]])
    assert log.staged_objects_refusal([below]).startswith("its log end offset is 3, past offset 2 reserved")
    held = _staged(storage, "staging/held", 3, log.leader_epoch, [[b"h0", b"h1"]])
    assert log.staged_objects_refusal([held]) is None
    placed = []

    def place(source, path):
        placed.append((source, path))
        return storage.put_if_absent(path, source) is not None
    assert log.publish_staged_objects([(storage.read("staging/held"), held)], place) == [(3, 4)]
    assert [p for _s, p in placed] == ["t-0/00000000000000000003.log"]
    log.commit()
    assert [(r.offset, r.value) for r in log.read_records(0)][3:] == [(3, b"h0"), (4, b"h1")]
    log.close()
