"""Property tests: random batches round-trip through build/decode and the Arrow path agrees."""
import pyarrow as pa
from hypothesis import HealthCheck, given, settings, strategies as st

from logcore.records import (
    Compression, TimestampType, batches_to_arrow, build_batch, decode_records, iter_batches, parse_header,
)

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TS = st.integers(-(1 << 40), 1 << 42)
maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=10), maybe_bytes), max_size=4).map(tuple)
record = st.tuples(maybe_bytes, maybe_bytes, headers, TS)

batch_args = st.fixed_dictionaries({
    "records": st.lists(record, min_size=1, max_size=40),
    "compression": st.sampled_from(list(Compression)),
    "base_offset": st.integers(0, 1 << 50),
    "timestamp_type": st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]),
    "log_append_time": TS,
    "producer": st.one_of(st.none(), st.tuples(st.integers(0, (1 << 63) - 1), st.integers(0, 32767),
                                               st.integers(0, (1 << 31) - 1), st.booleans())),
    "partition_leader_epoch": st.integers(-1, (1 << 31) - 1),
})


def build(args) -> bytes:
    producer = args["producer"]
    extra = {}
    if producer:
        pid, epoch, seq, txn = producer
        extra = dict(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)
    return build_batch(args["records"], compression=args["compression"], base_offset=args["base_offset"],
                       timestamp_type=args["timestamp_type"], log_append_time=args["log_append_time"],
                       partition_leader_epoch=args["partition_leader_epoch"], **extra)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_args)
def test_round_trip(args):
    data = build(args)
    h = parse_header(data)
    assert h.compression == args["compression"] and h.records_count == len(args["records"])
    assert h.partition_leader_epoch == args["partition_leader_epoch"]
    decoded = decode_records(data, 0)
    lat = args["timestamp_type"] == TimestampType.LOG_APPEND_TIME
    for i, (r, (key, value, hdrs, ts)) in enumerate(zip(decoded, args["records"])):
        assert (r.offset, r.key, r.value, r.headers) == (args["base_offset"] + i, key, value, hdrs)
        assert r.timestamp == (args["log_append_time"] if lat else ts)
        if args["producer"]:
            _, _, seq, _ = args["producer"]
            assert r.sequence == (seq + i) % (1 << 31)
            assert h.is_transactional == args["producer"][3]
        else:
            assert r.sequence == -1 and h.producer_id == -1
    assert h.max_timestamp == (args["log_append_time"] if lat else max(r[3] for r in args["records"]))


def arrow_rows(table: pa.RecordBatch):
    cols = table.to_pydict()
    ts = table.column("timestamp").cast(pa.int64()).to_pylist()
    out = []
    for i in range(table.num_rows):
        hdrs = cols["headers"][i]
        out.append((cols["offset"][i], ts[i], cols["timestampType"][i], cols["key"][i], cols["value"][i],
                    None if hdrs is None else tuple((h["key"], h["value"]) for h in hdrs)))
    return out


def reference_rows(data: bytes, min_offset=0, max_offset=(1 << 63) - 1):
    out = []
    for pos, h in iter_batches(data):
        if h.is_control:
            continue
        for r in decode_records(data, pos, h):
            if min_offset <= r.offset < max_offset:
                out.append((r.offset, r.timestamp * 1000, int(h.timestamp_type), r.key, r.value, r.headers or None))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch_args, min_size=0, max_size=5), st.integers(0, 1 << 51), st.integers(0, 1 << 51))
def test_arrow_equals_decode_records(many, lo, span):
    data = b"".join(build(args) for args in many)
    table = batches_to_arrow(data, include_headers=True)
    table.validate(full=True)
    assert arrow_rows(table) == reference_rows(data)
    filtered = batches_to_arrow(data, min_offset=lo, max_offset=lo + span, include_headers=True)
    assert arrow_rows(filtered) == reference_rows(data, lo, lo + span)
    plain = batches_to_arrow(data)
    assert plain.schema.names == ["offset", "timestamp", "timestampType", "key", "value"]
    assert plain.equals(table.select(plain.schema.names)) if table.num_rows else plain.num_rows == 0
