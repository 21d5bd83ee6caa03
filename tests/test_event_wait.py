"""wait_event: a timeout, a set event, and a cancellation that arrives as the event is set;
cancel_and_wait: a task that swallowed a cancellation is still stopped; wait_all: every future
done, or the timeout, and a cancellation that leaves nothing behind."""
from __future__ import annotations

import asyncio

import time

from logcore.event_wait import cancel_and_wait, wait_all, wait_event


def test_set_timeout_and_no_limit():
    async def main():
        ev = asyncio.Event()
        assert await wait_event(ev, 0.01) is False
        asyncio.get_running_loop().call_later(0.01, ev.set)
        assert await wait_event(ev, 5) is True
        assert await wait_event(ev, None) is True
        assert await wait_event(asyncio.Event(), 0) is False
    asyncio.run(main())


def test_a_cancellation_in_the_same_turn_as_the_set_ends_a_waiting_loop():
    """The shape of a replica fetcher: wait, loop. Cancelled in the very turn the event is
    set, the loop must end (wait_for before Python 3.12 could swallow the cancellation)."""
    async def main():
        for _ in range(200):
            ev = asyncio.Event()
            rounds = 0

            async def loop_forever():
                nonlocal rounds
                while True:
                    rounds += 1
                    await wait_event(ev, 10)
                    ev.clear()

            task = asyncio.get_running_loop().create_task(loop_forever())
            await asyncio.sleep(0)          # the task waits
            ev.set()
            task.cancel()                   # same turn as the set
            done, _ = await asyncio.wait({task}, timeout=2)
            assert task in done and task.cancelled(), f"the loop went on ({rounds} rounds)"
    asyncio.run(main())


def test_cancel_and_wait_stops_a_loop_that_swallowed_the_first_cancellation():
    """A loop whose await swallows a cancellation (as asyncio.wait_for can on Python 3.11 when
    its inner await completes in the same turn) runs on after one cancel(); cancel_and_wait
    cancels again until it ends."""
    async def main():
        swallowed = 0

        async def loop_forever():
            nonlocal swallowed
            while True:
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    if swallowed == 0:
                        swallowed += 1
                        asyncio.current_task().uncancel()
                        continue            # the first cancellation is lost, as wait_for loses it
                    raise

        task = asyncio.get_running_loop().create_task(loop_forever())
        await asyncio.sleep(0.02)
        await asyncio.wait_for(cancel_and_wait(task, recheck_s=0.05), 5)
        assert task.cancelled() and swallowed == 1
    asyncio.run(main())


def test_wait_all_until_every_future_or_the_timeout():
    async def main():
        loop = asyncio.get_running_loop()
        await wait_all([])                               # nothing to wait for
        done = loop.create_future()
        done.set_result(1)
        await wait_all([done], 0)
        a, b = loop.create_future(), loop.create_future()
        loop.call_later(0.01, a.set_result, 1)
        loop.call_later(0.03, b.set_exception, ValueError("b's own"))
        t0 = time.monotonic()
        await wait_all([a, b, done], 5)
        assert a.done() and b.done() and time.monotonic() - t0 < 4
        b.exception()
        slow, fast = loop.create_future(), loop.create_future()
        loop.call_later(0.01, fast.set_result, 1)
        t0 = time.monotonic()
        await wait_all([slow, fast], 0.1)                # returns at the timeout
        assert 0.09 <= time.monotonic() - t0 < 4
        assert fast.done() and not slow.done() and not slow.cancelled()   # left as it was
        await wait_all([slow], -1)                       # a timeout already passed: at once
    asyncio.run(main())


def test_wait_all_cancelled_propagates_and_leaves_no_callbacks():
    async def main():
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(3)]
        waiter = asyncio.ensure_future(wait_all(futs, 10))
        await asyncio.sleep(0)
        waiter.cancel()
        try:
            await waiter
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the cancellation was swallowed")
        assert not any(f.done() for f in futs)
        # no callback of the cancelled wait left on them (asyncio's Future lists them here)
        assert all(not f._callbacks for f in futs)       # noqa: SLF001
    asyncio.run(main())
