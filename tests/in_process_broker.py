"""A broker in the test's own process: a BrokerServer on an event loop in a daemon thread, so that a
test reads its bound ports and reaches its objects (the metrics registry, the handlers, the
authorizer) while real clients talk to it over the wire.

A module's fixture starts one with `InProcessBroker(props)` (127.0.0.1 port 0 listeners) and
stops it with `stop()`; `run(coro)` runs a coroutine on the broker's loop and waits for it.
"""
from __future__ import annotations

import asyncio
import threading

from logcore.broker.config import BrokerConfig
from logcore.broker.server import BrokerServer


class LoopThread:
    """An event loop in a daemon thread; run(coro) waits for its result."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class InProcessBroker:
    """A started BrokerServer over `props` (a broker.properties map) on its own LoopThread."""

    def __init__(self, props: dict[str, str], source: str = "test"):
        self.loop = LoopThread()
        try:
            self.server = BrokerServer(BrokerConfig.from_props(props, source=source))
            self.host, self.port = self.loop.run(self.server.start())
        except BaseException:
            self.loop.close()
            raise

    @property
    def broker(self):
        return self.server.broker

    @property
    def bootstrap(self) -> str:
        """host:port of the first listener."""
        return f"{self.host}:{self.port}"

    def listener(self, name: str) -> str:
        """host:port of the named listener."""
        host, port = self.server.bound[name]
        return f"{host}:{port}"

    def run(self, coro, timeout: float = 60):
        return self.loop.run(coro, timeout)

    def stop(self) -> None:
        try:
            self.loop.run(self.server.stop())
        finally:
            self.loop.close()
