"""Shared pieces of the tiered-storage tests: segments to upload, metadata, a fault-injecting and
request-counting storage wrapper, and an S3 client wrapper that fails chosen requests."""
from __future__ import annotations

import random
import threading
import uuid
from typing import Any

from logcore.errors import RetriableStorageError
from logcore.records.batch import build_batch
from logcore.records.compression import Compression
from logcore.storage import Storage
from logcore.tiered.metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata,
                                     TopicIdPartition)
from logcore.tiered.rsm import LogSegmentData

TIP = TopicIdPartition(uuid.UUID(int=0x1234_5678_9ABC), "clicks", 3)


def segment_bytes(records: int, *, base_offset: int = 0, per_batch: int = 50, value_size: int = 200,
                  compression: Compression = Compression.NONE, seed: int = 1) -> bytes:
    """A run of RecordBatch v2 batches with semi-compressible values."""
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefghij") for _ in range(8)) for _ in range(64)]
    out = []
    offset = base_offset
    while offset < base_offset + records:
        n = min(per_batch, base_offset + records - offset)
        recs = [(b"k%d" % (offset + i), b"".join(rng.choice(words) for _ in range(value_size // 8)),
                 (), 1_700_000_000_000 + offset + i) for i in range(n)]
        out.append(build_batch(recs, base_offset=offset, compression=compression,
                               partition_leader_epoch=0))
        offset += n
    return b"".join(out)


def segment_data(log: bytes, *, txn: bool = False) -> LogSegmentData:
    rng = random.Random(len(log))
    return LogSegmentData(
        log_segment=log, offset_index=rng.randbytes(8 * 40), time_index=rng.randbytes(12 * 40),
        producer_snapshot=rng.randbytes(100), leader_epoch_index=b"0\n1\n0 0\n",
        transaction_index=rng.randbytes(34 * 2) if txn else None)


def new_metadata(start: int, end: int, size: int, *, tip: TopicIdPartition = TIP,
                 epochs: dict[int, int] | None = None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), start, end, 1_700_000_000_000 + end,
                                    epochs or {0: start}, size)


class FaultyStorage(Storage):
    """Delegates to a real Storage, counts requests, and fails the Nth one of a kind.

    fail(op, nth, exc): the nth call (1-based, counted from now) of `op` raises `exc`; op is
    read | write (write_atomic, put_if_absent, put_if_version, and each open_write write) |
    delete. `reads` lists every ranged read as (path, start, end): each is one GET."""

    def __init__(self, inner: Storage):
        self.inner = inner
        self.url = inner.url
        self.is_local = inner.is_local
        self.read_only = inner.read_only
        self.reads: list[tuple[str, int, int | None]] = []
        self.counts = {"read": 0, "write": 0, "delete": 0}
        self._faults: dict[str, tuple[int, BaseException]] = {}
        self._lock = threading.Lock()

    def fail(self, op: str, nth: int, exc: BaseException | None = None) -> None:
        with self._lock:
            self._faults[op] = (self.counts[op] + nth,
                                exc or RetriableStorageError(f"injected {op} fault #{nth}"))

    def _tick(self, op: str) -> None:
        with self._lock:
            self.counts[op] += 1
            fault = self._faults.get(op)
            if fault and self.counts[op] == fault[0]:
                del self._faults[op]
                raise fault[1]

    def exists(self, path): return self.inner.exists(path)
    def size(self, path): return self.inner.size(path)
    def list_dir(self, path=""): return self.inner.list_dir(path)
    def makedirs(self, path): return self.inner.makedirs(path)
    def describe(self, path): return self.inner.describe(path)

    def read(self, path, start=0, end=None):
        with self._lock:
            self.reads.append((path, start, end))
        self._tick("read")
        return self.inner.read(path, start, end)

    def read_versioned(self, path):
        self._tick("read")
        return self.inner.read_versioned(path)

    def write_atomic(self, path, data, *, durable=True):
        self._tick("write")
        return self.inner.write_atomic(path, data, durable=durable)

    def put_if_absent(self, path, data):
        self._tick("write")
        return self.inner.put_if_absent(path, data)

    def put_if_version(self, path, data, version):
        self._tick("write")
        return self.inner.put_if_version(path, data, version)

    def delete(self, path, missing_ok=True):
        self._tick("delete")
        return self.inner.delete(path, missing_ok)

    def delete_dir(self, path):
        self._tick("delete")
        return self.inner.delete_dir(path)

    def open_write(self, path, *, part_size=None):
        stream = self.inner.open_write(path, part_size=part_size)
        inner_write = stream._write
        owner = self

        def write(data):
            owner._tick("write")
            inner_write(data)

        stream._write = write
        return stream

    def data_reads(self) -> list[tuple[str, int, int | None]]:
        return [r for r in self.reads if not r[0].endswith("manifest.json")]


class FaultyS3:
    """Wraps an s3fs filesystem: the nth S3 request of a method fails (or stalls into a timeout).

    Intercepts both s3fs entry points ObjectStorage uses (call_s3 and _call_s3)."""

    def __init__(self, fs: Any):
        self._fs = fs
        self.calls: dict[str, int] = {}
        self._faults: dict[str, tuple[int, BaseException]] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def fail(self, method: str, nth: int, exc: BaseException) -> None:
        with self._lock:
            self._faults[method] = (self.calls.get(method, 0) + nth, exc)

    def _tick(self, method: str) -> None:
        with self._lock:
            self.calls[method] = self.calls.get(method, 0) + 1
            fault = self._faults.get(method)
            if fault and self.calls[method] == fault[0]:
                del self._faults[method]
                raise fault[1]

    def call_s3(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._tick(method)
        return self._fs.call_s3(method, *args, **kwargs)

    async def _call_s3(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._tick(method)
        return await self._fs._call_s3(method, *args, **kwargs)


def metadata_topic_props(remote, partitions: int) -> dict[str, str]:
    """A 3-broker cluster's settings for tiering to the folder `remote` with the topic-based
    remote log metadata manager (`partitions` partitions of its topic, replicated 3 times), fast
    retention and tiering passes."""
    from logcore.tiered.config import TOPIC_BASED_RLMM_CLASS
    return {"min.insync.replicas": "2", "log.retention.check.interval.ms": "300",
            "remote.log.manager.task.interval.ms": "200", "log.segment.delete.delay.ms": "0",
            "remote.log.storage.system.enable": "true", "rsm.config.storage.url": str(remote),
            "remote.log.metadata.manager.class.name": TOPIC_BASED_RLMM_CLASS,
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
            "rlmm.config.remote.log.metadata.topic.num.partitions": str(partitions)}
