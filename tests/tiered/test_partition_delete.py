"""A deleted partition's remote data (partition_delete.py) over the object-store metadata: the
segments' data goes, the records say DELETE_PARTITION_MARKED, _STARTED, the segments' deletes,
then _FINISHED, in that order; no copy attempt is taken once the partition is marked; running it
again (another replica, a retry after a crash) does nothing more; a snapshot keeps the state."""
from __future__ import annotations

import json

import pytest

from logcore.errors import InvalidConfigError
from logcore.storage import open_storage
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager
from logcore.tiered.metadata import RemoteLogSegmentState as S, RemotePartitionDeleteState as P
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.partition_delete import delete_remote_partition, pending_deletions
from logcore.tiered.remote_log import RemoteTier
from logcore.tiered.segment_states import InvalidEvent
from tests.tiered.helpers import TIP, new_metadata, segment_bytes, segment_data
from tests.tiered.tiered_root import tiering_defaults


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


def test_a_deletion_cut_short_is_resumed_by_the_next_broker(tmp_path):
    """A process killed after MARKED and STARTED, one segment deleted of three: the tier of the
    next broker to start finds it (not the partitions of topics that still exist, nor one
    finished) and finishes it, the rest of the steps written once with that broker's id."""
    tier = RemoteTier.from_props(tiering_defaults(str(tmp_path)))
    storage, rsm = tier.rsm.storage, tier.rsm
    store = _store(storage, snapshot_interval=0)
    metas = []
    for i in range(3):
        log = segment_bytes(100, base_offset=i * 100)
        meta = store.add_segment(new_metadata(i * 100, i * 100 + 99, len(log)))
        rsm.copy_log_segment_data(meta, segment_data(log))
        metas.append(store.update_state(meta.segment_id, S.COPY_SEGMENT_FINISHED))
    store.put_partition_delete(P.DELETE_PARTITION_MARKED, broker_id=4)
    store.put_partition_delete(P.DELETE_PARTITION_STARTED, broker_id=4)
    store.update_state(metas[0].segment_id, S.DELETE_SEGMENT_STARTED, broker_id=4)
    rsm.delete_log_segment_data(metas[0])                  # killed here
    before = len(_records(storage, store))
    other = RemoteLogMetadataStore(storage, "other", TIP.topic_id, 0)   # another topic's, finished
    other.put_partition_delete(P.DELETE_PARTITION_MARKED)
    other.put_partition_delete(P.DELETE_PARTITION_STARTED)
    other.put_partition_delete(P.DELETE_PARTITION_FINISHED)

    assert pending_deletions(storage) == [(TIP.topic, TIP.topic_id, TIP.partition)]
    assert pending_deletions(storage, {TIP.topic_id}) == []             # a topic that exists
    with pytest.raises(InvalidConfigError, match="broker id"):
        tier.attach_broker(-1)
    tier.attach_broker(5)
    assert tier.resume_deletions(set()) == 1
    tier.deleter.wait()
    assert _objects(tmp_path) == []
    fresh = _store(storage)
    assert fresh.partition_delete is P.DELETE_PARTITION_FINISHED
    assert {m.state for m in fresh.list_segments(None)} == {S.DELETE_SEGMENT_FINISHED}
    written = [json.loads(storage.read(storage.join(store.folder, name)))
               for name in sorted(storage.list_dir(store.folder)) if name != "snapshot.json"][before:]
    states = [r["state"] if r["type"] == "partition_delete" else S(r["segment"]["state"]).name
              for r in written]
    assert states == (["DELETE_SEGMENT_FINISHED"] + ["DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED"] * 2
                      + ["DELETE_PARTITION_FINISHED"])
    assert {r.get("brokerId", r.get("segment", {}).get("brokerId")) for r in written} == {5}
    assert pending_deletions(storage) == [] and tier.resume_deletions(set()) == 0
    tier.close()
