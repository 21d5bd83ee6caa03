"""partition.metadata: Kafka's exact text, topic id text form, validation errors."""
from __future__ import annotations

import base64
import uuid

import pytest

from logcore.errors import CorruptIndexError
from logcore.log.partition_metadata import (
    PartitionMetadata,
    PartitionMetadataFile,
    format_topic_id,
    new_topic_id,
    parse_topic_id,
)
from logcore.storage import open_storage


@pytest.fixture(params=["local", "memory"])
def storage(request, storage_targets):
    target = storage_targets.make(request.param)
    return open_storage(target.url, target.storage_options)


def test_topic_id_text_form_is_urlsafe_base64_without_padding():
    topic_id = uuid.UUID(bytes=bytes(range(0xF0, 0x100)))
    text = format_topic_id(topic_id)
    assert len(text) == 22 and "=" not in text
    assert text == base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    assert "_" in text or "-" in text  # these bytes use the URL-safe alphabet
    assert parse_topic_id(text) == topic_id


def test_new_topic_ids_are_random_and_never_reserved():
    ids = {new_topic_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(not format_topic_id(i).startswith("-") and i.int > 1 for i in ids)


def test_file_bytes_and_round_trip(storage):
    topic_id = uuid.UUID("7a2b8f8e-3c1d-4e5f-9a0b-1c2d3e4f5a6b")
    file = PartitionMetadataFile(storage, "orders-0/partition.metadata")
    assert file.read() is None
    file.write(topic_id)
    assert storage.read("orders-0/partition.metadata") == (
        b"version: 0\ntopic_id: " + format_topic_id(topic_id).encode())
    assert file.read() == PartitionMetadata(topic_id, 0)


@pytest.mark.parametrize("data, message", [
    (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "all-zero"),
    (b"version: -1\ntopic_id: AQIDBAUGBwgJCgsMDQ4PEA", "unrecognised version -1"),
    (b"version:0\ntopic_id: AQIDBAUGBwgJCgsMDQ4PEA", "malformed line 1"),
    (b"version: 0\ntopic_id:", "malformed line 2"),
    (b"version: 0", "malformed line 2"),
    (b"version: 0\ntopic_id: AQIDBAUGBwgJ", "decodes to 9 bytes"),
    (b"version: 0\ntopic_id: AQID*AUGBwgJCgsMDQ4PEA", "not URL-safe base64"),
    (b"version: x\ntopic_id: AQIDBAUGBwgJCgsMDQ4PEA", "malformed version"),
])
def test_corrupt_files(data, message):
    with pytest.raises(CorruptIndexError, match=message) as info:
        PartitionMetadata.from_bytes(data, source="t-0/partition.metadata")
    assert info.value.file == "t-0/partition.metadata"


def test_newer_version_is_accepted_like_kafka():
    meta = PartitionMetadata.from_bytes(b"version: 1\ntopic_id: AQIDBAUGBwgJCgsMDQ4PEA\n")
    assert meta.version == 1 and meta.topic_id.bytes == bytes(range(1, 17))


def test_zero_id_is_never_written(storage):
    with pytest.raises(ValueError, match="all-zero"):
        PartitionMetadataFile(storage, "partition.metadata").write(uuid.UUID(int=0))
