"""kazoo's connection handler for ZooKeeper over TLS (logcore.security.zookeeper_tls): each
connection is wrapped with the broker's client context (its stores read into memory, its
versions, suites and host-name check), not with kazoo's own file-based TLS arguments.

It also remembers the last TLS failure (a refused handshake, or a server's alert on the first
read: with TLS 1.3 a refused client certificate arrives after the handshake) so that a session
that never connects says why in terms of the settings instead of timing out. And it reports a
TLS socket whose decrypted bytes wait in its buffer as readable: `select` sees only the raw
socket, so a second response that came in the same TLS record would otherwise wait for the
next packet or ping.
"""
from __future__ import annotations

import logging
import socket
import ssl
import threading

from kazoo.handlers.threading import SequentialThreadingHandler

logger = logging.getLogger(__name__)

_RETRY = (ssl.SSLWantReadError, ssl.SSLWantWriteError)


def definitive(exc: BaseException) -> bool:
    """A TLS failure that trying again will not cure: a certificate refused either way, no common
    version or suite, a server that does not speak TLS (not a connection cut short)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return True
    reason = getattr(exc, "reason", None) or ""
    return isinstance(exc, ssl.SSLError) and ("ALERT" in reason or reason in (
        "WRONG_VERSION_NUMBER", "NO_PROTOCOLS_AVAILABLE", "UNSUPPORTED_PROTOCOL", "NO_SHARED_CIPHER"))


class TlsHandler(SequentialThreadingHandler):
    """kazoo's threading handler with TLS connections from `tls` (a ZooKeeperTls); one per client."""

    def __init__(self, tls, where: str):
        super().__init__()
        self.tls = tls
        self._lock = threading.Lock()
        self._failure: tuple[str, BaseException] | None = None
        self._failed_in_a_row = 0
        self._server = ""
        context = tls.context(where)
        handler = self

        class RecordingSocket(ssl.SSLSocket):
            def recv(self, *args, **kwargs):
                try:
                    return super().recv(*args, **kwargs)
                except _RETRY:
                    raise
                except ssl.SSLError as exc:
                    handler.note_failure(exc)
                    raise

        context.sslsocket_class = RecordingSocket
        self._context = context

    def create_connection(self, address, hostname=None, timeout=None, **_kazoo_tls_arguments):
        """A TLS connection to `address` checked against `hostname` (zookeeper.connect's host)."""
        with self._lock:
            self._server = f"{hostname or address[0]}:{address[1]}"
        raw = socket.create_connection(address, timeout)
        try:
            conn = self._context.wrap_socket(raw, server_hostname=hostname or address[0])
        except ssl.SSLError as exc:
            raw.close()
            self.note_failure(exc)
            raise
        except BaseException:
            raw.close()
            raise
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def select(self, rlist, wlist, xlist, timeout=None):
        ready = [s for s in rlist if isinstance(s, ssl.SSLSocket) and s.pending() > 0]
        if ready:
            return ready, [], []
        return super().select(rlist, wlist, xlist, timeout)

    def note_failure(self, exc: BaseException) -> None:
        with self._lock:
            server = self._server
            if definitive(exc):
                self._failure = (server, exc)
                self._failed_in_a_row += 1
        logger.warning("ZooKeeper TLS: %s", self.tls.explain(exc, server))

    def connected(self) -> None:
        """The session is established: earlier failures are history."""
        with self._lock:
            self._failed_in_a_row = 0

    def failure(self, servers: int) -> str | None:
        """Why no connection could be made, when each of `servers` servers (at least) failed its
        TLS in a way that will not change by trying again; else None."""
        with self._lock:
            if self._failure is None or self._failed_in_a_row < servers:
                return None
            server, exc = self._failure
        return self.tls.explain(exc, server)

    def last_failure(self) -> str | None:
        with self._lock:
            if self._failure is None:
                return None
            server, exc = self._failure
        return self.tls.explain(exc, server)
