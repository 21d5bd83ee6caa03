"""The Storage contract, run against local disk, fsspec memory and real S3 servers."""
from __future__ import annotations

import threading

import pytest

from logcore.errors import ReadOnlyLogError, ResourceNotFoundError, StorageError
from logcore.storage import Storage, open_storage

KINDS = ["local", "memory", pytest.param("seaweedfs", marks=pytest.mark.s3),
         pytest.param("moto", marks=pytest.mark.s3)]


@pytest.fixture(params=KINDS)
def target(request, storage_targets):
    return storage_targets.make(request.param)


@pytest.fixture
def storage(target) -> Storage:
    return open_storage(target.url, target.storage_options)


def test_kind_matches_url(storage, target):
    assert storage.is_local == (target.kind == "local")
    assert not storage.read_only


def test_ranged_reads(storage):
    data = bytes(range(256)) * 4
    storage.write_atomic("p/seg.log", data)
    assert storage.size("p/seg.log") == len(data)
    assert storage.read("p/seg.log") == data
    assert storage.read("p/seg.log", 10) == data[10:]
    assert storage.read("p/seg.log", 10, 20) == data[10:20]
    assert storage.read("p/seg.log", 1000, 5000) == data[1000:]      # end past EOF is clamped
    assert storage.read("p/seg.log", len(data), len(data) + 10) == b""
    assert storage.read("p/seg.log", 5000, 6000) == b""               # start past EOF: empty
    assert storage.read("p/seg.log", 7, 7) == b""


def test_bad_range_names_path(storage):
    storage.write_atomic("f", b"abc")
    with pytest.raises(StorageError, match="bad range.*f"):
        storage.read("f", 5, 2)
    with pytest.raises(StorageError, match="bad range"):
        storage.read("f", -1)


def test_list_dir_and_exists(storage):
    assert storage.list_dir("") == []
    assert storage.list_dir("nope") == []
    storage.makedirs("t-0")
    for name in ["b.log", "a.index", "c.timeindex"]:
        storage.write_atomic(storage.join("t-0", name), b"x")
    storage.write_atomic("t-0/sub/deep", b"y")
    storage.write_atomic("t-1/x", b"z")
    assert storage.list_dir("t-0") == ["a.index", "b.log", "c.timeindex", "sub"]
    assert storage.list_dir("") == ["t-0", "t-1"]
    assert storage.exists("t-0/a.index")
    assert not storage.exists("t-0/missing")


def test_conditional_writes_leave_no_visible_helpers(storage):
    version = storage.put_if_absent("d/state", b"1")
    assert storage.put_if_version("d/state", b"2", version) is not None
    assert storage.list_dir("d") == ["state"]


def test_write_atomic_replaces_whole(storage):
    storage.write_atomic("cp/checkpoint", b"0\n1\nclicks 0 5\n")
    storage.write_atomic("cp/checkpoint", b"0\n0\n")
    assert storage.read("cp/checkpoint") == b"0\n0\n"
    storage.write_atomic("cp/empty", b"")
    assert storage.read("cp/empty") == b""
    assert storage.size("cp/empty") == 0


def test_delete(storage):
    storage.write_atomic("x/a", b"1")
    storage.delete("x/a")
    assert not storage.exists("x/a")
    storage.delete("x/a")  # missing_ok by default
    with pytest.raises(ResourceNotFoundError, match="x/a"):
        storage.delete("x/a", missing_ok=False)
    storage.write_atomic("y/1", b"1")
    storage.write_atomic("y/z/2", b"2")
    storage.write_atomic("y/z/w/3", b"3")
    storage.delete_dir("y")
    assert storage.list_dir("y") == []
    assert not storage.exists("y/z/2")
    assert "y" not in storage.list_dir("")     # no emptied folder left listed (SeaweedFS keeps one)
    storage.delete_dir("never-existed")


def test_missing_files_raise_resource_not_found(storage):
    for call in (lambda: storage.read("no/such"), lambda: storage.read("no/such", 3, 9),
                 lambda: storage.size("no/such")):
        with pytest.raises(ResourceNotFoundError, match="no/such"):
            call()
    assert storage.read_versioned("no/such") is None


def test_paths_cannot_leave_root(storage):
    with pytest.raises(StorageError, match="climbs out"):
        storage.read("../outside")
    with pytest.raises(StorageError, match="relative"):
        storage.write_atomic("/abs", b"1")


def test_read_versioned_and_put_if_version(storage):
    assert storage.put_if_version("v/f", b"x", "whatever") is None  # nothing there: stale
    v1 = storage.put_if_absent("v/f", b"one")
    assert v1 is not None
    data, version = storage.read_versioned("v/f")
    assert (data, version) == (b"one", v1)
    v2 = storage.put_if_version("v/f", b"two", v1)
    assert v2 is not None and v2 != v1
    assert storage.put_if_version("v/f", b"stale", v1) is None
    assert storage.read("v/f") == b"two"
    assert storage.read_versioned("v/f") == (b"two", v2)
    storage.write_atomic("v/f", b"three")  # an unconditional write also changes the version
    assert storage.put_if_version("v/f", b"late", v2) is None
    assert storage.read("v/f") == b"three"


def test_put_if_absent_keeps_first(storage):
    assert storage.put_if_absent("a/once", b"first") is not None
    assert storage.put_if_absent("a/once", b"second") is None
    assert storage.read("a/once") == b"first"


def _race(n: int, attempt) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = attempt(i)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return results


@pytest.mark.parametrize("round_", range(3))
def test_put_if_absent_race_has_one_winner(storage, round_):
    path = f"race/{round_}"
    results = _race(8, lambda i: storage.put_if_absent(path, f"writer-{i}".encode()))
    winners = [i for i, r in enumerate(results) if r is not None]
    assert len(winners) == 1
    assert storage.read(path) == f"writer-{winners[0]}".encode()


def test_put_if_version_race_has_one_winner(storage):
    # Each racer writes content different from the base: S3 ETags (MD5) and the memory digest
    # are content-derived, so rewriting identical bytes would leave the version unchanged.
    base = storage.put_if_absent("cas/state", b"base")
    results = _race(8, lambda i: storage.put_if_version("cas/state", f"{i}".encode(), base))
    winners = [i for i, r in enumerate(results) if r is not None]
    assert len(winners) == 1
    assert storage.read_versioned("cas/state") == (f"{winners[0]}".encode(), results[winners[0]])


def test_read_only_refuses_every_write(storage, target):
    storage.write_atomic("ro/f", b"data")
    version = storage.read_versioned("ro/f")[1]
    ro = open_storage(target.url, target.storage_options, read_only=True)
    assert ro.read_only and "read_only=True" in repr(ro)
    assert ro.read("ro/f") == b"data"
    writes = [lambda: ro.write_atomic("ro/f", b"x"), lambda: ro.put_if_absent("ro/g", b"x"),
              lambda: ro.put_if_version("ro/f", b"x", version), lambda: ro.delete("ro/f"),
              lambda: ro.delete_dir("ro"), lambda: ro.makedirs("ro/sub")]
    if ro.is_local:
        writes += [lambda: ro.rename("ro/f", "ro/h"), lambda: ro.lock("ro/.l").__enter__(),
                   lambda: ro.open_append("ro/f").append(b"x")]
    for write in writes:
        with pytest.raises(ReadOnlyLogError, match=r"/ro\b.*read-only"):
            write()
    assert storage.read("ro/f") == b"data"
    assert storage.list_dir("ro") == ["f"]


def test_object_stores_refuse_local_only_operations(storage):
    if storage.is_local:
        pytest.skip("local storage supports append, rename and locks")
    for call in (lambda: storage.open_append("a"), lambda: storage.rename("a", "b"),
                 lambda: storage.lock("a"), lambda: storage.local_path("a")):
        with pytest.raises(StorageError, match="object store"):
            call()


def test_credentials_never_printed(target, storage):
    secret = target.storage_options.get("secret")
    key = target.storage_options.get("key")
    texts = [repr(storage), str(storage), storage.url]
    for call in (lambda: storage.read("missing/file"), lambda: storage.size("missing/file")):
        with pytest.raises(ResourceNotFoundError) as info:
            call()
        texts.append(str(info.value))
    for text in texts:
        for value in (secret, key):
            if value:
                assert value not in text
