"""Log.adopt_staged: a staged file of batches becomes a segment without its bytes being copied.

The adopted segment must be indistinguishable from the same batches appended one by one: same
offsets, epochs, index entries and reads; and a crash between adoption and commit must leave
both the log (uncommitted data dropped) and the staged file (adoptable again) intact.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pyarrow as pa
import pytest

from logcore.errors import CorruptRecordError
from logcore.log.log_root import LogRoot
from logcore.records.batch import batch_fields, build_batch, iter_batches
from logcore.records.encode import encode_batches
import broker_spawner

TOPIC_CONFIG = {"index.interval.bytes": "300", "segment.bytes": "1000000"}


def staged_bytes(n: int, seed: int = 0, ts0: int = 1_000_000) -> bytes:
    rng = np.random.default_rng(seed)
    keys = pa.array([b"k%d" % i for i in range(n)], pa.binary())
    values = pa.array([bytes(rng.integers(0, 255, int(rng.integers(1, 120)), dtype=np.uint8)) for _ in range(n)],
                      pa.binary())
    # timestamps that go back now and then: the time index keeps only new maxima
    ts = ts0 + np.arange(n, dtype=np.int64) * 7 - (np.arange(n) % 5 == 0) * 50
    return b"".join(encode_batches(keys, values, ts, batch_bytes=700))


def stage(root_dir, name: str, data: bytes) -> str:
    path = f".staging/{name}"
    os.makedirs(os.path.join(root_dir, ".staging"), exist_ok=True)
    with open(os.path.join(root_dir, path), "wb") as f:
        f.write(data)
    return path


def open_root(root_dir) -> LogRoot:
    return LogRoot.open(str(root_dir), create=True)


def segment_files(log):
    """The bytes of every segment's .log, .index and .timeindex."""
    out = []
    for seg in log.segments:
        if seg.size() == 0:
            continue
        seg_files = []
        for path in (seg.log_path, seg.index_path, seg.time_index_path):
            with open(log.storage.local_path(path), "rb") as f:
                seg_files.append(f.read())
        out.append((seg.base_offset, seg_files))
    return out


@pytest.mark.parametrize("how", ["verify_crc", "headers", "fields", "fields_cached", "wrong_fields"])
def test_adopted_segment_matches_appended_batches(tmp_path, how):
    """However the batches are found (CRC scan, header scan, the writer's own batch_fields rows,
    with or without reading the header pages ahead, rows that do not match the file and are
    ignored), the segment is the same."""
    data = staged_bytes(2000)
    fields = batch_fields(data)
    if how == "wrong_fields":
        fields = fields[1:].copy()
    with open_root(tmp_path / "a") as root_a, open_root(tmp_path / "b") as root_b:
        for root in (root_a, root_b):
            root.create_topic("t", config=TOPIC_CONFIG)
        adopted = root_a.log("t", 0, writer=True)
        copied = root_b.log("t", 0, writer=True)
        for log in (adopted, copied):
            log.append_records([(b"x", b"first", (), 999)])
            log.commit()
        path = stage(tmp_path / "a", "part-0", data)
        kwargs = {"verify_crc": how == "verify_crc"}
        if how.endswith("fields"):
            kwargs["fields"] = fields
        if how == "fields_cached":
            assert adopted.adopt_staged_many([(path, fields)], verify_crc=False, headers_cached=True) == [(1, 2000)]
        else:
            assert adopted.adopt_staged(path, **kwargs) == (1, 2000)
        # the reference: the same batches appended into a fresh segment
        copied.roll_to(copied.log_end_offset)
        assert copied.append_staged(data) == (1, 2000)
        for log in (adopted, copied):
            log.commit()
            log.roll_to(log.log_end_offset)
            log.segments[-2].seal()
        assert segment_files(adopted) == segment_files(copied)
        records = list(adopted.read_records(0))
        assert [r.offset for r in records] == list(range(2001))
        assert [r.value for r in records] == [r.value for r in copied.read_records(0)]
        epochs = {h.partition_leader_epoch for _, h in iter_batches(adopted.read(0, 1 << 30).data)}
        assert epochs == {adopted.leader_epoch}
        # lookups through the adopted segment's indexes
        for offset in (1, 2, 777, 1999, 2000):
            assert next(adopted.read_records(offset)).offset == offset
        assert adopted.offset_for_timestamp(1_000_000 + 7 * 1000) == copied.offset_for_timestamp(1_000_000 + 7 * 1000)
        adopted.close()
        copied.close()


def test_adopt_into_an_empty_log_and_append_after(tmp_path):
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        log = root.log("t", 0, writer=True)
        path = stage(tmp_path, "p", staged_bytes(300))
        assert log.adopt_staged(path) == (0, 299)
        log.append_records([(b"after", b"x", (), 5)])
        path2 = stage(tmp_path, "p2", staged_bytes(10, seed=1))
        assert log.adopt_staged(path2) == (301, 310)
        log.commit()
        log.close()
        # the staged names are independent of the segments now: removing them changes nothing
        for name in ("p", "p2"):
            os.remove(tmp_path / ".staging" / name)
    with open_root(tmp_path) as root:
        log = root.log("t", 0)
        assert [r.offset for r in log.read_records(0)] == list(range(311))
        assert log.high_watermark == 311
        log.close()


def test_files_that_cannot_be_adopted(tmp_path):
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        root.create_topic("appendtime", config={"message.timestamp.type": "LogAppendTime"})
        root.create_topic("small", config={"segment.bytes": "2000"})
        log = root.log("t", 0, writer=True)
        idempotent = build_batch([(b"k", b"v", (), 1)], producer_id=7, producer_epoch=0, base_sequence=0)
        assert log.adopt_staged(stage(tmp_path, "pid", idempotent)) is None
        assert log.adopt_staged(stage(tmp_path, "empty", b"")) is None
        with root.log("appendtime", 0, writer=True) as other:
            assert other.adopt_staged(stage(tmp_path, "lat", staged_bytes(5))) is None
        with root.log("small", 0, writer=True) as other:
            assert other.adopt_staged(stage(tmp_path, "big", staged_bytes(300))) is None
        assert log.log_end_offset == 0
        log.close()


def test_corrupt_staged_file_names_file_and_position_and_changes_nothing(tmp_path):
    data = bytearray(staged_bytes(200))
    second = next(p for p, _ in iter_batches(data) if p > 0)
    data[second + 30] ^= 0xFF               # inside the CRC-covered part of the second batch
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        log = root.log("t", 0, writer=True)
        log.append_records([(b"k", b"v", (), 1)])
        log.commit()
        with pytest.raises(CorruptRecordError) as err:
            log.adopt_staged(stage(tmp_path, "bad", bytes(data)))
        assert "bad" in str(err.value) and str(second) in str(err.value)
        assert log.log_end_offset == 1 and len(log.segments) == 1
        log.close()


def test_without_crc_checks_headers_still_catch_a_torn_file(tmp_path):
    """verify_crc=False (a file the caller wrote itself) reads only the headers, which still
    catch a file cut short or a batch whose header is gone (zeros where a crash left a hole)."""
    data = bytearray(staged_bytes(200))
    second = next(p for p, _ in iter_batches(data) if p > 0)
    holed = bytearray(data)
    holed[second:second + 61] = bytes(61)
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        log = root.log("t", 0, writer=True)
        for name, bad, where in (("cut", bytes(data[:-5]), None), ("holed", bytes(holed), second)):
            with pytest.raises(CorruptRecordError) as err:
                log.adopt_staged(stage(tmp_path, name, bad), verify_crc=False)
            assert name in str(err.value)
            if where is not None:
                assert str(where) in str(err.value)
        assert log.log_end_offset == 0 and len(log.segments) == 1
        log.close()


CRASH_AFTER_ADOPT = r"""
import os, sys
from logcore.log.log_root import LogRoot
root = LogRoot.open(sys.argv[1])
log = root.log("t", 0, writer=True)
print(log.adopt_staged(sys.argv[2]), flush=True)
os._exit(9)                 # dies before commit: the adopted segment is above the HW
"""


def test_crash_between_adopt_and_commit_keeps_the_staged_file(tmp_path):
    data = staged_bytes(500)
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        with root.log("t", 0, writer=True) as log:
            log.append_records([(b"k", b"committed", (), 1)])
            log.commit()
    path = stage(tmp_path, "part", data)
    out = broker_spawner.run([sys.executable, "-c", CRASH_AFTER_ADOPT, str(tmp_path), path], timeout=60)
    assert out.returncode == 9, out.stderr
    assert out.stdout.strip() == "(1, 500)"
    with open_root(tmp_path) as root:
        with root.log("t", 0) as reader:
            assert reader.high_watermark == 1
        with root.log("t", 0, writer=True) as log:
            # the new writer dropped the uncommitted segment; the staged file is still whole
            assert log.log_end_offset == 1
            assert [h.records_count for _, h in iter_batches((tmp_path / ".staging" / "part").read_bytes())]
            assert log.adopt_staged(path) == (1, 500)
            log.commit()
        with root.log("t", 0) as reader:
            values = [r.value for r in reader.read_records(0)]
    assert values[0] == b"committed" and len(values) == 501


def test_adopted_segments_survive_unclean_shutdown_recovery(tmp_path):
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        log = root.log("t", 0, writer=True)
        for i in range(3):
            log.adopt_staged(stage(tmp_path, f"p{i}", staged_bytes(400, seed=i)))
        log.commit()
        # no close(): the next open is an unclean one and validates past the recovery point
    with open_root(tmp_path) as root:
        with root.log("t", 0, writer=True) as log:
            assert log.recovery.truncated == [] and log.recovery.rebuilt_indexes == []
            assert [r.offset for r in log.read_records(0)] == list(range(1200))
            for seg in log.segments:
                seg.check_index_against_log()


class SyncCalls:
    """Records the file behind each fsync / fdatasync while active (and can make one fail)."""

    def __init__(self, monkeypatch, fail_on: str | None = None):
        self.paths: list[str] = []
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)

            def call(fd, real=real):
                path = os.readlink(f"/proc/self/fd/{fd}")
                self.paths.append(path)
                if fail_on is not None and path.endswith(fail_on):
                    raise OSError(5, "injected I/O error", path)
                return real(fd)
            monkeypatch.setattr(os, name, call)

    def names(self) -> list[str]:
        return sorted(os.path.basename(p) for p in self.paths)


def test_adopt_many_syncs_each_file_once_and_the_folder_once(tmp_path, monkeypatch):
    """Several parts in one step: offsets follow on, each adopted .log and index is synced
    exactly once, the partition folder once, the empty active segment it replaced not at all,
    and the commit after it syncs no empty new active segment."""
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        log = root.log("t", 0, writer=True)
        paths = [stage(tmp_path, f"p{i}", staged_bytes(n, seed=i)) for i, n in enumerate((300, 10, 200))]
        syncs = SyncCalls(monkeypatch)
        assert log.adopt_staged_many([(p, None) for p in paths]) == [(0, 299), (300, 309), (310, 509)]
        bases = ("00000000000000000000", "00000000000000000300", "00000000000000000310")
        assert syncs.names() == sorted([f"{b}{s}" for b in bases for s in (".log", ".index", ".timeindex")]
                                       + ["t-0"])
        del syncs.paths[:]
        log.commit()
        # the root checkpoint files and their folder only: the new active segment at 510 is empty
        assert not [p for p in syncs.paths if "00000000000000000510" in p]
        log.close()
    with open_root(tmp_path) as root, root.log("t", 0) as reader:
        assert [r.offset for r in reader.read_records(0)] == list(range(510))


def test_adopt_many_stops_at_the_first_file_it_cannot_adopt(tmp_path):
    idempotent = build_batch([(b"k", b"v", (), 1)], producer_id=7, producer_epoch=0, base_sequence=0)
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        with root.log("t", 0, writer=True) as log:
            paths = [stage(tmp_path, "a", staged_bytes(50)), stage(tmp_path, "pid", idempotent),
                     stage(tmp_path, "b", staged_bytes(20, seed=1))]
            assert log.adopt_staged_many([(p, None) for p in paths]) == [(0, 49)]
            assert log.log_end_offset == 50
            log.append_staged((tmp_path / ".staging" / "pid").read_bytes())
            assert log.adopt_staged_many([(paths[2], None)]) == [(51, 70)]
            log.commit()
            assert [r.offset for r in log.read_records(0)] == list(range(71))


def test_a_failed_sync_of_an_adopted_file_fails_the_adoption_before_any_commit(tmp_path, monkeypatch):
    """Fault injection: the adopted .log cannot be synced. The error reaches the caller, the HW
    stays, and a new writer drops what was adopted; the staged files adopt again."""
    with open_root(tmp_path) as root:
        root.create_topic("t", config=TOPIC_CONFIG)
        with root.log("t", 0, writer=True) as log:
            log.append_records([(b"k", b"committed", (), 1)])
            log.commit()
        paths = [stage(tmp_path, f"p{i}", staged_bytes(100, seed=i)) for i in range(2)]
        log = root.log("t", 0, writer=True)
        with monkeypatch.context() as patch:
            SyncCalls(patch, fail_on="00000000000000000101.log")
            with pytest.raises(OSError, match="injected"):
                log.adopt_staged_many([(p, None) for p in paths])
        assert log.high_watermark == 1
        log.close()
        with root.log("t", 0) as reader:
            assert reader.high_watermark == 1 and [r.value for r in reader.read_records(0)] == [b"committed"]
        with root.log("t", 0, writer=True) as log:
            assert log.log_end_offset == 1
            assert log.adopt_staged_many([(p, None) for p in paths]) == [(1, 100), (101, 200)]
            log.commit()
    with open_root(tmp_path) as root, root.log("t", 0) as reader:
        assert [r.offset for r in reader.read_records(0)] == list(range(201))
