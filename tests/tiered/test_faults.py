"""Faults mid-upload and mid-read (storage-level and S3-request-level injection), and processes
killed with SIGKILL during copy and delete: no partial or duplicate remote segment is ever served,
retries succeed, deletes are idempotent."""
from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logcore.errors import RemoteStorageError
from logcore.storage import open_storage
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager, segment_folder
from logcore.tiered.metadata import RemoteLogSegmentState as S
from logcore.tiered.metadata_store import RemoteLogMetadataStore, partition_prefix
from logcore.tiered.orphans import collect_orphans
from tests.tiered.helpers import (TIP, FaultyS3, FaultyStorage, new_metadata, segment_bytes,
                                  segment_data)
from broker_process import subprocess_env

CHUNK = 8192
REPO = Path(__file__).resolve().parents[2]


def visible_folders(storage, store):
    return sorted(n for n in storage.list_dir(partition_prefix(TIP)) if n != "metadata")


@pytest.mark.parametrize("nth_write", [1, 3, 12])   # first chunk, mid-log, an index/manifest
def test_failed_copy_leaves_nothing_and_a_retry_succeeds(any_storage_url, nth_write):
    storage = FaultyStorage(open_storage(any_storage_url.url, any_storage_url.storage_options))
    rsm = FsspecRemoteStorageManager(storage, chunk_size=CHUNK, compression="on")
    store = RemoteLogMetadataStore(storage, TIP.topic, TIP.topic_id, TIP.partition)
    log = segment_bytes(600)
    attempt = store.add_segment(new_metadata(0, 599, len(log)))
    storage.fail("write", nth_write)
    with pytest.raises(RemoteStorageError, match="injected write fault"):
        rsm.copy_log_segment_data(attempt, segment_data(log))
    assert storage.inner.list_dir(segment_folder(attempt)) == []
    store.update_state(attempt.segment_id, S.DELETE_SEGMENT_STARTED)
    rsm.delete_log_segment_data(attempt)
    store.update_state(attempt.segment_id, S.DELETE_SEGMENT_FINISHED)

    retry = store.add_segment(new_metadata(0, 599, len(log)))
    custom = rsm.copy_log_segment_data(retry, segment_data(log))
    store.update_state(retry.segment_id, S.COPY_SEGMENT_FINISHED, custom_metadata=custom)
    served = store.segment_for_offset(300)
    assert served.segment_id == retry.segment_id
    assert rsm.fetch_log_segment(served, 0).read() == log
    assert visible_folders(storage.inner, store) == [segment_folder(retry).rsplit("/", 1)[1]]


def test_read_fault_mid_stream_then_retry(any_storage_url):
    storage = FaultyStorage(open_storage(any_storage_url.url, any_storage_url.storage_options))
    # no prefetch: the chunks after the fault are fetched when read, not ahead of it
    rsm = FsspecRemoteStorageManager(storage, chunk_size=CHUNK, compression="on", prefetch_max_size=0)
    log = segment_bytes(600)
    meta = new_metadata(0, 599, len(log))
    rsm.copy_log_segment_data(meta, segment_data(log))
    stream = rsm.fetch_log_segment(meta, 0)
    head = stream.read(2 * CHUNK)
    storage.fail("read", 2)
    with pytest.raises(RemoteStorageError, match=r"chunk \d+ .*injected read fault"):
        stream.read()
    assert head == log[:2 * CHUNK]
    assert rsm.fetch_log_segment(meta, 0).read() == log


def test_s3_errors_mid_multipart_and_timeouts_mid_read(s3_backend_url):
    storage = open_storage(s3_backend_url.url, s3_backend_url.storage_options)
    faulty = FaultyS3(storage._fs)
    storage._fs = faulty
    rsm = FsspecRemoteStorageManager(storage, chunk_size=1 << 20, upload_part_size=5 << 20,
                                     prefetch_max_size=0)
    log = random.Random(5).randbytes(12 << 20)
    meta = new_metadata(0, 9999, len(log))
    faulty.fail("upload_part", 2, ConnectionError("injected: connection reset mid-upload"))
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(meta, segment_data(log))
    assert storage.list_dir(segment_folder(meta)) == []
    bucket = s3_backend_url.url.split("/")[2]
    uploads = faulty.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", [])
    assert uploads == []                                    # the failed upload was aborted

    retry = new_metadata(0, 9999, len(log))
    rsm.copy_log_segment_data(retry, segment_data(log))
    faulty.fail("get_object", 3, TimeoutError("injected: read timed out"))
    with pytest.raises(RemoteStorageError, match="transient"):
        rsm.fetch_log_segment(retry, 0).read()
    assert rsm.fetch_log_segment(retry, 0).read() == log


# --- SIGKILL during copy and delete -----------------------------------------------------------

WORKER = r'''
import json, sys, random
from logcore.storage import open_storage
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager
from logcore.tiered.metadata import RemoteLogSegmentState as S
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from tests.tiered.helpers import TIP, new_metadata, segment_bytes, segment_data

url, options, action = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
storage = open_storage(url, options)
rsm = FsspecRemoteStorageManager(storage, chunk_size=4096, compression="on")
store = RemoteLogMetadataStore(storage, TIP.topic, TIP.topic_id, TIP.partition)
if action == "copy":
    start = (store.highest_offset() or -1) + 1
    while True:
        log = segment_bytes(200, base_offset=start, seed=start)
        meta = store.add_segment(new_metadata(start, start + 199, len(log)))
        custom = rsm.copy_log_segment_data(meta, segment_data(log))
        store.update_state(meta.segment_id, S.COPY_SEGMENT_FINISHED, custom_metadata=custom)
        print(start, flush=True)
        start += 200
else:
    for meta in store.list_segments():
        store.update_state(meta.segment_id, S.DELETE_SEGMENT_STARTED)
        rsm.delete_log_segment_data(meta)
        store.update_state(meta.segment_id, S.DELETE_SEGMENT_FINISHED)
        print(meta.start_offset, flush=True)
'''


def run_and_kill(target, action: str, tmp_path: Path, after_lines: int, jitter: float) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = subprocess_env()
    proc = subprocess.Popen([sys.executable, str(script), target.url, json.dumps(target.storage_options),
                             action], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO)
    try:
        for _ in range(after_lines):
            if not proc.stdout.readline():
                break
        time.sleep(jitter)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def check_served(rsm, store):
    """Every served segment reads back byte-exact; no two served segments overlap."""
    segments = store.list_segments()
    for a, b in zip(segments, segments[1:]):
        assert a.end_offset < b.start_offset
    for meta in segments:
        expected = segment_bytes(200, base_offset=meta.start_offset, seed=meta.start_offset)
        assert rsm.fetch_log_segment(meta, 0).read() == expected
    return segments


@pytest.mark.parametrize("kind", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_sigkill_during_copy_and_delete(storage_targets, tmp_path, kind):
    target = storage_targets.make(kind)
    storage = open_storage(target.url, target.storage_options)
    rng = random.Random(11)
    for round_ in range(3):
        run_and_kill(target, "copy", tmp_path, after_lines=rng.randrange(0, 3), jitter=rng.random() * 0.05)
        rsm = FsspecRemoteStorageManager(storage, chunk_size=4096, compression="on")
        store = RemoteLogMetadataStore(storage, TIP.topic, TIP.topic_id, TIP.partition)
        served = check_served(rsm, store)
        collect_orphans(store, rsm, grace_ms=0)
        assert check_served(rsm, store) == served
        assert store.list_segments(S.COPY_SEGMENT_STARTED) == []
        assert visible_folders(storage, store) == sorted(segment_folder(m).rsplit("/", 1)[1] for m in served)
    assert served, "the copier never finished a segment"

    run_and_kill(target, "delete", tmp_path, after_lines=1, jitter=0.01)
    rsm = FsspecRemoteStorageManager(storage, chunk_size=4096, compression="on")
    store = RemoteLogMetadataStore(storage, TIP.topic, TIP.topic_id, TIP.partition)
    remaining = check_served(rsm, store)
    collect_orphans(store, rsm, grace_ms=0)
    assert store.list_segments(S.DELETE_SEGMENT_STARTED) == []
    assert visible_folders(storage, store) == sorted(segment_folder(m).rsplit("/", 1)[1] for m in remaining)
    for meta in remaining:                      # deletes are idempotent: twice is fine
        rsm.delete_log_segment_data(meta)
        rsm.delete_log_segment_data(meta)
