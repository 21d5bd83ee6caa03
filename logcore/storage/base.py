"""The storage interface: where a log's bytes live, as paths relative to a root.

Two implementations: `LocalStorage` (POSIX fast path) and `ObjectStorage` (fsspec; S3 and
friends). Paths are `/`-separated, relative to the root, and may not climb out of it.
"""
from __future__ import annotations

import posixpath
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from logcore.errors import ReadOnlyLogError, StorageError

if TYPE_CHECKING:
    from logcore.storage.append_file import AppendFile
    from logcore.storage.write_stream import WriteStream


class Storage(ABC):
    """A root (a local folder or an object-store prefix) holding files addressed by relative path."""

    url: str           # printable root url: never carries credentials
    is_local: bool     # True: append, rename, fsync, flock and mmap are available
    read_only: bool

    # -- paths ---------------------------------------------------------------------------------

    def join(self, *parts: str) -> str:
        """Join relative path parts with `/`, dropping empty parts and stray slashes."""
        return "/".join(p.strip("/") for p in parts if p and p.strip("/"))

    def _check_path(self, path: str) -> str:
        """Normalise a relative path; refuse absolute paths and `..` that would leave the root."""
        if not isinstance(path, str):
            raise StorageError(f"storage path must be a str, got {type(path).__name__} {path!r} "
                               f"(root {self.url})")
        if path.startswith("/"):
            raise StorageError(f"storage path {path!r} must be relative to the root {self.url}")
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise StorageError(f"storage path {path!r} climbs out of the root {self.url}")
        return "/".join(parts)

    def describe(self, path: str) -> str:
        """The printable location of `path` (root url + path) for error messages."""
        return posixpath.join(self.url, path) if path else self.url

    def _refuse_if_read_only(self, path: str, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyLogError(f"cannot {operation} {self.describe(path)}: storage is read-only")

    # -- reads ---------------------------------------------------------------------------------

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def size(self, path: str) -> int:
        """Size in bytes; ResourceNotFoundError if missing."""

    @abstractmethod
    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of the file; end is exclusive and clamped to the size."""

    @abstractmethod
    def list_dir(self, path: str = "") -> list[str]:
        """Sorted child names (files and folders); [] for a folder that does not exist.

        Storage-internal names (in-flight temp files, `.<name>.lock` lock files) are left out."""

    @abstractmethod
    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        """Content and an opaque version token from one read, or None if missing."""

    # -- writes --------------------------------------------------------------------------------

    @abstractmethod
    def makedirs(self, path: str) -> None: ...

    @abstractmethod
    def delete(self, path: str, missing_ok: bool = True) -> None: ...

    @abstractmethod
    def delete_dir(self, path: str) -> None:
        """Delete a folder and everything below it; a missing folder is fine."""

    @abstractmethod
    def write_atomic(self, path: str, data: bytes, *, durable: bool = True) -> None:
        """Replace the whole file; readers see the old or the new content, never a mix.

        durable=False skips the fsyncs on local disk: for scratch files that a crash may lose
        (staging that a retry rewrites), never for anything a commit relies on."""

    def delete_abandoned_writes(self, path: str) -> int:
        """Delete the temp files that `write_atomic` calls into folder `path` left when their
        process died mid-write; the caller knows no such write of its folder is in flight.
        Object stores put whole objects and leave none: 0."""
        return 0

    def write_atomic_many(self, items: list[tuple[str, bytes]], *, durable: bool = True) -> None:
        """`write_atomic` of each (path, data); each file on its own is replaced atomically
        (not the set). Local disk shares the waits: see LocalStorage."""
        for path, data in items:
            self.write_atomic(path, data, durable=durable)

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> str | None:
        """Create with full content if nothing is there: the new version, or None if it exists."""

    @abstractmethod
    def put_if_version(self, path: str, data: bytes, version: str) -> str | None:
        """Replace only if the current version is `version`: the new version, or None if stale.

        Versions may be content-derived (S3 ETag, memory digest, the local token's digest):
        rewriting identical bytes can leave the version unchanged, so a compare-and-swap
        guards the content, and a writer that needs a change to be seen writes new content."""

    def copy_if_absent(self, src: str, dst: str) -> bool:
        """Create `dst` with the content of `src` if nothing is there: True, or False if `dst`
        exists. Object stores copy on the server (S3 CopyObject with If-None-Match)."""
        raise StorageError(f"cannot copy {self.describe(src)} inside {self.url}: use read and put_if_absent")

    # Uploads that outlive the process that started them: a batch sink's task uploads a segment
    # object's bytes, the job's commit completes the upload with If-None-Match (invisible until
    # then). Only stores that honour the condition on the complete have them.
    conditional_uploads = False

    def start_upload(self, path: str) -> str:
        """Start an upload of the object `path`; its upload id."""
        raise StorageError(f"{self.url} has no multipart uploads (needed to upload {self.describe(path)})")

    def upload_part(self, path: str, upload_id: str, data: bytes) -> str:
        """Upload `data` as the one part of upload `upload_id`; the part's ETag."""
        raise StorageError(f"{self.url} has no multipart uploads (needed to upload {self.describe(path)})")

    def complete_upload_if_absent(self, path: str, upload_id: str, etag: str) -> bool:
        """Make upload `upload_id` (one part, `etag`) the object `path` if nothing is there:
        True, or False if `path` exists (the upload stays, as it was)."""
        raise StorageError(f"{self.url} has no multipart uploads (needed to complete {self.describe(path)})")

    def abort_upload(self, path: str, upload_id: str) -> None:
        """Drop upload `upload_id` of `path` and its part; nothing if it is gone or complete."""
        raise StorageError(f"{self.url} has no multipart uploads (needed to abort {self.describe(path)})")

    def list_uploads(self, prefix: str) -> list[tuple[str, str]]:
        """(path, upload id) of the uploads not completed nor aborted whose path starts with
        `prefix` (relative to the root, as text: "t-" matches "t-0/...")."""
        return []

    @abstractmethod
    def open_write(self, path: str, *, part_size: int | None = None) -> WriteStream:
        """A streamed whole-object write: the object appears complete at commit (a clean `with`
        exit) or not at all. On S3 a multipart upload of `part_size` parts (see write_stream)."""

    # -- local-only operations -----------------------------------------------------------------

    def local_path(self, path: str) -> str:
        raise StorageError(f"{self.describe(path)} has no local path: {self.url} is an object store")

    def open_append(self, path: str) -> AppendFile:
        raise StorageError(f"cannot append to {self.describe(path)}: object stores have no append; "
                           "build the object locally and publish it with write_atomic/put_if_absent")

    def rename(self, src: str, dst: str) -> None:
        raise StorageError(f"cannot rename {self.describe(src)}: object stores have no atomic rename")

    def lock(self, path: str) -> AbstractContextManager[None]:
        raise StorageError(f"cannot lock {self.describe(path)}: object stores have no file locks; "
                           "use put_if_version for read-modify-write")

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"{type(self).__name__}({self.url!r}{flag})"

    __str__ = __repr__
