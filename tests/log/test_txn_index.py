"""TransactionIndex: the 34-byte entry layout, append rules, collect_aborted against a
brute-force version of Kafka's loop, truncation, corrupt files."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.errors import CorruptIndexError, InvalidRecordError
from logcore.log.txn_index import AbortedTxn, TransactionIndex
from logcore.storage import open_storage


@pytest.fixture(params=["local", "memory"])
def storage(request, storage_targets):
    target = storage_targets.make(request.param)
    return open_storage(target.url, target.storage_options)


def kafka_collect(entries, fetch_offset, upper_bound):
    """Kafka's collectAbortedTxns loop, entry by entry."""
    found = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound:
            return found, True
    return found, False


def test_entry_layout():
    txn = AbortedTxn(producer_id=7, first_offset=100, last_offset=150, last_stable_offset=120)
    assert txn.to_bytes() == struct.pack(">hqqqq", 0, 7, 100, 150, 120)
    assert len(txn.to_bytes()) == 34
    assert AbortedTxn.from_bytes(txn.to_bytes()) == txn


def test_file_created_on_first_append_and_round_trips(storage):
    index = TransactionIndex(storage, "p/00000000000000000000.txnindex", 0, writable=True)
    assert not storage.exists("p/00000000000000000000.txnindex")
    txns = [AbortedTxn(1, 0, 10, 0), AbortedTxn(2, 5, 20, 5)]
    for txn in txns:
        index.append(txn)
    index.flush()
    index.close()
    assert storage.read("p/00000000000000000000.txnindex") == b"".join(t.to_bytes() for t in txns)
    loaded = TransactionIndex(storage, "p/00000000000000000000.txnindex", 0)
    assert loaded.all_aborted() == txns
    loaded.sanity_check()


def test_last_offset_must_increase():
    index = TransactionIndex(None, None, 0, writable=True)
    index.append(AbortedTxn(1, 0, 10, 0))
    with pytest.raises(InvalidRecordError, match="not greater than the current last offset 10"):
        index.append(AbortedTxn(2, 3, 10, 0))


@settings(max_examples=80, deadline=None)
@given(raw=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 40), st.integers(0, 60)),
                    max_size=25),
       fetch=st.integers(0, 400), span=st.integers(0, 400))
def test_collect_aborted_matches_kafka(raw, fetch, span):
    index = TransactionIndex(None, None, 0, writable=True)
    entries, last = [], 0
    for gap, length, lso_lag in raw:
        last += gap + 1
        first = max(0, last - length)
        txn = AbortedTxn(gap, first, last, max(0, last - lso_lag))
        index.append(txn)
        entries.append(txn)
    result = index.collect_aborted(fetch, fetch + span)
    assert (result.aborted, result.is_complete) == kafka_collect(entries, fetch, fetch + span)


def test_truncate_to(storage):
    index = TransactionIndex(storage, "t.txnindex", 0, writable=True)
    for i in range(1, 6):
        index.append(AbortedTxn(i, i * 10 - 5, i * 10, i * 10 - 5))
    index.truncate_to(30)
    assert [t.last_offset for t in index.all_aborted()] == [10, 20]
    index.append(AbortedTxn(9, 25, 26, 25))
    index.flush()
    loaded = TransactionIndex(storage, "t.txnindex", 0)
    assert [t.last_offset for t in loaded.all_aborted()] == [10, 20, 26]
    index.reset()
    index.flush()
    assert TransactionIndex(storage, "t.txnindex", 0).entries == 0


def test_partial_trailing_entry_is_corrupt_and_dropped_before_appending(tmp_path):
    storage = open_storage(str(tmp_path))
    storage.write_atomic("t.txnindex", AbortedTxn(1, 0, 10, 0).to_bytes() + b"\x00" * 7)
    index = TransactionIndex(storage, "t.txnindex", 0, writable=True)
    with pytest.raises(CorruptIndexError, match="41 bytes"):
        index.sanity_check()
    index.append(AbortedTxn(2, 11, 12, 11))
    index.close()
    loaded = TransactionIndex(storage, "t.txnindex", 0)
    loaded.sanity_check()
    assert [t.producer_id for t in loaded.all_aborted()] == [1, 2]


def test_sanity_check_last_offset_below_start(storage):
    storage.write_atomic("t.txnindex", AbortedTxn(1, 0, 10, 0).to_bytes())
    with pytest.raises(CorruptIndexError, match="below the start offset 50"):
        TransactionIndex(storage, "t.txnindex", 50).sanity_check()


def test_unknown_version_is_corrupt(storage):
    storage.write_atomic("t.txnindex", struct.pack(">hqqqq", 0x0100, 1, 0, 10, 0))
    index = TransactionIndex(storage, "t.txnindex", 0)
    with pytest.raises(CorruptIndexError, match="version"):
        index.sanity_check()
    with pytest.raises(CorruptIndexError, match="version"):
        index.collect_aborted(0, 100)
