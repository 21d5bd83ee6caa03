"""A fast and safe signal that a broker process is gone: its listener refuses connections.

ZooKeeper takes a broker for dead only when its session expires (zookeeper.session.timeout.ms
after the last heartbeat). A killed process is known to be gone much sooner: the kernel closes
its sockets at once, and its listening address answers every new connection with a refusal
(RST: no process listening). `ListenerProbe` watches that, for the controller:

- it holds one idle TCP connection to each registered broker's listener (the address clients
  and followers use, `inter.broker.address.overrides` included) and waits for it to end;
- when it ends (or cannot be opened), it connects again, `REFUSALS` times `SPACING_S` apart;
  only an active refusal counts (ECONNREFUSED, or a reset during connect). A connection that
  is accepted, a timeout, or any other error is not evidence of death and starts the count
  over (a paused process, SIGSTOP, still has its socket in the kernel: connections are
  accepted into its backlog, so it is never taken for dead here, only by its session);
- after `REFUSALS` refusals in a row the broker's registration (id and czxid, the broker epoch)
  is marked dead and `on_change()` is called; the controller then runs the broker-failure
  election it runs on session expiry. The registration znode itself is left alone: ZooKeeper
  removes it when the session expires (replication.md 4.2);
- a dead-marked broker is still probed every `INTERVAL_S`: if its listener accepts again while
  the same registration exists, the mark is dropped (`on_change()` again). A new registration
  of the id (a larger czxid) also drops it: that is a startup.
"""
from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

REFUSALS = 3            # refused connections in a row that make a broker dead
SPACING_S = 0.1         # between those connection attempts
INTERVAL_S = 0.5        # reconnecting an idle watch, and probing dead-marked brokers
CONNECT_TIMEOUT_S = 1.0
_REFUSED = {errno.ECONNREFUSED, errno.ECONNRESET}


def refused(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[bool | None, socket.socket | None]:
    """Try one connection: (True, None) refused, (False, sock) accepted (the caller owns
    `sock`), (None, None) anything else (timeout, unreachable network, ...): no evidence."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect((host, port))
    except OSError as exc:
        sock.close()
        return (True, None) if exc.errno in _REFUSED else (None, None)
    except Exception:                                   # noqa: BLE001 - e.g. a bad host name
        sock.close()
        return None, None
    sock.setblocking(False)
    return False, sock


class ListenerProbe:
    """Watches the listeners of `targets` (broker id -> (host, port, czxid)) on its own thread."""

    def __init__(self, on_change: Callable[[], None], *, name: str = "listener-probe",
                 refusals: int = REFUSALS, spacing_s: float = SPACING_S, interval_s: float = INTERVAL_S):
        self.on_change = on_change
        self.refusals_needed = refusals
        self.spacing_s = spacing_s
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._targets: dict[int, tuple[str, int, int]] = {}
        self._dead: dict[int, int] = {}                 # id -> czxid taken for dead
        self._socks: dict[int, socket.socket] = {}
        self._refusals: dict[tuple[int, int], list[float]] = {}   # (id, czxid) -> refusals in a row
        self._connected_at: dict[int, float] = {}
        self._next_try: dict[int, float] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # ------------------------------------------------------------------ from other threads
    def start(self) -> "ListenerProbe":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join(5)
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def set_targets(self, targets: dict[int, tuple[str, int, int]]) -> None:
        """The registrations to watch: {broker id: (host, port, czxid)}; {} stops watching."""
        with self._lock:
            self._targets = dict(targets)
            for b in list(self._dead):
                if b not in targets or targets[b][2] != self._dead[b]:
                    del self._dead[b]                   # deregistered, or registered anew
        self._wake()

    def dead(self) -> dict[int, int]:
        """{broker id: czxid} of the registrations whose listener refused connections."""
        with self._lock:
            return dict(self._dead)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # ------------------------------------------------------------------ the probe thread
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                timeout = self._pass()
                for key, _ in self._selector.select(timeout):
                    if key.data is None:
                        try:
                            self._wake_r.recv(4096)
                        except OSError:
                            pass
                    else:
                        self._readable(key.data)
            except Exception:                               # noqa: BLE001 - keep probing
                logger.exception("listener probe failed; going on")
                time.sleep(self.interval_s)

    def _drop_sock(self, b: int) -> None:
        sock = self._socks.pop(b, None)
        if sock is not None:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()

    def _readable(self, b: int) -> None:
        sock = self._socks.get(b)
        if sock is None:
            return
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            return                                          # nothing is sent on it; ignore
        self._drop_sock(b)
        # Ended: probe at once, but not in a tight loop when something in between (a proxy)
        # keeps accepting and closing the watch connection (nor when a dying process still
        # accepted the first probe: that one ends at once too).
        self._next_try[b] = self._connected_at.get(b, 0.0) + self.spacing_s

    def _pass(self) -> float:
        """Probe whoever is due; returns how long to wait for the next event."""
        with self._lock:
            targets = dict(self._targets)
            dead = dict(self._dead)
        for b in [b for b in self._socks if b not in targets]:
            self._drop_sock(b)
        for key in [k for k in self._refusals if targets.get(k[0], (0, 0, None))[2] != k[1]]:
            self._refusals.pop(key, None)
        for b in [b for b in self._next_try if b not in targets]:
            self._next_try.pop(b, None)
        now = time.monotonic()
        wait = self.interval_s
        for b, (host, port, czxid) in targets.items():
            if b in self._socks:
                continue
            due = self._next_try.get(b, 0.0)
            if due > now:
                wait = min(wait, due - now)
                continue
            outcome, sock = refused(host, port)
            now = time.monotonic()
            if outcome is False:
                self._refusals.pop((b, czxid), None)
                self._connected_at[b] = now
                self._socks[b] = sock
                self._selector.register(sock, selectors.EVENT_READ, b)
                if b in dead:
                    self._reinstate(b, czxid, host, port)
                continue
            if outcome is None:
                self._refusals.pop((b, czxid), None)        # no evidence: start over
                self._next_try[b] = now + self.interval_s
                continue
            times = self._refusals.setdefault((b, czxid), [])
            times.append(now)
            if b in dead:
                self._next_try[b] = now + self.interval_s
            elif len(times) >= self.refusals_needed:
                self._mark_dead(b, czxid, host, port, times[-1] - times[0])
                self._next_try[b] = now + self.interval_s
            else:
                self._next_try[b] = now + self.spacing_s
                wait = min(wait, self.spacing_s)
        return max(0.0, wait)

    def _mark_dead(self, b: int, czxid: int, host: str, port: int, span_s: float) -> None:
        with self._lock:
            if self._targets.get(b, (None, None, None))[2] != czxid:
                return
            self._dead[b] = czxid
        logger.warning("broker %d's listener %s:%d refused %d connections in a row (%.0f ms): taken for"
                       " dead before its ZooKeeper session ends (broker epoch %d)", b, host, port,
                       len(self._refusals.get((b, czxid), ())), span_s * 1000, czxid)
        self.on_change()

    def _reinstate(self, b: int, czxid: int, host: str, port: int) -> None:
        with self._lock:
            if self._dead.get(b) != czxid:
                return
            del self._dead[b]
        logger.warning("broker %d's listener %s:%d accepts connections again and its registration"
                       " (broker epoch %d) still stands: live again", b, host, port, czxid)
        self.on_change()
