"""A remote segment's manifest and chunk index.

The manifest (`manifest.json` in the segment's folder) is written last: a segment folder without
one is a copy that did not finish, never served and removed by the orphan collector. It says how
to turn stored bytes back into the original ones:

    {"version": 1,
     "segment": {...RemoteLogSegmentMetadata JSON at copy time...},
     "log": {"object": "00000000000000001234.log", "transformed": false},
     "chunkIndex": {"type": "fixed", "originalChunkSize": 4194304, "originalFileSize": 1000,
                    "transformedChunkSize": 4194304, "finalTransformedChunkSize": 1000},
     "compression": false,
     "encryption": null | {"keyPairId": "k1", "wrappedKey": "<base64>", "aad": "<base64>"},
     "indexes": {"offset": {"object": "...index", "size": 80}, ..., "transaction": null}}

The chunk index is `fixed` when every stored chunk has the size of its original plus a constant
(no transform, or encryption only), else `variable`: the stored sizes as little-endian uint32,
zstd-compressed, base64 (about 1-2 bytes per chunk after compression).
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from logcore.errors import CorruptIndexError

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
INDEX_NAMES = ("offset", "timestamp", "producerSnapshot", "transaction", "leaderEpoch")


@dataclass(frozen=True)
class ChunkIndex:
    original_chunk_size: int
    original_file_size: int
    stored_sizes: np.ndarray          # int64, one per chunk
    fixed: bool

    @classmethod
    def build(cls, chunk_size: int, file_size: int, stored_sizes: list[int]) -> "ChunkIndex":
        sizes = np.asarray(stored_sizes, dtype=np.int64)
        originals = cls._original_sizes(chunk_size, file_size)
        deltas = sizes - originals if len(sizes) == len(originals) else None
        fixed = deltas is not None and (len(deltas) == 0 or bool((deltas == deltas[0]).all()))
        return cls(chunk_size, file_size, sizes, fixed)

    @staticmethod
    def _original_sizes(chunk_size: int, file_size: int) -> np.ndarray:
        count = -(-file_size // chunk_size)
        sizes = np.full(count, chunk_size, dtype=np.int64)
        if count:
            sizes[-1] = file_size - chunk_size * (count - 1)
        return sizes

    def __post_init__(self) -> None:
        ends = np.cumsum(self.stored_sizes)
        object.__setattr__(self, "_stored_ends", ends)

    @property
    def chunk_count(self) -> int:
        return len(self.stored_sizes)

    @property
    def stored_file_size(self) -> int:
        return int(self.stored_sizes.sum())

    def original_range(self, chunk: int) -> tuple[int, int]:
        start = chunk * self.original_chunk_size
        return start, min(start + self.original_chunk_size, self.original_file_size)

    def stored_range(self, chunk: int) -> tuple[int, int]:
        end = int(self._stored_ends[chunk])
        return end - int(self.stored_sizes[chunk]), end

    def chunk_of(self, position: int) -> int:
        return position // self.original_chunk_size

    def to_json(self) -> dict[str, Any]:
        base = {"originalChunkSize": self.original_chunk_size,
                "originalFileSize": self.original_file_size}
        if self.fixed:
            first = int(self.stored_sizes[0]) if self.chunk_count else self.original_chunk_size
            last = int(self.stored_sizes[-1]) if self.chunk_count else 0
            delta = first - self.original_chunk_size if self.chunk_count > 1 else \
                last - self.original_file_size
            return {"type": "fixed", **base, "transformedChunkSize": self.original_chunk_size + delta,
                    "finalTransformedChunkSize": last}
        packed = zstandard.ZstdCompressor().compress(self.stored_sizes.astype("<u4").tobytes())
        return {"type": "variable", **base, "transformedChunks": base64.b64encode(packed).decode()}

    @classmethod
    def from_json(cls, obj: dict[str, Any], *, source: str) -> "ChunkIndex":
        try:
            chunk_size, file_size = int(obj["originalChunkSize"]), int(obj["originalFileSize"])
            if chunk_size <= 0 or file_size < 0:
                raise ValueError(f"chunk size {chunk_size}, file size {file_size}")
            originals = cls._original_sizes(chunk_size, file_size)
            if obj["type"] == "fixed":
                sizes = originals + (int(obj["transformedChunkSize"]) - chunk_size)
                if len(sizes):
                    sizes[-1] = int(obj["finalTransformedChunkSize"])
                return cls(chunk_size, file_size, sizes, True)
            if obj["type"] == "variable":
                raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(obj["transformedChunks"]),
                                                              max_output_size=16 << 20)
                sizes = np.frombuffer(raw, dtype="<u4").astype(np.int64)
                if len(sizes) != len(originals):
                    raise ValueError(f"{len(sizes)} chunk sizes for {len(originals)} chunks")
                return cls(chunk_size, file_size, sizes, False)
            raise ValueError(f"unknown chunk index type {obj['type']!r}")
        except (KeyError, TypeError, ValueError, zstandard.ZstdError) as exc:
            raise CorruptIndexError(f"bad chunk index: {exc}", file=source) from None


@dataclass(frozen=True)
class IndexEntry:
    object: str
    size: int                          # stored size


@dataclass(frozen=True)
class SegmentManifest:
    segment: dict[str, Any]
    log_object: str
    log_transformed: bool
    chunk_index: ChunkIndex
    compression: bool
    encryption: dict[str, str] | None          # keyPairId, wrappedKey, aad (base64)
    indexes: dict[str, IndexEntry | None]

    def to_bytes(self) -> bytes:
        return json.dumps({
            "version": MANIFEST_VERSION, "segment": self.segment,
            "log": {"object": self.log_object, "transformed": self.log_transformed},
            "chunkIndex": self.chunk_index.to_json(), "compression": self.compression,
            "encryption": self.encryption,
            "indexes": {name: None if (e := self.indexes.get(name)) is None
                        else {"object": e.object, "size": e.size} for name in INDEX_NAMES},
        }, indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str) -> "SegmentManifest":
        try:
            obj = json.loads(data)
            if obj.get("version") != MANIFEST_VERSION:
                raise ValueError(f"unsupported manifest version {obj.get('version')!r}")
            indexes = {name: None if obj["indexes"].get(name) is None else
                       IndexEntry(str(obj["indexes"][name]["object"]), int(obj["indexes"][name]["size"]))
                       for name in INDEX_NAMES}
            encryption = obj.get("encryption")
            if encryption is not None and not {"keyPairId", "wrappedKey", "aad"} <= set(encryption):
                raise ValueError("encryption needs keyPairId, wrappedKey and aad")
            return cls(segment=obj["segment"], log_object=str(obj["log"]["object"]),
                       log_transformed=bool(obj["log"]["transformed"]),
                       chunk_index=ChunkIndex.from_json(obj["chunkIndex"], source=source),
                       compression=bool(obj["compression"]), encryption=encryption, indexes=indexes)
        except CorruptIndexError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptIndexError(f"bad segment manifest: {type(exc).__name__}: {exc}",
                                    file=source) from None
