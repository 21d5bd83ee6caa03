"""wait_event: a timeout, a set event, and a cancellation that arrives as the event is set;
cancel_and_wait: a task that swallowed a cancellation is still stopped."""
from __future__ import annotations

import asyncio

from logcore.event_wait import cancel_and_wait, wait_event


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
