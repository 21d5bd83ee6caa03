"""Kafka's text checkpoints: exact bytes, round trips, missing/empty files, corrupt files."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.errors import CorruptIndexError, InvalidTopicError, ReadOnlyLogError
from logcore.log.checkpoint import LeaderEpochCheckpoint, OffsetCheckpoint
from logcore.storage import open_storage


@pytest.fixture
def storage(any_storage_url):
    return open_storage(any_storage_url.url, any_storage_url.storage_options)


def test_offset_checkpoint_bytes_and_round_trip(storage):
    checkpoint = OffsetCheckpoint(storage, "replication-offset-checkpoint")
    assert checkpoint.read() == {}
    offsets = {("orders", 1): 1432, ("orders", 0): 1500, ("a.b_c-d", 12): 0}
    checkpoint.write(offsets)
    assert storage.read("replication-offset-checkpoint") == (
        b"0\n3\na.b_c-d 12 0\norders 0 1500\norders 1 1432\n")
    assert checkpoint.read() == offsets


def test_leader_epoch_checkpoint_bytes_and_round_trip(storage):
    checkpoint = LeaderEpochCheckpoint(storage, "t-0/leader-epoch-checkpoint")
    assert checkpoint.read() == []
    checkpoint.write([(0, 0), (3, 1200)])
    assert storage.read("t-0/leader-epoch-checkpoint") == b"0\n2\n0 0\n3 1200\n"
    assert checkpoint.read() == [(0, 0), (3, 1200)]


offset_maps = st.dictionaries(
    st.tuples(st.text("abcXYZ019._-", min_size=1, max_size=20), st.integers(0, 2**31 - 1)),
    st.integers(-2**63, 2**63 - 1), max_size=30)


@settings(max_examples=100, deadline=None)
@given(offsets=offset_maps)
def test_offset_codec_round_trip(offsets):
    assert OffsetCheckpoint.decode(OffsetCheckpoint.encode(offsets)) == offsets


def test_reads_what_kafka_writes_including_crlf_and_extra_spaces():
    assert OffsetCheckpoint.decode(b"0\r\n1\r\ntopic  3\t99\r\n") == {("topic", 3): 99}
    assert OffsetCheckpoint.decode(b"") == {}
    assert OffsetCheckpoint.decode(b"0\n") == {}          # Kafka: no count line, no entries
    assert LeaderEpochCheckpoint.decode(b"0\n0\n") == []


@pytest.mark.parametrize("data, message", [
    (b"1\n0\n", "unrecognised version 1"),
    (b"x\n0\n", "malformed version 'x' on line 1"),
    (b"0\n2\nt 0 5\n", "declares 2 entries on line 2 but has only 1"),
    (b"0\n1\nt 0 5\nt 1 6\n", "unexpected line 4"),
    (b"0\n1\nt 0\n", "malformed line 3"),
    (b"0\n1\nt zero 5\n", "malformed partition 'zero' on line 3"),
    (b"0\n1\nt 0 5.5\n", "malformed offset '5.5' on line 3"),
    (b"0\n1\nt -1 5\n", "malformed partition '-1'"),
    (b"0\n1\nt 0 99999999999999999999\n", "malformed offset"),
    (b"0\n-1\n", "malformed entry count '-1'"),
    (b"\xff\n", "not UTF-8"),
])
def test_corrupt_offset_checkpoints(tmp_path, data, message):
    storage = open_storage(str(tmp_path))
    storage.write_atomic("recovery-point-offset-checkpoint", data)
    with pytest.raises(CorruptIndexError, match=message) as info:
        OffsetCheckpoint(storage, "recovery-point-offset-checkpoint").read()
    assert info.value.file.endswith("recovery-point-offset-checkpoint")


@pytest.mark.parametrize("data, message", [
    (b"0\n1\n-1 0\n", "malformed leader epoch '-1' on line 3"),
    (b"0\n1\n1 -5\n", "malformed start offset '-5' on line 3"),
    (b"0\n1\n1 2 3\n", "malformed line 3"),
])
def test_corrupt_leader_epoch_checkpoints(data, message):
    with pytest.raises(CorruptIndexError, match=message):
        LeaderEpochCheckpoint.decode(data, source="leader-epoch-checkpoint")


def test_topic_with_whitespace_is_refused():
    with pytest.raises(InvalidTopicError, match="whitespace"):
        OffsetCheckpoint.encode({("bad topic", 0): 1})


def test_read_only_storage_refuses_writes(tmp_path):
    open_storage(str(tmp_path)).write_atomic("cleaner-offset-checkpoint", b"0\n0\n")
    storage = open_storage(str(tmp_path), read_only=True)
    checkpoint = OffsetCheckpoint(storage, "cleaner-offset-checkpoint")
    assert checkpoint.read() == {}
    with pytest.raises(ReadOnlyLogError):
        checkpoint.write({("t", 0): 1})


def test_write_replaces_atomically_leaving_no_temp_files(tmp_path):
    storage = open_storage(str(tmp_path))
    checkpoint = OffsetCheckpoint(storage, "log-start-offset-checkpoint")
    for i in range(5):
        checkpoint.write({("t", 0): i})
    assert checkpoint.read() == {("t", 0): 4}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log-start-offset-checkpoint"]
