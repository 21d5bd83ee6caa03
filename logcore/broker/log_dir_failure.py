"""A log dir whose I/O fails goes offline; a broker whose log dirs have all failed stops at once.

Kafka's LogDirFailureChannel (KIP-112): an IOException in a log operation (an append, a roll,
an index or checkpoint write, a follower's append) marks its log dir offline. Its partitions then
move to other replicas; a broker with no log dir left halts (`Exit.halt`: no controlled shutdown,
no log closed, nothing more written), its ZooKeeper session ends and the controller elects new
leaders. A client never sees a leader that keeps answering KAFKA_STORAGE_ERROR; the request that
hit the error is not answered (the connection drops) and the client retries elsewhere.

A seglog broker serves one log dir (`log.dirs` takes one folder), so a failed log dir always
means all of them: the channel logs one ERROR naming the dir and the error and hands over to its
policy, `HaltProcess` in the `seglog broker` process (exit status 1 at once) or `RecordedStop`
in-process (the stop recorded, the server aborted without writing; tests).

What counts: an OSError of the device or filesystem (ENOSPC, EIO, EROFS, EDQUOT, ...), found in
the error or in the chain of errors that caused it. Not: a client's error, a partition closed
under a request (ConnectionAbortedError), a file a concurrent deletion removed, an object store.
"""
from __future__ import annotations

import errno
import logging
import os
import sys
import threading
import time
from typing import Callable

from logcore.errors import StorageError

logger = logging.getLogger(__name__)

# Errors of the device or the filesystem under the log dir (not of one request).
STORAGE_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EIO", "EROFS", "EFBIG", "ENXIO", "ENODEV", "ESTALE", "EUCLEAN")
    if hasattr(errno, name))


def storage_failure(exc: BaseException | None) -> OSError | None:
    """The OSError of the device or filesystem behind `exc` (itself or a cause), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and not isinstance(exc, ConnectionError) \
                and exc.errno in STORAGE_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class LogDirOfflineError(StorageError):
    """The log dir failed earlier: nothing is written to it any more (KAFKA_STORAGE_ERROR)."""


class HaltProcess:
    """The `seglog broker` process's policy: exit at once with `status` (Kafka's Exit.halt), from
    whichever thread saw the error; no shutdown hook, no log closed, nothing written."""

    name = "halt the process"

    def __init__(self, status: int = 1):
        self.status = status

    def __call__(self, log_dir: str, error: OSError, what: str) -> None:
        for handler in logging.getLogger().handlers:
            try:
                handler.flush()
            except Exception:   # noqa: BLE001 - exiting regardless
                pass
        try:
            sys.stderr.flush()
        except Exception:       # noqa: BLE001
            pass
        os._exit(self.status)


class RecordedStop:
    """In-process policy (tests, embedded servers): record the stop and call `on_stop` (the
    server aborts: listener and connections closed, no controlled shutdown, no log closed)."""

    name = "record the stop"

    def __init__(self, on_stop: Callable[[], None] | None = None):
        self.on_stop = on_stop
        self.stops: list[tuple[str, OSError, str, float]] = []   # (log dir, error, what, time)

    def __call__(self, log_dir: str, error: OSError, what: str) -> None:
        self.stops.append((log_dir, error, what, time.time()))
        if self.on_stop is not None:
            self.on_stop()


class LogDirFailureChannel:
    """Where log operations report an error; the broker's log dirs and what to do once all failed."""

    def __init__(self, log_dirs: list[str] | str, policy: Callable[[str, OSError, str], None] | None = None):
        self.log_dirs = [log_dirs] if isinstance(log_dirs, str) else list(log_dirs)
        self.policy = policy if policy is not None else RecordedStop()
        self.offline: dict[str, str] = {}      # log dir -> why
        self._lock = threading.Lock()

    @property
    def all_failed(self) -> bool:
        return bool(self.log_dirs) and all(d in self.offline for d in self.log_dirs)

    def check_online(self, what: str = "") -> None:
        """Raise LogDirOfflineError once every log dir failed (nothing more is written)."""
        if self.all_failed:
            raise LogDirOfflineError(f"{what + ': ' if what else ''}log dir {', '.join(self.offline)}"
                                     f" is offline ({'; '.join(self.offline.values())})")

    def maybe_fail(self, exc: BaseException | None, what: str, log_dir: str | None = None) -> bool:
        """When `exc` is a storage failure (storage_failure), take `log_dir` (the only one by
        default) offline and, with every log dir failed, apply the policy; True then. False for
        any other error (the caller handles it as before)."""
        error = storage_failure(exc)
        if error is None:
            return False
        log_dir = log_dir or self.log_dirs[0]
        with self._lock:
            if log_dir in self.offline:
                return True
            self.offline[log_dir] = f"{what}: {error}"
            all_failed = self.all_failed
        if not all_failed:          # several log dirs: not in seglog today (log.dirs takes one)
            logger.error("Log dir %s is offline: %s failed: %s", log_dir, what, error)
            return True
        logger.error("Shutdown broker because all log dirs in %s have failed: %s failed: %s (policy:"
                     " %s)", ", ".join(self.log_dirs), what, error, getattr(self.policy, "name", self.policy))
        self.policy(log_dir, error, what)
        return True
