"""LogValidator on compressed client batches: inflated and checked in C (check_inflated_records),
with the same answers and refusals as the same records uncompressed."""
from __future__ import annotations

import os

import pytest

from logcore.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, RejectedRecordsError
from logcore.log.config import LogConfig
from logcore.log.log_validator import ON_LOOP_INFLATION, LogValidator, _WouldBlock
from logcore.records.batch import build_batch
from logcore.records.compression import Compression
from logcore.records.crc import crc32c

NOW = 1_700_000_000_000
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def _validator(**props) -> LogValidator:
    return LogValidator("t", 0, LogConfig.from_props({k.replace("_", "."): str(v) for k, v in props.items()}))


@pytest.mark.parametrize("codec", CODECS)
def test_a_compressed_batch_is_accepted_with_its_header_fields(codec):
    records = [(b"k%d" % i, os.urandom(100), (("h", b"v"),), NOW + i) for i in range(50)]
    batch = build_batch(records, compression=codec)
    assert _validator().validate(bytearray(batch), NOW, nonblocking=True)[-1] == 50


@pytest.mark.parametrize("codec", CODECS)
def test_a_compressed_record_outside_the_timestamp_bounds_is_named(codec):
    records = [(b"k", b"v", (), NOW), (b"k", b"v", (), NOW - 7_200_000), (b"k", b"v", (), NOW)]
    batch = build_batch(records, compression=codec)
    with pytest.raises(InvalidRecordError, match=f"record timestamp {NOW - 7_200_000} is outside"):
        _validator(message_timestamp_before_max_ms=3_600_000).validate(bytearray(batch), NOW)


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_records_without_keys_are_refused_on_a_compacted_topic(codec):
    batch = build_batch([(b"k", b"v", (), NOW), (None, b"v", (), NOW), (None, b"v", (), NOW)], compression=codec)
    with pytest.raises(RejectedRecordsError, match="2 records have none, the first is record 1"):
        _validator(cleanup_policy="compact").validate(bytearray(batch), NOW)


def test_a_batch_inflating_past_the_event_loops_share_goes_to_a_thread():
    """On the event loop a compressed batch is inflated up to ON_LOOP_INFLATION bytes; past it
    _WouldBlock (the caller retries in a thread), where it is accepted."""
    records = [(b"k", b"x" * 1000, (), NOW) for _ in range(ON_LOOP_INFLATION // 1000 + 10)]
    batch = build_batch(records, compression=Compression.LZ4)
    validator = _validator(max_message_bytes=1 << 20)
    with pytest.raises(_WouldBlock):
        validator.validate(bytearray(batch), NOW, nonblocking=True)
    assert validator.validate(bytearray(batch), NOW)[-1] == len(records)


def test_a_batch_inflating_past_the_limit_is_too_large():
    records = [(b"k", b"x" * 10_000, (), NOW) for _ in range(200)]     # 2 MB from a few KiB
    batch = build_batch(records, compression=Compression.ZSTD)
    with pytest.raises(RecordTooLargeError, match=r"the limit is 32 x max.message.bytes=40000"):
        _validator(max_message_bytes=40_000).validate(bytearray(batch), NOW)


def test_a_compressed_batch_declaring_more_records_than_it_holds_is_corrupt():
    batch = bytearray(build_batch([(b"k", b"v", (), NOW)] * 3, compression=Compression.LZ4))
    batch[57:61] = (4).to_bytes(4, "big")              # recordsCount 3 -> 4
    batch[23:27] = (3).to_bytes(4, "big")              # lastOffsetDelta to match it
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="record 3"):
        _validator().validate(batch, NOW)
