"""Cross-checks both ways against kafka-python's independent RecordBatch v2 implementation."""
import struct

import pytest

kafka_codec = pytest.importorskip("kafka.codec", reason="kafka-python is not installed")
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

from logcore.records import (  # noqa: E402
    Compression, ControlType, EndTransactionMarker, TimestampType, batches_to_arrow, build_batch,
    build_control_batch, crc32c, decode_records, iter_batches, parse_header,
)

SUPPORT = {Compression.NONE: True, Compression.GZIP: kafka_codec.has_gzip(),
           Compression.SNAPPY: kafka_codec.has_snappy(), Compression.LZ4: kafka_codec.has_lz4(),
           Compression.ZSTD: kafka_codec.has_zstd()}


def codec_param(codec):
    return pytest.param(codec, id=codec.name.lower(), marks=pytest.mark.skipif(
        not SUPPORT[codec], reason=f"kafka-python lacks its {codec.name.lower()} codec (needs python-snappy/lz4/zstandard)"))


CODECS = [codec_param(c) for c in Compression]

RECORDS = [
    (b"key-%d" % i if i % 4 else None,
     (b"value %d " % i) * (i % 7) if i % 5 else None,
     [("trace", b"t%d" % i), ("empty", b""), ("null", None)][: i % 4],
     1_700_000_000_000 + 37 * i)
    for i in range(60)
]


def kafka_python_batch(codec, *, producer=(-1, -1, -1), transactional=False):
    pid, epoch, seq = producer
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=transactional,
                                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                        batch_size=1 << 20)
    for i, (key, value, headers, ts) in enumerate(RECORDS):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    data = bytes(builder.build())
    assert data[22] & 0x07 == int(codec)  # the builder silently falls back to none when compression does not help
    return data


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("transactional", [False, True])
def test_kafka_python_batches_decode_with_seglog(codec, transactional):
    data = kafka_python_batch(codec, producer=(4242, 3, 2**31 - 20), transactional=transactional)
    (pos, h), = list(iter_batches(data, allow_partial_tail=False))
    assert (h.compression, h.producer_id, h.producer_epoch, h.base_sequence) == (codec, 4242, 3, 2**31 - 20)
    assert h.is_transactional == transactional and h.records_count == len(RECORDS)
    assert h.last_sequence == DefaultRecordBatch(data).last_sequence
    records = decode_records(data, pos, h)
    assert [(r.key, r.value, r.headers, r.timestamp, r.offset) for r in records] == [
        (k, v, tuple(hs), ts, i) for i, (k, v, hs, ts) in enumerate(RECORDS)]
    assert [r.sequence for r in records][-1] == h.last_sequence
    table = batches_to_arrow(data, include_headers=True)
    assert table.column("value").to_pylist() == [v for _, v, _, _ in RECORDS]
    assert table.column("headers").to_pylist() == [
        [{"key": k, "value": v} for k, v in hs] or None for _, _, hs, _ in RECORDS]


@pytest.mark.parametrize("codec", CODECS)
def test_seglog_batches_decode_with_kafka_python(codec):
    data = build_batch(RECORDS, compression=codec, base_offset=1000, producer_id=77, producer_epoch=1,
                       base_sequence=5, is_transactional=True, partition_leader_epoch=9)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert (batch.base_offset, batch.leader_epoch, batch.magic, batch.compression_type) == (1000, 9, 2, int(codec))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 1, 5)
    assert batch.is_transactional and not batch.is_control_batch
    assert (batch.last_offset_delta, batch.records_count, batch.max_timestamp) == (
        len(RECORDS) - 1, len(RECORDS), max(r[3] for r in RECORDS))
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(1000 + i, ts, k, v, list(hs)) for i, (k, v, hs, ts) in enumerate(RECORDS)]


def test_log_append_time_agrees():
    data = build_batch(RECORDS[:5], timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=123_456)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.timestamp_type == 1
    assert {r.timestamp for r in batch} == {123_456}


@pytest.mark.parametrize("control_type", [ControlType.ABORT, ControlType.COMMIT])
def test_seglog_control_batches_decode_with_kafka_python(control_type):
    data = build_control_batch(control_type, producer_id=11, producer_epoch=2, coordinator_epoch=6,
                               base_offset=50, timestamp_ms=999)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert record.type == int(control_type) and record.version == 0 and record.offset == 50
    assert struct.unpack(">hi", record.value) == (0, 6)


@pytest.mark.parametrize("control_type", [ControlType.ABORT, ControlType.COMMIT])
def test_kafka_python_built_control_batches_decode_with_seglog(control_type):
    # kafka-python has no control-batch builder: build the marker record with it, then set the control
    # bit and the CRC as a broker does.
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=11,
                                        producer_epoch=2, base_sequence=-1, batch_size=1 << 16)
    builder.append(0, timestamp=999, key=struct.pack(">hh", 0, int(control_type)), value=struct.pack(">hi", 0, 6),
                   headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x20)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    h = parse_header(data)
    assert h.is_control and h.is_transactional and h.producer_id == 11
    (record,) = decode_records(bytes(data), 0)
    assert EndTransactionMarker.decode(record.key, record.value) == EndTransactionMarker(control_type, 6)
    mixed = kafka_python_batch(Compression.NONE) + bytes(data)
    assert batches_to_arrow(mixed).num_rows == len(RECORDS)


def test_kafka_python_reads_a_seglog_segment_of_many_batches():
    segment = b"".join(build_batch(RECORDS[i:i + 10], base_offset=i, compression=codec)
                       for i, codec in zip(range(0, 60, 10), [c for c in Compression if SUPPORT[c]] * 2))
    records = MemoryRecords(segment)
    offsets = []
    while records.has_next():
        offsets += [r.offset for r in records.next_batch()]
    assert offsets == list(range(60))
