"""`kill -QUIT` on a running broker prints its threads' and tasks' stacks and it goes on serving."""
from __future__ import annotations

import os
import signal

from broker_helpers import create, ping, produce, wait_until


def test_sigquit_dumps_stacks_and_the_broker_keeps_serving(broker_factory, tmp_path):
    b = broker_factory(tmp_path / "logs")
    create(b, "t")
    os.kill(b.proc.pid, signal.SIGQUIT)
    assert wait_until(lambda: "pending asyncio tasks" in b.log_text(), 10), b.log_text()[-2000:]
    text = b.log_text()
    assert "Thread 0x" in text and "most recent call first" in text     # every thread's stack
    assert "serve_until_stopped" in text                                # the main task's
    assert b.proc.poll() is None and ping(b)
    produce(b, "t", [b"after the dump"])
    assert b.stop() == 0
