"""check_produced_records (the produce path's one C call) agrees with decode_records on valid
and damaged batches, and reports offset deltas, null keys and the timestamp range."""
from __future__ import annotations

import random
import struct

import pytest

from logcore.errors import CorruptRecordError, UnsupportedMagicError
from logcore.records import build_batch
from logcore.records.batch import check_inflated_records, check_produced_records, decode_records, parse_header
from logcore.records.compression import Compression, decompress
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


def _damaged_batches(seed: int, n: int):
    """`n` copies of one uncompressed batch with 1-3 random bytes of its records changed, the
    CRC made right again; each with decode_records' refusal of it (None: accepted)."""
    rng = random.Random(seed)
    base = build_batch([(bytes([i]) * (i % 5), b"v" * (i * 3), (("k", b"x"),) * (i % 3), 1000 + i)
                        for i in range(12)])
    for _ in range(n):
        buf = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(61, len(buf))] = rng.randrange(256)
        _recrc(buf)
        try:
            decode_records(bytes(buf), 0)
            yield buf, None
        except CorruptRecordError as exc:
            yield buf, exc


def test_damaged_records_fail_as_decode_records_fails():
    for buf, expected in _damaged_batches(7, 3000):
        try:
            check_produced_records(buf)
            got = None
        except CorruptRecordError as exc:
            got = exc
        assert (expected is None) == (got is None), (expected, got)


def _inflated(batch: bytes) -> tuple:
    """check_inflated_records' answer for a compressed batch, as the produce path calls it."""
    header = parse_header(batch)
    raw = decompress(header.attributes & 0x7, memoryview(batch)[61:])
    return check_inflated_records(raw, header.records_count, header.base_timestamp, header.max_timestamp,
                                  bool(header.attributes & 0x8), source="t-0 append")


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_inflated_records_answer_as_the_same_records_uncompressed(codec):
    rng = random.Random(int(codec))
    for _ in range(200):
        records = [(None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 20)),
                    None if rng.random() < 0.05 else rng.randbytes(rng.randrange(0, 300)),
                    tuple(("h", rng.randbytes(3)) for _ in range(rng.randrange(3))),
                    1_700_000_000_000 + rng.randrange(-5000, 5000)) for _ in range(rng.randrange(1, 60))]
        assert _inflated(build_batch(records, compression=codec)) == check_produced_records(build_batch(records))


def test_damaged_inflated_records_fail_as_decode_records_fails():
    """A records section damaged, given as a compressed batch's inflated records: refused exactly
    when decode_records refuses the same records in an uncompressed batch."""
    for buf, expected in _damaged_batches(11, 1500):
        header = parse_header(buf)
        try:
            got = check_inflated_records(bytes(buf[61:]), header.records_count, header.base_timestamp,
                                         header.max_timestamp, False)
            got = None
        except CorruptRecordError as exc:
            got = exc
        assert (expected is None) == (got is None), (expected, got)
        if got is not None:
            assert str(got).startswith("record ")
