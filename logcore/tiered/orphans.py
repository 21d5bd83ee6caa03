"""Collect what interrupted copies and deletes left in remote storage.

A copy attempt is recorded (COPY_SEGMENT_STARTED) before any of its data is uploaded, so every
remote folder belongs to a known attempt. An attempt still STARTED after `grace_ms` was abandoned
(its process died, or its copy failed and the clean-up did not finish): it is moved to
DELETE_SEGMENT_STARTED, its data deleted, then DELETE_SEGMENT_FINISHED. A delete that was
interrupted (DELETE_SEGMENT_STARTED) is finished. Folders of no known attempt that have no
manifest are never served and are removed too.
"""
from __future__ import annotations

from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager
from logcore.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentState, now_ms
from logcore.tiered.metadata_store import RemoteLogMetadataStore, partition_prefix
from logcore.tiered.manifest import MANIFEST_NAME

S = RemoteLogSegmentState
DEFAULT_GRACE_MS = 15 * 60 * 1000


def collect_orphans(store: RemoteLogMetadataStore, rsm: FsspecRemoteStorageManager, *,
                    grace_ms: int = DEFAULT_GRACE_MS, now: int | None = None) -> list[RemoteLogSegmentId]:
    """Delete abandoned copy attempts and finish interrupted deletes; returns the segment ids."""
    now = now_ms() if now is None else now
    store.refresh()
    done: list[RemoteLogSegmentId] = []
    for meta in store.list_segments(S.COPY_SEGMENT_STARTED):
        if now - meta.event_timestamp_ms >= grace_ms:
            store.update_state(meta.segment_id, S.DELETE_SEGMENT_STARTED)
            done.append(meta.segment_id)
    for meta in store.list_segments(S.DELETE_SEGMENT_STARTED):
        rsm.delete_log_segment_data(meta)
        store.update_state(meta.segment_id, S.DELETE_SEGMENT_FINISHED)
        if meta.segment_id not in done:
            done.append(meta.segment_id)
    known = {m.segment_id.text for m in store.list_segments(None)}
    prefix = partition_prefix(store.topic_id_partition)
    for name in rsm.segment_folders(prefix):
        folder = f"{prefix}/{name}"
        if name[21:] not in known and not rsm.storage.exists(f"{folder}/{MANIFEST_NAME}"):
            rsm.storage.delete_dir(folder)
    return done
