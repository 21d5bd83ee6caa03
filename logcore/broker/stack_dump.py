"""The broker's stack dump: `kill -QUIT <pid>` prints every thread's stack and every pending
asyncio task's to stderr and the broker goes on serving (a JVM's thread dump on the same signal).
It is how a broker that does not stop, or stops answering, shows where it waits."""
from __future__ import annotations

import asyncio
import faulthandler
import io
import signal
import sys

SIGNAL = signal.SIGQUIT


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Dump on SIGQUIT. The threads' stacks are written from the signal handler itself (so also
    when the event loop thread is stuck in a blocking call); the tasks' once the loop runs it."""
    try:
        loop.add_signal_handler(SIGNAL, _dump_tasks)
    except (NotImplementedError, RuntimeError, ValueError):    # not the main thread: no dump
        return
    faulthandler.register(SIGNAL, file=sys.stderr, all_threads=True, chain=True)


def _dump_tasks() -> None:
    out = io.StringIO()
    tasks = [t for t in asyncio.all_tasks() if not t.done()]
    out.write(f"--- {len(tasks)} pending asyncio tasks ---\n")
    for task in tasks:
        out.write(f"{task.get_name()}: {task.get_coro()!r}\n")
        task.print_stack(limit=12, file=out)
    sys.stderr.write(out.getvalue())
    sys.stderr.flush()
