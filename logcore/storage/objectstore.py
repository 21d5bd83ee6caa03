"""Object-store storage over fsspec: whole-object PUTs, ranged GETs, conditional writes.

S3 (s3fs) gets its conditional writes from the server: `If-None-Match: *` for put_if_absent and
`If-Match: <etag>` for put_if_version, sent through s3fs's botocore client. Other fsspec backends
(memory:// for tests) get the same semantics emulated under one process-wide lock, with a content
digest as the version: valid only when this process is the only writer, as it always is for memory://.
"""
from __future__ import annotations

import asyncio
import errno
import hashlib
import threading
import time
from contextlib import nullcontext
from typing import Any

from fsspec.asyn import sync

from logcore.errors import (CommitStateUnknownError, ResourceNotFoundError, RetriableStorageError,
                            SegLogError, StorageError)
from logcore.storage.base import Storage
from logcore.storage.write_stream import (DEFAULT_PART_SIZE, BufferedWriteStream,
                                          S3MultipartWriteStream, WriteStream)

S3_PROTOCOLS = ("s3", "s3a")
# One lock for every emulated conditional write in this process (memory:// has one global store).
_EMULATION_LOCK = threading.RLock()
# A racing conditional write in flight on AWS answers 409: the outcome of ours is not decided yet.
_CONFLICT_RETRIES = 10
# A ranged read is one GET, whatever its size. Splitting reads of 4 MiB and more into two
# concurrent GETs of their halves was measured and dropped: a tiered segment's cold read (4 MiB
# chunks, 4 prefetch threads) ran at 160-170 MB/s split against 210-240 MB/s whole, the server
# spending 0.50-0.55 s of CPU per 64 MiB against 0.31-0.36; the source, whose next window's GET is
# already in flight while the current one is decoded, took no less time per task split and sent
# 20% more requests (SeaweedFS on loopback, 2 cores).

_RETRIABLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                    "RequestTimeTooSkewed", "ServiceUnavailable", "InternalError", "503", "500"}
_RETRIABLE_ERRNOS = {errno.EBUSY, errno.ETIMEDOUT, errno.EAGAIN, errno.ECONNRESET,
                     errno.ECONNREFUSED, getattr(errno, "EREMOTEIO", 121)}


def _client_error(exc: BaseException | None) -> Any:
    """The botocore ClientError behind an s3fs exception (s3fs keeps it as __cause__), if any."""
    seen = 0
    while exc is not None and seen < 8:
        if hasattr(exc, "response") and isinstance(getattr(exc, "response"), dict):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _error_code_and_status(exc: BaseException) -> tuple[str | None, int | None]:
    ce = _client_error(exc)
    if ce is None:
        return None, None
    code = ce.response.get("Error", {}).get("Code")
    status = ce.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code, status


def is_precondition_failed(exc: BaseException) -> bool:
    """A 412 from any server: moto/AWS map it to FileExistsError, SeaweedFS to OSError(EINVAL)."""
    if isinstance(exc, FileExistsError):
        return True
    code, status = _error_code_and_status(exc)
    return code == "PreconditionFailed" or status == 412


def _is_conflict(exc: BaseException) -> bool:
    code, status = _error_code_and_status(exc)
    return code == "ConditionalRequestConflict" or status == 409


_CREDENTIAL_ERRORS = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError")


def _is_missing_credentials(exc: BaseException) -> bool:
    """botocore found no (or incomplete) credentials: raised before any request is sent."""
    seen = 0
    while exc is not None and seen < 5:
        if type(exc).__name__ in _CREDENTIAL_ERRORS:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _is_retriable(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    code, status = _error_code_and_status(exc)
    if code in _RETRIABLE_CODES or (status is not None and (status >= 500 or status == 429)):
        return True
    if code is None and isinstance(exc, OSError) and exc.errno in _RETRIABLE_ERRNOS:
        return True
    module = type(exc).__module__ or ""
    # botocore/aiohttp transport failures: connection refused/reset, read/connect timeouts
    return module.startswith(("botocore", "aiobotocore", "aiohttp", "urllib3")) and code is None


class ObjectStorage(Storage):
    is_local = False

    def __init__(self, url: str, fs: Any, *, read_only: bool = False, secrets: tuple[str, ...] = ()):
        protocol = url.split("://", 1)[0]
        self.url = _printable_url(url)
        self.read_only = read_only
        self.protocol = protocol
        self._fs = fs
        self._is_s3 = protocol in S3_PROTOCOLS
        self._root = fs._strip_protocol(url).rstrip("/")
        self._secrets = tuple(s for s in secrets if len(s) >= 4)
        self._facts = None              # a ReadFacts answering reads (read_facts.py), or None

    # -- remembered reads (read_facts.py) --------------------------------------------------------

    def remember_reads(self, facts) -> None:
        """Answer and keep reads with `facts` (a ReadFacts) from now on."""
        self._facts = facts

    def settle_reads(self) -> None:
        """An open is done: only facts of immutable segment objects answer from now on."""
        if self._facts is not None:
            self._facts.settle()

    @property
    def read_facts(self):
        return self._facts

    # -- helpers -------------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        rel = self._check_path(path)
        return f"{self._root}/{rel}" if rel else self._root

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _translate(self, exc: BaseException, operation: str, path: str) -> SegLogError:
        """Map a backend exception to the seglog hierarchy; never leaks storage options."""
        if isinstance(exc, SegLogError):
            return exc
        where = self.describe(path)
        if isinstance(exc, FileNotFoundError):
            return ResourceNotFoundError(f"not found: {where}")
        detail = self._redact(f"{type(exc).__name__}: {exc}")
        if _is_missing_credentials(exc):     # a set-up error, not a transient one: retrying cannot help
            return StorageError(
                f"{operation} {where}: no credentials for {self.protocol}:// ({detail}); give them with "
                "--storage-option key=... --storage-option secret=... (storage options), the "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables or an AWS profile, "
                "or anon=true for a public bucket")
        if _is_retriable(exc):
            return RetriableStorageError(f"{operation} {where} failed (transient, retry): {detail}")
        if isinstance(exc, PermissionError):
            return StorageError(f"{operation} {where}: access denied: {detail}")
        return StorageError(f"{operation} {where} failed: {detail}")

    def _bucket_key(self, full: str) -> tuple[str, str]:
        bucket, key, _ = self._fs.split_path(full)
        return bucket, key

    def _digest(self, data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    # -- reads ---------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        if self._facts is not None:
            rel = self._check_path(path)
            if not rel:
                # The root prefix exists when something is below it: the LIST that follows an
                # open's check answers both.
                return bool(self.list_dir(""))
            return self._facts.exists(rel, lambda: self._exists(path))
        return self._exists(path)

    def _exists(self, path: str) -> bool:
        full = self._full(path)
        try:
            return bool(self._fs.exists(full))
        except Exception as exc:
            raise self._translate(exc, "check", path) from exc

    def size(self, path: str) -> int:
        if self._facts is not None:
            return self._facts.size(self._check_path(path), lambda: self._size(path))
        return self._size(path)

    def _size(self, path: str) -> int:
        full = self._full(path)
        try:
            info = self._fs.info(full)
        except Exception as exc:
            raise self._translate(exc, "stat", path) from exc
        if info.get("type") == "directory":
            raise StorageError(f"{self.describe(path)} is a folder, not a file")
        return int(info["size"])

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        if start < 0 or (end is not None and end < start):
            raise StorageError(f"bad range [{start}, {end}) for {self.describe(path)}")
        if end is not None and end == start:
            if not self.exists(path):
                raise ResourceNotFoundError(f"not found: {self.describe(path)}")
            return b""
        if self._facts is not None:
            rel = self._check_path(path)
            if start == 0 and end is None:
                # with its version: a read_versioned of the same object (the partition state
                # is read both ways at an open) is answered by it
                found = self._facts.whole(rel, lambda: self._read_versioned(path))
                if found is None:
                    raise ResourceNotFoundError(f"not found: {self.describe(path)}")
                return found[0]
            return self._facts.read_range(rel, start, end, lambda: self._read(path, start, end))
        return self._read(path, start, end)

    def _read(self, path: str, start: int, end: int | None) -> bytes:
        full = self._full(path)
        try:
            if self._is_s3:
                # One GET (s3fs's cat_file adds a HEAD for whole-object reads).
                bucket, key = self._bucket_key(full)
                byte_range = f"bytes={start}-{'' if end is None else end - 1}" if start or end else None
                return sync(self._fs.loop, self._s3_get, bucket, key, byte_range)[0]
            return self._fs.cat_file(full, start=start or None, end=end)
        except Exception as exc:
            code, status = _error_code_and_status(exc)
            if (code == "InvalidRange" or status == 416) and start > 0:
                return b""  # start at or past the end: an empty range, not an error
            raise self._translate(exc, "read", path) from exc

    def list_dir(self, path: str = "") -> list[str]:
        if self._facts is not None:
            return self._facts.listing(self._check_path(path), lambda: self._listing(path))
        return sorted(self._listing(path))

    def _listing(self, path: str) -> dict[str, int | None]:
        """{name: size, None for a folder} of the names directly in `path` (one LIST: the
        sizes come with it, and a remembering reader keeps them)."""
        full = self._full(path)
        try:
            entries = self._fs.ls(full, detail=True, refresh=True)
        except FileNotFoundError:
            return {}
        except Exception as exc:
            raise self._translate(exc, "list", path) from exc
        prefix = full.rstrip("/") + "/"
        out: dict[str, int | None] = {}
        for e in entries:
            name = e["name"].rstrip("/")
            if not name.startswith(prefix):
                continue
            rel = name[len(prefix):]
            if rel and "/" not in rel:
                is_file = e.get("type") == "file"
                out[rel] = int(e.get("size") or 0) if is_file else None
        return out

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        if self._facts is not None:
            return self._facts.whole(self._check_path(path), lambda: self._read_versioned(path),
                                     versioned=True)
        return self._read_versioned(path)

    def _read_versioned(self, path: str) -> tuple[bytes, str] | None:
        full = self._full(path)
        try:
            if self._is_s3:
                bucket, key = self._bucket_key(full)
                return sync(self._fs.loop, self._s3_get, bucket, key)
            with _EMULATION_LOCK:
                data = self._fs.cat_file(full)
                return data, self._digest(data)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._translate(exc, "read", path) from exc

    async def _s3_get(self, bucket: str, key: str, byte_range: str | None = None) -> tuple[bytes, str]:
        extra = {"Range": byte_range} if byte_range else {}
        resp = await self._fs._call_s3("get_object", Bucket=bucket, Key=key, **extra)
        body = resp["Body"]
        try:
            data = await body.read()
        finally:
            body.close()
        return data, resp["ETag"]

    # -- writes --------------------------------------------------------------------------------

    def makedirs(self, path: str) -> None:
        # Object stores have no folders: a prefix exists once an object below it does.
        self._refuse_if_read_only(path, "create folder")
        self._check_path(path)

    def delete(self, path: str, missing_ok: bool = True) -> None:
        self._refuse_if_read_only(path, "delete")
        full = self._full(path)
        try:
            if not missing_ok and not self._fs.exists(full):
                raise ResourceNotFoundError(f"not found: {self.describe(path)}")
            with _EMULATION_LOCK if not self._is_s3 else nullcontext():
                self._fs.rm_file(full)
        except FileNotFoundError:
            if not missing_ok:
                raise ResourceNotFoundError(f"not found: {self.describe(path)}") from None
        except Exception as exc:
            raise self._translate(exc, "delete", path) from exc

    def delete_dir(self, path: str) -> None:
        self._refuse_if_read_only(path, "delete folder")
        full = self._full(path)
        if full == self._root:
            raise StorageError(f"refusing to delete the storage root {self.url}")
        try:
            if self._is_s3:
                self._s3_delete_tree(path, full)
                return
            try:
                self._fs.rm(full, recursive=True)
            except FileNotFoundError:
                pass
        except Exception as exc:
            raise self._translate(exc, "delete folder", path) from exc

    def _s3_delete_tree(self, path: str, full: str) -> None:
        """Everything under `full`: one listing, then bulk deletes of up to 1,000 keys each
        (s3fs's recursive rm lists twice and checks the folder first). The folders' "dir/" keys
        go last in the same requests: SeaweedFS keeps an emptied folder as a listable prefix
        until that key is deleted; on other servers deleting an absent key is a no-op."""
        found = self._fs.find(full, withdirs=True, detail=True)
        bucket, prefix = self._bucket_key(full)
        files = [self._bucket_key(p)[1] for p, info in found.items() if info.get("type") != "directory"]
        folders = {prefix.rstrip("/")} | {self._bucket_key(p)[1].rstrip("/") for p, info in found.items()
                                          if info.get("type") == "directory"}
        keys = sorted(files) + [f + "/" for f in sorted(folders, key=len, reverse=True)]
        for p in list(found) + [full]:
            self._fs.invalidate_cache(p)
        for i in range(0, len(keys), 1000):
            answer = self._fs.call_s3("delete_objects", Bucket=bucket, Delete={
                "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
            failed = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if failed:
                raise StorageError(f"delete folder {self.describe(path)}:"
                                   f" {len(failed)} objects not deleted, e.g. {failed[0].get('Key')}:"
                                   f" {failed[0].get('Code')} {failed[0].get('Message', '')}")

    def write_atomic(self, path: str, data: bytes, *, durable: bool = True) -> None:
        # A single PUT (multipart above s3fs's chunk size) becomes visible whole or not at all.
        self._refuse_if_read_only(path, "write")
        full = self._full(path)
        try:
            if self._is_s3:
                self._fs.pipe_file(full, bytes(data))
            else:
                with _EMULATION_LOCK:
                    self._fs.pipe_file(full, bytes(data))
        except Exception as exc:
            raise self._translate(exc, "write", path) from exc

    def open_write(self, path: str, *, part_size: int | None = None) -> WriteStream:
        self._refuse_if_read_only(path, "write")
        full = self._full(path)
        if not self._is_s3:
            return BufferedWriteStream(lambda data: self.write_atomic(path, data), self.describe(path))
        bucket, key = self._bucket_key(full)

        def call(method: str, **kwargs: Any) -> Any:
            try:
                return self._fs.call_s3(method, **kwargs)
            except Exception as exc:
                raise self._translate(exc, f"{method} of", path) from exc

        return S3MultipartWriteStream(call, bucket, key, self.describe(path),
                                      part_size or DEFAULT_PART_SIZE)

    def put_if_absent(self, path: str, data: bytes) -> str | None:
        self._refuse_if_read_only(path, "create")
        full = self._full(path)
        if not self._is_s3:
            with _EMULATION_LOCK:
                if self._fs.exists(full):
                    return None
                self._fs.pipe_file(full, bytes(data))
                return self._digest(data)
        bucket, key = self._bucket_key(full)
        return self._s3_conditional_put(path, bucket, key, bytes(data), IfNoneMatch="*")

    def put_if_version(self, path: str, data: bytes, version: str) -> str | None:
        self._refuse_if_read_only(path, "write")
        full = self._full(path)
        if not self._is_s3:
            with _EMULATION_LOCK:
                try:
                    current = self._fs.cat_file(full)
                except FileNotFoundError:
                    return None
                if self._digest(current) != version:
                    return None
                self._fs.pipe_file(full, bytes(data))
                return self._digest(data)
        bucket, key = self._bucket_key(full)
        return self._s3_conditional_put(path, bucket, key, bytes(data), IfMatch=version)

    def copy_if_absent(self, src: str, dst: str) -> bool:
        self._refuse_if_read_only(dst, "create")
        full_src, full_dst = self._full(src), self._full(dst)
        if not self._is_s3:
            with _EMULATION_LOCK:
                if self._fs.exists(full_dst):
                    return False
                try:
                    self._fs.pipe_file(full_dst, self._fs.cat_file(full_src))
                except Exception as exc:
                    raise self._translate(exc, "copy of", src) from exc
                return True
        src_bucket, src_key = self._bucket_key(full_src)
        bucket, key = self._bucket_key(full_dst)
        try:
            self._fs.call_s3("copy_object", Bucket=bucket, Key=key, IfNoneMatch="*",
                             CopySource={"Bucket": src_bucket, "Key": src_key})
        except Exception as exc:
            if is_precondition_failed(exc):
                return False
            if _is_retriable(exc):
                raise CommitStateUnknownError(
                    f"copy of {self.describe(src)} to {self.describe(dst)}: outcome unknown, re-read"
                    f" before retrying ({self._redact(f'{type(exc).__name__}: {exc}')})") from exc
            raise self._translate(exc, "copy of", src) from exc
        return True

    # -- uploads completed by another process (base.Storage.conditional_uploads) ---------------

    @property
    def conditional_uploads(self) -> bool:
        return self._is_s3

    def _upload_call(self, operation: str, path: str, method: str, **kwargs: Any) -> Any:
        self._refuse_if_read_only(path, operation)
        if not self._is_s3:
            return super().start_upload(path)      # raises: no multipart uploads here
        bucket, key = self._bucket_key(self._full(path))
        try:
            return self._fs.call_s3(method, Bucket=bucket, Key=key, **kwargs)
        except Exception as exc:
            raise self._translate(exc, operation, path) from exc

    def start_upload(self, path: str) -> str:
        return self._upload_call("start upload of", path, "create_multipart_upload")["UploadId"]

    def upload_part(self, path: str, upload_id: str, data: bytes) -> str:
        return self._upload_call("upload part of", path, "upload_part", UploadId=upload_id, PartNumber=1,
                                 Body=bytes(data))["ETag"]

    def complete_upload_if_absent(self, path: str, upload_id: str, etag: str) -> bool:
        try:
            self._upload_call("complete upload of", path, "complete_multipart_upload", UploadId=upload_id,
                              MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}, IfNoneMatch="*")
        except SegLogError as exc:
            cause = exc.__cause__
            if cause is not None and is_precondition_failed(cause):
                return False
            if isinstance(exc, RetriableStorageError):
                raise CommitStateUnknownError(
                    f"complete upload of {self.describe(path)}: outcome unknown, re-read before retrying"
                    f" ({exc})") from exc
            raise
        return True

    def abort_upload(self, path: str, upload_id: str) -> None:
        try:
            self._upload_call("abort upload of", path, "abort_multipart_upload", UploadId=upload_id)
        except SegLogError as exc:
            if _error_code_and_status(exc.__cause__ or exc)[0] != "NoSuchUpload":
                raise

    def list_uploads(self, prefix: str) -> list[tuple[str, str]]:
        if not self._is_s3:
            return []
        bucket, root_key = self._bucket_key(self._root)
        base = f"{root_key}/" if root_key else ""
        found: list[tuple[str, str]] = []
        marker: dict[str, str] = {}
        while True:
            try:
                page = self._fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=base + prefix, **marker)
            except Exception as exc:
                raise self._translate(exc, "list uploads under", prefix) from exc
            found += [(u["Key"][len(base):], u["UploadId"]) for u in page.get("Uploads", [])]
            if not page.get("IsTruncated"):
                return found
            marker = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}

    def _s3_conditional_put(self, path: str, bucket: str, key: str, data: bytes,
                            **condition: str) -> str | None:
        for attempt in range(_CONFLICT_RETRIES):
            try:
                resp = self._fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
                return resp["ETag"]
            except FileNotFoundError:
                return None  # If-Match on an object that is gone: the version is stale
            except Exception as exc:
                if is_precondition_failed(exc):
                    return None
                if _is_conflict(exc) and attempt + 1 < _CONFLICT_RETRIES:
                    time.sleep(0.01 * (attempt + 1))
                    continue
                if _is_retriable(exc):
                    # the PUT may have been applied before the failure: only a re-read can tell
                    raise CommitStateUnknownError(
                        f"conditional write of {self.describe(path)}: outcome unknown, re-read "
                        f"before retrying ({self._redact(f'{type(exc).__name__}: {exc}')})") from exc
                raise self._translate(exc, "conditional write of", path) from exc
        raise RetriableStorageError(f"conditional write of {self.describe(path)} kept conflicting")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ObjectStorage) and other._fs is self._fs
                and (other._root, other.read_only) == (self._root, self.read_only))

    def __hash__(self) -> int:
        return hash((self.protocol, self._root, self.read_only))


def _printable_url(url: str) -> str:
    """The url without any user:password@ part."""
    protocol, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        netloc = netloc.rsplit("@", 1)[1]
    return f"{protocol}://{netloc}{slash}{tail}".rstrip("/") or url

