"""Tiered storage: upload, cold read and warm read of a remote segment, each against an anchor
measured in the same run on the same server (SeaweedFS when `weed` starts, else moto):

- upload MB/s of copy_log_segment_data against one plain whole-object write of the same bytes;
- cold read MB/s (fresh cache, prefetch on) against one whole-object GET, and GETs per MB read;
- warm read MB/s (chunks in the memory cache) against reading the local segment file.

Run: python bench/bench_tiered.py [segment MiB, default 32]
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import best_of, print_table  # noqa: E402

from logcore.storage import open_storage  # noqa: E402
from logcore.tiered.cache import ChunkCache  # noqa: E402
from logcore.tiered.encryption import KeyRing, generate_key_pair_pem  # noqa: E402
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager  # noqa: E402
from tests.conftest import _make_bucket, _start_moto, _start_seaweedfs  # noqa: E402
from tests.tiered.helpers import FaultyStorage, new_metadata, segment_bytes, segment_data  # noqa: E402

MIB = 1 << 20


def start_server(tmp: str):
    try:
        return _start_seaweedfs(__import__("pathlib").Path(tmp) / "weed")
    except Exception as exc:
        print(f"SeaweedFS unavailable ({exc}); using moto", file=sys.stderr)
        return _start_moto()


def main(argv: list[str] | None = None) -> list[str]:
    argv = sys.argv[1:] if argv is None else argv
    size_mib = int(argv[0]) if argv else 32
    unique = segment_bytes(16_000, value_size=240)            # ~4 MiB of distinct batches
    log = (unique * (size_mib * MIB // len(unique) + 1))[:size_mib * MIB]
    mb = len(log) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        local_file = os.path.join(tmp, "00000000000000000000.log")
        with open(local_file, "wb") as f:
            f.write(log)
        os.makedirs(os.path.join(tmp, "weed"))
        endpoint, stop = start_server(tmp)
        try:
            bucket, _ = _make_bucket(endpoint)
            storage = open_storage(f"s3://{bucket}/bench", endpoint.storage_options())
            public, private = generate_key_pair_pem()
            open(os.path.join(tmp, "pub.pem"), "wb").write(public)
            open(os.path.join(tmp, "priv.pem"), "wb").write(private)
            ring = KeyRing.from_pem_files({"k1": (os.path.join(tmp, "pub.pem"),
                                                  os.path.join(tmp, "priv.pem"))}, "k1")
            rows = []
            put_s = best_of(lambda: storage.write_atomic(f"anchor/{uuid.uuid4().hex}", log), repeat=3)
            modes = {"plain": dict(), "zstd": dict(compression="on"), "aes-gcm": dict(key_ring=ring),
                     "zstd+aes-gcm": dict(compression="on", key_ring=ring)}
            metas = {}
            for name, kw in modes.items():
                rsm = FsspecRemoteStorageManager(storage, **kw)

                def copy():
                    meta = new_metadata(0, 999_999, len(log))
                    rsm.copy_log_segment_data(meta, replace(segment_data(log), log_segment=local_file))
                    metas[name] = meta
                rows.append((f"upload {name} (vs plain PUT)", mb / best_of(copy, repeat=3, warmup=0),
                             mb / put_s, "MB/s"))
            anchor_key = f"anchor/{uuid.uuid4().hex}"
            storage.write_atomic(anchor_key, log)
            get_s = best_of(lambda: storage.read(anchor_key), repeat=3)
            for name in ("plain", "zstd+aes-gcm"):
                counted = FaultyStorage(storage)
                timings, gets = [], []
                for _ in range(3):
                    rsm = FsspecRemoteStorageManager(counted, key_ring=ring,
                                                     cache=ChunkCache(memory_bytes=512 * MIB, prefetch_threads=4))
                    counted.reads.clear()
                    t0 = time.perf_counter()
                    data = rsm.fetch_log_segment(metas[name], 0).read()
                    timings.append(time.perf_counter() - t0)
                    gets.append(len(counted.reads))
                    assert data == log
                    if name == "plain":
                        warm_rsm = rsm
                    else:
                        rsm.close()
                rows.append((f"cold read {name} (vs one GET)", mb / min(timings), mb / get_s, "MB/s"))
                chunks = -(-len(log) // (4 * MIB))
                rows.append((f"cold GETs per MB {name} (vs chunks+manifest per MB)",
                             min(gets) / mb, (chunks + 1) / mb, "GET/MB"))
            meta = metas["plain"]

            def read_local():
                with open(local_file, "rb") as f:
                    return f.read()
            local_s = best_of(read_local)
            warm_s = best_of(lambda: warm_rsm.fetch_log_segment(meta, 0).read())
            rows.append(("warm read plain (vs local segment file)", mb / warm_s, mb / local_s, "MB/s"))
            warm_rsm.close()
            rows += log_read_rows(endpoint, tmp, size_mib)
        finally:
            stop()
    return print_table(f"tiered storage, {size_mib} MiB segment, 4 MiB chunks, {endpoint.backend}", rows)


def log_read_rows(endpoint, tmp: str, size_mib: int) -> list[tuple]:
    """Log.read over a tiered topic: every batch read in 1 MiB windows from the remote tier
    (cold: fresh cache; warm: chunks cached) against the same reads of the local segments
    before they were tiered."""
    from logcore.log.log_root import LogRoot
    from logcore.maintenance.service import MaintenanceService
    from tests.tiered.tiered_root import all_batches, tiering_defaults

    bucket, _ = _make_bucket(endpoint)
    url = os.path.join(tmp, "root")
    # A root does not store the remote tier's credentials: every open is given them.
    defaults = tiering_defaults(f"s3://{bucket}/tier", endpoint.storage_options(), chunk_size=str(4 * MIB),
                                fetch_chunk_cache_memory_size=str(4 * size_mib * MIB))
    root = LogRoot.open(url, create=True, defaults=defaults)
    root.create_topic("t", config={"remote.storage.enable": "true", "segment.bytes": str(8 * MIB),
                                   "local.retention.bytes": "1", "retention.bytes": "-1"})
    log = root.log("t", 0, writer=True)
    value = bytes(range(256)) * 1
    while log.log_end_offset * len(value) < size_mib * MIB:
        log.append_records([(b"k%d" % i, value, (), None) for i in range(500)])
    log.commit()
    root.release_log(log)
    local = LogRoot.open(url, read_only=True).log("t", 0)
    expected = all_batches(local, 0)
    local_s = best_of(lambda: all_batches(local, 0))
    local.close()
    MaintenanceService(root).run_once()
    root.close()
    mb = 0.0
    timings, gets = [], []
    for _ in range(2):
        reader_root = LogRoot.open(url, read_only=True, defaults=defaults)
        counted = FaultyStorage(reader_root.remote_tier().rsm.storage)
        reader_root.remote_tier().rsm.storage = counted
        reader = reader_root.log("t", 0)
        t0 = time.perf_counter()
        data = all_batches(reader, 0)
        timings.append(time.perf_counter() - t0)
        gets.append(len(counted.reads))
        assert data == expected and reader.local_log_start_offset > 0
        mb = len(data) / 1e6
        if _ == 0:
            reader_root.close()
    warm_s = best_of(lambda: all_batches(reader, 0))
    reader_root.close()
    remote_mb = mb * (1 - 8 * MIB / max(len(expected), 1))      # the last segment stays local
    return [("Log.read warm remote (vs Log.read of the local segments)", mb / warm_s, mb / local_s, "MB/s"),
            ("Log.read cold remote (vs Log.read of the local segments)", mb / min(timings), mb / local_s, "MB/s"),
            ("Log.read cold GETs per remote MB (vs data chunks alone; + manifest, index, metadata)", min(gets) / remote_mb,
             1 / (4 * MIB / 1e6), "GET/MB")]


if __name__ == "__main__":
    main()
