"""encode_batches / murmur2_partitions against the reference encoder and kafka-python."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.records.batch import F_POSITION, batch_fields, build_batch, decode_records, iter_batches
from logcore.records.compression import Compression
from logcore.records.encode import (encode_batch_run, encode_batch_run_into, encode_batches,
                                    encode_plain_run_into, group_rows, plain_columns)
from logcore.records.partitioner import murmur2_partition, murmur2_partitions

kafka_default = pytest.importorskip("kafka.partitioner.default", reason="kafka-python is not installed")
from kafka.record.memory_records import MemoryRecords  # noqa: E402

HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
rows = st.lists(st.tuples(maybe_bytes, maybe_bytes, st.integers(0, 2**41)), min_size=1, max_size=60)


def _records_of(batches):
    out = []
    for batch in batches:
        for pos, header in iter_batches(batch, allow_partial_tail=False):
            out.append((header, decode_records(batch, pos, header)))
    return out


@settings(max_examples=200, deadline=None)
@given(rows, st.integers(1, 2000), st.one_of(st.none(), st.integers(1, 7)))
def test_same_bytes_as_build_batch(data, batch_bytes, max_records):
    keys = pa.array([k for k, _, _ in data], pa.binary())
    values = pa.array([v for _, v, _ in data], pa.binary())
    ts = np.array([t for _, _, t in data], dtype=np.int64)
    batches = encode_batches(keys, values, ts, batch_bytes=batch_bytes, max_records=max_records)
    # every row exactly once, in order, each batch byte-identical to the reference encoder's
    i = 0
    for batch in batches:
        (pos, header), = list(iter_batches(batch, allow_partial_tail=False))
        count = header.records_count
        assert max_records is None or count <= max_records
        expected = build_batch([(k, v, (), t) for k, v, t in data[i:i + count]])
        assert batch == expected
        i += count
    assert i == len(data)


@settings(max_examples=200, deadline=None)
@given(rows, st.integers(1, 2000), st.one_of(st.none(), st.integers(1, 7)), st.randoms(use_true_random=False),
       st.one_of(st.just(-1), st.integers(0, 2**31 - 1)))
def test_batch_run_equals_the_batches_of_the_taken_rows(data, batch_bytes, max_records, rnd, sequence):
    """The one-call C encoder of a row selection makes exactly the per-batch encoder's bytes."""
    keys = pa.array([k for k, _, _ in data], pa.binary())
    values = pa.array([v for _, v, _ in data], pa.binary())
    ts = np.array([t for _, _, t in data], dtype=np.int64)
    picked = rnd.sample(range(len(data)), rnd.randint(0, len(data)))
    rows = np.array(picked, dtype=np.int64)
    producer = {"producer_id": 9, "producer_epoch": 2} if sequence >= 0 else {}
    run, count = encode_batch_run(keys, values, ts, rows=rows, batch_bytes=batch_bytes,
                                  max_records=max_records, base_sequence=sequence,
                                  partition_leader_epoch=4, **producer)
    idx = pa.array(rows, pa.int64())
    expected = encode_batches(keys.take(idx), values.take(idx), ts[rows], batch_bytes=batch_bytes,
                              max_records=max_records, base_sequence=sequence, partition_leader_epoch=4,
                              **producer)
    assert run == b"".join(expected) and count == len(expected)
    whole, _ = encode_batch_run(keys, values, ts, batch_bytes=batch_bytes, max_records=max_records)
    assert whole == b"".join(encode_batches(keys, values, ts, batch_bytes=batch_bytes, max_records=max_records))


@settings(max_examples=100, deadline=None)
@given(rows, st.integers(1, 2000), st.integers(0, 64), st.randoms(use_true_random=False))
def test_batch_run_into_a_buffer_writes_the_same_bytes_or_nothing(data, batch_bytes, pos, rnd):
    """Into a caller's buffer: the bytes encode_batch_run returns, at `pos`; when they do not fit,
    (size, -1) and the buffer is untouched."""
    keys = pa.array([k for k, _, _ in data], pa.binary())
    values = pa.array([v for _, v, _ in data], pa.binary())
    ts = np.array([t for _, _, t in data], dtype=np.int64)
    rows = np.array(rnd.sample(range(len(data)), rnd.randint(1, len(data))), dtype=np.int64)
    expected, count = encode_batch_run(keys, values, ts, rows=rows, batch_bytes=batch_bytes)
    out = bytearray(b"\xee" * (pos + len(expected) + 5))
    assert encode_batch_run_into(out, pos, keys, values, ts, rows=rows, batch_bytes=batch_bytes) == (
        len(expected), count)
    assert out[pos:pos + len(expected)] == expected and out[:pos] == b"\xee" * pos
    small = bytearray(b"\xee" * (pos + len(expected) - 1))
    assert encode_batch_run_into(small, pos, keys, values, ts, rows=rows, batch_bytes=batch_bytes) == (
        len(expected), -1)
    assert small == b"\xee" * len(small)


@settings(max_examples=100, deadline=None)
@given(rows, st.integers(1, 2000), st.one_of(st.none(), st.integers(1, 7)), st.integers(0, 64),
       st.integers(0, 1 << 40), st.randoms(use_true_random=False))
def test_plain_run_gives_the_same_bytes_and_the_fields_a_scan_would(data, batch_bytes, max_records, pos, base, rnd):
    """encode_plain_run_into: encode_batch_run_into's bytes, plus the batch_fields rows a scan of
    them finds (positions from fields_base); when they do not fit, nothing written, no fields."""
    keys = pa.array([k for k, _, _ in data], pa.binary())
    values = pa.array([v for _, v, _ in data], pa.binary())
    ts = np.array([t for _, _, t in data], dtype=np.int64)
    rows = np.array(rnd.sample(range(len(data)), rnd.randint(1, len(data))), dtype=np.int64)
    expected, count = encode_batch_run(keys, values, ts, rows=rows, batch_bytes=batch_bytes, max_records=max_records)
    columns = plain_columns(keys, values, ts)
    out = bytearray(b"\xee" * (pos + len(expected) + 5))
    size, got_count, fields = encode_plain_run_into(columns, out, pos, rows=rows, batch_bytes=batch_bytes,
                                                    max_records=max_records, fields_base=base)
    assert (size, got_count) == (len(expected), count)
    assert out[pos:pos + size] == expected
    scanned = batch_fields(expected)
    scanned[:, F_POSITION] += base
    assert np.array_equal(np.frombuffer(fields, dtype=np.int64).reshape(-1, 9), scanned)
    small = bytearray(b"\xee" * (pos + len(expected) - 1))
    assert encode_plain_run_into(columns, small, pos, rows=rows, batch_bytes=batch_bytes,
                                 max_records=max_records) == (len(expected), -1, None)
    assert small == b"\xee" * len(small)


def test_fields_need_an_output_buffer():
    from logcore.records import _fastcodec
    columns = plain_columns(pa.array([b"k"]), pa.array([b"v"]), np.array([1], dtype=np.int64))
    with pytest.raises(ValueError, match="fields_base needs an output buffer"):
        _fastcodec.encode_batch_run(*columns, None, 100, 0, -1, -1, -1, -1, None, 0, 0)


def test_plain_columns_only_for_rows_without_a_codec_or_headers():
    keys, values, ts = pa.array([b"k1", b"k2"]), pa.array(["a", None]), np.array([10, 11], dtype=np.int64)
    assert plain_columns(keys, values, ts) is not None
    assert plain_columns(keys, values, ts, pa.nulls(2, HEADERS)) is not None
    assert plain_columns(keys, values, ts, pa.array([[{"key": "h", "value": b"x"}], None], HEADERS)) is None
    assert plain_columns(keys, values, ts, compression=Compression.GZIP) is None


def test_batch_run_into_a_buffer_with_a_codec_or_headers():
    keys = pa.array([b"k1", b"k2"])
    values = pa.array([b"a", b"b"])
    headers = pa.array([[{"key": "h", "value": b"x"}], None], HEADERS)
    ts = np.array([10, 11], dtype=np.int64)
    for options in ({"headers": headers}, {"compression": Compression.GZIP}):
        expected, count = encode_batch_run(keys, values, ts, **options)
        out = bytearray(len(expected) + 3)
        assert encode_batch_run_into(out, 3, keys, values, ts, **options) == (len(expected), count)
        assert out[3:] == expected
        assert encode_batch_run_into(bytearray(4), 0, keys, values, ts, **options) == (len(expected), -1)
    with pytest.raises(ValueError, match="output position 9 outside 0..4"):
        encode_batch_run_into(bytearray(4), 9, keys, values, ts)


def test_batch_run_rejects_rows_outside_the_columns():
    values = pa.array([b"a", b"b"])
    with pytest.raises(ValueError, match="row index 2 at 1 outside"):
        encode_batch_run(pa.nulls(2, pa.binary()), values, np.zeros(2, np.int64), rows=np.array([0, 2]))


def test_batch_run_with_a_codec_or_headers_takes_the_rows():
    keys = pa.array([b"k1", b"k2", b"k3"])
    values = pa.array([b"a", b"b", b"c"])
    headers = pa.array([[{"key": "h", "value": b"x"}], None, None], HEADERS)
    ts = np.array([10, 11, 12], dtype=np.int64)
    rows = np.array([2, 0])
    run, count = encode_batch_run(keys, values, ts, rows=rows, headers=headers)
    assert count == 1 and run == build_batch([(b"k3", b"c", (), 12), (b"k1", b"a", (("h", b"x"),), 10)])
    run, _ = encode_batch_run(keys, values, ts, rows=rows, compression=Compression.ZSTD)
    assert run == build_batch([(b"k3", b"c", (), 12), (b"k1", b"a", (), 10)], compression=Compression.ZSTD)


def test_sliced_string_columns_and_nulls():
    keys = pa.array(["a", None, "ccc", "dd", None, "e"]).slice(1, 4)
    values = pa.array(["v0", "v1", None, "v333", "v4", "v5"]).slice(1, 4)
    ts = np.array([5, 4, 6, 1], dtype=np.int64)
    (batch,) = encode_batches(keys, values, ts)
    expected = build_batch([(None, b"v1", (), 5), (b"ccc", None, (), 4), (b"dd", b"v333", (), 6),
                            (None, b"v4", (), 1)])
    assert batch == expected


def test_headers_go_through_the_reference_encoder():
    keys = pa.array([b"k1", b"k2", b"k3"])
    values = pa.array([b"a", b"b", b"c"])
    headers = pa.array([[{"key": "h", "value": b"x"}], None, [{"key": "n", "value": None}]], HEADERS)
    ts = np.array([10, 11, 12], dtype=np.int64)
    (batch,) = encode_batches(keys, values, ts, headers=headers)
    assert batch == build_batch([(b"k1", b"a", (("h", b"x"),), 10), (b"k2", b"b", (), 11),
                                 (b"k3", b"c", (("n", None),), 12)])


def test_idempotent_producer_fields_and_sequences_per_batch():
    values = pa.array([b"v%d" % i for i in range(10)])
    keys = pa.nulls(10, pa.binary())
    ts = np.arange(10, dtype=np.int64)
    batches = encode_batches(keys, values, ts, max_records=4, producer_id=77, producer_epoch=3,
                             base_sequence=2**31 - 6)
    headers = [h for b in batches for _pos, h in iter_batches(b, allow_partial_tail=False)]
    assert [(h.producer_id, h.producer_epoch, h.records_count) for h in headers] == [(77, 3, 4), (77, 3, 4), (77, 3, 2)]
    # each batch starts at its first row's sequence, wrapping past 2**31 - 1 as Kafka does
    assert [h.base_sequence for h in headers] == [2**31 - 6, 2**31 - 2, 2]
    expected = build_batch([(None, b"v%d" % i, (), i) for i in range(4)], producer_id=77, producer_epoch=3,
                           base_sequence=2**31 - 6)
    assert batches[0] == expected


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_reads_every_codec(codec):
    from kafka import codec as kc
    has = {Compression.NONE: True, Compression.GZIP: kc.has_gzip(), Compression.SNAPPY: kc.has_snappy(),
           Compression.LZ4: kc.has_lz4(), Compression.ZSTD: kc.has_zstd()}
    if not has[codec]:
        pytest.skip(f"kafka-python lacks its {codec.name.lower()} codec")
    rng = random.Random(7)
    n = 3000
    keys = pa.array([None if i % 5 == 0 else f"key-{i}".encode() for i in range(n)])
    values = pa.array([bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 150))) for _ in range(n)])
    ts = np.arange(n, dtype=np.int64) + 1_700_000_000_000
    batches = encode_batches(keys, values, ts, compression=codec, batch_bytes=16384)
    assert len(batches) > 5
    got = []
    mr = MemoryRecords(b"".join(batches))
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.compression_type == int(codec)
        got.extend((r.key, r.value, r.timestamp) for r in batch)
    assert got == list(zip(keys.to_pylist(), values.to_pylist(), ts.tolist()))
    # and our own decoder agrees
    ours = [(r.key, r.value, r.timestamp) for _, recs in _records_of(batches) for r in recs]
    assert ours == got


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=50), st.integers(1, 1000))
def test_murmur2_partitions_match_kafka_python(keys, partitions):
    got = murmur2_partitions(pa.array(keys, pa.binary()), partitions).tolist()
    for key, p in zip(keys, got):
        if key is None:
            assert p == -1
        else:
            expected = (kafka_default.murmur2(key) & 0x7FFFFFFF) % partitions
            assert p == expected == murmur2_partition(key, partitions)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40).flatmap(lambda count: st.tuples(
    st.just(count), st.lists(st.integers(0, count - 1), max_size=200))))
def test_group_rows_is_a_stable_grouping_by_partition(case):
    count, parts = case
    order, starts = group_rows(np.array(parts, dtype=np.int32), count)
    assert len(starts) == count + 1 and starts[0] == 0 and starts[-1] == len(parts)
    for p in range(count):
        assert order[starts[p]:starts[p + 1]].tolist() == [i for i, q in enumerate(parts) if q == p]


def test_group_rows_rejects_a_partition_out_of_range():
    with pytest.raises(ValueError, match="row 2 has partition 4, outside 0..3"):
        group_rows(np.array([0, 3, 4], dtype=np.int32), 4)
    with pytest.raises(ValueError, match="row 0 has partition -1"):
        group_rows(np.array([-1], dtype=np.int32), 4)


def test_murmur2_known_vectors():
    # Kafka's UtilsTest.testMurmur2: the Java client's hash of these strings
    cases = {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
             "a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             "abc": 479470107}
    keys = pa.array([k.encode() for k in cases])
    got = murmur2_partitions(keys, 2**31 - 1).tolist()
    for (k, h), p in zip(cases.items(), got):
        assert p == (h & 0x7FFFFFFF) % (2**31 - 1)


# Lengths on both sides of each of the C encoder's copy paths (0, 1-3, 4-7, 8-16, 17-256, longer).
_COPY_EDGES = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 255, 256, 257, 1000]
edge_bytes = st.one_of(st.none(), st.sampled_from(_COPY_EDGES).map(lambda n: bytes((n + i) % 251 for i in range(n))))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(edge_bytes, edge_bytes, st.integers(0, 2**41)), min_size=1, max_size=400),
       st.integers(1, 40_000), st.randoms(use_true_random=False))
def test_batch_run_copy_paths_and_checksum_chunks_match_the_reference(data, batch_bytes, rnd):
    """Every key/value copy path, and batches long enough that the checksum is taken in several
    chunks ending at every kind of record boundary, byte for byte as the pure-Python encoder."""
    keys = pa.array([k for k, _, _ in data], pa.binary())
    values = pa.array([v for _, v, _ in data], pa.binary())
    ts = np.array([t for _, _, t in data], dtype=np.int64)
    rows = np.array(rnd.sample(range(len(data)), rnd.randint(1, len(data))), dtype=np.int64)
    run, count = encode_batch_run(keys, values, ts, rows=rows, batch_bytes=batch_bytes)
    taken = [data[r] for r in rows]
    expected, i = [], 0
    for _, header in iter_batches(run, allow_partial_tail=False):
        expected.append(build_batch([(k, v, (), t) for k, v, t in taken[i:i + header.records_count]]))
        i += header.records_count
    assert i == len(taken) and count == len(expected) and run == b"".join(expected)
