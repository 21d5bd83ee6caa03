"""The driver's pool of threads that take, publish and close a commit's partitions in parallel
(each has its own fence, files and fsyncs), and the two ways a commit runs calls in it."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_PUBLISH_THREADS = 8
_publish_pool: tuple[int, ThreadPoolExecutor] | None = None     # (pid that made it, pool)
_publish_pool_lock = threading.Lock()


def shared_publish_pool() -> ThreadPoolExecutor:
    """The driver's threads that take, publish and close partitions, kept from one commit to the
    next: starting them anew was a visible part of a commit's wall time. Every commit waits for
    all it submitted (`run_all`), so commits may share it. A forked child makes its own (the
    parent's threads do not exist there)."""
    global _publish_pool
    with _publish_pool_lock:
        if _publish_pool is None or _publish_pool[0] != os.getpid():
            _publish_pool = (os.getpid(), ThreadPoolExecutor(_PUBLISH_THREADS, thread_name_prefix="seglog-publish"))
        return _publish_pool[1]


def run_each(pool: ThreadPoolExecutor, calls: list[tuple]) -> list[BaseException | None]:
    """Run every call (a function and its arguments) in the pool; each one's error or None."""
    futures = [pool.submit(*call) for call in calls]
    return [f.exception() for f in futures]


def run_all(pool: ThreadPoolExecutor, calls: list[tuple]) -> None:
    """Run every call (a function and its arguments) in the pool; raise the first error."""
    for error in run_each(pool, calls):
        if error is not None:
            raise error

