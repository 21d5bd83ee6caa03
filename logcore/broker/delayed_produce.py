"""An acks=all Produce in a cluster whose batches are appended and wait for the high watermark
(Kafka's DelayedProduce), answered by callbacks instead of a task.

Each partition's wait is an `HwWait` in that replica's waiter list (replication/partition.py
sets it when the HW passes the batch, fails it when leadership moves, cancels it when the
produce stops waiting): its set_result runs in the step that moved the HW, and the last one
encodes the answer into `response`, the future the connection's sender awaits. Between the HW
move and the answer there is no event-loop pass (a task woken through asyncio.wait took three:
the wait's completion callback, the task's step, the sender's), and no task, coroutine or
wait set per produce. The request's timeout is one timer; semantics are those of the coroutine
it replaces (`Broker._finish_replicated_produce`, kept for appends still in flight): errors per
partition as overrides of the appended results, REQUEST_TIMED_OUT for a partition whose HW did
not pass in time (its records may still commit).
"""
from __future__ import annotations

import asyncio
import logging

from logcore.wire import error_codes as E

logger = logging.getLogger(__name__)


class HwWait:
    """One partition's wait of a DelayedProduce: the replica's waiter list holds it as it holds
    a future (done, set_result, cancel), but set_result answers at once, on the caller's step."""
    __slots__ = ("_produce", "_code", "_done", "_cancelled")

    def __init__(self, produce: "DelayedProduce"):
        self._produce = produce
        self._code = None
        self._done = False
        self._cancelled = False

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._cancelled

    def result(self) -> int:
        return self._code

    def set_result(self, code: int) -> None:
        if self._done:
            raise asyncio.InvalidStateError("this wait is done already")
        self._done = True
        self._code = code
        self._produce.one_done()

    def cancel(self) -> bool:
        if self._done:
            return False
        self._done = self._cancelled = True
        return True


class DelayedProduce:
    """The waits of one acks=all request whose appends are all done (`entries`, the broker's
    ProduceEntry list). `finish(entries, overrides)` encodes the answer (the broker's
    _produce_response); `fail(exc)` answers a failure of it as a handler failure is answered."""
    __slots__ = ("response", "_entries", "_waits", "_pending", "_timer", "_finish", "_fail")

    def __init__(self, loop: asyncio.AbstractEventLoop, entries: list, replicas: dict, timeout_s: float,
                 finish, fail):
        self.response: asyncio.Future = loop.create_future()
        self._entries = entries
        self._finish = finish
        self._fail = fail
        self._timer = None
        waits = []
        self._pending = 1                 # held until every wait is registered
        for i, entry in enumerate(entries):
            fut = entry.appended
            if fut is not None and fut.exception() is None:
                replica = replicas.get((entry.topic, entry.index))
                if replica is None:
                    waits.append((i, None, None))
                else:
                    wait = HwWait(self)
                    self._pending += 1
                    waits.append((i, replica, wait))
                    replica.high_watermark_reached(fut.result().last_offset + 1, wait)   # may set it now
        self._waits = waits
        if self._pending > 1:
            self._timer = loop.call_later(max(0.0, timeout_s), self._timed_out)
        self.one_done()

    def one_done(self) -> None:
        self._pending -= 1
        if self._pending == 0:
            self._answer()

    def _timed_out(self) -> None:
        self._timer = None
        for _, replica, wait in self._waits:
            if wait is not None and not wait.done():
                replica.forget_waiter(wait)       # cancels it
        if self._pending:
            self._pending = 0
            self._answer()

    def _answer(self) -> None:
        """Every wait is over (or the time is): the response, unless nobody waits for it any
        more (the connection closed and cancelled it). Never raises into the replica's step."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        response = self.response
        if response.done():
            return
        overrides = {}
        for i, _, wait in self._waits:
            if wait is None:
                overrides[i] = E.NOT_LEADER_OR_FOLLOWER
            elif wait.cancelled():
                overrides[i] = E.REQUEST_TIMED_OUT          # the records may still commit
            elif wait.result() != E.NONE:
                overrides[i] = wait.result()
        try:
            response.set_result(self._finish(self._entries, overrides))
        except Exception as exc:   # noqa: BLE001 - answered as a failed handler is
            try:
                response.set_result(self._fail(exc))
            except Exception as again:   # noqa: BLE001 - no answer: the connection closes
                logger.error("acks=all produce: no answer could be built: %r", again)
                response.set_exception(again)
