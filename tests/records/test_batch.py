"""Batch layout, header fields, in-place edits and validation of RecordBatch v2."""
import struct

import pytest
from crc32c import crc32c

from logcore.errors import CorruptRecordError, InvalidRecordError, UnsupportedMagicError
from logcore.records import (
    BatchHeader, Compression, ControlType, EndTransactionMarker, Record, TimestampType, build_batch,
    build_control_batch, decode_records, iter_batches, parse_header, set_base_offset, set_log_append_time,
    set_partition_leader_epoch,
)
from logcore.records.varint import encode_varint, encode_varlong

HEADER = struct.Struct(">qiibIhiqqqhii")


def raw_batch(section: bytes, *, count: int, attributes: int = 0, base_offset: int = 0, last_delta: int | None = None,
              base_ts: int = 1000, max_ts: int = 1000, magic: int = 2) -> bytes:
    """A batch around a hand-made record section, with a correct CRC (independent of logcore)."""
    body = bytearray(61) + section
    HEADER.pack_into(body, 0, base_offset, len(body) - 12, 0, magic, 0, attributes,
                     count - 1 if last_delta is None else last_delta, base_ts, max_ts, -1, -1, -1, count)
    struct.pack_into(">I", body, 17, crc32c(bytes(body[21:])))
    return bytes(body)


def raw_record(*, offset_delta=0, ts_delta=0, key=b"k", value=b"v", headers=(), header_count=None,
               length_adjust=0, extra=b"") -> bytes:
    body = b"\x00" + encode_varlong(ts_delta) + encode_varint(offset_delta)
    for field in (key, value):
        body += b"\x01" if field is None else encode_varint(len(field)) + field
    body += encode_varint(len(headers) if header_count is None else header_count)
    for k, v in headers:
        body += encode_varint(len(k)) + k + (b"\x01" if v is None else encode_varint(len(v)) + v)
    body += extra
    return encode_varint(len(body) + length_adjust) + body


def test_header_fields_and_properties():
    data = build_batch([(b"a", b"1", (), 5000), (None, b"2", (), 7000), (b"c", None, (), 6000)],
                       base_offset=42, producer_id=99, producer_epoch=3, base_sequence=10,
                       is_transactional=True, partition_leader_epoch=7, compression=Compression.GZIP)
    h = parse_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.magic, h.last_offset_delta) == (42, 7, 2, 2)
    assert (h.base_timestamp, h.max_timestamp, h.records_count) == (5000, 7000, 3)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (99, 3, 10, 12)
    assert h.size == len(data) and h.batch_length == len(data) - 12
    assert (h.last_offset, h.next_offset) == (44, 45)
    assert h.compression is Compression.GZIP and h.is_transactional and not h.is_control
    assert h.timestamp_type is TimestampType.CREATE_TIME and h.delete_horizon_ms == -1
    assert h.crc == crc32c(data[21:])
    records = decode_records(data, 0)
    assert records[1] == Record(43, 7000, None, b"2", (), 11)


def test_last_sequence_wraps_at_int32_max():
    data = build_batch([(None, b"x", (), 0)] * 5, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    h = parse_header(data)
    assert h.last_sequence == 2
    assert [r.sequence for r in decode_records(data, 0)] == [2**31 - 2, 2**31 - 1, 0, 1, 2]
    assert parse_header(build_batch([(None, b"x", (), 0)])).last_sequence == -1


def test_log_append_time_reports_max_timestamp_for_every_record():
    data = build_batch([(None, b"x", (), 10), (None, b"y", (), 20)], timestamp_type=TimestampType.LOG_APPEND_TIME,
                       log_append_time=99_000)
    h = parse_header(data)
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME and h.max_timestamp == 99_000
    assert [r.timestamp for r in decode_records(data, 0)] == [99_000, 99_000]


def test_delete_horizon_sets_bit_and_keeps_record_timestamps():
    data = build_batch([(b"k", None, (), 500), (b"j", b"v", (), 700)], delete_horizon_ms=10_000)
    h = parse_header(data)
    assert h.has_delete_horizon and h.delete_horizon_ms == 10_000 and h.base_timestamp == 10_000
    assert [r.timestamp for r in decode_records(data, 0)] == [500, 700]


def test_headers_null_values_and_null_keys():
    data = build_batch([(b"k", b"v", (("a", b"1"), ("b", None), ("é", b"")), 1)])
    assert decode_records(data, 0)[0].headers == (("a", b"1"), ("b", None), ("é", b""))
    with pytest.raises(InvalidRecordError, match="header keys"):
        build_batch([(b"k", b"v", ((None, b"x"),), 1)])


def test_control_batch_layout():
    data = build_control_batch(ControlType.ABORT, producer_id=5, producer_epoch=2, coordinator_epoch=9,
                               base_offset=100, timestamp_ms=1234, partition_leader_epoch=3)
    h = parse_header(data)
    assert h.is_control and h.is_transactional and h.compression is Compression.NONE
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (5, 2, -1, 1)
    (rec,) = decode_records(data, 0)
    assert rec.key == struct.pack(">hh", 0, 0) and rec.value == struct.pack(">hi", 0, 9)
    assert EndTransactionMarker.decode(rec.key, rec.value) == EndTransactionMarker(ControlType.ABORT, 9)
    commit = decode_records(build_control_batch(ControlType.COMMIT, producer_id=5, producer_epoch=2,
                                                timestamp_ms=1), 0)[0]
    assert EndTransactionMarker.decode(commit.key, commit.value).control_type is ControlType.COMMIT


def test_in_place_edits():
    data = bytearray(build_batch([(b"k", b"v", (), 1), (b"k", b"w", (), 3)]))
    crc = parse_header(data).crc
    set_base_offset(data, 1000)
    set_partition_leader_epoch(data, 17)
    h = parse_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (1000, 17, crc)
    assert [r.offset for r in decode_records(data, 0)] == [1000, 1001]
    set_log_append_time(memoryview(data), 77_777)
    h = parse_header(data)
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME and h.max_timestamp == 77_777
    assert h.crc == crc32c(bytes(data[21:])) != crc
    assert [r.timestamp for r in decode_records(data, 0)] == [77_777, 77_777]


def test_in_place_edits_at_a_position():
    first = build_batch([(b"a", b"b", (), 1)])
    data = bytearray(first + build_batch([(b"c", b"d", (), 2)]))
    set_base_offset(data, 5, pos=len(first))
    set_log_append_time(data, 9, pos=len(first))
    headers = [h for _, h in iter_batches(data)]
    assert [h.base_offset for h in headers] == [0, 5] and headers[1].max_timestamp == 9


def test_iter_batches_positions_and_partial_tail():
    batches = [build_batch([(b"k", b"v" * i, (), i)], base_offset=i) for i in range(1, 4)]
    data = b"".join(batches)
    found = list(iter_batches(data, source="x.log"))
    assert [pos for pos, _ in found] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert [h.base_offset for _, h in found] == [1, 2, 3]
    for cut in (1, 16, 17, 60, len(batches[2]) - 1):
        partial = data[:len(data) - cut]
        assert len(list(iter_batches(partial))) == 2
        with pytest.raises(CorruptRecordError, match=f"position {len(batches[0]) + len(batches[1])}"):
            list(iter_batches(partial, source="x.log", allow_partial_tail=False))


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_rejected_with_file_and_position(magic):
    good = build_batch([(b"k", b"v", (), 1)])
    legacy = bytearray(build_batch([(b"k", b"v", (), 1)]))
    legacy[16] = magic
    with pytest.raises(UnsupportedMagicError) as info:
        list(iter_batches(good + bytes(legacy), source="t-0/00000000000000000000.log", base_position=1000))
    assert info.value.file == "t-0/00000000000000000000.log" and info.value.position == 1000 + len(good)
    assert "t-0/00000000000000000000.log" in str(info.value) and str(1000 + len(good)) in str(info.value)
    assert f"magic {magic}" in str(info.value)


def test_bad_sizes_and_magic():
    good = bytearray(build_batch([(b"k", b"v", (), 1)]))
    small = bytearray(good)
    struct.pack_into(">i", small, 8, 13)
    with pytest.raises(CorruptRecordError, match="smaller than the minimum"):
        list(iter_batches(small))
    header_only = bytearray(good)
    struct.pack_into(">i", header_only, 8, 30)
    with pytest.raises(CorruptRecordError, match="61-byte header"):
        list(iter_batches(header_only))
    future = bytearray(good)
    future[16] = 3
    with pytest.raises(CorruptRecordError, match="magic 3"):
        list(iter_batches(future))


def test_every_bit_flip_inside_the_crc_range_is_caught_with_the_position():
    prefix = build_batch([(b"a", b"b", (), 1)])
    batch = build_batch([(b"key", b"value", (("h", b"v"),), 5), (None, b"x" * 40, (), 9)],
                        producer_id=3, producer_epoch=1, base_sequence=0)
    for byte in range(17, len(batch)):
        for bit in (0, 3, 7):
            data = bytearray(prefix + batch)
            data[len(prefix) + byte] ^= 1 << bit
            with pytest.raises(CorruptRecordError) as info:
                for pos, h in iter_batches(data, source="f.log", base_position=10):
                    decode_records(data, pos, h, source="f.log", base_position=10)
            assert info.value.file == "f.log" and info.value.position == 10 + len(prefix)


def test_bit_flips_outside_the_crc_never_crash():
    batch = build_batch([(b"key", b"value", (), 5)], base_offset=7)
    for byte in range(0, 17):
        for bit in range(8):
            data = bytearray(batch)
            data[byte] ^= 1 << bit
            try:
                for pos, h in iter_batches(data, allow_partial_tail=False):
                    decode_records(data, pos, h)
            except CorruptRecordError:
                pass


def test_truncated_batch_is_corrupt_for_decode_records():
    data = build_batch([(b"k", b"v" * 100, (), 1)])
    for cut in (1, 50, len(data) - 20):
        with pytest.raises(CorruptRecordError, match="position 0"):
            decode_records(data[:-cut], 0)


LAYOUT_CASES = {
    "record length too long": (raw_record(length_adjust=1), 1, "does not fit"),
    "record length too short": (raw_record(length_adjust=-1), 1, "record"),
    "trailing bytes": (raw_record() + b"\x00", 1, "trailing"),
    "missing record": (raw_record(), 2, "record 1"),
    "negative header count": (raw_record(header_count=-1), 1, "negative header count"),
    "header count past the end": (raw_record(header_count=50), 1, "header count"),
    "long varint": (b"\x80\x80\x80\x80\x80\x01" + raw_record(), 1, "longer than 5"),
    "long varlong": (encode_varint(16) + b"\x00" + b"\x81" * 10 + b"\x00" * 5, 1, "longer than 10"),
    "negative key length": (raw_record(key=None).replace(b"\x01", b"\x03", 1), 1, "record 0"),
    "null header key": (raw_record(headers=((b"h", b"v"),)).replace(b"\x02h", b"\x01h"), 1, "record 0"),
    "bad utf-8 header key": (raw_record(headers=((b"\xff", b"v"),)), 1, "record 0"),
    "extra bytes inside a record": (raw_record(extra=b"\x00\x00"), 1, "record 0"),
}


@pytest.mark.parametrize("name", list(LAYOUT_CASES))
def test_record_layout_errors(name):
    section, count, message = LAYOUT_CASES[name]
    data = build_batch([(b"ok", b"ok", (), 1)]) + raw_batch(section, count=count)
    pos, header = list(iter_batches(data))[1]
    with pytest.raises(CorruptRecordError, match=message) as info:
        decode_records(data, pos, header, source="s.log", base_position=100)
    assert info.value.position == 100 + pos and info.value.file == "s.log"


def test_raw_helper_builds_valid_batches():
    data = raw_batch(raw_record(key=None, headers=((b"h", None),)) + raw_record(offset_delta=1, value=None), count=2)
    assert [(r.key, r.value, r.headers) for r in decode_records(data, 0)] == [
        (None, b"v", (("h", None),)), (b"k", None, ())]


def test_build_batch_accepts_record_objects_and_rejects_empty():
    data = build_batch([Record(0, 5, b"k", b"v", (("a", b"b"),))])
    assert decode_records(data, 0)[0].headers == (("a", b"b"),)
    with pytest.raises(InvalidRecordError):
        build_batch([])
    assert isinstance(parse_header(data), BatchHeader)


# ------------------------------------------------------------------ batch_fields (bulk header scan)

from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 300), st.integers(-1, 2**40),
                          st.booleans()), min_size=0, max_size=12),
       st.integers(0, 10_000))
def test_batch_fields_match_iter_batches(specs, flip):
    from logcore.records.batch import batch_fields
    data = bytearray()
    for count, size, ts, idempotent in specs:
        records = [(b"k", b"v" * size, (), ts) for _ in range(count)]
        extra = {"producer_id": 9, "producer_epoch": 0, "base_sequence": 0} if idempotent else {}
        data += build_batch(records, base_offset=len(data), **extra)
    fields = batch_fields(bytes(data))
    expected = [(p, h.size, h.base_offset, h.last_offset_delta, h.max_timestamp, h.producer_id, h.attributes,
                 h.base_timestamp, h.records_count) for p, h in iter_batches(bytes(data))]
    assert fields.tolist() == [list(e) for e in expected]
    if data:
        # One flipped byte: both scanners agree on whether and where the buffer is corrupt.
        pos = flip % len(data)
        data[pos] ^= 0x5A
        try:
            list(iter_batches(bytes(data), allow_partial_tail=False))
            py_error = None
        except CorruptRecordError as exc:
            py_error = exc.position
        try:
            batch_fields(bytes(data), source="staged")
            c_error = None
        except CorruptRecordError as exc:
            c_error = exc.position
            assert "staged" in str(exc)
        assert (py_error is None) == (c_error is None)
        if py_error is not None:
            assert py_error == c_error
        # A cut anywhere: with allow_partial_tail both stop at the last whole batch.
        cut = bytes(data[:pos])
        try:
            py_rows = [p for p, _ in iter_batches(cut)]
        except CorruptRecordError:
            py_rows = None
        try:
            c_rows = batch_fields(cut, allow_partial_tail=True)[:, 0].tolist()
        except CorruptRecordError:
            c_rows = None
        assert py_rows == c_rows


@pytest.mark.parametrize("source", list(Compression))
@pytest.mark.parametrize("target", list(Compression))
def test_recompress_batch_changes_the_codec_only(source, target):
    from logcore.records.batch import HEADER_SIZE, recompress_batch
    from logcore.records.compression import compress, decompress
    records = [(b"k%d" % i, b"value %d" % i * 3, (("h", b"x"),), 1_700_000_000_000 + 7 * i) for i in range(200)]
    batch = build_batch(records, compression=source, producer_id=3, producer_epoch=1, base_sequence=40,
                        is_transactional=True, partition_leader_epoch=5)
    out = recompress_batch(batch, target, 1 if target in (Compression.GZIP, Compression.ZSTD) else None)
    [(_, h)] = list(iter_batches(out, allow_partial_tail=False))       # a valid CRC
    before = parse_header(batch)
    assert h.compression == target
    assert h.attributes & ~7 == before.attributes & ~7
    for name in ("base_offset", "partition_leader_epoch", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "records_count"):
        assert getattr(h, name) == getattr(before, name), name
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decode_records(out, 0)] == \
        [(r.key, r.value, r.headers, r.timestamp) for r in decode_records(batch, 0)]
    if target in (Compression.GZIP, Compression.ZSTD):
        section = bytes(out[HEADER_SIZE:])
        assert section == compress(target, decompress(target, section), 1)
