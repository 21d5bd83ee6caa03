"""A writer that lost its partition can never make anything visible.

Object stores (fsspec memory, SeaweedFS, moto): writer A commits, writer B takes over; A's
commits fail, A's leftover segment objects are ignored by readers and replaced by B, and readers
stay bounded by the high watermark in `partition-state.json`. Local disk: two processes contend
for one partition while the first appends in a loop; the log they leave is whole.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from logcore.errors import FencedWriterError
from logcore.log.log_root import LogRoot
from logcore.log.partition_state import OBJECT_STATE
from logcore.log.segment import segment_name
from logcore.records.batch import build_batch, iter_batches

object_stores = pytest.mark.parametrize(
    "root_target", ["memory", pytest.param("seaweedfs", marks=pytest.mark.s3),
                    pytest.param("moto", marks=pytest.mark.s3)], indirect=True)

T0 = 1_700_000_000_000


def recs(tag: str, start: int, n: int):
    return [(b"k", f"{tag}{i}".encode(), (), T0 + i) for i in range(start, start + n)]


def visible(log, isolation="read_committed") -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in log.read_records(0, isolation=isolation)]


def fresh_reader(open_root):
    return open_root(create=False).log("t", 0)


def partition_state(root) -> dict:
    return json.loads(root.storage.read(root.storage.join("t-0", OBJECT_STATE)))


def a_values(n: int) -> list[tuple[int, bytes]]:
    return [(i, b"a%d" % i) for i in range(n)]


@object_stores
def test_takeover_fences_the_old_writer(open_root):
    root = open_root()
    root.create_topic("t")
    a = root.log("t", 0, writer=True)
    a.append_records(recs("a", 0, 3))
    a.commit()
    a.append_records(recs("a", 3, 2))               # A's, never committed
    b = open_root(create=False).log("t", 0, writer=True)
    assert b.leader_epoch > a.leader_epoch
    assert b.log_end_offset == b.high_watermark == 3
    state = partition_state(root)
    # (the LSO recorded with the HW: no transaction, so the HW itself; no producer either)
    assert state == {"high_watermark": 3, "log_start_offset": 0, "leader_epoch": b.leader_epoch,
                     "last_stable_offset": 3, "empty_producers_at": 3}

    a.append_records(recs("a", 5, 2))               # appends after the takeover
    with pytest.raises(FencedWriterError, match="fenced"):
        a.commit()
    with pytest.raises(FencedWriterError):
        a.commit()
    assert visible(fresh_reader(open_root)) == a_values(3)

    b.append_records(recs("b", 3, 2))
    b.commit()
    b.append_records(recs("b", 5, 1))
    b.commit()
    want = a_values(3) + [(3, b"b3"), (4, b"b4"), (5, b"b5")]
    reader = fresh_reader(open_root)
    assert visible(reader) == want
    assert visible(reader, "read_uncommitted") == want
    assert partition_state(root) == {"high_watermark": 6, "log_start_offset": 0,
                                     "leader_epoch": b.leader_epoch, "last_stable_offset": 6,
                                     "empty_producers_at": 6}
    # Every batch from the takeover point on carries B's epoch.
    epochs = [(h.base_offset, h.partition_leader_epoch) for _, h in iter_batches(reader.read(0).data)]
    for base, epoch in epochs:
        assert epoch == (a.leader_epoch if base < 3 else b.leader_epoch)
    # A stays fenced: it cannot write and its close writes nothing.
    with pytest.raises(FencedWriterError):
        a.commit()
    a.close()
    assert visible(fresh_reader(open_root)) == want


@object_stores
def test_fenced_writers_leftover_segment_is_ignored_then_replaced(open_root, monkeypatch):
    root = open_root()
    root.create_topic("t")
    a = root.log("t", 0, writer=True)
    a.append_records(recs("a", 0, 3))
    a.commit()
    a.append_records(recs("a", 3, 4))
    b = open_root(create=False).log("t", 0, writer=True)
    takeover = b.log_end_offset
    assert takeover == 3

    # A passed its fence check just before B took over, then went on with its commit: its
    # segment object is published, its conditional replace of the partition state fails.
    monkeypatch.setattr(a.fence, "check", lambda: None)
    with pytest.raises(FencedWriterError, match=f"epoch {b.leader_epoch}"):
        a.commit()
    monkeypatch.undo()
    leftover = root.storage.join("t-0", segment_name(takeover, ".log"))
    assert root.storage.exists(leftover)
    head = next(iter_batches(root.storage.read(leftover)))[1]
    assert (head.base_offset, head.partition_leader_epoch) == (takeover, a.leader_epoch)

    # Readers are bounded by the HW in partition-state.json: A's segment is never served.
    assert partition_state(root)["high_watermark"] == takeover
    reader = fresh_reader(open_root)
    assert reader.high_watermark == takeover
    assert visible(reader) == visible(reader, "read_uncommitted") == a_values(3)
    assert reader.read(takeover, isolation="read_uncommitted").data == b""
    assert reader.offset_for_timestamp(T0 + 4) is None

    # B publishes at the same base offset: A's object is replaced (by a bigger one, so that a
    # reader holding on to A's object would miss data).
    b.append_records([(b"k", b"b%d" % i + b"." * 300, (), T0 + i) for i in (3, 4)])
    b.commit()
    head = next(iter_batches(root.storage.read(leftover)))[1]
    assert head.partition_leader_epoch == b.leader_epoch
    want = a_values(3) + [(3, b"b3" + b"." * 300), (4, b"b4" + b"." * 300)]
    assert visible(fresh_reader(open_root)) == want
    reader.refresh()
    assert visible(reader) == want
    assert partition_state(root)["leader_epoch"] == b.leader_epoch


@object_stores
def test_leftover_segment_above_the_takeover_point(open_root):
    """An object a fenced writer wrote at a base offset past B's takeover point, with its old
    epoch, is ignored by readers (the leader-epoch checkpoint says B owns those offsets), and B's
    next publish at that offset replaces it."""
    root = open_root()
    root.create_topic("t")
    a = root.log("t", 0, writer=True)
    a.append_records(recs("a", 0, 3))
    a.commit()
    b = open_root(create=False).log("t", 0, writer=True)
    b.append_records(recs("b", 3, 2))
    b.commit()
    assert b.high_watermark == 5
    stale = build_batch(recs("z", 5, 3), base_offset=5, partition_leader_epoch=a.leader_epoch)
    root.storage.put_if_absent(root.storage.join("t-0", segment_name(5, ".log")), stale)
    want = a_values(3) + [(3, b"b3"), (4, b"b4")]

    reader = fresh_reader(open_root)
    assert visible(reader) == visible(reader, "read_uncommitted") == want
    assert reader.log_end_offset == reader.high_watermark == 5

    b.append_records(recs("b", 5, 1))
    b.commit()
    want.append((5, b"b5"))
    assert visible(fresh_reader(open_root)) == want
    reader.refresh()
    assert visible(reader) == want

    # A zombie object left above B's HW when B is gone: the next writer drops it.
    root.storage.put_if_absent(root.storage.join("t-0", segment_name(6, ".log")),
                               build_batch(recs("z", 6, 2), base_offset=6,
                                           partition_leader_epoch=a.leader_epoch))
    c = open_root(create=False).log("t", 0, writer=True)
    assert c.log_end_offset == 6
    assert not root.storage.exists(root.storage.join("t-0", segment_name(6, ".log")))
    c.append_records(recs("c", 6, 1))
    c.commit()
    assert visible(fresh_reader(open_root)) == want + [(6, b"c6")]
    assert partition_state(root) == {"high_watermark": 7, "log_start_offset": 0,
                                     "leader_epoch": c.leader_epoch, "last_stable_offset": 7,
                                     "empty_producers_at": 7}


# ---------------------------------------------------------------------------------------------
# local disk: two processes

APPENDER = textwrap.dedent("""
    import json, sys
    from logcore.errors import FencedWriterError
    from logcore.log.log_root import LogRoot

    log = LogRoot.open(sys.argv[1]).log("t", 0, writer=True)
    committed, i = 0, 0
    try:
        while True:
            log.append_records([(b"k", b"a%d" % (i + j), (), 1_700_000_000_000 + i + j)
                                for j in range(3)])
            i += 3
            if i % 15 == 0:
                log.commit()
                committed = log.high_watermark
                if committed == 300:          # three or more segments of 3000 bytes rolled
                    print("ready", flush=True)
            if i > 3_000_000:
                break
        result = {"fenced": False}
    except FencedWriterError as exc:
        result = {"fenced": True, "error": str(exc)}
    result.update(committed=committed, appended=i, epoch=log.leader_epoch)
    log.close()
    print(json.dumps(result), flush=True)
""")


@pytest.mark.parametrize("delay", [0.05, 0.4])
def test_two_processes_contend_on_local_disk(tmp_path, delay):
    root_path = str(tmp_path / "root")
    root = LogRoot.open(root_path, create=True)
    root.create_topic("t", config={"segment.bytes": "3000", "index.interval.bytes": "200"})
    proc = subprocess.Popen([sys.executable, "-c", APPENDER, root_path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(delay)                     # let the first writer run on
        b = LogRoot.open(root_path).log("t", 0, writer=True)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads(out.strip().splitlines()[-1])
    assert result["fenced"], (result, err)
    assert f"now {b.leader_epoch}" in result["error"]
    # B took over at A's last successful commit: nothing A did not commit survives.
    takeover = b.log_end_offset
    assert takeover == b.high_watermark == result["committed"]
    assert result["appended"] >= takeover
    for i in range(10):
        b.append_records([(b"k", b"b%d" % (takeover + 2 * i + j), (), T0) for j in range(2)])
    b.commit()
    b.close()

    # Every batch in every segment file is whole (CRC checked), offsets are contiguous across
    # files, A's batches all come before B's, and each carries its writer's epoch.
    part = tmp_path / "root" / "t-0"
    files = sorted(part.glob("*.log"))
    assert len(files) > 2
    expected_next = 0
    epochs = []
    for path in files:
        data = path.read_bytes()
        assert int(path.name[:20]) == expected_next
        end = 0
        for pos, header in iter_batches(data, source=str(path), allow_partial_tail=False):
            assert header.base_offset == expected_next
            expected_next = header.next_offset
            epochs.append((header.base_offset, header.partition_leader_epoch))
            end = pos + header.size
        assert end == len(data)
    end_offset = takeover + 20
    assert expected_next == end_offset
    assert all(epoch == (result["epoch"] if base < takeover else b.leader_epoch)
               for base, epoch in epochs)
    reader = LogRoot.open(root_path).log("t", 0)
    got = [(r.offset, r.value) for r in reader.read_records(0)]
    assert got == [(i, (b"a%d" if i < takeover else b"b%d") % i) for i in range(end_offset)]


@object_stores
def test_fenced_writer_publishing_late_cannot_touch_the_new_writers_segment(open_root, monkeypatch):
    """A passed its fence check, then stalled; meanwhile B took over and published a segment at
    the same base offset. A's late publish must leave B's segment (log and indexes) as it was."""
    root = open_root()
    root.create_topic("t", config={"index.interval.bytes": "0"})
    a = root.log("t", 0, writer=True)
    a.append_records(recs("a", 0, 3))
    a.commit()
    for i in range(3, 9):                     # small batches: A's index positions fall inside
        a.append_records([(b"k", b"a%d" % i, (), T0 + i)])      # B's batches
    b = open_root(create=False).log("t", 0, writer=True)
    for i in range(3, 9):
        b.append_records([(b"k", b"b%d" % i + b"." * 200, (), T0 + i)])
    b.commit()
    storage = root.storage
    published = {suffix: storage.read(storage.join("t-0", segment_name(3, suffix)))
                 for suffix in (".log", ".index", ".timeindex")}
    monkeypatch.setattr(a.fence, "check", lambda: None)
    with pytest.raises(FencedWriterError):
        a.commit()
    monkeypatch.undo()
    for suffix, data in published.items():
        assert storage.read(storage.join("t-0", segment_name(3, suffix))) == data, suffix
    reader = fresh_reader(open_root)
    assert reader.recovery.rebuilt_indexes == []
    want = a_values(3) + [(i, b"b%d" % i + b"." * 200) for i in range(3, 9)]
    assert visible(reader) == want
    for offset in range(3, 9):
        assert next(reader.read_records(offset)).offset == offset
