"""check_produced_records (the produce path's one C call) agrees with decode_records on valid
and damaged batches, and reports offset deltas, null keys and the timestamp range."""
from __future__ import annotations

import random
import struct

import pytest

from logcore.errors import CorruptRecordError, UnsupportedMagicError
from logcore.records import build_batch
from logcore.records.batch import check_produced_records, decode_records
from logcore.records.compression import Compression
from logcore.records.crc import crc32c


def _recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def test_fields_of_a_valid_batch():
    batch = build_batch([(b"k", b"v", (("h", b"x"),), 1000), (None, b"w", (), 900), (b"k2", None, (), 1500)])
    assert check_produced_records(batch) == (-1, 0, 1, 900, 1500)


def test_compressed_batches_are_left_to_the_caller():
    assert check_produced_records(build_batch([(b"k", b"v" * 100, (), 1)], compression=Compression.GZIP)) is None


def test_crc_and_magic():
    batch = bytearray(build_batch([(b"k", b"v", (), 1)]))
    batch[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_produced_records(batch, source="t-0 append")
    batch = bytearray(build_batch([(b"k", b"v", (), 1)]))
    batch[16] = 1
    with pytest.raises(UnsupportedMagicError):
        check_produced_records(batch)


def test_wrong_offset_delta_is_reported():
    batch = bytearray(build_batch([(b"a", b"1", (), 1), (b"b", b"2", (), 1)]))
    # second record: length, attributes, timestampDelta (0), offsetDelta 1 -> 3 (zigzag 6)
    first_len = batch[61] >> 1
    second = 61 + 1 + first_len
    assert batch[second + 3] == 2
    batch[second + 3] = 6
    assert check_produced_records(_recrc(batch))[:2] == (1, 3)


def test_damaged_records_fail_as_decode_records_fails():
    rng = random.Random(7)
    base = build_batch([(bytes([i]) * (i % 5), b"v" * (i * 3), (("k", b"x"),) * (i % 3), 1000 + i)
                        for i in range(12)])
    for _ in range(3000):
        buf = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(61, len(buf))] = rng.randrange(256)
        _recrc(buf)
        try:
            decode_records(bytes(buf), 0)
            expected = None
        except CorruptRecordError as exc:
            expected = exc
        try:
            check_produced_records(buf)
            got = None
        except CorruptRecordError as exc:
            got = exc
        assert (expected is None) == (got is None), (expected, got)
