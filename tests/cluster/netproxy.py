"""An asyncio TCP proxy for fault injection between processes on 127.0.0.1.

One `ProxyHub` runs an event loop in a daemon thread and owns any number of `Proxy`s; a test
(synchronous code) switches each proxy's mode at run time:

    hub = ProxyHub(); hub.start()
    p = hub.add(("127.0.0.1", broker_port), name="1->2")   # p.port: where to connect instead
    p.set_mode("blackhole")   # silence: sockets stay open, nothing forwarded, new connections
                              # accepted and held; on "pass" the held bytes flow on, in order
    p.set_mode("reset")       # every connection closed (RST), new ones accepted and closed
    p.set_mode("delay", 0.2)  # every chunk forwarded 0.2 s after it arrived, order kept
    p.set_mode("discard", direction="down")   # replies read and thrown away (see below)
    p.set_mode("blackhole", direction="up")   # one direction only (see below)
    p.set_mode("pass")        # both directions back to pass
    hub.stop()

A blackhole stops *reading* from both sides (nothing is dropped), so TCP streams stay intact,
like a partition that heals before the peers give up; the peers see silence, never a reset.

`direction` ("both", the default; "up": what the connecting side sends to the target, e.g. a
broker's requests to ZooKeeper; "down": what the target sends back, its replies) applies a
mode to one half of every connection; the other half keeps its own mode. A blackhole "up"
holds new connections too (nothing reaches the target); a blackhole "down" lets them connect.
`discard` reads what arrives in that direction and throws it away, so requests reach the target
but their replies never come back (the requester cannot tell whether a write happened); a
stream that lost bytes is broken, so when the direction leaves `discard` every connection that
lost something is reset, as a connection whose packets were lost ends in the end.
`set_mode("discard", direction="down", after=pred)` discards only from the moment a request
for which `pred(chunk)` is true went up a connection (on that connection): e.g. the reply to a
ZooKeeper write and everything after it, while reads, watches and pings before it still pass
(`zookeeper_write` is such a predicate, `zookeeper_write_to(paths)` one for writes to given znodes).
"""
from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time

MODES = ("pass", "blackhole", "reset", "delay", "discard")
DIRECTIONS = ("both", "up", "down")
CHUNK = 65536
# ZooKeeper opcodes that change data: create, delete, setData, multi, create2, createContainer, createTTL
ZK_WRITES = {1, 2, 5, 14, 15, 19, 20}


def zookeeper_write_to(paths):
    """A predicate like zookeeper_write, true only for a write whose chunk names one of `paths`
    (znode paths, e.g. a partition's state znode)."""
    names = [p.encode() for p in paths]

    def match(chunk: bytes) -> bool:
        return zookeeper_write(chunk) and any(n in chunk for n in names)
    return match


def zookeeper_write(chunk: bytes) -> bool:
    """True when a chunk a ZooKeeper client sent holds a write request: frames of
    [length][xid][type]...; a ConnectRequest (protocol version 0 where a request has its xid)
    and pings, auth and set-watches (negative xids) are not."""
    pos = 0
    while pos + 12 <= len(chunk):
        length, xid, kind = struct.unpack_from(">iii", chunk, pos)
        if xid > 0 and kind in ZK_WRITES:
            return True
        if length <= 0:
            return False
        pos += 4 + length
    return False


class Proxy:
    """One listening port forwarding to `target`. Created by ProxyHub.add."""

    def __init__(self, hub: "ProxyHub", target: tuple[str, int], name: str):
        self.hub = hub
        self.target = target
        self.name = name
        self.modes = {"up": ("pass", 0.0), "down": ("pass", 0.0)}   # direction -> (mode, delay)
        self.port = 0
        self.connections = 0            # accepted so far
        self.bytes_forwarded = 0
        self.bytes_discarded = 0
        self._server: asyncio.base_events.Server | None = None
        self._open: set = set()         # writers of live connections (both sides)
        self._flow: dict[str, asyncio.Event] = {}    # direction -> set unless blackholed
        self._lossy: set = set()        # (client writer, upstream writer) of connections that lost bytes
        self._after = {"up": None, "down": None}     # direction -> discard only once armed by this
        self._armed: set = set()        # connections on which `after` matched a request

    @property
    def mode(self) -> str:
        """The mode of both directions, or "up:M1,down:M2" when they differ."""
        up, down = self.modes["up"][0], self.modes["down"][0]
        return up if up == down else f"up:{up},down:{down}"

    @property
    def delay(self) -> float:
        return max(self.modes["up"][1], self.modes["down"][1])

    # -------------------------------------------------------------- control (any thread)
    def set_mode(self, mode: str, delay: float = 0.0, direction: str = "both", after=None) -> None:
        if mode not in MODES:
            raise ValueError(f"proxy {self.name}: unknown mode {mode!r} (one of {', '.join(MODES)})")
        if mode == "delay" and not delay > 0:
            raise ValueError(f"proxy {self.name}: mode delay needs a delay > 0 seconds, got {delay!r}")
        if direction not in DIRECTIONS:
            raise ValueError(f"proxy {self.name}: unknown direction {direction!r} (one of {', '.join(DIRECTIONS)})")
        if mode == "reset" and direction != "both":
            raise ValueError(f"proxy {self.name}: reset closes whole connections (direction both only)")
        if after is not None and (mode != "discard" or direction != "down"):
            raise ValueError(f"proxy {self.name}: `after` is for discard of direction down only")
        self.hub.call(self._apply, mode, delay, direction, after)

    def close(self) -> None:
        self.hub.call(self._close)

    @property
    def carrying(self) -> bool:
        """Whether a connection through this proxy is open now (e.g. a ZooKeeper session's)."""
        return bool(self._open)

    # -------------------------------------------------------------- inside the loop
    async def _listen(self, port: int = 0) -> None:
        for d in ("up", "down"):
            self._flow[d] = asyncio.Event()
            self._flow[d].set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]

    def _apply(self, mode: str, delay: float, direction: str = "both", after=None) -> None:
        left_discard = False
        for d in (("up", "down") if direction == "both" else (direction,)):
            left_discard |= self.modes[d][0] == "discard" and mode != "discard"
            self.modes[d] = (mode, delay if mode == "delay" else 0.0)
            self._after[d] = after
            if mode == "blackhole":
                self._flow[d].clear()
            else:
                self._flow[d].set()
        self._armed.clear()
        if mode == "reset":
            for w in list(self._open):
                _abort(w)
            self._open.clear()
            self._lossy.clear()
        elif left_discard:
            for pair in list(self._lossy):
                for w in pair:
                    _abort(w)
                    self._open.discard(w)
            self._lossy.clear()

    def _mode(self, direction: str) -> str:
        return self.modes[direction][0]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._open):
            _abort(w)
        self._open.clear()

    async def _accept(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._mode("up") == "reset":
            _abort(cwriter)
            return
        self._open.add(cwriter)
        try:
            await self._flow["up"].wait()           # blackholed: hold the connection, silently
            if self._mode("up") == "reset" or cwriter.is_closing():
                return
            try:
                ureader, uwriter = await asyncio.open_connection(*self.target)
            except OSError:
                _abort(cwriter)
                return
            if self._mode("up") == "reset":
                _abort(uwriter)
                _abort(cwriter)
                return
            self._open.add(uwriter)
            pair = (cwriter, uwriter)
            t1 = asyncio.ensure_future(self._pump(creader, uwriter, "up", pair))
            t2 = asyncio.ensure_future(self._pump(ureader, cwriter, "down", pair))
            try:
                await asyncio.wait([t1, t2], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (t1, t2):
                    t.cancel()
                self._lossy.discard(pair)
                self._armed.discard(pair)
                for w in (cwriter, uwriter):
                    self._open.discard(w)
                    if not w.is_closing():
                        w.close()
        finally:
            self._open.discard(cwriter)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str,
                    pair: tuple) -> None:
        """Copy one direction. Reading waits while blackholed (bytes stay in the kernel buffers);
        a chunk read before a blackhole began is held until it ends. In delay mode each chunk
        is written `delay` seconds after it was read, in order (a queue and a writer task). In
        discard mode each chunk read is thrown away and the connection marked as broken."""
        queue: asyncio.Queue = asyncio.Queue()
        writer_task = asyncio.ensure_future(self._drain(queue, writer, direction))
        flow = self._flow[direction]
        try:
            while True:
                await flow.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                mode, delay = self.modes[direction]
                if direction == "up" and self._after["down"] is not None and pair not in self._armed \
                        and self._after["down"](data):
                    self._armed.add(pair)
                if mode == "discard" and (self._after[direction] is None or pair in self._armed):
                    self.bytes_discarded += len(data)
                    self._lossy.add(pair)
                    continue
                due = time.monotonic() + (delay if mode == "delay" else 0.0)
                await queue.put((due, data))
                if writer_task.done():
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            await queue.put(None)
            try:
                await writer_task
            except (ConnectionError, OSError, asyncio.CancelledError):
                pass

    async def _drain(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, direction: str) -> None:
        while True:
            item = await queue.get()
            if item is None:
                if not writer.is_closing():
                    try:
                        writer.write_eof()
                    except (OSError, RuntimeError):
                        pass
                return
            due, data = item
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await self._flow[direction].wait()
            if writer.is_closing():
                return
            writer.write(data)
            await writer.drain()
            self.bytes_forwarded += len(data)

    def __repr__(self) -> str:
        return f"Proxy({self.name} :{self.port} -> {self.target[0]}:{self.target[1]}, {self.mode})"


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a reset link does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class ProxyHub:
    """An event loop in a daemon thread running proxies; methods are called from the test thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="netproxy", daemon=True)
        self.proxies: list[Proxy] = []

    def start(self) -> "ProxyHub":
        self.thread.start()
        return self

    def call(self, fn, *args, timeout: float = 10.0):
        """Run fn(*args) (a plain function or a coroutine function) in the loop and return its result."""
        async def run():
            out = fn(*args)
            if asyncio.iscoroutine(out):
                out = await out
            return out
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def add(self, target: tuple[str, int], name: str = "", port: int = 0) -> Proxy:
        p = Proxy(self, target, name or f"->{target[1]}")
        self.call(p._listen, port)
        self.proxies.append(p)
        return p

    def set_all(self, mode: str, delay: float = 0.0, direction: str = "both") -> None:
        for p in self.proxies:
            p.set_mode(mode, delay, direction)

    def stop(self) -> None:
        if not self.thread.is_alive():
            return
        for p in self.proxies:
            try:
                p.close()
            except Exception:       # noqa: BLE001 - best effort at teardown
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
