"""Remote log metadata: Kafka's states and transitions, and the per-partition store kept beside
the remote data (ordered, durable across restarts, readable from the URL alone, race-safe)."""
from __future__ import annotations

import threading

import pytest

from logcore.errors import CommitFailedError, RemoteStorageError
from logcore.storage import open_storage
from logcore.tiered.metadata import (RemoteLogSegmentMetadata, RemoteLogSegmentState as S,
                                     is_valid_transition)
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from tests.tiered.helpers import TIP, new_metadata


def test_kafka_transitions():
    allowed = {(S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED), (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
               (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED), (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)}
    for a in S:
        for b in S:
            assert is_valid_transition(a, b) == (a is b or (a, b) in allowed), (a, b)


def test_metadata_json_round_trip_and_validation():
    meta = new_metadata(100, 199, 5000, epochs={3: 100, 5: 150}).with_update(
        S.COPY_SEGMENT_FINISHED, custom_metadata=b"\x01\x02")
    assert RemoteLogSegmentMetadata.from_json(meta.to_json()) == meta
    assert meta.epoch_for_offset(149) == 3 and meta.epoch_for_offset(150) == 5
    with pytest.raises(RemoteStorageError, match="offsets"):
        new_metadata(10, 5, 1)
    with pytest.raises(RemoteStorageError, match="leader epochs"):
        new_metadata(10, 20, 1, epochs={1: 30})
    with pytest.raises(RemoteStorageError, match="cannot become"):
        meta.with_update(S.COPY_SEGMENT_STARTED)


def open_store(target, **kw):
    return RemoteLogMetadataStore(open_storage(target.url, target.storage_options),
                                  TIP.topic, TIP.topic_id, TIP.partition, **kw)


def test_store_lifecycle_survives_restart_and_opens_from_url(any_storage_url):
    store = open_store(any_storage_url)
    a = store.add_segment(new_metadata(0, 99, 1000, epochs={0: 0}))
    b = store.add_segment(new_metadata(100, 199, 1000, epochs={0: 100, 1: 150}))
    assert store.list_segments() == [] and store.segment_for_offset(50) is None   # half-done: invisible
    assert store.highest_offset() is None
    store.update_state(a.segment_id, S.COPY_SEGMENT_FINISHED, custom_metadata=b"x")
    store.update_state(b.segment_id, S.COPY_SEGMENT_FINISHED)
    store.update_state(b.segment_id, S.COPY_SEGMENT_FINISHED)        # repeat: no-op
    assert store.segment_for_offset(150).segment_id == b.segment_id
    assert store.segment_for_offset(150, leader_epoch=1).segment_id == b.segment_id
    assert store.segment_for_offset(120, leader_epoch=1) is None
    assert store.highest_offset() == 199 and store.highest_offset(leader_epoch=0) == 199
    assert store.remote_log_size() == 2000

    reopened = RemoteLogMetadataStore.open(any_storage_url.url, TIP.topic, TIP.partition,
                                           storage_options=any_storage_url.storage_options)
    assert [m.segment_id for m in reopened.list_segments()] == [a.segment_id, b.segment_id]
    assert reopened.get(a.segment_id).custom_metadata == b"x"

    store.update_state(a.segment_id, S.DELETE_SEGMENT_STARTED)
    assert store.segment_for_offset(50) is None                      # hidden as soon as deleting
    store.update_state(a.segment_id, S.DELETE_SEGMENT_FINISHED)
    with pytest.raises(RemoteStorageError, match="cannot become"):
        store.update_state(a.segment_id, S.COPY_SEGMENT_FINISHED)
    reopened.refresh()
    assert reopened.get(a.segment_id).state is S.DELETE_SEGMENT_FINISHED
    assert [m.start_offset for m in reopened.list_segments(None)] == [0, 100]


def test_first_finished_copy_wins(tmp_path):
    target = type("T", (), {"url": str(tmp_path), "storage_options": {}})()
    store = open_store(target)
    first = store.add_segment(new_metadata(0, 99, 1000))
    second = store.add_segment(new_metadata(0, 99, 1000))            # a retry with a fresh id
    store.update_state(first.segment_id, S.COPY_SEGMENT_FINISHED)
    with pytest.raises(CommitFailedError, match="first copy wins"):
        store.update_state(second.segment_id, S.COPY_SEGMENT_FINISHED)
    store.update_state(second.segment_id, S.DELETE_SEGMENT_STARTED)
    assert [m.segment_id for m in store.list_segments()] == [first.segment_id]
    with pytest.raises(CommitFailedError):
        store.add_segment(new_metadata(50, 149, 1000))


def test_custom_metadata_is_bounded(tmp_path):
    target = type("T", (), {"url": str(tmp_path), "storage_options": {}})()
    store = open_store(target, custom_metadata_max_bytes=16)
    meta = store.add_segment(new_metadata(0, 9, 10))
    with pytest.raises(RemoteStorageError, match="remote.log.metadata.custom.metadata.max.bytes=16"):
        store.update_state(meta.segment_id, S.COPY_SEGMENT_FINISHED, custom_metadata=b"x" * 17)


def test_concurrent_writers_keep_one_order(any_storage_url):
    stores = [open_store(any_storage_url) for _ in range(3)]
    errors = []

    def work(store, base):
        try:
            for i in range(4):
                m = store.add_segment(new_metadata(base + i * 10, base + i * 10 + 9, 10))
                store.update_state(m.segment_id, S.COPY_SEGMENT_FINISHED)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s, k * 1000)) for k, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    final = open_store(any_storage_url)
    assert len(final.list_segments()) == 12
    for s in stores:
        s.refresh()
        assert s.list_segments() == final.list_segments()
    names = final.storage.list_dir(final.folder)
    assert names == [f"{i:020d}.json" for i in range(24)]


def test_open_from_url_finds_a_topic_id_whose_text_holds_a_dash(tmp_path):
    # URL-safe base64 ids may contain "-" (here the first character): the folder
    # "<topic>-<id>" is split by the id's length, not at its last dash.
    import uuid
    from logcore.log.partition_metadata import format_topic_id
    from logcore.tiered.metadata import TopicIdPartition
    topic_id = uuid.UUID(bytes=b"\xfb" + bytes(15))
    assert "-" in format_topic_id(topic_id)[:21]
    tip = TopicIdPartition(topic_id, "a-b", 0)
    store = RemoteLogMetadataStore(open_storage(str(tmp_path)), tip.topic, topic_id, 0)
    meta = store.add_segment(new_metadata(0, 9, 100, tip=tip))
    reopened = RemoteLogMetadataStore.open(str(tmp_path), "a-b", 0)
    assert reopened.topic_id_partition == tip and reopened.get(meta.segment_id).start_offset == 0
    with pytest.raises(Exception, match="no remote data for topic 'a'"):
        RemoteLogMetadataStore.open(str(tmp_path), "a", 0)
