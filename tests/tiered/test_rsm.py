"""The fsspec remote storage manager: byte-exact round trips in every mode, indexes, deletes,
key rotation and wrong keys, on a local folder, fsspec memory and S3."""
from __future__ import annotations

import random

import pytest

from logcore.errors import RemoteResourceNotFoundError, RemoteStorageError
from logcore.records.compression import Compression
from logcore.storage import open_storage
from logcore.tiered.encryption import KeyRing
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager, segment_folder
from logcore.tiered.rsm import IndexType, SegmentCustomMetadata
from tests.tiered.helpers import FaultyStorage, new_metadata, segment_bytes, segment_data

CHUNK = 8192
MODES = {
    "plain": dict(compression="off", encrypt=False),
    "compressed": dict(compression="on", encrypt=False),
    "heuristic": dict(compression="heuristic", encrypt=False),
    "encrypted": dict(compression="off", encrypt=True),
    "encrypted+compressed": dict(compression="on", encrypt=True),
}


def make_rsm(target, ring=None, *, compression="off", chunk_size=CHUNK, cache=None, **kw):
    storage = FaultyStorage(open_storage(target.url, target.storage_options))
    rsm = FsspecRemoteStorageManager(storage, chunk_size=chunk_size, compression=compression,
                                     key_ring=ring, cache=cache, **kw)
    return rsm, storage


@pytest.mark.parametrize("mode", list(MODES))
def test_round_trip_is_byte_exact(any_storage_url, ring_k1, mode):
    opts = MODES[mode]
    rsm, storage = make_rsm(any_storage_url, ring_k1 if opts["encrypt"] else None,
                            compression=opts["compression"])
    log = segment_bytes(600)                       # ~10 chunks, last one partial
    meta = new_metadata(0, 599, len(log))
    data = segment_data(log, txn=True)
    custom = rsm.copy_log_segment_data(meta, data)
    meta = meta.with_update(meta.state.COPY_SEGMENT_FINISHED, custom_metadata=custom)
    assert len(custom) <= 128

    assert rsm.fetch_log_segment(meta, 0).read() == log
    rng = random.Random(7)
    for _ in range(25):
        start = rng.randrange(len(log))
        end = rng.randrange(start, len(log))
        assert rsm.fetch_log_segment(meta, start, end).read() == log[start:end + 1]  # end inclusive
    assert rsm.fetch_log_segment(meta, len(log)).read() == b""
    for index_type in IndexType:
        assert rsm.fetch_index(meta, index_type) == bytes(data.source(index_type))

    manifest = rsm.load_manifest(meta)
    folder = segment_folder(meta)
    stored = storage.inner.read(f"{folder}/{manifest.log_object}")
    assert manifest.compression == (opts["compression"] != "off")
    if mode == "plain":
        assert stored == log and manifest.log_object == "00000000000000000000.log"
        assert manifest.chunk_index.fixed
        assert storage.inner.read(f"{folder}/00000000000000000000.index") == data.offset_index
    else:
        assert stored != log and manifest.log_object.endswith(".rsm")
    if opts["encrypt"]:
        assert manifest.encryption["keyPairId"] == "k1"
        assert data.offset_index not in storage.inner.read(f"{folder}/{manifest.indexes['offset'].object}")
    if opts["compression"] != "off":
        assert len(stored) < len(log) * 0.7


def test_heuristic_skips_already_compressed_batches(tmp_path):
    rsm, storage = make_rsm(type("T", (), {"url": str(tmp_path), "storage_options": {}})(),
                            compression="heuristic")
    log = segment_bytes(300, compression=Compression.ZSTD)
    meta = new_metadata(0, 299, len(log))
    rsm.copy_log_segment_data(meta, segment_data(log))
    assert not rsm.load_manifest(meta).compression
    assert rsm.fetch_log_segment(meta, 0).read() == log


def test_absent_txn_index_fails_without_a_remote_call(tmp_path):
    target = type("T", (), {"url": str(tmp_path), "storage_options": {}})()
    rsm, storage = make_rsm(target)
    log = segment_bytes(100)
    meta = new_metadata(0, 99, len(log))
    custom = rsm.copy_log_segment_data(meta, segment_data(log, txn=False))
    meta = meta.with_update(meta.state.COPY_SEGMENT_FINISHED, custom_metadata=custom)
    assert IndexType.TRANSACTION not in SegmentCustomMetadata.from_bytes(custom).indexes
    before = storage.counts["read"]
    with pytest.raises(RemoteResourceNotFoundError, match="transaction"):
        rsm.fetch_index(meta, IndexType.TRANSACTION)
    assert storage.counts["read"] == before
    # without custom metadata the manifest decides (one GET), with the same error
    bare = meta.with_update(meta.state, custom_metadata=b"")
    with pytest.raises(RemoteResourceNotFoundError, match="transaction"):
        FsspecRemoteStorageManager(storage, chunk_size=CHUNK).fetch_index(bare, IndexType.TRANSACTION)


def test_delete_is_idempotent(any_storage_url):
    rsm, storage = make_rsm(any_storage_url)
    log = segment_bytes(200)
    meta = new_metadata(0, 199, len(log))
    rsm.copy_log_segment_data(meta, segment_data(log, txn=True))
    rsm.delete_log_segment_data(meta)
    rsm.delete_log_segment_data(meta)                 # twice: fine
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(meta, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(meta, IndexType.OFFSET)
    assert storage.inner.list_dir(segment_folder(meta)) == []
    never = new_metadata(200, 299, 10)
    rsm.delete_log_segment_data(never)                # never copied: fine


def test_half_deleted_segment_deletes_and_stays_invisible(tmp_path):
    target = type("T", (), {"url": str(tmp_path), "storage_options": {}})()
    rsm, storage = make_rsm(target)
    log = segment_bytes(200)
    meta = new_metadata(0, 199, len(log))
    rsm.copy_log_segment_data(meta, segment_data(log))
    folder = segment_folder(meta)
    storage.inner.delete(f"{folder}/manifest.json")   # a delete that stopped after step one
    fresh, _ = make_rsm(target)
    with pytest.raises(RemoteResourceNotFoundError, match="manifest"):
        fresh.fetch_log_segment(meta, 0)
    fresh.delete_log_segment_data(meta)
    assert storage.inner.list_dir(folder) == []


def test_key_rotation_keeps_old_segments_readable(tmp_path, key_files):
    target = type("T", (), {"url": str(tmp_path), "storage_options": {}})()
    old_ring = KeyRing.from_pem_files({"k1": key_files["k1"]}, "k1")
    rsm1, _ = make_rsm(target, old_ring)
    log1 = segment_bytes(150)
    m1 = new_metadata(0, 149, len(log1))
    rsm1.copy_log_segment_data(m1, segment_data(log1))

    rotated = KeyRing.from_pem_files(key_files, "k2")
    rsm2, _ = make_rsm(target, rotated)
    log2 = segment_bytes(150, base_offset=150, seed=2)
    m2 = new_metadata(150, 299, len(log2))
    rsm2.copy_log_segment_data(m2, segment_data(log2))
    assert rsm2.load_manifest(m2).encryption["keyPairId"] == "k2"
    assert rsm2.fetch_log_segment(m1, 0).read() == log1
    assert rsm2.fetch_log_segment(m2, 0).read() == log2

    # encryption turned off for new segments: a configured ring still opens old ones
    plain, _ = make_rsm(target, None, decrypt_ring=rotated)
    assert plain.fetch_log_segment(m1, 0).read() == log1

    only_k1, _ = make_rsm(target, old_ring)
    with pytest.raises(RemoteStorageError, match="key pair 'k2'.*not in the key ring"):
        only_k1.fetch_log_segment(m2, 0)
    no_ring, _ = make_rsm(target, None)
    with pytest.raises(RemoteStorageError, match="k1.*no key ring"):
        no_ring.fetch_log_segment(m1, 0)


def test_wrong_key_under_the_same_id_is_a_clear_error(tmp_path, key_files):
    target = type("T", (), {"url": str(tmp_path), "storage_options": {}})()
    rsm, _ = make_rsm(target, KeyRing.from_pem_files({"k1": key_files["k1"]}, "k1"))
    log = segment_bytes(100)
    meta = new_metadata(0, 99, len(log))
    rsm.copy_log_segment_data(meta, segment_data(log))
    impostor = KeyRing.from_pem_files({"k1": key_files["k2"]}, "k1")
    other, _ = make_rsm(target, impostor)
    with pytest.raises(RemoteStorageError, match="does not unwrap with key pair 'k1'"):
        other.fetch_log_segment(meta, 0)


def test_tampered_chunk_is_detected(tmp_path, ring_k1):
    target = type("T", (), {"url": str(tmp_path), "storage_options": {}})()
    rsm, storage = make_rsm(target, ring_k1)
    log = segment_bytes(100)
    meta = new_metadata(0, 99, len(log))
    rsm.copy_log_segment_data(meta, segment_data(log))
    path = f"{segment_folder(meta)}/{rsm.load_manifest(meta).log_object}"
    raw = bytearray(storage.inner.read(path))
    raw[100] ^= 1
    storage.inner.write_atomic(path, bytes(raw))
    with pytest.raises(RemoteStorageError, match="chunk 0 .*authentication failed"):
        rsm.fetch_log_segment(meta, 0).read()


def test_copy_checks_the_size_and_bad_positions(tmp_path):
    target = type("T", (), {"url": str(tmp_path), "storage_options": {}})()
    rsm, storage = make_rsm(target)
    log = segment_bytes(50)
    with pytest.raises(RemoteStorageError, match="metadata says"):
        rsm.copy_log_segment_data(new_metadata(0, 49, len(log) + 1), segment_data(log))
    meta = new_metadata(0, 49, len(log))
    rsm.copy_log_segment_data(meta, segment_data(log))
    with pytest.raises(RemoteStorageError, match="outside"):
        rsm.fetch_log_segment(meta, len(log) + 1)
    with pytest.raises(RemoteStorageError, match="before start"):
        rsm.fetch_log_segment(meta, 10, 5)


def test_large_segment_uses_multipart_on_s3(s3_backend_url):
    storage = open_storage(s3_backend_url.url, s3_backend_url.storage_options)
    from tests.tiered.helpers import FaultyS3
    spy = FaultyS3(storage._fs)
    storage._fs = spy
    rsm = FsspecRemoteStorageManager(storage, chunk_size=1 << 20, upload_part_size=5 << 20)
    log = random.Random(3).randbytes(12 << 20)
    meta = new_metadata(0, 9999, len(log))
    rsm.copy_log_segment_data(meta, segment_data(log))
    assert spy.calls.get("upload_part") == 3 and spy.calls.get("complete_multipart_upload") == 1
    assert rsm.fetch_log_segment(meta, 0).read() == log
