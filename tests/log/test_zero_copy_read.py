"""Log.read(zero_copy=True): the same batches as a copying read, as an open range of the file."""
from __future__ import annotations

import os
import random

import pytest

from logcore.log.file_slice import FileSlice
from logcore.log.log_root import LogRoot
from logcore.records.control import ControlType


def _fill(log, rng: random.Random, batches: int, *, txn_every: int = 0) -> None:
    offset = seq = 0
    for i in range(batches):
        n = rng.randint(1, 6)
        size = rng.choice([10, 100, 700, 3000])
        recs = [(b"k", os.urandom(size), (), 1_700_000_000_000 + offset + j) for j in range(n)]
        if txn_every and i % txn_every == 0:
            log.append_records(recs, producer_id=9, producer_epoch=0, base_sequence=seq,
                               is_transactional=True)
            seq += n
            log.append_control(ControlType.ABORT if i % (2 * txn_every) == 0 else ControlType.COMMIT,
                               producer_id=9, producer_epoch=0)
            offset += n + 1
        else:
            log.append_records(recs)
            offset += n
        if rng.random() < 0.3:
            log.commit()


def _both(log, offset, max_bytes, isolation, min_one_batch):
    plain = log.read(offset, max_bytes, isolation=isolation, min_one_batch=min_one_batch)
    zero = log.read(offset, max_bytes, isolation=isolation, min_one_batch=min_one_batch, zero_copy=True)
    return plain, zero


@pytest.fixture
def local_log(tmp_path):
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    root.create_topic("t", config={"segment.bytes": "20000", "index.interval.bytes": "500",
                                   "file.delete.delay.ms": "0"})
    log = root.log("t", 0, writer=True)
    yield root, log
    root.close()


def test_zero_copy_matches_copying_read(local_log):
    root, log = local_log
    rng = random.Random(7)
    _fill(log, rng, 150, txn_every=9)
    # Leave an uncommitted tail and an open transaction: both bounds must hold.
    log.commit()
    log.append_records([(b"k", b"open", (), 1)], producer_id=11, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    log.append_records([(b"k", b"x" * 50, (), 1)] * 3)
    log.commit()
    log.append_records([(b"k", b"uncommitted", (), 1)])
    assert len(log.segments) > 5
    assert log.last_stable_offset < log.high_watermark < log.log_end_offset
    slices = 0
    for _ in range(400):
        offset = rng.randrange(0, log.high_watermark + 1)
        max_bytes = rng.choice([0, 1, 100, 1000, 5000, 20000, 1 << 20])
        isolation = rng.choice(["read_committed", "read_uncommitted"])
        plain, zero = _both(log, offset, max_bytes, isolation, rng.random() < 0.8)
        assert (zero.high_watermark, zero.last_stable_offset, zero.log_start_offset) == \
            (plain.high_watermark, plain.last_stable_offset, plain.log_start_offset)
        assert zero.aborted == plain.aborted
        if isinstance(zero.data, FileSlice):
            slices += 1
            with zero.data as s:
                assert s.read() == bytes(plain.data)
        else:
            assert zero.data == b"" == bytes(plain.data)
    assert slices > 200
    # A reader in another handle (its own descriptors, not the writer's) gives the same.
    reader_root = LogRoot.open(root.url, create=False)
    try:
        reader = reader_root.log("t", 0)
        for offset in range(0, reader.high_watermark, 17):
            plain, zero = _both(reader, offset, 3000, "read_uncommitted", True)
            assert isinstance(zero.data, FileSlice)
            with zero.data as s:
                assert s.read() == bytes(plain.data)
    finally:
        reader_root.close()


def test_slice_outlives_retention_of_its_segment(local_log):
    root, log = local_log
    _fill(log, random.Random(3), 120)
    log.commit()
    first = log.read(0, 1 << 20, zero_copy=True).data
    expected = bytes(log.read(0, 1 << 20).data)
    # Retention deletes the first segments (start offset moved past them) while the slice is
    # open; file.delete.delay.ms=0 removes their files at once.
    first_file = first.source
    log.delete_records_before(log.segments[3].base_offset)
    assert log.log_start_offset > 0
    assert not any(name.startswith(os.path.basename(first_file).split(".")[0])
                   for name in os.listdir(os.path.dirname(root.storage.local_path(first_file))))
    with first:
        assert first.read() == expected


def test_object_store_log_falls_back_to_bytes(tmp_path):
    root = LogRoot.open("memory://zero-copy-fallback", create=True)
    try:
        root.create_topic("t")
        log = root.log("t", 0, writer=True)
        log.append_records([(b"k", b"v" * 100, (), 1)] * 5)
        log.commit()
        got = log.read(0, 1 << 20, zero_copy=True)
        assert isinstance(got.data, bytes | memoryview) and len(got.data) > 500
    finally:
        root.close()


def test_slice_outlives_a_cleaner_swap_of_its_segment(tmp_path):
    from logcore.cleaner.cleaner import LogCleaner
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    try:
        root.create_topic("c", config={"cleanup.policy": "compact", "segment.bytes": "4000",
                                       "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"})
        log = root.log("c", 0, writer=True)
        for i in range(200):
            log.append_records([(b"key%d" % (i % 5), b"v%03d" % i * 20, (), 1_700_000_000_000 + i)])
        log.commit()
        held = log.read(0, 1 << 20, zero_copy=True).data
        expected = bytes(log.read(0, 1 << 20).data)
        stats = LogCleaner(dedupe_buffer_size=1 << 20).clean(log, now_ms=1_800_000_000_000)
        assert stats is not None
        assert bytes(log.read(0, 1 << 20).data) != expected        # the segment was rewritten
        with held:
            assert held.read() == expected                          # the held range was not
    finally:
        root.close()


def test_writer_serves_what_it_appended_without_a_second_check_other_readers_check(local_log):
    """The writer checked each batch (CRC, offsets) on its way in, so serving it again needs no
    second CRC pass (Kafka checks none when serving); a reader that did not write the bytes
    checks them, and a truncation makes the writer forget the ranges it cut."""
    from logcore.errors import CorruptRecordError
    root, log = local_log
    for i in range(20):
        log.append_records([(b"k", b"%04d" % i + b"v" * 200, (), 1)])
    log.commit()
    seg = log.segments[-1]
    path = root.storage.local_path(seg.log_path)
    data = open(path, "rb").read()
    at = data.index(b"0010") + 100                      # inside the value of offset 10
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes([data[at] ^ 0xFF]))
    served = log.read(0, 1 << 20, zero_copy=True).data
    with served as s:
        assert len(s.read()) == len(data)              # the writer's own bytes: not checked again
    reader_root = LogRoot.open(root.url, create=False)
    try:
        reader = reader_root.log("t", 0)
        got = reader.read(0, 1 << 20, zero_copy=True).data
        assert got.next_offset == 10                    # the good batches before the damage
        with got as s:
            assert data.startswith(s.read())
        with pytest.raises(CorruptRecordError) as err:
            reader.read(10, 1 << 20, zero_copy=True)
        assert err.value.file is not None and err.value.position is not None
    finally:
        reader_root.close()
    # A truncation cuts the remembered ranges: what lies past the cut is checked again.
    cut = seg.translate_offset(5)[0]
    log.truncate_to(5, below_high_watermark=True)
    assert seg._is_verified(0, cut) and not seg._is_verified(cut, cut + 1)


def test_a_window_is_found_with_int32_keys(local_log, monkeypatch):
    """The offset index's columns are int32: searched with a Python int, numpy casts the whole
    column to int64 first, a search linear in the index's size on every read. The window's
    index searches use keys of the column's own type."""
    import numpy as np

    root, log = local_log
    _fill(log, random.Random(3), 60)
    log.commit()
    seg = log.segments[-1]
    assert seg.offset_index.entries > 2
    seen = []

    class Column(np.ndarray):
        def searchsorted(self, v, side="left", sorter=None):
            seen.append(type(v))
            return np.asarray(self).searchsorted(v, side=side, sorter=sorter)

    index = type(seg.offset_index)
    for name in ("value_column", "key_column"):
        plain = getattr(index, name)
        monkeypatch.setattr(index, name, lambda self, plain=plain: plain(self).view(Column))
    expected = log.read(seg.base_offset, 1500)
    zero = log.read(seg.base_offset, 1500, zero_copy=True)
    with zero.data as data:
        assert data.read() == expected.data
    assert seen and all(t is np.int32 for t in seen), seen
