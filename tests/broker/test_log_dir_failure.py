"""LogDirFailureChannel: which errors take the log dir offline, and its policy applied once."""
from __future__ import annotations

import errno

import pytest

from logcore.broker.log_dir_failure import (LogDirFailureChannel, LogDirOfflineError, RecordedStop,
                                            storage_failure)
from logcore.errors import StorageError


def _caused(exc):
    try:
        try:
            raise exc
        except OSError as inner:
            raise StorageError("a failed append left a partial write") from inner
    except StorageError as outer:
        return outer


@pytest.mark.parametrize("exc,failed", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EIO, "Input/output error"), True),
    (OSError(errno.EROFS, "Read-only file system"), True),
    (_caused(OSError(errno.ENOSPC, "No space left on device")), True),
    (ConnectionAbortedError("moves-0 was closed"), False),            # a partition closed under a request
    (FileNotFoundError(errno.ENOENT, "gone"), False),                  # a concurrent deletion
    (StorageError("object store: access denied"), False),
    (ValueError("a client's bad batch"), False),
])
def test_what_takes_the_log_dir_offline(exc, failed):
    assert (storage_failure(exc) is not None) == failed


def test_the_policy_runs_once_and_nothing_is_written_after():
    stops = []
    policy = RecordedStop(lambda: stops.append("stopped"))
    channel = LogDirFailureChannel("/data/kafka", policy)
    channel.check_online()
    assert not channel.maybe_fail(ValueError("bad"), "append to t-0")
    assert not channel.all_failed
    assert channel.maybe_fail(OSError(errno.ENOSPC, "No space left on device"), "append to t-0")
    assert channel.maybe_fail(OSError(errno.EIO, "Input/output error"), "roll of t-1")
    assert stops == ["stopped"] and [(d, w) for d, _e, w, _t in policy.stops] == [("/data/kafka", "append to t-0")]
    assert channel.all_failed
    with pytest.raises(LogDirOfflineError, match="t-2: log dir /data/kafka is offline"):
        channel.check_online("t-2")
