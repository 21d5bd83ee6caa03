"""Waiting for an asyncio.Event with a timeout, and stopping a task, without losing a
cancellation; waiting for several futures at the cost of one.

`asyncio.wait_for(event.wait(), t)` before Python 3.12 returns normally when the task is
cancelled in the same loop turn as the event is set: the cancellation is swallowed. A loop
that waits that way (a replica fetcher, a join) then never ends, and whoever cancelled it and
awaits it (a broker stopping) waits for ever."""
from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """True once `event` is set, False when `timeout` seconds (None: no limit) pass first.
    A cancellation always propagates."""
    if event.is_set():
        return True
    if timeout is None:
        await event.wait()
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=max(0.0, timeout))
    finally:
        if not waiter.done():
            waiter.cancel()
    return bool(done)


async def cancel_and_wait(task: asyncio.Task, recheck_s: float = 0.1) -> None:
    """Cancel `task` and wait until it has ended. The cancellation is repeated while the task
    runs on: any `asyncio.wait_for` inside it (a connect with a timeout, in this code or a
    library's) can swallow a cancellation on Python 3.11 the same way, and a loop task that
    swallowed it would otherwise be awaited for ever."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=recheck_s)
    if not task.cancelled():
        task.exception()                 # retrieved: an error of a stopped task is not reported


async def wait_all(futures, timeout: float | None = None) -> None:
    """Until every one of `futures` is done, or `timeout` seconds (None: no limit) pass first;
    they are not cancelled. asyncio.wait's ALL_COMPLETED without what it adds per call (a set of
    the futures, ensure_future on each, a callback removal each at the end): a produce request
    waits so once or twice, and this is about half of asyncio.wait's cost."""
    pending = [f for f in futures if not f.done()]
    if not pending:
        return
    loop = pending[0].get_loop()
    done = loop.create_future()
    left = len(pending)

    def one(_f) -> None:
        nonlocal left
        left -= 1
        if left == 0 and not done.done():
            done.set_result(None)
    for f in pending:
        f.add_done_callback(one)
    timer = loop.call_later(max(0.0, timeout), _release, done) if timeout is not None else None
    try:
        await done
    finally:
        if timer is not None:
            timer.cancel()
        if left:
            for f in pending:
                f.remove_done_callback(one)


def _release(done: asyncio.Future) -> None:
    if not done.done():
        done.set_result(None)
