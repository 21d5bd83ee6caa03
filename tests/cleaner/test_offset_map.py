"""The cleaner's offset map: a dict of last offsets, in a fixed budget, whatever the probing."""
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from logcore.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from logcore.errors import InvalidConfigError


def _keys(values):
    return pa.array(values, type=pa.binary())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.booleans()), max_size=300),
       st.integers(min_value=1, max_value=64))
def test_matches_a_dict_of_last_offsets(rows, slots):
    """Whatever the table size (even smaller than the key count), every key the map consumed
    maps to its last consumed offset, and the rows after a full map were not consumed."""
    keys = [k for k, _ in rows]
    m = OffsetMap(slots * ENTRY_BYTES, load_factor=1.0)
    offsets = np.arange(len(keys), dtype=np.int64) * 3 + 7
    consumed = m.put_batch(_keys(keys), offsets)
    model = {}
    for k, off in zip(keys[:consumed], offsets[:consumed]):
        if k is not None:
            model[k] = int(off)
    assert m.size == len(model) <= slots
    if consumed < len(keys):
        # stopped only at a new key while full
        assert m.size == m.max_entries and keys[consumed] not in model
    probe = list(model) + [k for k in keys if k is not None and k not in model] + [b"never-put", None]
    got = m.get_batch(_keys(probe))
    for k, off in zip(probe, got):
        assert off == model.get(k, -1)


def test_full_table_keeps_updating_known_keys():
    m = OffsetMap(10 * ENTRY_BYTES, load_factor=0.9)
    assert m.max_entries == 9
    first = [str(i).encode() for i in range(9)]
    assert m.put_batch(_keys(first), np.arange(9)) == 9
    assert m.full
    # known keys still update, the first new key stops the batch
    assert m.put_batch(_keys([b"3", b"4", b"new", b"5"]), [100, 101, 102, 103]) == 2
    assert m.get(b"3") == 100 and m.get(b"4") == 101 and m.get(b"new") == -1 and m.get(b"5") == 5
    assert m.latest_offset == 101
    assert m.utilization == pytest.approx(0.9)


def test_many_keys_in_a_crowded_table_all_found():
    """Load factor 1: every slot used, so probe sequences wrap around the whole table."""
    n = 1000
    m = OffsetMap(n * ENTRY_BYTES, load_factor=1.0)
    keys = [f"key-{i}".encode() for i in range(n)]
    assert m.put_batch(_keys(keys), np.arange(n)) == n
    assert m.size == n and m.utilization == 1.0
    assert (m.get_batch(_keys(keys)) == np.arange(n)).all()
    assert m.put(b"one-more", 5) is False


def test_budget_is_the_table():
    m = OffsetMap(1 << 20)
    assert m.slots == (1 << 20) // 24
    assert m.memory_bytes <= 1 << 20
    assert m.memory_bytes / m.slots == ENTRY_BYTES


def test_clear_and_string_keys():
    m = OffsetMap(4096)
    m.put_batch(pa.array(["a", "b"]), [1, 2])
    assert m.get(b"a") == 1
    m.clear()
    assert m.size == 0 and m.get(b"a") == -1 and m.latest_offset == -1


def test_empty_key_is_a_key_and_null_is_not():
    m = OffsetMap(4096)
    m.put_batch(_keys([b"", None]), [1, 2])
    assert m.size == 1 and m.get(b"") == 1


@pytest.mark.parametrize("memory, factor", [(0, 0.9), (23, 0.9), (-5, 0.9), (4096, 0), (4096, 1.5)])
def test_bad_budgets(memory, factor):
    with pytest.raises(InvalidConfigError, match="log.cleaner"):
        OffsetMap(memory, load_factor=factor)


def test_mismatched_lengths():
    with pytest.raises(ValueError, match="2 keys but 1 offsets"):
        OffsetMap(4096).put_batch(_keys([b"a", b"b"]), [1])
