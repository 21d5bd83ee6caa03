"""Streamed whole-object writes: a large object written piece by piece, visible only when complete.

`Storage.open_write(path)` returns one of these as a context manager: leaving the block normally
publishes the object (all or nothing), leaving it by an exception aborts and publishes nothing.

- local disk: a hidden temp file beside the target, fsynced and renamed into place;
- S3: a multipart upload (parts of `part_size`, at least 5 MiB, the S3 minimum), completed at the
  end, aborted on error; an object smaller than one part is a single PUT. A process killed in the
  middle leaves an incomplete multipart upload, invisible to readers; a bucket lifecycle rule
  (AbortIncompleteMultipartUpload) reclaims its parts;
- other fsspec backends: buffered in memory and written with one pipe_file at the end.
"""
from __future__ import annotations

import io
import os
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Callable

S3_MIN_PART_SIZE = 5 * 1024 * 1024
DEFAULT_PART_SIZE = 8 * 1024 * 1024


class WriteStream(ABC):
    """Write bytes with write(); the object appears at commit() (or a clean `with` exit)."""

    def __init__(self, describe: str):
        self.describe = describe
        self.bytes_written = 0
        self._done = False

    def write(self, data: bytes | memoryview) -> None:
        if self._done:
            raise ValueError(f"write to {self.describe} after commit or abort")
        self._write(data)
        self.bytes_written += len(data)

    @abstractmethod
    def _write(self, data: bytes | memoryview) -> None: ...

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def _abort(self) -> None: ...

    def commit(self) -> None:
        if not self._done:
            self._done = True
            self._commit()

    def abort(self) -> None:
        """Discard everything written; never raises for a missing temp or upload."""
        if not self._done:
            self._done = True
            self._abort()

    def __enter__(self) -> "WriteStream":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            try:
                self.commit()
            except BaseException:
                self._abort()
                raise
        else:
            self.abort()


class LocalWriteStream(WriteStream):
    def __init__(self, os_path: str, tmp_path: str, describe: str, fsync_dir: Callable[[str], None]):
        super().__init__(describe)
        self._os_path = os_path
        self._tmp = tmp_path
        self._fsync_dir = fsync_dir
        self._fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)

    def _write(self, data: bytes | memoryview) -> None:
        view, done = memoryview(data), 0
        while done < len(view):
            done += os.write(self._fd, view[done:])

    def _commit(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        os.replace(self._tmp, self._os_path)
        self._fsync_dir(os.path.dirname(self._os_path))

    def _abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass


class S3MultipartWriteStream(WriteStream):
    """Parts go up as they fill; `call_s3(method, **kwargs)` is s3fs's synchronous call."""

    def __init__(self, call_s3: Callable[..., Any], bucket: str, key: str, describe: str,
                 part_size: int = DEFAULT_PART_SIZE):
        super().__init__(describe)
        self._call = call_s3
        self._bucket, self._key = bucket, key
        self.part_size = max(part_size, S3_MIN_PART_SIZE)
        self._buffer = io.BytesIO()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    @property
    def parts_uploaded(self) -> int:
        return len(self._parts)

    def _write(self, data: bytes | memoryview) -> None:
        self._buffer.write(data)
        if self._buffer.tell() >= self.part_size:
            self._flush_parts(final=False)

    def _flush_parts(self, final: bool) -> None:
        data = self._buffer.getvalue()
        if self._upload_id is None:
            resp = self._call("create_multipart_upload", Bucket=self._bucket, Key=self._key)
            self._upload_id = resp["UploadId"]
        pos = 0
        while len(data) - pos >= self.part_size or (final and pos < len(data)):
            piece = data[pos:pos + self.part_size]
            number = len(self._parts) + 1
            resp = self._call("upload_part", Bucket=self._bucket, Key=self._key,
                              UploadId=self._upload_id, PartNumber=number, Body=piece)
            self._parts.append({"PartNumber": number, "ETag": resp["ETag"]})
            pos += len(piece)
        self._buffer = io.BytesIO()
        self._buffer.write(data[pos:])

    def _commit(self) -> None:
        if self._upload_id is None:
            self._call("put_object", Bucket=self._bucket, Key=self._key, Body=self._buffer.getvalue())
            return
        self._flush_parts(final=True)
        self._call("complete_multipart_upload", Bucket=self._bucket, Key=self._key,
                   UploadId=self._upload_id, MultipartUpload={"Parts": self._parts})

    def _abort(self) -> None:
        self._buffer = io.BytesIO()
        if self._upload_id is not None:
            try:
                self._call("abort_multipart_upload", Bucket=self._bucket, Key=self._key,
                           UploadId=self._upload_id)
            except Exception:
                pass  # best effort: an unaborted upload is invisible and a lifecycle rule reclaims it


class BufferedWriteStream(WriteStream):
    """Backends without multipart: collect, then one whole-object write."""

    def __init__(self, put: Callable[[bytes], None], describe: str):
        super().__init__(describe)
        self._put = put
        self._buffer = io.BytesIO()

    def _write(self, data: bytes | memoryview) -> None:
        self._buffer.write(data)

    def _commit(self) -> None:
        self._put(self._buffer.getvalue())

    def _abort(self) -> None:
        self._buffer = io.BytesIO()
