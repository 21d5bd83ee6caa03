"""batches_to_arrow: schema, filters, transactions, and validation of corrupt input by the C scanner."""
import os
import random
import time

import pyarrow as pa
import pytest

from logcore.errors import CorruptRecordError, UnsupportedMagicError
from logcore.records import (
    Compression, ControlType, TimestampType, batches_to_arrow, build_batch, build_control_batch, decode_records,
    iter_batches,
)
from logcore.records.arrow import SCHEMA, SCHEMA_WITH_HEADERS, BufferRecycler, decode_batches, record_columns

from test_batch import LAYOUT_CASES, raw_batch


def test_schema_is_exactly_the_kafka_source_schema():
    data = build_batch([(b"k", b"v", (("h", b"1"),), 1000)])
    assert batches_to_arrow(data).schema == SCHEMA
    t = batches_to_arrow(data, include_headers=True)
    assert t.schema == SCHEMA_WITH_HEADERS
    assert str(t.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    assert t.schema.field("headers").type == pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    assert all(f.nullable for f in t.schema)


def test_empty_input_gives_an_empty_batch():
    for data in (b"", bytearray(), memoryview(b"")):
        t = batches_to_arrow(data, include_headers=True)
        assert t.num_rows == 0 and t.schema == SCHEMA_WITH_HEADERS


def test_values_nulls_headers_and_timestamps():
    data = build_batch([(None, b"a", (), 1), (b"k", None, (("x", None), ("y", b"")), 2)], base_offset=10,
                       compression=Compression.ZSTD)
    data += build_batch([(b"z", b"b", (), 3)], base_offset=12, timestamp_type=TimestampType.LOG_APPEND_TIME,
                        log_append_time=50)
    t = batches_to_arrow(memoryview(bytearray(data)), include_headers=True)
    assert t.column("offset").to_pylist() == [10, 11, 12]
    assert t.column("timestamp").cast(pa.int64()).to_pylist() == [1000, 2000, 50_000]
    assert t.column("timestampType").to_pylist() == [0, 0, 1]
    assert t.column("key").to_pylist() == [None, b"k", b"z"]
    assert t.column("value").to_pylist() == [b"a", None, b"b"]
    assert t.column("headers").to_pylist() == [None, [{"key": "x", "value": None}, {"key": "y", "value": b""}], None]


def test_control_batches_skipped_and_aborted_transactions_dropped():
    def txn(pid, base, values):
        return build_batch([(None, v, (), 1) for v in values], base_offset=base, producer_id=pid, producer_epoch=0,
                           base_sequence=0, is_transactional=True)
    data = b"".join([
        txn(1, 0, [b"a1", b"a2"]),                 # aborted below
        txn(2, 2, [b"c1"]),                        # committed
        build_batch([(None, b"plain", (), 1)], base_offset=3, producer_id=1, producer_epoch=0, base_sequence=9),
        build_control_batch(ControlType.ABORT, producer_id=1, producer_epoch=0, base_offset=4, timestamp_ms=1),
        build_control_batch(ControlType.COMMIT, producer_id=2, producer_epoch=0, base_offset=5, timestamp_ms=1),
        txn(1, 6, [b"a3"]),                        # a later transaction of producer 1: visible
    ])
    assert batches_to_arrow(data).column("value").to_pylist() == [b"a1", b"a2", b"c1", b"plain", b"a3"]
    t = batches_to_arrow(data, aborted=[(1, 0, 4)])
    assert t.column("value").to_pylist() == [b"c1", b"plain", b"a3"]
    assert t.column("offset").to_pylist() == [2, 3, 6]


def test_offset_range_filter_is_half_open():
    data = b"".join(build_batch([(None, b"%d" % (i + j), (), 1) for j in range(5)], base_offset=i, compression=c)
                    for i, c in zip(range(0, 25, 5), Compression))
    t = batches_to_arrow(data, min_offset=3, max_offset=17)
    assert t.column("offset").to_pylist() == list(range(3, 17))


def test_partial_tail_is_ignored_and_errors_name_file_and_position():
    a = build_batch([(b"k", b"v", (), 1)])
    b = build_batch([(b"k", b"w", (), 1)], base_offset=1)
    assert batches_to_arrow(a + b[:-3]).num_rows == 1
    bad = bytearray(a + b)
    bad[len(a) + 64] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC") as info:
        batches_to_arrow(bad, source="t-0/0.log", base_position=4096)
    assert (info.value.file, info.value.position) == ("t-0/0.log", 4096 + len(a))
    legacy = bytearray(b)
    legacy[16] = 1
    with pytest.raises(UnsupportedMagicError, match="position 12"):
        batches_to_arrow(a + bytes(legacy), base_position=12 - len(a))


@pytest.mark.parametrize("name", list(LAYOUT_CASES))
def test_c_scanner_rejects_what_the_python_decoder_rejects(name):
    section, count, _ = LAYOUT_CASES[name]
    good = build_batch([(b"ok", b"ok", (), 1)])
    data = good + raw_batch(section, count=count)
    for include_headers in (False, True):
        with pytest.raises(CorruptRecordError, match="record") as info:
            batches_to_arrow(data, source="s.log", base_position=7, include_headers=include_headers)
        assert (info.value.file, info.value.position) == ("s.log", 7 + len(good))


@pytest.mark.parametrize("name", list(LAYOUT_CASES))
def test_produce_validation_without_data_copies_rejects_the_same(name):
    """record_columns (the produce path) validates every record without copying keys and values."""
    section, count, _ = LAYOUT_CASES[name]
    with pytest.raises(CorruptRecordError, match="record") as info:
        record_columns(raw_batch(section, count=count), source="p", base_position=3)
    assert (info.value.file, info.value.position) == ("p", 3)


def test_produce_validation_columns_match_the_full_decode():
    batch = build_batch([(None, b"v0", (), 10), (b"k1", None, (("h", b"x"),), 12), (b"k2", b"v2" * 50, (), 11)],
                        base_offset=40, compression=Compression.NONE)
    cols = record_columns(batch)
    full = batches_to_arrow(batch)
    assert cols.rows == 3 and list(cols.offsets) == full.column("offset").to_pylist() == [40, 41, 42]
    assert list(cols.timestamps_ms) == [10, 12, 11]
    assert cols.key_nulls == 1


def test_corrupt_compressed_stream_reports_the_batch_position():
    good = build_batch([(b"ok", b"ok", (), 1)])
    section = os.urandom(40)
    bad = raw_batch(section, count=1, attributes=int(Compression.LZ4))
    with pytest.raises(CorruptRecordError, match="lz4") as info:
        batches_to_arrow(good + bad, source="c.log")
    assert info.value.position == len(good)


def _both_decoders(data: bytes):
    """Outcome of the Python decoder and of the C path: the rows, or 'corrupt'."""
    try:
        expected = [(r.offset, r.key, r.value) for pos, h in iter_batches(data) if not h.is_control
                    for r in decode_records(data, pos, h) if r.offset >= 0]  # batches_to_arrow's default min_offset
    except CorruptRecordError:
        expected = "corrupt"
    try:
        t = batches_to_arrow(data, include_headers=True)
        t.validate(full=True)
        got = list(zip(t.column("offset").to_pylist(), t.column("key").to_pylist(), t.column("value").to_pylist()))
    except CorruptRecordError:
        got = "corrupt"
    return expected, got


def test_fuzz_mutated_sections_with_valid_crc():
    """Random mutations of record sections (CRC recomputed so the C scanner sees them): no crash, same verdict."""
    rng = random.Random(1234)
    records = [(b"key%d" % i if i % 3 else None, os.urandom(i % 40) if i % 5 else None,
                (("h", b"v"), ("n", None)) if i % 2 else (), i) for i in range(12)]
    seed_section = build_batch(records)[61:]
    deadline = time.monotonic() + 8
    runs = 0
    while time.monotonic() < deadline:
        section = bytearray(seed_section)
        for _ in range(rng.randint(1, 6)):
            op = rng.random()
            i = rng.randrange(len(section) + 1)
            if op < 0.5 and section:
                section[min(i, len(section) - 1)] = rng.randrange(256)
            elif op < 0.75:
                section[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            else:
                del section[i:i + rng.randint(1, 8)]
        count = rng.choice([12, 12, 12, rng.randint(0, 20)])
        data = raw_batch(bytes(section), count=count, last_delta=11)
        expected, got = _both_decoders(data)
        assert got == expected
        runs += 1
    assert runs > 100


def test_fuzz_random_bytes_never_crash():
    rng = random.Random(99)
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        section = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        data = raw_batch(section, count=rng.randint(0, 40), last_delta=0)
        expected, got = _both_decoders(data)
        assert got == expected
        garbage = bytes(rng.randrange(256) for _ in range(rng.randint(0, 120)))
        try:
            batches_to_arrow(garbage)
        except CorruptRecordError:
            pass


def test_decoder_fills_buffers_from_the_given_allocator_and_cuts_them_to_size():
    from logcore.records import _fastcodec
    data = build_batch([(b"k%d" % i, b"value-%d" % i if i % 3 else None, (), 1000 + i) for i in range(50)],
                       base_offset=7)
    section = [(data, 61, len(data), 7, 1000, 1049, 0, 50)]
    plain = _fastcodec.decode_sections(section, 0, 1 << 62, False)
    sizes = []

    def allocate(n):
        sizes.append(n)
        return bytearray(b"\xee" * n)      # garbage: every byte used must be written by the decoder
    pooled = _fastcodec.decode_sections(section, 10, 40, False, allocate)
    assert len(sizes) == 9 and all(n >= 64 for n in sizes)
    assert pooled[0] == 30
    cut = _fastcodec.decode_sections(section, 10, 40, False)
    for a, b in zip(pooled[1:12], cut[1:12]):
        assert bytes(a) == bytes(b)         # same bytes, each cut to its used length
    assert plain[0] == 50
    pool = batches_to_arrow(data, min_offset=10, max_offset=40)   # the pyarrow pool path
    assert pool.column("offset").to_pylist() == list(range(10, 40))
    assert pool.column("value").to_pylist() == [b"value-%d" % i if i % 3 else None for i in range(3, 33)]

    with pytest.raises(ValueError, match="allocate"):
        _fastcodec.decode_sections(section, 0, 1 << 62, False, lambda n: bytearray(n - 1))
    with pytest.raises(BufferError):
        _fastcodec.decode_sections(section, 0, 1 << 62, False, lambda n: b"x" * n)   # read-only


def _flip(data: bytes, at: int) -> bytearray:
    bad = bytearray(data)
    bad[at] ^= 0x01
    return bad


def test_every_batch_is_crc_checked_whether_decoded_or_skipped():
    """The decoder checks CRCs batch by batch: batches it skips (control, aborted, out of the
    offset range) and compressed ones (before decompressing) are checked all the same."""
    plain = build_batch([(b"k", b"v%d" % i, (), 1) for i in range(3)], base_offset=0)
    control = build_control_batch(ControlType.COMMIT, producer_id=2, producer_epoch=0, base_offset=3, timestamp_ms=1)
    zstd = build_batch([(b"k", b"z", (), 1)], base_offset=4, compression=Compression.ZSTD)
    aborted = build_batch([(None, b"a", (), 1)], base_offset=5, producer_id=1, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
    tail = build_batch([(b"k", b"t", (), 1)], base_offset=6)
    parts = [plain, control, zstd, aborted, tail]
    data = b"".join(parts)
    t = batches_to_arrow(data, min_offset=1, aborted=[(1, 5, 5)])
    assert t.column("offset").to_pylist() == [1, 2, 4, 6]
    for i, part in enumerate(parts):
        start = sum(len(p) for p in parts[:i])
        for at in (start + 30, start + len(part) - 1):         # a header field, the last record byte
            with pytest.raises(CorruptRecordError, match="^CRC mismatch") as info:
                batches_to_arrow(_flip(data, at), min_offset=1, aborted=[(1, 5, 5)], source="x.log",
                                 base_position=100)
            assert (info.value.file, info.value.position) == ("x.log", 100 + start)
    # Skipped because it lies wholly below min_offset: still checked.
    with pytest.raises(CorruptRecordError, match="CRC"):
        batches_to_arrow(_flip(data, len(plain) - 1), min_offset=3)


def test_decode_batches_gives_the_next_offset_past_trailing_control_batches():
    data = (build_batch([(b"k", b"v", (), 1), (b"k", b"w", (), 1)], base_offset=10)
            + build_control_batch(ControlType.ABORT, producer_id=1, producer_epoch=0, base_offset=12, timestamp_ms=1))
    decoded = decode_batches(data + data[:20])          # a partial batch at the end is not counted
    assert decoded.batch.column("offset").to_pylist() == [10, 11]
    assert decoded.next_offset == 13
    assert decode_batches(b"").next_offset == -1
    assert decode_batches(data, max_offset=11).batch.num_rows == 1


def test_buffer_recycler_reuses_only_buffers_no_array_holds():
    data = build_batch([(b"key-%d" % i, b"value-%d" % i * 10, (), i) for i in range(500)])
    recycler = BufferRecycler()
    first = decode_batches(data, allocate=recycler).batch
    held = len(recycler._held)
    assert held > 0
    second = decode_batches(data, allocate=recycler).batch
    assert len(recycler._held) > held             # the first batch's buffers were still in use
    assert second.equals(first) and first.equals(batches_to_arrow(data))
    expected = first.to_pylist()
    count = len(recycler._held)
    del second
    third = decode_batches(data, allocate=recycler).batch
    assert len(recycler._held) == count           # the second batch's buffers came back
    assert first.to_pylist() == expected == third.to_pylist()   # reuse never overwrote a live batch
    small = BufferRecycler(max_buffers=3, max_bytes=1 << 30)
    batches = [decode_batches(data, allocate=small).batch for _ in range(3)]
    assert len(small._held) <= 3 and all(b.to_pylist() == expected for b in batches)
