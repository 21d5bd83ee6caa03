"""The event loop a broker process runs on (`event.loop`).

`uvloop` (the default): libuv's loop through uvloop, whose scheduling, timers and socket
transports are compiled code. A broker's work per request is mostly short callbacks and small
socket writes; on three brokers under Kafka's ProducerPerformance with the Java client's
defaults it took about 8% less broker CPU than asyncio's own loop (docs/benchmarks.md).
`asyncio`: the standard library's selector loop (its debug mode, PYTHONASYNCIODEBUG, works there).

The broker relies on nothing either loop lacks except `loop.sendfile`, which uvloop does not
implement: a file range the socket did not take at once goes out read and written in chunks
(client_connections), as asyncio itself does for transports without sendfile.
"""
from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

LOOPS = ("uvloop", "asyncio")


def run(coro: Coroutine[Any, Any, Any], policy: str) -> Any:
    """Run `coro` to completion on a new loop of the named kind (one of LOOPS)."""
    if policy == "uvloop":
        try:
            import uvloop
        except ImportError:
            coro.close()
            raise RuntimeError("event.loop=uvloop, but uvloop is not installed (pip install uvloop);"
                               " event.loop=asyncio runs the standard library's loop") from None
        # The main task runs `coro` itself (uvloop.run would wrap it: a stack dump would show
        # the wrapper's frame, not where the broker waits).
        if sys.version_info >= (3, 11):
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(coro)
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return asyncio.run(coro)
    if policy == "asyncio":
        return asyncio.run(coro)
    coro.close()
    raise ValueError(f"event.loop={policy!r}: expected one of {', '.join(LOOPS)}")
