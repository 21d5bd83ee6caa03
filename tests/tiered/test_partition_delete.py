"""A deleted partition's remote data (partition_delete.py) over the object-store metadata: the
segments' data goes, the records say DELETE_PARTITION_MARKED, _STARTED, the segments' deletes,
then _FINISHED, in that order; no copy attempt is taken once the partition is marked; running it
again (another replica, a retry after a crash) does nothing more; a snapshot keeps the state."""
from __future__ import annotations

import json

import pytest

from logcore.storage import open_storage
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager
from logcore.tiered.metadata import RemoteLogSegmentState as S, RemotePartitionDeleteState as P
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.partition_delete import delete_remote_partition
from logcore.tiered.segment_states import InvalidEvent
from tests.tiered.helpers import TIP, new_metadata, segment_bytes, segment_data


def _store(storage, **kw):
    return RemoteLogMetadataStore(storage, TIP.topic, TIP.topic_id, TIP.partition, **kw)


def _records(storage, store) -> list[tuple[str, str]]:
    out = []
    for name in sorted(storage.list_dir(store.folder)):
        if name.endswith(".json") and name != "snapshot.json":
            record = json.loads(storage.read(storage.join(store.folder, name)))
            state = (record["state"] if record["type"] == "partition_delete"
                     else S(record["segment"]["state"]).name)
            out.append((record["type"], state))
    return out


def _objects(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                  if p.is_file() and "metadata" not in p.parts)


def test_partition_delete_records_and_removes_the_segments(tmp_path):
    storage = open_storage(str(tmp_path))
    rsm = FsspecRemoteStorageManager(storage, chunk_size=4096)
    store = _store(storage, snapshot_interval=0)
    for i in range(3):
        log = segment_bytes(100, base_offset=i * 100)
        meta = store.add_segment(new_metadata(i * 100, i * 100 + 99, len(log)))
        rsm.copy_log_segment_data(meta, segment_data(log))
        store.update_state(meta.segment_id, S.COPY_SEGMENT_FINISHED)
    half = store.add_segment(new_metadata(300, 399, 1))       # an attempt still copying
    assert len(_objects(tmp_path)) >= 3

    assert delete_remote_partition(store, rsm, broker_id=7) == 4
    assert _objects(tmp_path) == []
    assert store.partition_delete is P.DELETE_PARTITION_FINISHED
    assert store.list_segments() == [] and store.find(half.segment_id).state is S.DELETE_SEGMENT_FINISHED
    records = _records(storage, store)[7:]                  # after the 3 copies and the attempt
    assert records[:2] == [("partition_delete", "DELETE_PARTITION_MARKED"),
                           ("partition_delete", "DELETE_PARTITION_STARTED")]
    assert sorted(records[2:-1]) == sorted([("update", "DELETE_SEGMENT_STARTED"),
                                            ("update", "DELETE_SEGMENT_FINISHED")] * 4)
    assert records[-1] == ("partition_delete", "DELETE_PARTITION_FINISHED")

    # Another replica (its own store over the same records) finds it done and writes nothing.
    other = _store(storage)
    assert other.partition_delete is P.DELETE_PARTITION_FINISHED
    count = len(_records(storage, store))
    assert delete_remote_partition(other, rsm) == 0 and len(_records(storage, store)) == count
    # No copy attempt is taken for a deleted partition, nor a step back.
    with pytest.raises(InvalidEvent, match="being deleted"):
        other.add_segment(new_metadata(400, 499, 1))
    with pytest.raises(InvalidEvent, match="not a valid transition"):
        other.put_partition_delete(P.DELETE_PARTITION_MARKED)
    # A snapshot keeps the state (and forgets the deleted segments).
    other.write_snapshot()
    for name in storage.list_dir(store.folder):
        if name != "snapshot.json":
            storage.delete(storage.join(store.folder, name))
    fresh = _store(storage)
    assert fresh.partition_delete is P.DELETE_PARTITION_FINISHED and fresh.list_segments(None) == []


def test_a_partition_never_tiered_records_nothing(tmp_path):
    storage = open_storage(str(tmp_path))
    store = _store(storage)
    assert delete_remote_partition(store, FsspecRemoteStorageManager(storage)) == 0
    assert store.partition_delete is None and not storage.exists(store.folder)
