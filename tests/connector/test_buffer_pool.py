"""The sink's pool of encode buffers kept across the tasks of a Python worker."""
from __future__ import annotations

from logcore.storage.direct_writer import ALIGN

from pyspark_seglog.buffer_pool import AlignedBufferPool


def test_take_returns_the_smallest_kept_buffer_that_fits_else_a_new_one():
    pool = AlignedBufferPool(keep_bytes=1 << 20)
    small, large = pool.take(10_000), pool.take(300_000)
    assert len(small) % ALIGN == 0 and len(small) >= 10_000
    assert len(large) >= 300_000
    pool.give_back(large)
    pool.give_back(small)
    assert pool.take(5_000) is small            # not the large one
    assert pool.take(200_000) is large
    fresh = pool.take(400_000)                  # nothing kept fits
    assert fresh is not small and fresh is not large and len(fresh) >= 400_000


def test_give_back_keeps_at_most_keep_bytes_dropping_the_smallest():
    pool = AlignedBufferPool(keep_bytes=5 * 65536)
    buffers = [pool.take(65536), pool.take(4 * 65536), pool.take(65536)]
    for b in buffers:
        pool.give_back(b)
    assert pool.kept_bytes() == 5 * 65536       # the two 64 KiB ones could not both stay
    assert released(buffers[0]) != released(buffers[2])
    assert not released(buffers[1])
    assert pool.take(4 * 65536) is buffers[1]


def released(buffer: memoryview) -> bool:
    try:
        len(buffer)
    except ValueError:
        return True
    return False
