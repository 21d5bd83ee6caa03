"""The C codecs' CRC-32C (three interleaved lanes for long inputs) against the crc32c package,
for batch lengths on both sides of every lane boundary."""
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from logcore.errors import CorruptRecordError
from logcore.records.batch import batch_fields
from logcore.records.crc import crc32c
from logcore.records.encode import encode_batch_run

# Lanes of 256 and 4096 bytes: three of them are one round; probe around multiples of both.
_EDGES = sorted({k * r + d for r in (768, 12288) for k in range(1, 4) for d in (-9, -8, -1, 0, 1, 7, 8)})


def _one_batch(value_size: int, seed: int) -> bytes:
    value = np.random.default_rng(seed).integers(0, 256, value_size, dtype=np.uint8).tobytes()
    data, count = encode_batch_run(pa.array([b"k"]), pa.array([value]), np.array([1], dtype=np.int64),
                                   batch_bytes=1 << 30)
    assert count == 1
    return data


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.sampled_from(_EDGES), st.integers(0, 60_000)), st.integers(0, 2**32 - 1))
def test_encoded_crc_matches_the_reference(value_size, seed):
    data = _one_batch(value_size, seed)
    assert struct.unpack_from(">I", data, 17)[0] == crc32c(data[21:])
    batch_fields(data)          # the scan's check agrees


@pytest.mark.parametrize("value_size", [700, 12_300, 50_000])
def test_scan_detects_a_flipped_byte_in_every_lane(value_size):
    data = _one_batch(value_size, 7)
    for at in (21, len(data) // 3, len(data) // 2, 2 * len(data) // 3, len(data) - 1):
        bad = bytearray(data)
        bad[at] ^= 0x10
        with pytest.raises(CorruptRecordError):
            batch_fields(bytes(bad))
