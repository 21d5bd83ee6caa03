"""ObjectStorage specifics: url resolution, error mapping, secrets never printed."""
from __future__ import annotations

import socket

import pytest

from logcore.errors import CommitStateUnknownError, InvalidConfigError, ResourceNotFoundError, RetriableStorageError
from logcore.storage import ObjectStorage, open_storage
from logcore.storage.objectstore import is_precondition_failed


def test_memory_and_s3_urls_give_object_storage():
    assert isinstance(open_storage("memory://seglog-resolve"), ObjectStorage)
    s3 = open_storage("s3://bucket/prefix/", {"key": "AKIAEXAMPLEKEY", "secret": "s3cr3t-value",
                                              "endpoint_url": "http://127.0.0.1:9"})
    assert isinstance(s3, ObjectStorage) and not s3.is_local
    assert s3.url == "s3://bucket/prefix"
    assert "s3cr3t" not in repr(s3) and "AKIA" not in repr(s3)


def test_user_info_in_url_is_not_printed():
    storage = open_storage("memory://user:hunter2@seglog-userinfo/x")
    assert "hunter2" not in storage.url and "hunter2" not in repr(storage)


def test_bad_urls_name_the_problem():
    with pytest.raises(InvalidConfigError, match="no bucket"):
        open_storage("s3:///prefix")
    with pytest.raises(InvalidConfigError, match="nosuchproto"):
        open_storage("nosuchproto://x/y")
    with pytest.raises(InvalidConfigError, match="absolute"):
        open_storage("file://relative/path")
    with pytest.raises(InvalidConfigError):
        open_storage("")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_server_is_retriable_and_hides_secrets():
    secret = "very-secret-value-123"
    storage = open_storage("s3://seglog-nobucket/root", {
        "endpoint_url": f"http://127.0.0.1:{_closed_port()}", "key": "AKIDEXAMPLEKEY99",
        "secret": secret, "client_kwargs": {"region_name": "us-east-1"},
        "config_kwargs": {"connect_timeout": 0.5, "read_timeout": 0.5, "retries": {"max_attempts": 1}}})
    with pytest.raises(RetriableStorageError) as info:
        storage.read("p/00000000000000000000.log")
    assert "p/00000000000000000000.log" in str(info.value)
    assert secret not in str(info.value) and "AKIDEXAMPLEKEY99" not in str(info.value)
    # a conditional write that fails in transit may have been applied: state unknown, not "lost"
    with pytest.raises(CommitStateUnknownError, match="re-read") as info:
        storage.put_if_absent("p/writer-epoch", b"{}")
    assert secret not in str(info.value)


@pytest.mark.s3
def test_secrets_absent_from_errors_on_real_server(s3_endpoint, s3_bucket):
    options = s3_endpoint.storage_options()
    if s3_endpoint.backend in ("seaweedfs", "moto"):  # these accept any credentials
        options.update(key="AKIDUNIQUEKEY77", secret="unique-secret-value-77")
    storage = open_storage(f"s3://{s3_bucket}/root", options)
    storage.write_atomic("a", b"1")
    for call in (lambda: storage.read("missing"), lambda: storage.size("missing"),
                 lambda: storage.delete("missing", missing_ok=False)):
        with pytest.raises(ResourceNotFoundError) as info:
            call()
        assert options["secret"] not in str(info.value) and options["key"] not in str(info.value)
        assert "missing" in str(info.value)


@pytest.mark.s3
def test_missing_bucket_is_resource_not_found(s3_endpoint):
    storage = open_storage("s3://seglog-no-such-bucket-7f3a/root", s3_endpoint.storage_options())
    with pytest.raises(ResourceNotFoundError, match="seglog-no-such-bucket-7f3a"):
        storage.read("x")
    assert storage.read_versioned("x") is None
    assert storage.list_dir("") == []


def test_precondition_failed_recognised_in_all_its_forms():
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    def s3fs_error(code: str, status: int, **extra: str) -> BaseException:
        response = {"Error": {"Code": code, "Message": code, **extra},
                    "ResponseMetadata": {"HTTPStatusCode": status}}
        return translate_boto_error(ClientError(response, "PutObject"))

    moto_style = s3fs_error("PreconditionFailed", 412, Condition="If-None-Match")
    assert isinstance(moto_style, FileExistsError) and is_precondition_failed(moto_style)
    seaweed_style = s3fs_error("PreconditionFailed", 412)  # no Condition element in the body
    assert not isinstance(seaweed_style, FileExistsError) and is_precondition_failed(seaweed_style)
    assert not is_precondition_failed(s3fs_error("InvalidArgument", 400))


@pytest.mark.parametrize("kind", ["memory", "s3"])
def test_copy_if_absent_copies_once_and_never_over_an_object(kind, request):
    if kind == "s3":
        endpoint, bucket = request.getfixturevalue("s3_endpoint"), request.getfixturevalue("s3_bucket")
        storage = open_storage(f"s3://{bucket}/copy", endpoint.storage_options())
    else:
        storage = open_storage(f"memory://seglog-copy-{request.node.name[-8:]}/copy")
    storage.write_atomic("staged/a", b"first")
    storage.write_atomic("staged/b", b"second")
    assert storage.copy_if_absent("staged/a", "dir/segment") is True
    assert storage.copy_if_absent("staged/b", "dir/segment") is False     # If-None-Match
    assert storage.read("dir/segment") == b"first"
    storage.delete("staged/a")
    assert storage.read("dir/segment") == b"first"          # a copy, not a reference
    with pytest.raises(ResourceNotFoundError):
        storage.copy_if_absent("staged/missing", "dir/other")


@pytest.mark.s3
def test_a_large_ranged_read_is_one_get_of_its_range(s3_endpoint, s3_bucket, monkeypatch):
    storage = open_storage(f"s3://{s3_bucket}/parts", s3_endpoint.storage_options())
    data = bytes(range(256)) * 36000            # 9 MB: over a source window, no two KiB alike
    storage.write_atomic("obj", data)
    ranges = []
    real = ObjectStorage._s3_get

    async def counting(self, bucket, key, byte_range=None):
        ranges.append(byte_range)
        return await real(self, bucket, key, byte_range)
    monkeypatch.setattr(ObjectStorage, "_s3_get", counting)
    assert storage.read("obj", 1000, 1000 + (8 << 20)) == data[1000:1000 + (8 << 20)]
    assert ranges == [f"bytes=1000-{1000 + (8 << 20) - 1}"]     # not split into parts
    ranges.clear()
    # a range reaching past the object's end reads to its end
    assert storage.read("obj", 8 << 20, 16 << 20) == data[8 << 20:]
    assert storage.read("obj", len(data) + 10, len(data) + (300 << 10)) == b""
    with pytest.raises(ResourceNotFoundError):
        storage.read("missing", 0, 300 << 10)
