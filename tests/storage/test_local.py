"""LocalStorage only: append files, rename, fsync paths and flock across processes."""
from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from logcore.errors import ReadOnlyLogError, ResourceNotFoundError, StorageError
from logcore.storage import AppendFile, LocalStorage, open_storage


@pytest.fixture
def storage(tmp_path) -> LocalStorage:
    return open_storage(str(tmp_path / "root"))


def test_resolution_of_local_urls(tmp_path):
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    via_url = open_storage(f"file://{tmp_path}")
    assert isinstance(via_url, LocalStorage) and via_url.root == str(tmp_path)
    assert open_storage(str(tmp_path)).local_path("a/b") == str(tmp_path / "a" / "b")


def test_append_file_positions_and_pread(storage):
    with storage.open_append("t-0/00000000000000000000.log") as f:
        assert isinstance(f, AppendFile)
        assert f.append(b"hello") == 0
        assert f.append(b" world") == 5
        assert f.size() == 11
        assert f.pread(0, 5) == b"hello"
        assert f.pread(6, 100) == b"world"      # short at EOF
        assert f.pread(50, 10) == b""
        f.flush()
        f.truncate(5)
        assert f.size() == 5
        assert f.append(b"!") == 5
        f.flush(fsync=False)
    assert storage.read("t-0/00000000000000000000.log") == b"hello!"
    with storage.open_append("t-0/00000000000000000000.log") as again:  # reopen continues at the end
        assert again.append(b"?") == 6
    assert storage.size("t-0/00000000000000000000.log") == 7


def test_append_file_rejects_bad_arguments_and_use_after_close(storage):
    f = storage.open_append("f")
    with pytest.raises(StorageError, match="negative"):
        f.truncate(-1)
    with pytest.raises(StorageError, match="bad read"):
        f.pread(-1, 4)
    f.close()
    assert f.closed
    with pytest.raises(StorageError, match="closed"):
        f.append(b"x")


def test_read_only_append_file_reads_but_never_writes(storage, tmp_path):
    storage.write_atomic("seg", b"abc")
    ro = open_storage(str(tmp_path / "root"), read_only=True)
    with ro.open_append("seg") as f:
        assert f.pread(0, 3) == b"abc"
        assert f.size() == 3
        for write in (lambda: f.append(b"x"), lambda: f.truncate(0)):
            with pytest.raises(ReadOnlyLogError, match="seg"):
                write()
    with pytest.raises(ResourceNotFoundError, match="missing"):
        ro.open_append("missing")


def test_rename_is_atomic_replace(storage):
    storage.write_atomic("p/00000000000000000000.log", b"old")
    storage.write_atomic("p/00000000000000000000.log.swap", b"new")
    storage.rename("p/00000000000000000000.log.swap", "p/00000000000000000000.log")
    assert storage.read("p/00000000000000000000.log") == b"new"
    assert storage.list_dir("p") == ["00000000000000000000.log"]
    with pytest.raises(ResourceNotFoundError, match="gone"):
        storage.rename("p/gone", "p/x")


def test_write_atomic_leaves_no_temp_files(storage):
    for i in range(5):
        storage.write_atomic("cp/recovery-point-offset-checkpoint", f"0\n{i}\n".encode())
    assert os.listdir(storage.local_path("cp")) == ["recovery-point-offset-checkpoint"]


def test_version_changes_on_every_write_even_same_size(storage):
    versions = set()
    for i in range(20):  # same size, same coarse mtime tick, inodes possibly reused
        storage.write_atomic("v", f"{i % 10}".encode())
        versions.add(storage.read_versioned("v")[1])
    assert len(versions) >= 10  # distinct content always gives a distinct version


def test_delete_dir_refuses_root(storage):
    with pytest.raises(StorageError, match="root"):
        storage.delete_dir("")


def _hold_lock(root: str, path: str, entered, release) -> None:
    storage = open_storage(root)
    with storage.lock(path):
        entered.set()
        release.wait(30)


def _try_lock(root: str, path: str, acquired) -> None:
    storage = open_storage(root)
    with storage.lock(path):
        acquired.set()


def test_lock_excludes_other_processes(storage):
    ctx = multiprocessing.get_context("spawn")
    entered, release, acquired = ctx.Event(), ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(storage.root, "t-0/.lock", entered, release))
    holder.start()
    try:
        assert entered.wait(30)
        waiter = ctx.Process(target=_try_lock, args=(storage.root, "t-0/.lock", acquired))
        waiter.start()
        assert not acquired.wait(0.5)  # blocked while the other process holds the lock
        release.set()
        assert acquired.wait(30)
        waiter.join(30)
        assert waiter.exitcode == 0
    finally:
        release.set()
        holder.join(30)
    assert holder.exitcode == 0


def _cas_increment(root: str, n: int) -> None:
    storage = open_storage(root)
    done = 0
    while done < n:
        data, version = storage.read_versioned("counter")
        if storage.put_if_version("counter", str(int(data) + 1).encode(), version) is not None:
            done += 1


def test_put_if_version_across_processes_loses_no_update(storage):
    storage.put_if_absent("counter", b"0")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_cas_increment, args=(storage.root, 50)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert storage.read("counter") == b"150"


def test_read_of_folder_is_clear_error(storage):
    storage.makedirs("dir")
    with pytest.raises(StorageError, match="folder"):
        storage.read("dir")


def test_lock_serialises_threads(storage):
    import threading
    inside, overlaps = [0], []

    def work() -> None:
        for _ in range(20):
            with storage.lock(".root.lock"):
                inside[0] += 1
                overlaps.append(inside[0])
                time.sleep(0.0005)
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert max(overlaps) == 1 and len(overlaps) == 80


def test_write_atomic_many_replaces_each_file_with_one_folder_fsync(tmp_path, monkeypatch):
    storage = LocalStorage(str(tmp_path))
    storage.write_atomic("a", b"old a")
    synced: list[str] = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    storage.write_atomic_many([("a", b"new a"), ("b", b"new b")])
    assert storage.read("a") == b"new a" and storage.read("b") == b"new b"
    # both temp files, then the folder once (not once per file)
    assert len(synced) == 3 and synced[-1] == str(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]


def _die_mid_write(root: str) -> None:
    # a process killed between the temp file's write and its rename
    storage = LocalStorage(root)
    storage._write_tmp(storage.local_path("q/_committed.json"), b'{"batch": 7}')
    os._exit(0)


def test_delete_abandoned_writes_removes_what_a_killed_writer_left(storage):
    storage.write_atomic("q/_committed.json", b'{"batch": 6}')
    proc = multiprocessing.get_context("fork").Process(target=_die_mid_write, args=(storage.local_path(""),))
    proc.start()
    proc.join(10)
    assert storage.list_dir("q") == ["_committed.json"]        # hidden, but on disk
    assert len(os.listdir(storage.local_path("q"))) == 2
    assert storage.delete_abandoned_writes("q") == 1
    assert os.listdir(storage.local_path("q")) == ["_committed.json"]
    assert storage.read("q/_committed.json") == b'{"batch": 6}'
    assert storage.delete_abandoned_writes("missing") == 0
