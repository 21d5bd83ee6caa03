"""`partition.metadata`: the topic id of a partition folder.

Kafka's layout (no trailing newline):

    version: 0
    topic_id: <22-char URL-safe base64 without padding of the 16-byte UUID>

Written atomically before any data is appended to the log. Reading checks Kafka's rules: two
whitespace-separated tokens per line, version >= 0, a 16-byte id that is not all zeros.
"""
from __future__ import annotations

import base64
import binascii
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logcore.errors import CorruptIndexError, ResourceNotFoundError

if TYPE_CHECKING:
    from logcore.storage import Storage

FILE_NAME = "partition.metadata"
CURRENT_VERSION = 0
ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)   # Kafka reserves it for the KRaft metadata topic
_INT = re.compile(r"[+-]?[0-9]+\Z")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def format_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a UUID: URL-safe base64 of its 16 bytes, no padding (22 chars)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def parse_topic_id(text: str, *, source: str | None = None) -> uuid.UUID:
    """The UUID of Kafka's 22-char text form; CorruptIndexError (naming `source`) if it is not."""
    if not isinstance(text, str) or len(text) > 24 or not re.fullmatch(r"[A-Za-z0-9_-]+=*", text):
        raise CorruptIndexError(f"invalid topic id {text!r}: not URL-safe base64", file=source)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise CorruptIndexError(f"invalid topic id {text!r}: not URL-safe base64",
                                file=source) from None
    if len(raw) != 16:
        raise CorruptIndexError(f"invalid topic id {text!r}: decodes to {len(raw)} bytes, not 16",
                                file=source)
    return uuid.UUID(bytes=raw)


def new_topic_id() -> uuid.UUID:
    """A random topic id, avoiding Kafka's reserved ids and text forms starting with '-'."""
    while True:
        candidate = uuid.uuid4()
        if candidate not in (ZERO_UUID, METADATA_TOPIC_ID) \
                and not format_topic_id(candidate).startswith("-"):
            return candidate


@dataclass(frozen=True)
class PartitionMetadata:
    topic_id: uuid.UUID
    version: int = CURRENT_VERSION

    def to_bytes(self) -> bytes:
        return f"version: {self.version}\ntopic_id: {format_topic_id(self.topic_id)}".encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str | None = None) -> PartitionMetadata:
        try:
            lines = _LINE_BREAK.split(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise CorruptIndexError(f"partition metadata is not UTF-8 (byte {exc.start})",
                                    file=source) from None
        version_tokens = lines[0].split()
        if len(version_tokens) != 2 or version_tokens[0] != "version:":
            raise CorruptIndexError(f"malformed line 1 of partition metadata: {lines[0]!r} "
                                    "(expected 'version: <n>')", file=source)
        if not _INT.match(version_tokens[1]):
            raise CorruptIndexError(f"malformed version {version_tokens[1]!r} on line 1 of "
                                    "partition metadata", file=source)
        version = int(version_tokens[1])
        if version < CURRENT_VERSION:
            raise CorruptIndexError(f"unrecognised version {version} of partition metadata",
                                    file=source)
        id_line = lines[1] if len(lines) > 1 else ""
        id_tokens = id_line.split()
        if len(id_tokens) != 2 or id_tokens[0] != "topic_id:":
            raise CorruptIndexError(f"malformed line 2 of partition metadata: {id_line!r} "
                                    "(expected 'topic_id: <id>')", file=source)
        topic_id = parse_topic_id(id_tokens[1], source=source)
        if topic_id == ZERO_UUID:
            raise CorruptIndexError("invalid topic id in partition metadata: the all-zero id",
                                    file=source)
        return cls(topic_id, version)


class PartitionMetadataFile:
    """The `partition.metadata` file of one partition folder."""

    def __init__(self, storage: Storage, path: str):
        self.storage = storage
        self.path = path

    def exists(self) -> bool:
        return self.storage.exists(self.path)

    def read(self) -> PartitionMetadata | None:
        """The stored metadata, or None when the file does not exist."""
        try:
            data = self.storage.read(self.path)
        except ResourceNotFoundError:
            return None
        return PartitionMetadata.from_bytes(data, source=self.storage.describe(self.path))

    def write(self, topic_id: uuid.UUID) -> None:
        if topic_id == ZERO_UUID:
            raise ValueError(f"refusing to write the all-zero topic id to "
                             f"{self.storage.describe(self.path)}")
        self.storage.write_atomic(self.path, PartitionMetadata(topic_id).to_bytes())

    def __repr__(self) -> str:
        return f"PartitionMetadataFile({self.storage.describe(self.path)})"
