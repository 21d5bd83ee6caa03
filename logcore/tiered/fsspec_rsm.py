"""The remote storage manager on any storage root (a folder, s3://..., any fsspec URL).

Remote layout, per copy attempt (see docs/tiered-storage.md):

    <topic>-<topic id>/<partition>/<20-digit start offset>-<segment id>/
        00000000000000001234.log[.rsm]          the segment data
        00000000000000001234.index[.rsm]        offset index
        00000000000000001234.timeindex[.rsm]    time index
        00000000000000001234.txnindex[.rsm]     transaction index (when the segment has one)
        00000000000000005678.snapshot[.rsm]     producer snapshot (named by the next offset, as Kafka does)
        leader-epoch-checkpoint[.rsm]           epochs up to the segment's end
        manifest.json                           written last: the segment exists once it does

Without compression and encryption ("plain") the objects are byte-identical to Kafka's files and
keep Kafka's names, so `seglog dump` and Kafka's own tools read them. Otherwise the `.log` is cut
into `chunk.size` chunks, each zstd-compressed and/or AES-GCM-sealed on its own (suffix `.rsm`),
and index files are sealed whole (never compressed).
"""
from __future__ import annotations

import base64
import io
import threading
from collections import OrderedDict
from typing import Any, BinaryIO

import zstandard

from logcore.errors import (RemoteResourceNotFoundError, RemoteStorageError, ResourceNotFoundError,
                            SegLogError)
from logcore.storage import Storage, open_storage
from logcore.storage.write_stream import DEFAULT_PART_SIZE
from logcore.tiered.cache import ChunkCache, LruBytes
from logcore.tiered.config import TieredConfig
from logcore.tiered.encryption import DataKey, KeyRing
from logcore.tiered.manifest import MANIFEST_NAME, ChunkIndex, IndexEntry, SegmentManifest
from logcore.tiered.metadata import RemoteLogSegmentMetadata
from logcore.tiered.metadata_store import partition_prefix
from logcore.tiered.rsm import (FileSource, IndexType, LogSegmentData, RemoteStorageManager,
                                SegmentCustomMetadata, read_source, source_size)

TRANSFORMED_SUFFIX = ".rsm"
_ATTRIBUTES_AT = 21          # batch header: baseOffset 8, length 4, epoch 4, magic 1, crc 4
_COMPRESSION_MASK = 0x07


def segment_folder(metadata: RemoteLogSegmentMetadata) -> str:
    return f"{partition_prefix(metadata.topic_id_partition)}/" \
           f"{metadata.start_offset:020d}-{metadata.segment_id.text}"


def index_file_name(metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> str:
    base = f"{metadata.start_offset:020d}"
    return {IndexType.OFFSET: f"{base}.index", IndexType.TIMESTAMP: f"{base}.timeindex",
            IndexType.TRANSACTION: f"{base}.txnindex",
            IndexType.PRODUCER_SNAPSHOT: f"{metadata.end_offset + 1:020d}.snapshot",
            IndexType.LEADER_EPOCH: "leader-epoch-checkpoint"}[index_type]


def first_batch_uncompressed(head: bytes) -> bool:
    """The compression heuristic: compress chunks only when the segment's first batch is not
    compressed already (compressed batches do not shrink again)."""
    if len(head) < _ATTRIBUTES_AT + 2:
        return False
    return (int.from_bytes(head[_ATTRIBUTES_AT:_ATTRIBUTES_AT + 2], "big") & _COMPRESSION_MASK) == 0


class _SegmentView:
    """A loaded manifest with what reading needs: folder, unwrapped data key."""

    def __init__(self, folder: str, manifest: SegmentManifest, data_key: DataKey | None, cache_key: str):
        self.folder = folder
        self.manifest = manifest
        self.data_key = data_key
        self.cache_key = cache_key


class FsspecRemoteStorageManager(RemoteStorageManager):
    def __init__(self, storage: Storage, *, chunk_size: int = 4 * 1024 * 1024,
                 compression: str = "off", compression_level: int = 3,
                 key_ring: KeyRing | None = None, upload_part_size: int = DEFAULT_PART_SIZE,
                 cache: ChunkCache | None = None, prefetch_max_size: int = 16 * 1024 * 1024,
                 index_cache_size: int = 10 * 1024 * 1024, manifest_cache_entries: int = 1000,
                 decrypt_ring: KeyRing | None = None):
        """key_ring: encrypt new segments with its active key pair (None: no encryption).
        decrypt_ring: key pairs that open old encrypted segments (default: key_ring)."""
        if compression not in ("off", "on", "heuristic"):
            raise RemoteStorageError(f"compression must be off, on or heuristic, got {compression!r}")
        if chunk_size <= 0:
            raise RemoteStorageError(f"chunk size must be positive, got {chunk_size}")
        self.storage = storage
        self.chunk_size = chunk_size
        self.compression = compression
        self.compression_level = compression_level
        self.key_ring = key_ring
        self.decrypt_ring = decrypt_ring if decrypt_ring is not None else key_ring
        self.upload_part_size = upload_part_size
        self.cache = cache if cache is not None else ChunkCache(memory_bytes=0)
        self.prefetch_chunks = -(-prefetch_max_size // chunk_size) if prefetch_max_size > 0 else 0
        self.index_cache = LruBytes(index_cache_size)
        self._views: OrderedDict[str, _SegmentView] = OrderedDict()
        self._views_max = manifest_cache_entries
        self._views_lock = threading.Lock()

    @classmethod
    def from_config(cls, config: TieredConfig, storage: Storage | None = None) -> "FsspecRemoteStorageManager":
        """The manager the root's `rsm.config.*` settings describe."""
        if storage is None:
            storage = open_storage(config.storage_url, config.storage_options)
        key_ring = None
        if config.encryption_enabled or config.key_files:
            key_ring = KeyRing.from_pem_files(config.key_files, config.encryption_key_pair_id
                                              or next(iter(config.key_files)))
        cache = ChunkCache(memory_bytes=config.memory_cache_size, disk_bytes=config.disk_cache_size,
                           disk_path=config.disk_cache_path, prefetch_threads=config.prefetch_threads)
        return cls(storage, chunk_size=config.chunk_size, compression=config.compression,
                   compression_level=config.compression_level,
                   key_ring=key_ring if config.encryption_enabled else None,
                   upload_part_size=config.upload_part_size, cache=cache,
                   prefetch_max_size=config.prefetch_max_size,
                   index_cache_size=config.index_cache_size,
                   manifest_cache_entries=config.manifest_cache_entries,
                   decrypt_ring=key_ring)    # encryption off still reads old encrypted segments

    # -- copy ----------------------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              segment_data: LogSegmentData) -> bytes | None:
        folder = segment_folder(metadata)
        try:
            return self._copy(metadata, segment_data, folder)
        except BaseException as exc:
            self._remove_folder_quietly(folder)
            if isinstance(exc, RemoteStorageError) or not isinstance(exc, Exception):
                raise
            raise RemoteStorageError(f"copy of remote segment {metadata.segment_id} "
                                     f"({metadata.topic_id_partition}) failed: {exc}") from exc

    def _copy(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData, folder: str) -> bytes:
        size = source_size(data.log_segment)
        if size != metadata.segment_size_in_bytes:
            raise RemoteStorageError(
                f"segment {metadata.segment_id}: the log is {size} bytes but the metadata says "
                f"{metadata.segment_size_in_bytes}")
        with _open_source(data.log_segment) as log:
            first = log.read(self.chunk_size)
            compress = self.compression == "on" or (
                self.compression == "heuristic" and first_batch_uncompressed(first))
            data_key = DataKey.generate() if self.key_ring is not None else None
            transformed = compress or data_key is not None
            log_object = f"{metadata.start_offset:020d}.log" + (TRANSFORMED_SUFFIX if transformed else "")
            compressor = zstandard.ZstdCompressor(level=self.compression_level) if compress else None
            stored_sizes: list[int] = []
            with self.storage.open_write(f"{folder}/{log_object}", part_size=self.upload_part_size) as out:
                chunk = first
                while chunk:
                    if compressor is not None:
                        chunk = compressor.compress(chunk)
                    if data_key is not None:
                        chunk = data_key.seal(chunk)
                    out.write(chunk)
                    stored_sizes.append(len(chunk))
                    chunk = log.read(self.chunk_size)
        indexes: dict[str, IndexEntry | None] = {}
        for index_type in IndexType:
            source = data.source(index_type)
            if source is None:
                indexes[index_type.value] = None
                continue
            body = read_source(source)
            if data_key is not None:
                body = data_key.seal(body)
            name = index_file_name(metadata, index_type) + (TRANSFORMED_SUFFIX if data_key else "")
            self.storage.write_atomic(f"{folder}/{name}", body)
            indexes[index_type.value] = IndexEntry(name, len(body))
        encryption = None
        if data_key is not None:
            key_id, wrapped = self.key_ring.wrap(data_key.key)
            encryption = {"keyPairId": key_id, "wrappedKey": base64.b64encode(wrapped).decode(),
                          "aad": base64.b64encode(data_key.aad).decode()}
        chunk_index = ChunkIndex.build(self.chunk_size, size, stored_sizes)
        manifest = SegmentManifest(segment=metadata.to_json(), log_object=log_object,
                                   log_transformed=transformed, chunk_index=chunk_index,
                                   compression=compress, encryption=encryption, indexes=indexes)
        # Last: until the manifest exists, nothing of this attempt is readable.
        self.storage.write_atomic(f"{folder}/{MANIFEST_NAME}", manifest.to_bytes())
        present = frozenset(t for t in IndexType if indexes[t.value] is not None)
        return SegmentCustomMetadata(present, transformed, chunk_index.stored_file_size).to_bytes()

    # -- fetch ---------------------------------------------------------------------------------

    def _view(self, metadata: RemoteLogSegmentMetadata) -> _SegmentView:
        key = metadata.segment_id.text
        with self._views_lock:
            view = self._views.get(key)
            if view is not None:
                self._views.move_to_end(key)
                return view
        folder = segment_folder(metadata)
        path = f"{folder}/{MANIFEST_NAME}"
        try:
            raw = self.storage.read(path)
        except ResourceNotFoundError:
            raise RemoteResourceNotFoundError(
                f"remote segment {metadata.segment_id} of {metadata.topic_id_partition} has no "
                f"manifest at {self.storage.describe(path)}: not copied, or deleted") from None
        except SegLogError as exc:
            raise RemoteStorageError(f"reading {self.storage.describe(path)}: {exc}") from exc
        manifest = SegmentManifest.from_bytes(raw, source=self.storage.describe(path))
        data_key = None
        if manifest.encryption is not None:
            ring = self.decrypt_ring
            where = f"remote segment {metadata.segment_id}"
            if ring is None:
                raise RemoteStorageError(
                    f"{where} is encrypted with key pair {manifest.encryption['keyPairId']!r} but "
                    "no key ring is configured (rsm.config.encryption.key.pairs)")
            key = ring.unwrap(manifest.encryption["keyPairId"],
                              base64.b64decode(manifest.encryption["wrappedKey"]), where=where)
            data_key = DataKey(key, base64.b64decode(manifest.encryption["aad"]))
        view = _SegmentView(folder, manifest, data_key, key)
        with self._views_lock:
            self._views[key] = view
            while len(self._views) > self._views_max:
                self._views.popitem(last=False)
        return view

    def load_chunk(self, view: _SegmentView, chunk: int) -> bytes:
        index = view.manifest.chunk_index
        start, end = index.stored_range(chunk)
        path = f"{view.folder}/{view.manifest.log_object}"
        try:
            data = self.storage.read(path, start, end)
        except ResourceNotFoundError:
            raise RemoteResourceNotFoundError(f"remote segment data {self.storage.describe(path)} "
                                              "is gone (deleted while reading?)") from None
        except SegLogError as exc:
            raise RemoteStorageError(f"reading chunk {chunk} of {self.storage.describe(path)}: {exc}") from exc
        if len(data) != end - start:
            raise RemoteStorageError(f"chunk {chunk} of {self.storage.describe(path)}: got "
                                     f"{len(data)} bytes, expected {end - start}")
        where = f"chunk {chunk} of {self.storage.describe(path)}"
        if view.data_key is not None:
            data = view.data_key.open(data, where=where)
        if view.manifest.compression:
            try:
                data = zstandard.ZstdDecompressor().decompress(data, max_output_size=index.original_chunk_size)
            except zstandard.ZstdError as exc:
                raise RemoteStorageError(f"{where}: bad zstd data: {exc}") from None
        lo, hi = index.original_range(chunk)
        if len(data) != hi - lo:
            raise RemoteStorageError(f"{where}: {len(data)} bytes after decoding, expected {hi - lo}")
        return data

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> "RemoteSegmentReader":
        view = self._view(metadata)
        size = view.manifest.chunk_index.original_file_size
        if start_position < 0 or start_position > size:
            raise RemoteStorageError(f"start position {start_position} is outside remote segment "
                                     f"{metadata.segment_id} of {size} bytes")
        end = size if end_position is None else min(end_position + 1, size)
        if end < start_position:
            raise RemoteStorageError(f"end position {end_position} is before start position "
                                     f"{start_position} (remote segment {metadata.segment_id})")
        return RemoteSegmentReader(self, view, start_position, end)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        custom = SegmentCustomMetadata.from_bytes(metadata.custom_metadata)
        if custom is not None and index_type not in custom.indexes:
            raise RemoteResourceNotFoundError(
                f"remote segment {metadata.segment_id} has no {index_type.name.lower()} index")
        cache_key = (metadata.segment_id.text, index_type.value)
        cached = self.index_cache.get(cache_key)
        if cached is not None:
            return cached
        view = self._view(metadata)
        entry = view.manifest.indexes.get(index_type.value)
        if entry is None:
            raise RemoteResourceNotFoundError(
                f"remote segment {metadata.segment_id} has no {index_type.name.lower()} index")
        path = f"{view.folder}/{entry.object}"
        try:
            data = self.storage.read(path)
        except ResourceNotFoundError:
            raise RemoteResourceNotFoundError(f"remote index {self.storage.describe(path)} is gone") from None
        except SegLogError as exc:
            raise RemoteStorageError(f"reading {self.storage.describe(path)}: {exc}") from exc
        if view.data_key is not None:
            data = view.data_key.open(data, where=self.storage.describe(path))
        self.index_cache.put(cache_key, data)
        return data

    def load_manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest:
        return self._view(metadata).manifest

    # -- delete --------------------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        folder = segment_folder(metadata)
        with self._views_lock:
            self._views.pop(metadata.segment_id.text, None)
        try:
            # The manifest first: from then on the segment is invisible, whatever else remains.
            self.storage.delete(f"{folder}/{MANIFEST_NAME}")
            self.storage.delete_dir(folder)
        except SegLogError as exc:
            raise RemoteStorageError(f"deleting remote segment {metadata.segment_id} at "
                                     f"{self.storage.describe(folder)}: {exc}") from exc

    def _remove_folder_quietly(self, folder: str) -> None:
        try:
            self.storage.delete(f"{folder}/{MANIFEST_NAME}")
            self.storage.delete_dir(folder)
        except Exception:
            pass        # the orphan collector finishes what this could not

    def segment_folders(self, metadata_prefix: str) -> list[str]:
        """Names of the copy-attempt folders under a partition prefix."""
        return [n for n in self.storage.list_dir(metadata_prefix)
                if len(n) > 21 and n[:20].isdigit() and n[20] == "-"]

    def close(self) -> None:
        self.cache.close()


def _open_source(source: FileSource) -> BinaryIO:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(source))
    try:
        return open(source, "rb")
    except OSError as exc:
        raise RemoteStorageError(f"cannot read {source} for upload: {exc.strerror}") from None


class RemoteSegmentReader(io.RawIOBase):
    """The original bytes [start, end) of a remote segment, fetched chunk by chunk as read.

    Each chunk needed is fetched once (through the chunk cache); with prefetch on, the next chunks
    of the requested range are fetched ahead on the cache's pool, never past the range's end."""

    def __init__(self, rsm: FsspecRemoteStorageManager, view: _SegmentView, start: int, end: int):
        super().__init__()
        self._rsm = rsm
        self._view = view
        self._index = view.manifest.chunk_index
        self._pos = start
        self._end = end
        self._last_chunk = self._index.chunk_of(end - 1) if end > start else -1
        self._ahead: dict[int, Any] = {}
        self._buf = memoryview(b"")
        self._buf_chunk = -1

    def readable(self) -> bool:
        return True

    @property
    def remaining(self) -> int:
        return self._end - self._pos

    def _chunk(self, number: int) -> bytes:
        key = (self._view.cache_key, number)
        load = lambda n=number: self._rsm.load_chunk(self._view, n)  # noqa: E731
        cache = self._rsm.cache
        ahead = self._rsm.prefetch_chunks
        if ahead:
            for n in range(number + 1, min(number + ahead, self._last_chunk) + 1):
                if n not in self._ahead:
                    self._ahead[n] = cache.get_async((self._view.cache_key, n),
                                                     lambda n=n: self._rsm.load_chunk(self._view, n))
        future = self._ahead.pop(number, None)
        return future.result() if future is not None else cache.get(key, load)

    def _fill(self) -> None:
        number = self._index.chunk_of(self._pos)
        if number != self._buf_chunk:
            self._buf = memoryview(self._chunk(number))
            self._buf_chunk = number

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > self.remaining:
            size = self.remaining
        parts = []
        while size > 0:
            self._fill()
            chunk_start = self._buf_chunk * self._index.original_chunk_size
            offset = self._pos - chunk_start
            take = min(size, len(self._buf) - offset)
            parts.append(self._buf[offset:offset + take])
            self._pos += take
            size -= take
        return b"".join(parts)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        # Prefetches are not cancelled: their futures are the cache's in-flight entries, which
        # other readers of the same chunks may be waiting on; they finish into the cache.
        self._ahead.clear()
        super().close()
