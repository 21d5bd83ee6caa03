"""Snapshots of the object-store remote metadata: opening a partition reads one snapshot and the
records after it, not its history; what a snapshot holds is what the replay of the records gives;
the records below a snapshot are deleted once it is written, and a reader left behind them
replays from the snapshot."""
from __future__ import annotations

import json

import pytest

from logcore.errors import CorruptIndexError
from logcore.storage import open_storage
from logcore.tiered.metadata import RemoteLogSegmentState as S
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from tests.tiered.helpers import TIP, new_metadata


def _store(storage, **kw):
    return RemoteLogMetadataStore(storage, TIP.topic, TIP.topic_id, TIP.partition, **kw)


def _fill(store, first, count, size=100):
    metas = []
    for i in range(first, first + count):
        meta = store.add_segment(new_metadata(i * 10, i * 10 + 9, size))
        metas.append(store.update_state(meta.segment_id, S.COPY_SEGMENT_FINISHED))
    return metas


def test_open_reads_the_snapshot_and_the_tail_only(tmp_path):
    storage = open_storage(str(tmp_path))
    writer = _store(storage, snapshot_interval=10)
    metas = _fill(writer, 0, 12)                      # 24 records: snapshots at 10 and 20
    doomed = metas[0]
    writer.update_state(doomed.segment_id, S.DELETE_SEGMENT_STARTED)
    writer.update_state(doomed.segment_id, S.DELETE_SEGMENT_FINISHED)   # 26 records
    snapshot = json.loads(storage.read(writer.snapshot_path))
    assert snapshot["nextSequence"] == 20 and len(snapshot["segments"]) == 10

    reader = _store(storage, snapshot_interval=0)
    assert reader.records_read == 6                   # records 20..25, not 26
    assert reader.list_segments() == writer.list_segments()
    assert reader.list_segments(None) == writer.list_segments(None)
    # the records below the snapshot are never read again: without them the open is the same
    for seq in range(20):
        storage.delete(f"{writer.folder}/{seq:020d}.json")
    again = _store(storage)
    assert again.list_segments() == writer.list_segments() and again.highest_offset() == 119
    assert again.segment_for_offset(5) is None and again.segment_for_offset(15).start_offset == 10
    # a snapshot written now forgets the finished delete and leaves no tail
    writer.write_snapshot()
    fresh = _store(storage)
    assert fresh.records_read == 0 and len(fresh.list_segments(None)) == 11
    assert doomed.segment_id not in {m.segment_id for m in fresh.list_segments(None)}
    # an older state never replaces a newer snapshot
    reader.write_snapshot()
    assert json.loads(storage.read(writer.snapshot_path))["nextSequence"] == 26


def test_without_snapshots_the_history_is_replayed(tmp_path):
    storage = open_storage(str(tmp_path))
    _fill(_store(storage, snapshot_interval=0), 0, 5)
    assert not storage.exists(_store(storage).snapshot_path)
    assert _store(storage).records_read == 10


def test_a_damaged_snapshot_is_an_error_naming_it(tmp_path):
    storage = open_storage(str(tmp_path))
    writer = _store(storage, snapshot_interval=2)
    _fill(writer, 0, 2)
    storage.write_atomic(writer.snapshot_path, b'{"version": 1, "nextSequence": 4, "segments": [{}]}')
    with pytest.raises(CorruptIndexError, match="snapshot"):
        _store(storage)
    storage.write_atomic(writer.snapshot_path, b'{"version": 9}')
    with pytest.raises(CorruptIndexError, match="version 9"):
        _store(storage)


def _record_names(storage, store) -> list[int]:
    return sorted(int(n[:20]) for n in storage.list_dir(store.folder) if n[:20].isdigit())


def test_records_below_a_snapshot_are_deleted_and_stale_readers_follow(tmp_path):
    storage = open_storage(str(tmp_path))
    writer = _store(storage, snapshot_interval=10)
    _fill(writer, 0, 4)                                # 8 records, no snapshot yet
    stale = _store(storage, snapshot_interval=0)       # opened at record 8
    assert stale.next_sequence == 8
    _fill(writer, 4, 8)                                # 24 records: snapshots at 10 and 20
    assert _record_names(storage, writer) == [20, 21, 22, 23]   # the history below 20 is gone
    # A reader past whose position records were deleted replays from the snapshot, not a gap.
    stale.refresh()
    assert stale.next_sequence == 24 and stale.list_segments() == writer.list_segments()
    assert stale.highest_offset() == 119
    # The stale store writes on (records 24, 25); the writer's next snapshot replaces the one at 20.
    _fill(stale, 12, 1)
    writer.refresh()
    writer.write_snapshot()
    assert json.loads(storage.read(writer.snapshot_path))["nextSequence"] == 26
    assert _record_names(storage, writer) == []
    fresh = _store(storage)
    assert fresh.records_read == 0 and fresh.list_segments() == writer.list_segments()


def test_kept_history_stays(tmp_path):
    from logcore.tiered.metadata_store import SnapshotHistory
    storage = open_storage(str(tmp_path))
    writer = _store(storage, snapshot_interval=10, history=SnapshotHistory.KEPT)
    _fill(writer, 0, 6)
    assert _record_names(storage, writer) == list(range(12))
