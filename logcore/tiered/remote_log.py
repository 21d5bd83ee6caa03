"""A root's remote tier and the per-partition view a Log reads its remote segments through.

`RemoteTier` is built from the root's settings (`remote.log.storage.system.enable`,
`rsm.config.*`): one remote storage manager, with its chunk, index and manifest caches, shared by
every partition log of the root. `RemotePartition` implements `logcore.log.remote_view.RemoteLogView`
over the partition's remote log metadata store: which finished segment holds an offset, where in
it (the segment's offset index, fetched once and cached), and whole batches read through the RSM.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from logcore.errors import InvalidConfigError, RemoteResourceNotFoundError, SegLogError
from logcore.log.partition_metadata import parse_topic_id
from logcore.log.remote_view import RemoteLogView
from logcore.log.remote_view import RemoteTier as RemoteTierProtocol
from logcore.log.txn_index import TransactionIndex
from logcore.log.time_index import TimeIndex
from logcore.records.batch import (F_BASE_OFFSET, F_LAST_DELTA, F_POSITION, F_SIZE, HEADER_SIZE,
                                   batch_fields, first_record_at_or_after, iter_batches,
                                   may_hold_timestamp)
from logcore.tiered.config import UNLIMITED_RATE, TieredConfig
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager
from logcore.tiered.metadata import RemoteLogSegmentMetadata
from logcore.tiered.metadata_policy import metadata_policy
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.metadata_topic import MetadataTopicClient
from logcore.tiered.metrics import RemoteStorageMetrics
from logcore.tiered.partition_delete import PartitionDeleter, delete_remote_partition, pending_deletions
from logcore.tiered.quota import ByteRateQuota, combined
from logcore.tiered.rsm import IndexType, SegmentCustomMetadata

logger = logging.getLogger(__name__)


def _limit(rate: int) -> int | None:
    """A Kafka quota setting as a limit: its default (Long.MAX_VALUE) is none."""
    return None if rate >= UNLIMITED_RATE else rate


_OFFSET_ENTRY = np.dtype([("relative", ">i4"), ("position", ">i4")])
_INDEX_CACHE_ENTRIES = 256
_TIMESTAMP_SCAN_BYTES = 256 * 1024  # a window of batches read per step of a timestamp search
_LENGTH_END = 12            # baseOffset (8) + batchLength (4): enough to know a batch's size


class RemoteTier(RemoteTierProtocol):
    """The tiered storage of one log root: settings, one RSM and a metadata store per partition."""

    def __init__(self, config: TieredConfig, rsm: FsspecRemoteStorageManager | None = None):
        self.config = config
        self.rsm = rsm if rsm is not None else FsspecRemoteStorageManager.from_config(config)
        # Shared by every partition of the root (Kafka's quotas are per broker).
        self.metrics = RemoteStorageMetrics()
        self.copy_quota = ByteRateQuota(combined(_limit(config.copy_max_bytes_per_second),
                                                 config.upload_rate_limit))
        self.fetch_quota = ByteRateQuota(_limit(config.fetch_max_bytes_per_second))
        # remote.log.metadata.manager.class.name: the object store, or __remote_log_metadata
        self.metadata = metadata_policy(config)
        self._stores: dict[tuple[str, uuid.UUID, int], RemoteLogMetadataStore] = {}
        self._lock = threading.Lock()
        self.deleter = PartitionDeleter()        # deleted partitions' remote data, in the background
        # the broker this tier works for, recorded in the metadata it writes (-1: a tool)
        self.broker_id = -1

    def attach_broker(self, broker_id: int) -> None:
        """The broker (node id) that owns this tier: its id goes into the remote log metadata
        records the tier writes (Kafka's brokerId field)."""
        if broker_id < 0:
            raise InvalidConfigError(f"a remote tier's broker id must be >= 0, got {broker_id}")
        self.broker_id = broker_id

    def attach_metadata_topic(self, client: MetadataTopicClient) -> None:
        """A broker's `__remote_log_metadata` (TopicBasedRemoteLogMetadataManager only): the
        partitions opened from now on keep their metadata there."""
        self.metadata.attach(client)
        with self._lock:
            self._stores.clear()

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> "RemoteTier | None":
        """The tier the root settings describe; None when they do not enable tiered storage."""
        config = TieredConfig.from_props(props)
        return cls(config) if config.enabled else None

    def check_access(self) -> None:
        """Write and delete a small object at the remote root, so that a wrong URL, bucket or
        credentials fail when a process starts, naming the setting, not at its first copy."""
        storage = self.rsm.storage
        probe = f".seglog-access-check-{uuid.uuid4().hex}"
        try:
            storage.write_atomic(probe, b"")
            storage.delete(probe)
        except SegLogError as exc:
            from logcore.storage.secrets import redact_url
            raise InvalidConfigError(f"rsm.config.storage.url={redact_url(self.config.storage_url)}: the remote "
                                     f"root cannot be written: {exc}") from None

    def store(self, topic: str, topic_id: str | uuid.UUID, partition: int) -> RemoteLogMetadataStore:
        """The partition's metadata store (one per partition and tier: its replay is cached)."""
        tid = parse_topic_id(topic_id) if isinstance(topic_id, str) else topic_id
        key = (topic, tid, partition)
        with self._lock:
            store = self._stores.get(key)
        if store is None:
            store = self.metadata.open_store(self.rsm.storage, topic, tid, partition)
            with self._lock:
                store = self._stores.setdefault(key, store)
        return store

    def view(self, topic: str, topic_id: str | uuid.UUID, partition: int) -> "RemotePartition":
        """The partition's view; its metadata is read on first need (a log that only reads
        local offsets never lists the remote root)."""
        return RemotePartition(self.rsm, lambda: self.store(topic, topic_id, partition), topic=topic,
                               metrics=self.metrics, copy_quota=self.copy_quota,
                               fetch_quota=self.fetch_quota)

    def delete_partition(self, topic: str, topic_id: str | uuid.UUID, partition: int) -> None:
        """A deleted topic's partition: its remote segments are deleted in the background, each
        step recorded in its remote log metadata (partition_delete.py)."""
        tid = parse_topic_id(topic_id) if isinstance(topic_id, str) else topic_id

        def delete() -> int:
            try:
                return delete_remote_partition(self.store(topic, tid, partition), self.rsm,
                                               broker_id=self.broker_id, metrics=self.metrics)
            finally:
                with self._lock:
                    self._stores.pop((topic, tid, partition), None)

        self.deleter.submit(f"partition {partition} of topic {topic}", delete)

    def resume_deletions(self, live_topic_ids=frozenset()) -> int:
        """Submit again every partition deletion that a killed process left marked or started
        (found in the remote root's metadata; topics in `live_topic_ids` still exist and are
        not looked into); the number submitted. A broker calls it when it starts."""
        pending = pending_deletions(self.rsm.storage, frozenset(live_topic_ids))
        for topic, topic_id, partition in pending:
            logger.info("partition %d of deleted topic %s: resuming the deletion of its remote data",
                        partition, topic)
            self.delete_partition(topic, topic_id, partition)
        return len(pending)

    def close(self) -> None:
        self.deleter.close()          # the deletions submitted finish first
        self.rsm.close()


class RemotePartition(RemoteLogView):
    """One partition's remote segments, read through the tier's RSM (see the module docstring)."""

    def __init__(self, rsm: FsspecRemoteStorageManager,
                 store: RemoteLogMetadataStore | Callable[[], RemoteLogMetadataStore], *,
                 topic: str | None = None, metrics: RemoteStorageMetrics | None = None,
                 copy_quota: ByteRateQuota | None = None, fetch_quota: ByteRateQuota | None = None):
        """metrics, quotas: the tier's, shared by its partitions (default: this view's own,
        unlimited)."""
        self.rsm = rsm
        self.topic = topic if topic is not None else (
            "" if callable(store) else store.topic_id_partition.topic)
        self.metrics = metrics if metrics is not None else RemoteStorageMetrics()
        self.copy_quota = copy_quota if copy_quota is not None else ByteRateQuota(None)
        self.fetch_quota = fetch_quota if fetch_quota is not None else ByteRateQuota(None)
        # a store, or how to open it on first need
        self._store = None if callable(store) else store
        self._open_store = store if callable(store) else None
        # Parsed remote indexes by (segment id, index type), most recently used last.
        self._indexes: OrderedDict[tuple[str, IndexType], Any] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def store(self) -> RemoteLogMetadataStore:
        if self._store is None:
            self._store = self._open_store()
        return self._store

    # -- offsets -------------------------------------------------------------------------------

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        """Finished remote segments by start offset."""
        return self.store.list_segments()

    def start_offset(self) -> int | None:
        segments = self.segments()
        return segments[0].start_offset if segments else None

    def end_offset(self) -> int | None:
        return self.store.highest_offset()

    def refresh(self) -> None:
        if self._store is not None:       # else the first use reads everything anyway
            self._store.refresh()

    def _segments_from(self, offset: int) -> list[RemoteLogSegmentMetadata]:
        """Finished segments that end at or after `offset`, in order; refreshed once when the
        cached metadata knows none (another process copied more since)."""
        found = [m for m in self.segments() if m.end_offset >= offset]
        if not found:
            self.store.refresh()
            found = [m for m in self.segments() if m.end_offset >= offset]
        return found

    # -- reading -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True) -> bytes:
        for meta in self._segments_from(offset):
            if meta.start_offset >= max_offset:
                break
            waited = self.fetch_quota.acquire(0)     # earlier reads paid for first
            started = time.monotonic()
            try:
                data = self._read_segment(meta, max(offset, meta.start_offset), max_bytes,
                                          max_offset, min_one_batch)
            except SegLogError:
                self.metrics.record_fetch_error(self.topic)
                raise
            self.fetch_quota.charge(len(data))
            self.metrics.record_fetch(self.topic, len(data), time.monotonic() - started, waited)
            if data:
                return data
        return b""

    def _index(self, meta: RemoteLogSegmentMetadata, index_type: IndexType,
               parse: Callable[[bytes], Any]) -> Any:
        """One of the segment's indexes, fetched through the RSM (b"" when the segment has none)
        and parsed once: the parsed form is kept for the most recently used segments."""
        key = (meta.segment_id.text, index_type)
        with self._lock:
            cached = self._indexes.get(key)
            if cached is not None:
                self._indexes.move_to_end(key)
                return cached
        try:
            raw = self.rsm.fetch_index(meta, index_type)
        except RemoteResourceNotFoundError:
            raw = b""
        cached = parse(raw)
        with self._lock:
            self._indexes[key] = cached
            while len(self._indexes) > _INDEX_CACHE_ENTRIES:
                self._indexes.popitem(last=False)
        return cached

    def _position(self, meta: RemoteLogSegmentMetadata, offset: int) -> int:
        """Byte position in the segment to scan from for `offset`: its offset index's floor entry."""
        relative, positions = self._index(meta, IndexType.OFFSET, _parse_offset_index)
        slot = int(np.searchsorted(relative, offset - meta.start_offset, side="right")) - 1
        return int(positions[slot]) if slot >= 0 else 0

    def _time_index(self, meta: RemoteLogSegmentMetadata) -> TimeIndex:
        def parse(raw: bytes) -> TimeIndex:
            index = TimeIndex.from_bytes(raw, meta.start_offset, source=f"time index of {meta.segment_id}")
            index.drop_invalid_tail()      # only the leading entries in order are real
            return index
        return self._index(meta, IndexType.TIMESTAMP, parse)

    # -- search by timestamp -------------------------------------------------------------------

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int,
                                 below_offset: int) -> tuple[int, int] | None:
        # KIP-405: the first segment (offset order) whose max timestamp reaches the target and
        # that ends at or after the starting offset; scan on when its records that reach the
        # target all lie below the starting offset (as the local search does).
        for meta in self._segments_from(starting_offset):
            if meta.start_offset >= below_offset:
                break
            if meta.max_timestamp_ms < timestamp:
                continue
            found = self._find_in_segment(meta, timestamp, starting_offset)
            if found is not None:
                return found
        return None

    def _find_in_segment(self, meta: RemoteLogSegmentMetadata, timestamp: int,
                         starting_offset: int) -> tuple[int, int] | None:
        """As a local segment searches: the time index's floor entry for the target, the offset
        index's position for it, then whole batches forward through the remote read path."""
        source = f"remote segment {meta.segment_id} of {meta.topic_id_partition}"
        _, index_offset = self._time_index(meta).lookup(timestamp)
        offset = max(index_offset, starting_offset, meta.start_offset)
        while offset <= meta.end_offset:
            data = self._read_segment(meta, offset, _TIMESTAMP_SCAN_BYTES, meta.end_offset + 1, True)
            if not data:
                return None
            for pos, header in iter_batches(data, source=source, verify_crc=False):
                if may_hold_timestamp(header, timestamp, starting_offset):
                    found = first_record_at_or_after(data, pos, timestamp, starting_offset, source=source)
                    if found is not None:
                        return found
                offset = header.next_offset
        return None

    def _read_segment(self, meta: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
                      max_offset: int, min_one_batch: bool) -> bytes:
        source = f"remote segment {meta.segment_id} of {meta.topic_id_partition}"
        position = self._position(meta, offset)
        stream = self.rsm.fetch_log_segment(meta, position)
        try:
            buf: bytes | bytearray = stream.read(max(max_bytes, HEADER_SIZE))
            base = position                        # segment position of buf[0]
            found = False
            while True:
                exhausted = stream.remaining == 0
                fields = batch_fields(buf, source=source, verify_crc=False, allow_partial_tail=True,
                                      base_position=base)
                lasts = fields[:, F_BASE_OFFSET] + fields[:, F_LAST_DELTA]
                ends = fields[:, F_POSITION] + fields[:, F_SIZE]    # positions within buf
                complete = int(ends[-1]) if len(fields) else 0
                if not found:
                    first = int(np.searchsorted(lasts, offset, side="left"))
                    if first < len(fields):
                        # Drop the batches before the one holding `offset`; scan again from it.
                        cut = int(fields[first, F_POSITION])
                        buf, base, found = bytes(buf[cut:]), base + cut, True
                        continue
                    if exhausted:
                        return b""
                    buf, base = bytearray(buf[complete:]), base + complete
                    buf += stream.read(max(max_bytes, _tail_need(buf)))
                    continue
                if not len(fields):                  # the first wanted batch is not whole yet
                    if exhausted:
                        return b""
                    buf = bytearray(buf)
                    buf += stream.read(_tail_need(buf))
                    continue
                if lasts[0] >= max_offset:
                    return b""
                below = int(np.searchsorted(lasts, max_offset, side="left"))
                fit = int(np.searchsorted(ends[:below], max_bytes, side="right"))
                if fit == 0 and min_one_batch:
                    fit = 1
                if fit == 0:
                    return b""
                tail_fits = complete + _tail_size(buf, complete) <= max_bytes
                if fit == len(fields) == below and not exhausted and tail_fits:
                    # Everything read fits and the next batch may too: read on.
                    buf = bytearray(buf)
                    buf += stream.read(max(max_bytes - len(buf), _tail_need(buf, complete)))
                    continue
                end = int(ends[fit - 1])
                return bytes(buf) if end == len(buf) else bytes(buf[:end])
        finally:
            stream.close()

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> tuple[list, bool]:
        found: list = []
        for meta in self._segments_from(fetch_offset):
            if meta.start_offset >= upper_bound:
                return found, True
            custom = SegmentCustomMetadata.from_bytes(meta.custom_metadata)
            if custom is not None and IndexType.TRANSACTION not in custom.indexes:
                continue
            try:
                raw = self.rsm.fetch_index(meta, IndexType.TRANSACTION)
            except RemoteResourceNotFoundError:
                continue
            index = TransactionIndex.from_bytes(raw, meta.start_offset, source=str(meta.segment_id))
            result = index.collect_aborted(fetch_offset, upper_bound)
            found.extend(result.aborted)
            if result.is_complete:
                return found, True
        return found, False


def _parse_offset_index(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(relative offsets, positions) of an offset index's entries."""
    entries = np.frombuffer(raw, dtype=_OFFSET_ENTRY, count=len(raw) // 8)
    relative = entries["relative"].astype(np.int64)
    # Only the leading entries in increasing order are real (a preallocated tail is zeros).
    bad = np.nonzero(np.diff(relative) <= 0)[0]
    n = int(bad[0]) + 1 if len(bad) else len(relative)
    return relative[:n], entries["position"][:n].astype(np.int64)


def _tail_size(buf: bytes | bytearray, complete: int) -> int:
    """The size of the partial batch at buf[complete:], or one header when it is not known yet."""
    if len(buf) - complete >= _LENGTH_END:
        return int.from_bytes(buf[complete + 8:complete + 12], "big", signed=True) + _LENGTH_END
    return HEADER_SIZE


def _tail_need(buf: bytes | bytearray, complete: int = 0) -> int:
    """Bytes still missing to complete the partial batch at buf[complete:] (at least 1)."""
    return max(1, _tail_size(buf, complete) - (len(buf) - complete))
