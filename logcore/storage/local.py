"""Local-disk storage: the POSIX fast path (pread, fsync, rename, link, flock)."""
from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from logcore.errors import ResourceNotFoundError, StorageError
from logcore.storage.append_file import AppendFile, pread_full
from logcore.storage.base import Storage
from logcore.storage.write_stream import LocalWriteStream

# In-flight temporary files of write_atomic/put_if_absent: hidden from list_dir.
TMP_MARKER = ".seglog-tmp."


def _version(st: os.stat_result, data: bytes) -> str:
    # inode:mtime:size alone can repeat (inode reuse within one coarse mtime tick), so the
    # content digest is part of the token: equal tokens then mean equal content.
    digest = hashlib.blake2b(data, digest_size=8).hexdigest()
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}:{digest}"


def _fsync_dir(os_dir: str) -> None:
    fd = os.open(os_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_internal_name(name: str) -> bool:
    """Temp files in flight and `.<name>.lock` lock files: not part of what list_dir shows,
    so a local folder lists the same as the same content on an object store."""
    return TMP_MARKER in name or (name.startswith(".") and name.endswith(".lock"))


def lock_file_name(name: str) -> str:
    """The sibling lock file that serialises conditional writes of `name`."""
    return f".{name}.lock"


class LocalStorage(Storage):
    is_local = True

    def __init__(self, root: str, *, read_only: bool = False):
        self.root = os.path.abspath(root)
        self.url = self.root
        self.read_only = read_only

    def local_path(self, path: str) -> str:
        rel = self._check_path(path)
        return os.path.join(self.root, rel) if rel else self.root

    # -- reads ---------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return os.path.exists(self.local_path(path))

    def size(self, path: str) -> int:
        try:
            return os.stat(self.local_path(path)).st_size
        except FileNotFoundError as exc:
            raise ResourceNotFoundError(f"file not found: {self.describe(path)}") from exc

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        if start < 0 or (end is not None and end < start):
            raise StorageError(f"bad range [{start}, {end}) for {self.describe(path)}")
        # open/pread/close per call: a cached fd would keep serving a file that write_atomic
        # has since replaced, and the open costs only a few microseconds.
        try:
            fd = os.open(self.local_path(path), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise ResourceNotFoundError(f"file not found: {self.describe(path)}") from exc
        except IsADirectoryError as exc:
            raise StorageError(f"{self.describe(path)} is a folder, not a file") from exc
        try:
            if end is None:
                end = os.fstat(fd).st_size
            length = end - start
            if length <= 0:
                return b""
            return pread_full(fd, length, start)
        except IsADirectoryError as exc:
            raise StorageError(f"{self.describe(path)} is a folder, not a file") from exc
        finally:
            os.close(fd)

    def list_dir(self, path: str = "") -> list[str]:
        try:
            names = os.listdir(self.local_path(path))
        except FileNotFoundError:
            return []
        except NotADirectoryError as exc:
            raise StorageError(f"{self.describe(path)} is a file, not a folder") from exc
        return sorted(n for n in names if not is_internal_name(n))

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        try:
            fd = os.open(self.local_path(path), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)
            data = self._read_all(fd, st.st_size)
            return data, _version(os.fstat(fd), data)
        finally:
            os.close(fd)

    @staticmethod
    def _read_all(fd: int, size_hint: int) -> bytes:
        parts, pos = [], 0
        while True:
            chunk = os.pread(fd, max(size_hint - pos, 65536), pos)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            pos += len(chunk)

    # -- writes --------------------------------------------------------------------------------

    def makedirs(self, path: str) -> None:
        self._refuse_if_read_only(path, "create folder")
        os.makedirs(self.local_path(path), exist_ok=True)

    def delete(self, path: str, missing_ok: bool = True) -> None:
        self._refuse_if_read_only(path, "delete")
        try:
            os.unlink(self.local_path(path))
        except FileNotFoundError as exc:
            if not missing_ok:
                raise ResourceNotFoundError(f"file not found: {self.describe(path)}") from exc

    def delete_dir(self, path: str) -> None:
        self._refuse_if_read_only(path, "delete folder")
        target = self.local_path(path)
        if target == self.root:
            raise StorageError(f"refusing to delete the storage root {self.url}")
        try:
            shutil.rmtree(target)
        except FileNotFoundError:
            pass  # already gone (or removed concurrently)

    def delete_abandoned_writes(self, path: str) -> int:
        self._refuse_if_read_only(path, "delete abandoned temp files")
        folder = self.local_path(path)
        try:
            names = [n for n in os.listdir(folder) if TMP_MARKER in n]
        except (FileNotFoundError, NotADirectoryError):
            return 0
        for name in names:
            _unlink_quietly(os.path.join(folder, name))
        return len(names)

    def _write_tmp(self, os_path: str, data: bytes, durable: bool = True) -> tuple[str, int]:
        """Write `data` to a fresh (fsynced) temp file beside `os_path`; returns (tmp path, open fd)."""
        folder, name = os.path.split(os_path)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{name}{TMP_MARKER}{secrets.token_hex(6)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            view, written = memoryview(data), 0
            while written < len(view):
                written += os.write(fd, view[written:])
            if durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        return tmp, fd

    def write_atomic(self, path: str, data: bytes, *, durable: bool = True) -> None:
        self._refuse_if_read_only(path, "write")
        self._replace(self.local_path(path), data, durable)

    def _replace(self, os_path: str, data: bytes, durable: bool = True) -> os.stat_result:
        tmp, fd = self._write_tmp(os_path, data, durable)
        try:
            st = os.fstat(fd)
            os.replace(tmp, os_path)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        finally:
            os.close(fd)
        if durable:
            _fsync_dir(os.path.dirname(os_path))
        return st

    def write_atomic_many(self, items: list[tuple[str, bytes]], *, durable: bool = True) -> None:
        """Every temp file is written before the first fsync (whose journal commit then takes
        the others' data along: their own fsyncs find little left), and each folder is fsynced
        once after all the renames, instead of one folder fsync per file. Each file is still
        fsynced before its rename can be durable; a crash leaves each file old or new."""
        if len(items) <= 1 or not durable:
            super().write_atomic_many(items, durable=durable)
            return
        for path, _ in items:
            self._refuse_if_read_only(path, "write")
        written: list[tuple[str, str, int]] = []        # (tmp, target, fd)
        try:
            for path, data in items:
                os_path = self.local_path(path)
                tmp, fd = self._write_tmp(os_path, data, durable=False)
                written.append((tmp, os_path, fd))
            for _, _, fd in written:
                os.fsync(fd)
            for tmp, os_path, _ in written:
                os.replace(tmp, os_path)
        except BaseException:
            for tmp, _, _ in written:
                _unlink_quietly(tmp)
            raise
        finally:
            for _, _, fd in written:
                os.close(fd)
        for folder in dict.fromkeys(os.path.dirname(os_path) for _, os_path, _ in written):
            _fsync_dir(folder)

    def put_if_absent(self, path: str, data: bytes) -> str | None:
        self._refuse_if_read_only(path, "create")
        os_path = self.local_path(path)
        tmp, fd = self._write_tmp(os_path, data)
        try:
            try:
                os.link(tmp, os_path)  # atomic create-exclusive with the full content
            except FileExistsError:
                return None
            st = os.fstat(fd)  # same inode as the new file
        finally:
            os.close(fd)
            _unlink_quietly(tmp)
        _fsync_dir(os.path.dirname(os_path))
        return _version(st, data)

    def put_if_version(self, path: str, data: bytes, version: str) -> str | None:
        self._refuse_if_read_only(path, "write")
        os_path = self.local_path(path)
        folder, name = os.path.split(os_path)
        os.makedirs(folder, exist_ok=True)
        with self._flock(os.path.join(folder, lock_file_name(name))):
            current = self.read_versioned(path)
            if current is None or current[1] != version:
                return None
            st = self._replace(os_path, data)
            return _version(st, data)

    def open_write(self, path: str, *, part_size: int | None = None) -> LocalWriteStream:
        self._refuse_if_read_only(path, "write")
        os_path = self.local_path(path)
        folder, name = os.path.split(os_path)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{name}{TMP_MARKER}{secrets.token_hex(6)}")
        return LocalWriteStream(os_path, tmp, self.describe(path), _fsync_dir)

    # -- local-only operations -----------------------------------------------------------------

    def open_append(self, path: str) -> AppendFile:
        os_path = self.local_path(path)
        if not self.read_only:
            os.makedirs(os.path.dirname(os_path), exist_ok=True)
        return AppendFile(os_path, read_only=self.read_only, display=self.describe(path))

    def rename(self, src: str, dst: str, *, durable: bool = True) -> None:
        """Atomic rename. durable=False skips the folder fsync: the caller renames several files
        and makes them durable together with `sync_dir` (one fsync instead of one each)."""
        self._refuse_if_read_only(src, "rename")
        src_path, dst_path = self.local_path(src), self.local_path(dst)
        try:
            os.replace(src_path, dst_path)
        except FileNotFoundError as exc:
            raise ResourceNotFoundError(f"cannot rename {self.describe(src)} to {self.describe(dst)}: "
                                        "source not found") from exc
        if not durable:
            return
        _fsync_dir(os.path.dirname(dst_path))
        if os.path.dirname(src_path) != os.path.dirname(dst_path):
            _fsync_dir(os.path.dirname(src_path))

    def sync_dir(self, path: str) -> None:
        """Make the renames and creations in the folder `path` durable."""
        _fsync_dir(self.local_path(path))

    def link(self, src: str, dst: str, *, durable: bool = True) -> None:
        """Give the file `src` the second name `dst` (a hard link: no byte is copied);
        durable=False leaves the folder fsync to a later `sync_dir`."""
        self._refuse_if_read_only(dst, "link")
        src_path, dst_path = self.local_path(src), self.local_path(dst)
        try:
            os.link(src_path, dst_path)
        except FileNotFoundError as exc:
            raise ResourceNotFoundError(f"cannot link {self.describe(src)} as {self.describe(dst)}: "
                                        "source not found") from exc
        if durable:
            _fsync_dir(os.path.dirname(dst_path))

    @contextmanager
    def lock(self, path: str) -> Iterator[None]:
        """Exclusive flock on `path` (created if needed), across threads and processes."""
        self._refuse_if_read_only(path, "lock")
        os_path = self.local_path(path)
        os.makedirs(os.path.dirname(os_path), exist_ok=True)
        with self._flock(os_path):
            yield

    @staticmethod
    @contextmanager
    def _flock(os_path: str) -> Iterator[None]:
        # flock locks belong to the open file description, so a fresh open per holder makes
        # threads of one process exclude each other too.
        fd = os.open(os_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalStorage) and (other.root, other.read_only) == (self.root, self.read_only)

    def __hash__(self) -> int:
        return hash((self.root, self.read_only))


def _unlink_quietly(os_path: str) -> None:
    try:
        os.unlink(os_path)
    except FileNotFoundError:
        pass
