"""A Fetch request's session fields (KIP-227, Kafka's FetchMetadata): the session id and the
epoch, with the values that mean "no session", "open one" and "end one"."""
from __future__ import annotations

INVALID_SESSION_ID = 0          # no session
INITIAL_EPOCH = 0               # a full fetch that opens a session
FINAL_EPOCH = -1                # a full fetch without a session (it ends the one named)
_MAX_EPOCH = 0x7FFFFFFF


def next_epoch(epoch: int) -> int:
    """The epoch that follows `epoch` in a session (it wraps to 1, never to 0 or -1)."""
    return 1 if epoch >= _MAX_EPOCH else epoch + 1
