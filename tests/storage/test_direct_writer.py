"""DirectFileWriter: a file written past the page cache holds exactly the bytes handed to it."""
from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.storage import direct_writer
from logcore.storage.direct_writer import ALIGN, DirectFileWriter, aligned_buffer


def write_chunks(path: str, chunks: list[bytes], keep_cached=None) -> DirectFileWriter:
    """Append `chunks` the way the sink does: whole blocks written, the rest carried over to
    the start of the other of two buffers. keep_cached(length) picks the blocks of each write
    to leave in the page cache."""
    size = max([len(c) for c in chunks] + [0]) + 2 * ALIGN
    buf, spare = aligned_buffer(size), aligned_buffer(size)
    writer = DirectFileWriter(path)
    fill = 0
    for chunk in chunks:
        buf[fill:fill + len(chunk)] = chunk
        fill += len(chunk)
        length = writer.aligned(fill)
        assert fill - length < ALIGN if writer.direct else length == fill
        spare[:fill - length] = buf[length:fill]
        writer.write(buf, length, keep_cached(length) if keep_cached else ())
        buf, spare, fill = spare, buf, fill - length
    writer.close(buf, fill)
    return writer


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3 * ALIGN + 7), max_size=8), st.randoms(use_true_random=False))
def test_file_holds_every_byte_written(tmp_path_factory, sizes, rnd):
    path = str(tmp_path_factory.mktemp("direct") / "part")
    chunks = [rnd.randbytes(n) for n in sizes]
    writer = write_chunks(path, chunks)
    expected = b"".join(chunks)
    assert writer.size == len(expected)
    with open(path, "rb") as f:
        assert f.read() == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3 * ALIGN + 7), max_size=8), st.randoms(use_true_random=False))
def test_blocks_kept_in_the_page_cache_hold_the_same_bytes(tmp_path_factory, sizes, rnd):
    path = str(tmp_path_factory.mktemp("direct") / "part")
    chunks = [rnd.randbytes(n) for n in sizes]

    def some_blocks(length):
        return [b * ALIGN for b in range(length // ALIGN) if rnd.random() < 0.5]

    write_chunks(path, chunks, some_blocks)
    with open(path, "rb") as f:
        assert f.read() == b"".join(chunks)


def _resident_pages(path: str) -> list[bool]:
    """Which pages of the file are in the page cache (mincore on a mapping of it)."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    vec = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as mm:
        first = ctypes.c_char.from_buffer(mm)
        failed = libc.mincore(ctypes.c_void_p(ctypes.addressof(first)), ctypes.c_size_t(size), vec)
        del first
    if failed:
        pytest.skip(f"mincore: {os.strerror(ctypes.get_errno())}")
    return [bool(v & 1) for v in vec]


def test_kept_blocks_are_in_the_page_cache_and_the_others_are_not(tmp_path):
    """What the sink's commit relies on to patch batch headers without disk reads."""
    path = str(tmp_path / "part")
    buf = aligned_buffer(8 * ALIGN)
    buf[:] = bytes(range(256)) * (len(buf) // 256)
    writer = DirectFileWriter(path)
    if not writer.direct:
        writer.abandon()
        pytest.skip("the temporary directory's file system refuses O_DIRECT")
    writer.write(buf, 8 * ALIGN, [ALIGN, 5 * ALIGN])
    writer.close()
    resident = _resident_pages(path)
    assert [i for i, r in enumerate(resident) if r] == [1, 5]
    with open(path, "rb") as f:
        assert f.read() == bytes(buf)


def test_local_disk_is_written_direct(tmp_path):
    # The project's test machines use ext4 or xfs for temporary files, which take O_DIRECT.
    writer = DirectFileWriter(str(tmp_path / "part"))
    writer.abandon()
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("this platform has no O_DIRECT")
    assert writer.direct


def test_refused_o_direct_falls_back_to_the_page_cache(tmp_path, monkeypatch):
    """A file system that refuses O_DIRECT at open (EINVAL) gets buffered writes, same bytes."""
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("this platform has no O_DIRECT")
    real_open = os.open

    def refusing_open(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(direct_writer.os, "open", refusing_open)
    chunks = [b"a" * 5000, b"b" * 3, b"c" * ALIGN]
    writer = write_chunks(str(tmp_path / "part"), chunks)
    assert not writer.direct
    assert (tmp_path / "part").read_bytes() == b"".join(chunks)


def test_refused_direct_write_falls_back_before_anything_is_written(tmp_path, monkeypatch):
    """Some file systems take O_DIRECT at open and refuse its writes: the first write goes buffered."""
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("this platform has no O_DIRECT")
    real_pwrite = os.pwrite

    def refusing_pwrite(fd, data, offset):
        if direct_writer.fcntl.fcntl(fd, direct_writer.fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(direct_writer.os, "pwrite", refusing_pwrite)
    chunks = [b"x" * (2 * ALIGN + 1), b"y" * 10]
    writer = write_chunks(str(tmp_path / "part"), chunks)
    assert not writer.direct
    assert (tmp_path / "part").read_bytes() == b"".join(chunks)


def test_a_direct_write_of_part_of_a_block_is_refused(tmp_path):
    buf = aligned_buffer(2 * ALIGN)
    writer = DirectFileWriter(str(tmp_path / "part"))
    try:
        if not writer.direct:
            pytest.skip("the temporary directory's file system refuses O_DIRECT")
        assert writer.aligned(ALIGN + 10) == ALIGN
        with pytest.raises(ValueError, match="not whole blocks"):
            writer.write(buf, ALIGN + 10)
        assert writer.size == 0
    finally:
        writer.close()


def test_large_buffers_are_aligned_to_a_huge_page_and_small_ones_to_a_block():
    import ctypes
    for size, align in ((1, ALIGN), (3 * ALIGN + 1, ALIGN), (direct_writer.HUGE_PAGE + 1, direct_writer.HUGE_PAGE)):
        buf = aligned_buffer(size)
        assert len(buf) >= size and len(buf) % align == 0
        assert ctypes.addressof(ctypes.c_char.from_buffer(buf)) % align == 0
        assert bytes(buf[:64]) == bytes(64)                  # zeroed
        buf[len(buf) - 1] = 7                                 # writable to its last byte
