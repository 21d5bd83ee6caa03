import gzip
import os
import random
import struct

import cramjam
import lz4.frame
import pytest

from logcore.errors import CorruptRecordError, RecordTooLargeError
from logcore.records.compression import Compression, codec_of, compress, decompress

PAYLOADS = [b"", b"x", os.urandom(1000), b"abc" * 50_000, os.urandom(70_000) + b"\x00" * 70_000]


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip(codec, payload):
    assert decompress(codec, compress(codec, payload)) == payload


def test_snappy_writes_xerial_framing_with_32k_blocks():
    data = os.urandom(100_000)
    out = compress(Compression.SNAPPY, data)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_blocks():
    data = b"hello snappy " * 1000
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_lz4_frame_has_independent_64k_blocks_and_no_checksums():
    out = compress(Compression.LZ4, os.urandom(200_000))
    assert out[:4] == b"\x04\x22\x4d\x18"
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1            # version 01
    assert flg & 0x20               # block independence
    assert not flg & 0x10           # no block checksum
    assert not flg & 0x04           # no content checksum
    assert not flg & 0x08           # no content size
    assert (bd >> 4) & 0x7 == 4     # 64 KiB max block


def test_lz4_linked_blocks_are_rejected():
    linked = lz4.frame.compress(b"a" * 200_000, block_linked=True)
    with pytest.raises(CorruptRecordError, match="dependent"):
        decompress(Compression.LZ4, linked)


def test_gzip_reads_concatenated_members():
    data = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, data) == b"first second"


def test_zstd_reads_frames_without_content_size():
    import zstandard
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"q" * 5000)
    assert decompress(Compression.ZSTD, frame + frame) == b"q" * 10000


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_raises_corrupt_record_error(codec):
    good = compress(codec, os.urandom(5000))
    for bad in (b"", b"\x00" * 20, good[: len(good) // 2]):
        with pytest.raises(CorruptRecordError):
            decompress(codec, bad)


def test_codec_names_and_ids():
    assert codec_of("ZSTD") is Compression.ZSTD and codec_of(2) is Compression.SNAPPY
    with pytest.raises(ValueError, match="brotli"):
        codec_of("brotli")
    with pytest.raises(CorruptRecordError, match="7"):
        codec_of(7)


def test_lz4_at_the_default_level_uses_the_fast_compressor_as_kafka_does():
    """Kafka's default lz4 level (9) means LZ4's fast compressor; another level, the
    high-compression one (about 20 times slower on a sink's records)."""
    data = b"".join(b'{"user":%d,"event":"click","pad":"%s"}' % (i, b"x" * (i % 50)) for i in range(20_000))
    fast = lz4.frame.compress(data, compression_level=0, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                              block_linked=False, content_checksum=False, store_size=False)
    assert compress(Compression.LZ4, data) == fast
    assert compress(Compression.LZ4, data, 9) == fast
    high = compress(Compression.LZ4, data, 10)
    assert high != fast and len(high) < len(fast)
    for out in (fast, high):
        assert decompress(Compression.LZ4, out) == data


LEVEL_ROWS = [(b"k%d" % i, b'{"user":%d,"event":"click","page":"/item/%d"}' % (i, i % 97), (), 1_700_000_000_000 + i)
              for i in range(3000)]


@pytest.mark.parametrize("codec, low, high", [(Compression.GZIP, 1, 9), (Compression.ZSTD, 1, 19),
                                              (Compression.LZ4, 9, 12)])
def test_the_level_given_to_batch_builders_reaches_the_codec(codec, low, high):
    """build_batch and encode_batches compress at `compression_level`: the records section is
    exactly the codec's output at that level, and the higher level is smaller."""
    import numpy as np
    import pyarrow as pa

    from logcore.records.batch import HEADER_SIZE, build_batch
    from logcore.records.encode import encode_batches

    keys = pa.array([k for k, _, _, _ in LEVEL_ROWS], pa.binary())
    values = pa.array([v for _, v, _, _ in LEVEL_ROWS], pa.binary())
    ts = np.array([t for *_, t in LEVEL_ROWS], dtype=np.int64)
    sizes = {}
    for level in (low, high):
        built = build_batch(LEVEL_ROWS, compression=codec, compression_level=level)
        [encoded] = encode_batches(keys, values, ts, compression=codec, compression_level=level, batch_bytes=1 << 24)
        for batch in (built, encoded):
            section = batch[HEADER_SIZE:]
            assert section == compress(codec, decompress(codec, section), level)
        sizes[level] = len(built)
    assert sizes[high] < sizes[low]


def test_lz4_levels_up_to_kafkas_maximum_compress():
    data = b"".join(v for _, v, _, _ in LEVEL_ROWS)
    for level in (1, 17):
        assert decompress(Compression.LZ4, compress(Compression.LZ4, data, level)) == data


def _zstd_frames():
    """zstd frames as producers write them: with and without the content size and checksum,
    one block and several, several frames in a row."""
    import zstandard
    rng = random.Random(5)
    letters = bytes(rng.randrange(65, 91) for _ in range(300_000))
    for size in (0, 1, 1000, 49_152, 131_072, 131_073, 300_000):
        for content_size in (True, False):
            for checksum in (True, False):
                cctx = zstandard.ZstdCompressor(write_content_size=content_size, write_checksum=checksum)
                yield letters[:size], cctx.compress(letters[:size])
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    yield letters[:5000] * 2, cctx.compress(letters[:5000]) + cctx.compress(letters[:5000])
    yield b"\0" * 200_000, cctx.compress(b"\0" * 200_000)


def test_bounded_zstd_inflates_what_zstd_inflates_and_refuses_one_byte_less():
    from logcore.records.compression import _zstd_frame_bound
    for payload, frame in _zstd_frames():
        assert decompress(Compression.ZSTD, frame, max_size=len(payload)) == payload
        assert decompress(Compression.ZSTD, frame, max_size=1 << 20) == payload
        bound = _zstd_frame_bound(memoryview(frame), 1 << 30)
        assert bound is None or bound >= len(payload)
        if payload:
            with pytest.raises(RecordTooLargeError):
                decompress(Compression.ZSTD, frame, max_size=len(payload) - 1)


def test_bounded_zstd_refuses_bombs_truncation_and_trailing_garbage():
    import zstandard
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (256 << 20))
    with pytest.raises(RecordTooLargeError):
        decompress(Compression.ZSTD, bomb, max_size=256 << 10)
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(os.urandom(50_000))
    with pytest.raises(CorruptRecordError, match="truncated"):
        decompress(Compression.ZSTD, frame[:-10], max_size=1 << 20)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, frame + b"xyz", max_size=1 << 20)
