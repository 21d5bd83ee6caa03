"""A Kafka protocol client over kio schemas: one connection to one broker.

- `KafkaConnection(host, port, *, timeout_s, client_id)`: blocking. `connect()` opens the socket
  and negotiates with ApiVersions; `request(api_key, body, version=None)` sends one request and
  returns its kio response dataclass; `send` / `receive` pipeline several (responses come back
  in the order the requests went out, as Kafka guarantees on one connection).
- `AsyncKafkaConnection`: the same over asyncio (a buffered protocol) (`await connect()`, `await request()`,
  `close()`), each request with its own timeout; concurrent requests share the connection.
- `bootstrap(servers)`: a connection to the first reachable of `h1:p1,h2:p2`, from a random one on;
  `KafkaConnection.connection_to(node_id)` reaches another broker of the cluster (the controller,
  a leader) through the Metadata response's broker list.

Bodies are dicts of Kafka field names (`protocol.build` fills what a version lacks with its
default), or the kio request dataclass of the version sent. Which version: the highest that the
broker serves (ApiVersions), kio knows, and the caller's window allows (`windows=` at
construction, or `window=` per request); `version=` asks for one exact version.

ApiVersions goes out at the newest version kio knows; a broker that does not serve it answers
UNSUPPORTED_VERSION with its own window in a v0 body (Kafka's rule), and the request is sent again
at the newest version both know.

Security (`security=`, a logcore.security.client_security.ClientSecurity or anything with its
`ssl_context`, `server_hostname(host)`, `authenticate(conn)` / `authenticate_async(conn)`):
the connection is wrapped in TLS when it has an ssl_context, and logs in with SASL right after
ApiVersions; when the login's session has a lifetime (KIP-368), the connection logs in again
before a request once `authenticate` said it is due.

Every failure is a KafkaError (a SegLogError) naming the broker's host:port and the API; a broken
or timed-out connection is a KafkaConnectionError (retriable: connect again). After a request
timeout the connection is closed, as Kafka's clients do: its late response cannot be matched.
The errors are kafka_error's; the asyncio connection's socket I/O (cutting response frames,
waiting on a full transport) is response_frames'.
"""
from __future__ import annotations

import asyncio
import collections
import random
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.schema.index import api_key_map, schema_name_map

from logcore import __version__
from logcore.wire.api_keys import API_VERSIONS, METADATA
from logcore.wire.error_codes import NONE, UNSUPPORTED_VERSION
from logcore.wire.kafka_error import KafkaConnectionError, KafkaError, UnsupportedApiError, api_name, error_name
from logcore.wire.protocol import ProtocolError, decode_response, encode_request
from logcore.wire.response_frames import ResponseFrames
from logcore.wire.servers import parse_servers

DEFAULT_TIMEOUT_S = 30.0
CLIENT_SOFTWARE = "seglog"           # ApiVersions v3+: Kafka checks [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?

_SIZE = struct.Struct(">i")
_CORRELATION_ERROR = struct.Struct(">ih")     # response header v0 + ApiVersions' leading error_code


@cache
def known_versions(api_key: int) -> tuple[int, int]:
    """The (min, max) versions of an API whose schemas kio has (both request and response)."""
    name = api_key_map.get(api_key)
    if name is None:
        raise UnsupportedApiError(f"api key {api_key} is not a Kafka API this client knows")
    versions = sorted(schema_name_map[name])
    return versions[0], versions[-1]


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class _Negotiated:
    """What both client kinds share: the negotiated versions, the correlation ids, the names."""

    def __init__(self, host: str, port: int, timeout_s: float, client_id: str | None,
                 windows: dict[int, tuple[int, int]] | None, origin: str | None, security=None):
        self.security = security
        self.reauth_at: float | None = None   # monotonic time the SASL session wants a new login
        self.host = host
        self.port = int(port)
        self.timeout_s = float(timeout_s)
        self.client_id = client_id
        self.windows = dict(windows or {})
        self.origin = origin              # e.g. "bootstrap.servers=h1:p1,h2:p2", for messages
        self.served: dict[int, tuple[int, int]] = {}     # api key -> the broker's (min, max)
        self._correlation = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def where(self) -> str:
        return f"the broker at {self.address}" + (f" ({self.origin})" if self.origin else "")

    def _next_correlation(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    def version_for(self, api_key: int, version: int | None = None,
                    window: tuple[int, int] | None = None) -> int:
        """The version a request of `api_key` goes out at (see the module docstring)."""
        k_lo, k_hi = known_versions(api_key)
        served = self.served.get(api_key)
        if served is None:
            raise UnsupportedApiError(f"{self.where()} does not serve {api_name(api_key)} (api key {api_key}):"
                                      " it is not advertised in its ApiVersions response")
        s_lo, s_hi = served
        if version is not None:
            if not (s_lo <= version <= s_hi and k_lo <= version <= k_hi):
                raise UnsupportedApiError(
                    f"{self.where()} serves {api_name(api_key)} versions {s_lo}..{s_hi}; v{version} was asked"
                    + ("" if k_lo <= version <= k_hi else f" (this client knows {k_lo}..{k_hi})"))
            return version
        c_lo, c_hi = window or self.windows.get(api_key, (k_lo, k_hi))
        lo, hi = max(s_lo, k_lo, c_lo), min(s_hi, k_hi, c_hi)
        if lo > hi:
            raise UnsupportedApiError(
                f"{self.where()} serves {api_name(api_key)} versions {s_lo}..{s_hi}, none of"
                f" {c_lo}..{c_hi} that the caller allows" + ("" if k_lo <= c_lo and c_hi <= k_hi
                                                            else f" (the schemas known here: {k_lo}..{k_hi})"))
        return hi

    def _api_versions_frame(self, version: int, correlation_id: int) -> bytes:
        body = {"client_software_name": CLIENT_SOFTWARE, "client_software_version": __version__}
        return encode_request(API_VERSIONS, version, correlation_id, self.client_id, body)

    def _api_versions_answer(self, version: int, frame: bytes) -> int | None:
        """Take the broker's windows from an ApiVersions response frame; the version to ask
        again at when the broker refused `version` (None: done)."""
        if len(frame) < _CORRELATION_ERROR.size:
            raise KafkaError(f"{self.where()} sent a {len(frame)}-byte ApiVersions response")
        _, code = _CORRELATION_ERROR.unpack_from(frame, 0)
        if code == UNSUPPORTED_VERSION and version > 0:
            _, body = self._decode(API_VERSIONS, 0, frame)     # Kafka answers in v0 with its window
            theirs = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}.get(API_VERSIONS)
            if theirs is None or theirs[1] >= version:
                raise KafkaError(f"{self.where()} refused ApiVersions v{version} without a usable window",
                                 UNSUPPORTED_VERSION)
            return theirs[1]
        _, body = self._decode(API_VERSIONS, version, frame)
        if body.error_code != NONE:
            raise KafkaError(f"{self.where()} refused ApiVersions v{version}: {error_name(body.error_code)}",
                             int(body.error_code))
        self.served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}
        return None

    def _decode(self, api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
        try:
            return decode_response(api_key, version, frame)
        except ProtocolError as exc:
            raise KafkaError(f"{self.where()}: {api_name(api_key)} v{version}: {exc}") from None

    def _frame(self, api_key: int, body: Any, version: int | None, window) -> tuple[bytes, int, int]:
        v = self.version_for(api_key, version, window)
        correlation = self._next_correlation()
        try:
            frame = encode_request(api_key, v, correlation, self.client_id, body)
        except (TypeError, ValueError) as exc:
            raise KafkaError(f"cannot encode a {api_name(api_key)} v{v} request for {self.where()}:"
                             f" {type(exc).__name__}: {exc}") from None
        return frame, v, correlation


# ------------------------------------------------------------------------------ blocking

class KafkaConnection(_Negotiated):
    """One blocking connection to one broker; not thread-safe."""

    def __init__(self, host: str, port: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 client_id: str | None = "seglog", windows: dict[int, tuple[int, int]] | None = None,
                 origin: str | None = None, security=None):
        super().__init__(host, port, timeout_s, client_id, windows, origin, security)
        self._sock: socket.socket | None = None
        self._pending: collections.deque[tuple[int, int, int]] = collections.deque()

    def connect(self) -> "KafkaConnection":
        """Open the connection and negotiate versions (no-op when open)."""
        if self._sock is not None:
            return self
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {self.where()}: {exc.strerror or exc}") from None
        sock.settimeout(self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        context = getattr(self.security, "ssl_context", None)
        if context is not None:
            try:
                sock = context.wrap_socket(sock, server_hostname=self.security.server_hostname(self.host))
            except (ssl.SSLError, ssl.CertificateError) as exc:
                sock.close()
                raise KafkaError(f"TLS handshake with {self.where()} failed: {exc}") from None
            except OSError as exc:
                sock.close()
                raise KafkaConnectionError(f"TLS handshake with {self.where()} failed: {exc.strerror or exc}") from None
        self._sock = sock
        try:
            version = known_versions(API_VERSIONS)[1]
            while version is not None:
                correlation = self._next_correlation()
                self._send_frame(self._api_versions_frame(version, correlation), API_VERSIONS)
                frame = self._recv_frame(API_VERSIONS)
                version = self._api_versions_answer(version, frame)
            if self.security is not None:
                self.reauth_at = self.security.authenticate(self)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._pending.clear()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def __enter__(self) -> "KafkaConnection":
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def send(self, api_key: int, body: Any, version: int | None = None, *,
             window: tuple[int, int] | None = None) -> int:
        """Send one request without waiting for its response; its correlation id."""
        self.connect()
        if self.reauth_at is not None and not self._pending and time.monotonic() >= self.reauth_at:
            self.reauth_at = None                   # KIP-368: log in again on this connection
            self.reauth_at = self.security.authenticate(self)
        frame, v, correlation = self._frame(api_key, body, version, window)
        self._send_frame(frame, api_key)
        self._pending.append((correlation, api_key, v))
        return correlation

    def receive(self) -> Any:
        """The response (kio dataclass) to the oldest request still waiting for one."""
        if not self._pending:
            raise KafkaError(f"no request to {self.where()} is waiting for a response")
        correlation, api_key, version = self._pending.popleft()
        frame = self._recv_frame(api_key)
        got, body = self._decode(api_key, version, frame)
        if got != correlation:
            self.close()
            raise KafkaError(f"{self.where()} answered correlation id {got} where {correlation}"
                             f" ({api_name(api_key)}) was expected")
        return body

    def request(self, api_key: int, body: Any, version: int | None = None, *,
                window: tuple[int, int] | None = None) -> Any:
        """Send one request and return its response (no pipelined request may be waiting)."""
        if self._pending:
            raise KafkaError(f"{len(self._pending)} request(s) sent to {self.where()} still wait for their"
                             f" responses: receive() them before a {api_name(api_key)} request()")
        self.send(api_key, body, version, window=window)
        return self.receive()

    def _send_frame(self, frame: bytes, api_key: int) -> None:
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise KafkaConnectionError(
                f"lost the connection to {self.where()} sending {api_name(api_key)}: {exc}") from None

    def _recv_frame(self, api_key: int) -> bytes:
        try:
            (size,) = _SIZE.unpack(self._recv_exactly(4))
            if size < 0:
                raise EOFError(f"a negative response size {size}")
            return self._recv_exactly(size)
        except socket.timeout:
            self.close()
            raise KafkaConnectionError(f"{self.where()} did not answer {api_name(api_key)}"
                                       f" within {self.timeout_s:g} s") from None
        except (OSError, EOFError) as exc:
            self.close()
            raise KafkaConnectionError(
                f"lost the connection to {self.where()} waiting for the {api_name(api_key)} response: {exc}") from None

    def _recv_exactly(self, n: int) -> bytes:
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise EOFError("the broker closed the connection")
            got += k
        return bytes(out)

    # ------------------------------------------------------------------ the cluster
    def metadata_brokers(self) -> tuple[dict[int, BrokerAddress], int]:
        """The cluster's brokers by node id, and the controller id Metadata reports (-1: none;
        a KRaft cluster names one of its brokers, which forwards controller requests)."""
        body = self.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})
        brokers = {int(b.node_id): BrokerAddress(int(b.node_id), b.host, int(b.port), b.rack)
                   for b in body.brokers}
        return brokers, int(getattr(body, "controller_id", -1))

    def connection_to(self, node_id: int) -> "KafkaConnection":
        """A new, connected KafkaConnection to broker `node_id` (its address from Metadata)."""
        brokers, _ = self.metadata_brokers()
        target = brokers.get(int(node_id))
        if target is None:
            raise KafkaError(f"{self.where()} lists no broker {node_id} in its Metadata"
                             f" (brokers: {sorted(brokers) or 'none'})")
        return KafkaConnection(target.host, target.port, timeout_s=self.timeout_s, client_id=self.client_id,
                               windows=self.windows, origin=f"node {node_id}", security=self.security).connect()

    def controller(self) -> "KafkaConnection":
        """A new connection to the broker Metadata names as the controller."""
        _, controller_id = self.metadata_brokers()
        if controller_id < 0:
            raise KafkaError(f"{self.where()} names no controller in its Metadata")
        return self.connection_to(controller_id)


def bootstrap(servers: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, client_id: str | None = "seglog",
              windows: dict[int, tuple[int, int]] | None = None,
              option: str = "bootstrap.servers", security=None) -> KafkaConnection:
    """A connected KafkaConnection to the first of `servers` (`h1:p1,h2:p2`) that answers, trying
    them from a random one on, in order, as Kafka's clients do: clients spread over the list,
    and a server that is down is not every client's first try. `option` names the setting in
    messages."""
    failures = []
    listed = parse_servers(servers, option)
    start = random.randrange(len(listed)) if listed else 0
    for host, port in listed[start:] + listed[:start]:
        conn = KafkaConnection(host, port, timeout_s=timeout_s, client_id=client_id, windows=windows,
                               origin=f"{option}={servers}", security=security)
        try:
            return conn.connect()
        except KafkaConnectionError as exc:
            failures.append(f"{host}:{port}: {exc}")
    raise KafkaConnectionError(
        f"cannot reach any broker of {option}={servers}: {'; '.join(failures)}. Is a Kafka-protocol"
        " broker (`seglog broker` or Apache Kafka) running there?")


# ------------------------------------------------------------------------------ asyncio

class AsyncKafkaConnection(_Negotiated):
    """One asyncio connection to one broker. Requests may be issued by several tasks at once:
    each waits for its own response (matched by correlation id), for at most its timeout."""

    def __init__(self, host: str, port: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 client_id: str | None = "seglog", windows: dict[int, tuple[int, int]] | None = None,
                 origin: str | None = None, security=None):
        super().__init__(host, port, timeout_s, client_id, windows, origin, security)
        self._reauthenticating = False
        self._protocol: ResponseFrames | None = None
        # correlation id -> (its future, api key, version, the caller's at_once or None)
        self._waiting: dict[int, tuple[asyncio.Future, int, int, Any]] = {}
        self._unclaimed: collections.deque[tuple[asyncio.Future, int]] = collections.deque()
        self._failure: KafkaError | None = None

    @property
    def connected(self) -> bool:
        return self._protocol is not None

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    def reads_through(self, protocol: "ResponseFrames") -> bool:
        """Whether `protocol` is this connection's I/O now (not one closed or replaced)."""
        return self._protocol is protocol

    async def connect(self) -> "AsyncKafkaConnection":
        if self._protocol is not None:
            return self
        loop = asyncio.get_running_loop()
        context = getattr(self.security, "ssl_context", None)
        tls = {} if context is None else {"ssl": context, "server_hostname": self.security.server_hostname(self.host),
                                          "ssl_handshake_timeout": self.timeout_s}
        try:
            _transport, protocol = await asyncio.wait_for(
                loop.create_connection(lambda: ResponseFrames(self), self.host, self.port, **tls), self.timeout_s)
        except asyncio.TimeoutError:
            raise KafkaConnectionError(f"cannot connect to {self.where()}: no answer within"
                                       f" {self.timeout_s:g} s") from None
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raise KafkaError(f"TLS handshake with {self.where()} failed: {exc}") from None
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {self.where()}: {exc.strerror or exc}") from None
        sock = protocol.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._failure = None
        self._unclaimed.clear()
        self._protocol = protocol
        try:
            version = known_versions(API_VERSIONS)[1]
            while version is not None:
                frame = await self._exchange(API_VERSIONS, version,
                                             lambda c, v=version: self._api_versions_frame(v, c), None, raw=True)
                version = self._api_versions_answer(version, frame)
            if self.security is not None:
                self.reauth_at = await self.security.authenticate_async(self)
        except BaseException:
            self.close()
            raise
        return self

    async def _login_if_due(self) -> None:
        """KIP-368: log in again on this connection once the session wants it (other requests
        go on meanwhile; one login at a time)."""
        if self.reauth_at is None or self._reauthenticating or time.monotonic() < self.reauth_at:
            return
        self._reauthenticating = True
        try:
            self.reauth_at = None
            self.reauth_at = await self.security.authenticate_async(self)
        finally:
            self._reauthenticating = False

    def close(self) -> None:
        """Close the connection; requests still waiting fail with KafkaConnectionError."""
        self.fail(KafkaConnectionError(f"the connection to {self.where()} was closed"))

    async def __aenter__(self) -> "AsyncKafkaConnection":
        return await self.connect()

    async def __aexit__(self, *exc) -> None:
        self.close()

    async def send(self, api_key: int, body: Any, version: int | None = None, *,
                   window: tuple[int, int] | None = None) -> int:
        """Send one request; `receive()` returns the responses in the order of the sends."""
        self._check_open()
        await self._login_if_due()
        frame, v, correlation = self._frame(api_key, body, version, window)
        fut = self._register(correlation, api_key, v)
        self._unclaimed.append((fut, api_key))
        await self._write(frame, api_key)
        return correlation

    async def receive(self, timeout_s: float | None = None) -> Any:
        """The response to the oldest request `send` sent that no receive() took yet."""
        if not self._unclaimed:
            raise KafkaError(f"no request sent to {self.where()} is waiting for a response")
        fut, api_key = self._unclaimed.popleft()
        return await self._await(fut, api_key, timeout_s)

    async def request(self, api_key: int, body: Any, version: int | None = None, *,
                      window: tuple[int, int] | None = None, timeout_s: float | None = None) -> Any:
        """Send one request and return its response; KafkaConnectionError (and the connection
        closed) when it does not come within `timeout_s` (default: the connection's)."""
        self._check_open()
        await self._login_if_due()
        frame, v, correlation = self._frame(api_key, body, version, window)
        return await self._exchange(api_key, v, lambda _c: frame, timeout_s, correlation=correlation)

    async def submit(self, api_key: int, body: Any, version: int | None = None, *,
                     into: asyncio.Future | None = None, at_once=None) -> asyncio.Future:
        """Send one request and return the future of its response without waiting for it: for
        a caller that waits its own way (a follower's fetch round, which may also be cut short)
        and times it out itself, with fail(). The future fails with the connection. `into`:
        the caller's own future, set here with the response (or the failure) unless the caller
        has set it first: its task then resumes in the pass after the response is read, not
        one later through a done-callback. `at_once(response)`: offered the decoded response
        first, in the protocol callback that read it; when it returns True it took the
        response and the future is left as it is."""
        self._check_open()
        await self._login_if_due()
        frame, v, correlation = self._frame(api_key, body, version, None)
        fut = self._register(correlation, api_key, v, into, at_once)
        await self._write(frame, api_key)
        return fut

    def submit_nowait(self, api_key: int, body: Any, version: int | None = None, *,
                      into: asyncio.Future, at_once=None) -> bool:
        """submit() for a caller that must not wait (a protocol callback): the request written
        now and True, or False with nothing sent where submit() would wait (a login due, the
        transport's writes paused) or fail (the connection closed)."""
        protocol = self._protocol
        if protocol is None or not protocol.writable() or (
                self.reauth_at is not None and not self._reauthenticating and time.monotonic() >= self.reauth_at):
            return False
        frame, v, correlation = self._frame(api_key, body, version, None)
        self._register(correlation, api_key, v, into, at_once)
        protocol.transport.write(frame)
        return True

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._protocol is None:
            raise self._failure or KafkaConnectionError(f"not connected to {self.where()}: await connect() first")

    def _register(self, correlation: int, api_key: int, version: int,
                  fut: asyncio.Future | None = None, at_once=None) -> asyncio.Future:
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
        self._waiting[correlation] = (fut, api_key, version, at_once)
        return fut

    async def _exchange(self, api_key: int, version: int, make_frame, timeout_s, *, raw: bool = False,
                        correlation: int | None = None):
        if correlation is None:
            correlation = self._next_correlation()
        frame = make_frame(correlation)
        fut = self._register(correlation, api_key, -1 if raw else version)
        await self._write(frame, api_key)
        return await self._await(fut, api_key, timeout_s)

    async def _await(self, fut: asyncio.Future, api_key: int, timeout_s: float | None):
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            return await asyncio.wait_for(asyncio.shield(fut), limit)
        except asyncio.TimeoutError:
            error = KafkaConnectionError(f"{self.where()} did not answer {api_name(api_key)}"
                                         f" within {limit:g} s")
            self.fail(error)
            raise error from None

    async def _write(self, frame: bytes, api_key: int) -> None:
        try:
            await self._protocol.write(frame)
        except (OSError, RuntimeError, AttributeError) as exc:
            error = KafkaConnectionError(f"lost the connection to {self.where()} sending {api_name(api_key)}: {exc}")
            self.fail(error)
            raise error from None

    def frame_received(self, frame) -> None:
        """A whole response frame (size prefix removed) arrived: its request's future gets it."""
        (correlation,) = _SIZE.unpack_from(frame, 0)
        entry = self._waiting.pop(correlation, None)
        if entry is None:
            raise KafkaError(f"{self.where()} answered correlation id {correlation},"
                             " which no request is waiting for")
        fut, api_key, version, at_once = entry
        if fut.done():
            return
        if version < 0:
            fut.set_result(bytes(frame))
            return
        try:
            answer = self._decode(api_key, version, frame)[1]
        except KafkaError as exc:
            fut.set_exception(exc)
            return
        if at_once is None or not at_once(answer):
            fut.set_result(answer)

    def fail(self, error: KafkaError) -> None:
        """Close the connection and fail every request still waiting with `error`."""
        self._failure = error
        waiting, self._waiting = self._waiting, {}
        for fut, api_key, _v, _at_once in waiting.values():
            if not fut.done():
                fut.set_exception(KafkaConnectionError(f"{error} (while waiting for {api_name(api_key)})"))
                fut.exception()       # retrieved here: a waiter that gave up does not warn
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol.close(error)
