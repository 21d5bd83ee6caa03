"""The cleaner's bulk C paths against its batch-by-batch reference.

`clean_batches` (many uncompressed data batches per call) must write exactly the bytes that
`LogCleaner._clean_batch` writes one batch at a time, and `OffsetMap.put_batches` must fill the
table exactly as putting the decoded key column does, map-full stop included.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from logcore.cleaner import _offsetmap
from logcore.cleaner.cleaner import CleanStats, LogCleaner, _empty_batch_keepers, _TxnTracker
from logcore.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from logcore.errors import CorruptRecordError
from logcore.records.arrow import batches_to_arrow
from logcore.records.batch import batch_fields, build_batch, iter_batches, parse_header

NOW = 2_000_000_000_000
HORIZON = NOW + 86_400_000

records_st = st.lists(
    st.tuples(st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e" * 20])),
              st.one_of(st.none(), st.binary(max_size=30)),
              st.integers(min_value=0, max_value=10**6)),
    min_size=1, max_size=8)
batch_st = st.tuples(records_st,
                     st.sampled_from([None, NOW - 5, NOW + 5]),   # delete horizon: none, passed, not yet
                     st.sampled_from([-1, 7, 9]),                  # producer id
                     st.booleans())                                # LogAppendTime


def _chunk(batches):
    out, base = [], 100
    for records, horizon, pid, log_append in batches:
        items = [(k, v, (), 1_700_000_000_000 + t) for k, v, t in records]
        kwargs = {"timestamp_type": 1, "log_append_time": 1_700_000_000_999} if log_append else {}
        out.append(build_batch(items, base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                               base_sequence=0 if pid >= 0 else -1, delete_horizon_ms=horizon, **kwargs))
        base += len(records) + 2       # gaps between batches, as after earlier cleaning
    return b"".join(out)


@settings(max_examples=150, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=12), st.data())
def test_clean_batches_writes_what_the_batch_path_writes(batches, data):
    chunk = _chunk(batches)
    headers = [h for _pos, h in iter_batches(chunk)]
    offsets = [o for h in headers for o in range(h.base_offset, h.next_offset)]
    omap = OffsetMap(64 * ENTRY_BYTES)
    # Map a random key -> offset (some keys absent, some mapped past the records).
    for key in [b"a", b"b", b"c", b"d", b"e" * 20]:
        choice = data.draw(st.sampled_from(["absent", "some", "past"]))
        if choice == "some":
            omap.put(key, data.draw(st.sampled_from(offsets)))
        elif choice == "past":
            omap.put(key, offsets[-1] + 50)
    end = data.draw(st.sampled_from([headers[-1].next_offset, offsets[len(offsets) // 2] + 1, offsets[-1] + 100]))
    latest = end - 1
    last_data = data.draw(st.sampled_from([h.last_offset for h in headers]))
    producers = {7: (last_data, 0), 9: (headers[0].last_offset, 0)}

    cleaner = LogCleaner(dedupe_buffer_size=64 * ENTRY_BYTES)
    cleaner.offset_map = omap
    stats = CleanStats("t", 0)
    expected, expected_meta = [], []
    txns = _TxnTracker([])
    for pos, h in iter_batches(chunk):
        out = cleaner._clean_batch(chunk, pos, h, txns, producers, omap.table, omap.slots, latest, end, NOW,
                                   HORIZON, stats, "test", 0, None)
        if out is not None:
            expected.append(bytes(out))
            got_h = parse_header(out)
            expected_meta.append((got_h.last_offset, got_h.max_timestamp, len(out)))
    rows = batch_fields(chunk)
    lasts, pids = _empty_batch_keepers(producers)
    got, meta, read, kept, tombstones = _offsetmap.clean_batches(
        chunk, rows, 0, len(rows), omap.table, omap.slots, latest, end, NOW, HORIZON, lasts, pids)
    assert got == b"".join(expected)
    assert [tuple(r) for r in np.frombuffer(meta, dtype=np.int64).reshape(-1, 3).tolist()] == expected_meta
    assert (read, kept, tombstones) == (stats.records_read, stats.records_kept, stats.tombstones_removed)


@settings(max_examples=100, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=12), st.integers(min_value=1, max_value=6), st.data())
def test_put_batches_fills_the_map_as_the_key_column_does(batches, slots, data):
    chunk = _chunk(batches)
    rows = batch_fields(chunk)
    include = np.array(data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows))), dtype=np.uint8)
    first = data.draw(st.integers(min_value=0, max_value=150))
    upper = data.draw(st.integers(min_value=first, max_value=250))

    bulk = OffsetMap(slots * ENTRY_BYTES, load_factor=1.0)
    stop = bulk.put_batches(chunk, rows, include, first, upper)

    reference = OffsetMap(slots * ENTRY_BYTES, load_factor=1.0)
    kept = b"".join(bytes(chunk[p:p + s]) for (p, s), inc in zip(rows[:, :2].tolist(), include) if inc)
    expected_stop = -1
    if kept:
        cols = batches_to_arrow(kept, min_offset=first, max_offset=upper)
        offsets = cols.column(0).to_numpy()
        consumed = reference.put_batch(cols.column(3), offsets)
        expected_stop = int(offsets[consumed]) if consumed < len(offsets) else -1
    assert stop == expected_stop
    assert bulk.size == reference.size
    assert bytes(bulk.table) == bytes(reference.table)


def test_corrupt_records_are_reported_at_their_batch():
    good = build_batch([(b"k", b"v", (), 1)], base_offset=0)
    bad = bytearray(build_batch([(b"k", b"v", (), 1), (b"k2", b"v2", (), 2)], base_offset=1))
    bad[61] = 0x7F      # first record's length varint now runs past the batch
    from logcore.records.batch import assemble_batch
    h = parse_header(bad)
    bad = assemble_batch(bytes(bad[61:]), base_offset=1, attributes=h.attributes, last_offset_delta=1,
                         base_timestamp=h.base_timestamp, max_timestamp=h.max_timestamp, producer_id=-1,
                         producer_epoch=-1, base_sequence=-1, records_count=2, partition_leader_epoch=-1)
    chunk = good + bad      # CRC valid, record layout broken
    rows = batch_fields(chunk)
    omap = OffsetMap(64 * ENTRY_BYTES)
    with pytest.raises(_offsetmap.RecordError) as err:
        omap.put_batches(chunk, rows, np.ones(len(rows), dtype=np.uint8), 0, 100)
    assert err.value.args[0] == 1
    with pytest.raises(_offsetmap.RecordError) as err:
        _offsetmap.clean_batches(chunk, rows, 0, 2, omap.table, omap.slots, 10, 11, NOW, HORIZON,
                                 np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert err.value.args[0] == 1
    from logcore.cleaner.cleaner import _corrupt
    exc = _corrupt(err.value, rows, "seg.log", 1000)
    assert isinstance(exc, CorruptRecordError) and exc.position == 1000 + len(good) and exc.file == "seg.log"
