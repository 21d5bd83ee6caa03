# Just over 700 lines: connections, listeners, SASL admission, quotas' mutes and in-order responses share each connection's state; TLS, SASL and quotas live in logcore.security and logcore.quota (next split: the per-connection reader loop).
"""The asyncio server: connections, framing, dispatch, in-order responses, clean shutdown.

Listeners (logcore.security): one server per listener of `listeners`, TLS ones with their
listener's context (reloaded when its stores change); each connection gets a security session
(its listener, the client's address, its principal) stamped on every request it sends; on a
SASL listener nothing but ApiVersions and the SASL exchange is served before the login.
Metadata, FindCoordinator and DescribeCluster name the brokers by the endpoint of the listener
the client connected to (advertised.listeners), as Kafka does; the handlers answer with the
inter-broker listener's, which is what each broker registers as its host and port.

Per connection, a reader loop takes one frame at a time (bounded by socket.request.max.bytes),
parses it and runs the handler's immediate part; what the handler leaves to finish later (a
produce waiting for its commit, a long-polling fetch) is queued, and a writer task sends the
responses in request order. A frame that cannot be parsed, is truncated or is too large closes
that connection only, with the reason logged.
"""
from __future__ import annotations

import asyncio
import os
import struct
import inspect
import logging
import signal
import time

from logcore.wire import error_codes as E
from logcore.broker import stack_dump
from logcore.broker.api_versions import windows
from logcore.broker.listener_endpoints import ListenerEndpoints
from logcore.broker.sasl_requests import SaslRequests
from logcore.broker.broker import Broker
from logcore.broker.cluster_member import ClusterMember
from logcore.broker.config import BrokerConfig
from logcore.broker.fetch_response import EncodedResponse
from logcore.broker.framing import ConnectionLimits, FrameConnection, RequestMemory
from logcore.broker.log_dir_failure import HaltProcess, LogDirFailureChannel, RecordedStop
from logcore.broker.quota_handlers import ThrottledResponse
from logcore.errors import SegLogError
from logcore.log.file_slice import FileSlice
from logcore.log.log_root import LogRoot
from logcore.log.root_owner import OwnerClaim
from logcore.metrics.broker_metrics import BrokerMetrics
from logcore.metrics.request_metrics import response_errors
from logcore.security.authenticator import SaslAuthenticator
from logcore.security.principal import certificate_principal
from logcore.security.session import CLOSE, SASL, SASL_AUTHENTICATE, SASL_HANDSHAKE, ConnectionSession
from logcore.security.tls_context import ServerTls
from logcore.wire.api_keys import API_VERSIONS, PRODUCE
from logcore.wire.protocol import (ProtocolError, UnsupportedRequest, build, encode_response,
                                   parse_request, response, response_type)

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64           # queued responses per connection before the reader waits


class BrokerServer:
    def __init__(self, config: BrokerConfig, on_log_dir_failure=None):
        """`on_log_dir_failure`: the policy once the log dir failed (log_dir_failure.py); the
        `seglog broker` process passes HaltProcess (exit at once). By default (in-process) a
        RecordedStop that aborts this server: listener and connections closed, no controlled
        shutdown, no log closed, nothing written."""
        self.config = config
        self.log_dir_failure = LogDirFailureChannel(
            config.log_dir, on_log_dir_failure if on_log_dir_failure is not None else RecordedStop(self.halt))
        self.halted = False
        self.broker: Broker | None = None
        self.server: asyncio.base_events.Server | None = None      # the first listener's
        self.servers: dict[str, asyncio.base_events.Server] = {}    # every listener's, by name
        self.tls: dict[str, ServerTls] = {}
        self.bound: dict[str, tuple[str, int]] = {}
        self.endpoints: ListenerEndpoints | None = None
        self.connections: dict[asyncio.Task, str] = {}              # -> its listener's name
        self.windows = windows()
        self.max_request = config["socket.request.max.bytes"]
        self.idle_timeout = config["connections.max.idle.ms"] / 1000
        self.read_timeout = config["socket.request.read.timeout.ms"] / 1000
        self.memory = RequestMemory(config["queued.max.request.bytes"])
        self.limits = ConnectionLimits(config["max.connections"], config["max.connections.per.ip"])
        self._stopping: asyncio.Event | None = None
        self.claim: OwnerClaim | None = None
        self.member: ClusterMember | None = None
        self._heartbeat: asyncio.Task | None = None
        self.metrics = BrokerMetrics()           # this broker's registry (endpoint: metrics.listener)
        self._requests = self.metrics.requests
        self.sasl = SaslRequests(self.metrics.authentication)

    def _close_servers(self) -> None:
        for server in self.servers.values():
            server.close()

    async def _bind(self) -> None:
        """Every listener bound (TLS contexts built first: a bad store fails the start)."""
        loop = asyncio.get_running_loop()
        for listener in self.config.listeners:
            settings = self.config.security.listener(listener.name)
            if listener.tls:
                self.tls[listener.name] = ServerTls(settings.settings, f"{self.config.source}: listener"
                                                                       f" {listener.name}")
            host, port = listener.bind_host, listener.port
            tls = self.tls.get(listener.name)
            try:
                server = await loop.create_server(
                    lambda l=listener: self._new_connection(l), host, port, reuse_address=True,
                    start_serving=False, **({} if tls is None else {"ssl": tls.context}))
            except OSError as exc:
                self._close_servers()
                raise ListenerError(
                    f"{self.config.source}: listeners={','.join(self.config['listeners'])}: cannot listen on "
                    f"{host}:{port} ({listener.name}): {exc.strerror or exc}") from None
            self.servers[listener.name] = server
            self.bound[listener.name] = server.sockets[0].getsockname()[:2]
        self.server = self.servers[self.config.listeners[0].name]

    async def start(self) -> tuple[str, int]:
        warning = self.config.listener_warning()
        if warning is not None:
            logger.warning("%s", warning)
        # Bound first (port 0 resolves), so that a port in use fails before anything is created
        # in the root, but accepting only once every partition is open: a client that connects
        # during start-up waits in the backlog instead of being told that existing partitions
        # are unknown.
        await self._bind()
        try:
            if self.config["metrics.listener"]:      # bound now too: a port in use fails the start
                endpoint = self.metrics.serve(self.config["metrics.listener"])
                logger.info("metrics endpoint on %s", endpoint.url)
            root = await asyncio.to_thread(LogRoot.open, self.config.log_dir, create=True,
                                           defaults=self.config.log_defaults)
        except BaseException:
            self._close_servers()
            self.metrics.close()
            raise
        bound = self.bound[self.config.listeners[0].name]
        by_listener = {name: self.config.advertised(name, *address) for name, address in self.bound.items()}
        advertised = by_listener[self.config.inter_broker_listener]
        self.endpoints = ListenerEndpoints(self.config.node_id, by_listener, advertised)
        # Claim the root before any partition is opened: other writers now refuse it, and a
        # second broker on the same root fails here, naming this one (root_owner).
        try:
            self.claim = await asyncio.to_thread(claim_root, root, advertised, self.config.node_id)
        except BaseException:
            self._close_servers()
            self.metrics.close()
            await asyncio.to_thread(root.close)
            raise
        self.broker = Broker(self.config, root, advertised, self.log_dir_failure, self.metrics)
        self.member = None
        self.metrics.watch(self.broker, controller=lambda: self.member.controller if self.member else None,
                           connections=self._connections_by_listener,
                           cleaner=self.broker.maintenance.service.cleaner)
        try:
            if self.config.cluster:
                # Before the logs open: a cluster member's logs open as replicas.
                self.member = ClusterMember(self.config, self.broker)
                await self.member.connect()
                self.windows = windows(self.broker.served)
                self.endpoints.registrations = lambda: self.broker.replica_manager.brokers
            await asyncio.to_thread(self.broker.open)
        except BaseException:
            self._close_servers()
            logger.info("stopping: closing every log")
            await asyncio.to_thread(self.broker.close)
            self.broker = None
            if self.member is not None:
                await self.member.close()
            await asyncio.to_thread(self.claim.release)
            self.claim = None
            self.metrics.close()
            raise
        await self.broker.start()
        for server in self.servers.values():
            await server.start_serving()      # clients connect only once every partition is open
        if self.member is not None:
            await self.member.register(*advertised, endpoints=self.endpoints.registered_endpoints(self.config))
        if not root.storage.is_local:
            self._heartbeat = asyncio.get_running_loop().create_task(_renew_claim(self.claim))
        self._stopping = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self.log_dir_failure.all_failed:       # failed while starting
            self._stopping.set()
        return bound[0], bound[1]

    async def serve_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._stopping.set)
            except (NotImplementedError, RuntimeError):
                pass
        stack_dump.install(loop)
        await self._stopping.wait()
        await self.stop()

    def request_stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    def halt(self) -> None:
        """The log dir failed (in-process policy): stop serving at once, from any thread, without
        writing anything more (serve_until_stopped then aborts instead of stopping cleanly)."""
        self.halted = True
        loop = getattr(self, "_loop", None)
        if loop is not None and self._stopping is not None:
            try:
                loop.call_soon_threadsafe(self._stopping.set)
            except RuntimeError:        # the loop is closed already
                pass

    async def _close_connections(self) -> None:
        """Stop listening and end every client connection (their tasks cancelled and awaited)."""
        self._close_servers()
        for task in list(self.connections):
            task.cancel()
        if self.connections:
            await asyncio.gather(*self.connections, return_exceptions=True)

    async def _abort(self) -> None:
        """Kafka's halt, in-process: no controlled shutdown, no log closed, the root's claim
        left as it is; the ZooKeeper session is closed (as a process exit would end it)."""
        await self._close_connections()
        if self.broker is not None:
            await self.broker.replication.stop()
            await asyncio.to_thread(self.broker.maintenance.stop)
            for task in list(self.broker.background):
                task.cancel()
        if self.member is not None:
            await self.member.close()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self.metrics.close()
        logger.error("broker halted: its log dir failed; nothing was closed or written")

    async def stop(self) -> None:
        if self.halted:
            await self._abort()
            return
        member = getattr(self, "member", None)
        if member is not None:
            await member.shutdown()        # leaderships move while this broker still serves
        logger.info("stopping: closing client connections")   # each step logged: a stuck one shows
        await self._close_connections()
        if self.broker is not None:
            logger.info("stopping: replication, groups, transactions and log maintenance")
            await self.broker.stop()
            for task in list(self.broker.background):
                try:
                    await asyncio.wait_for(task, 5)
                except (asyncio.TimeoutError, Exception):
                    pass
            await asyncio.to_thread(self.broker.close)
            self.broker = None
        if member is not None:
            await member.close()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.claim is not None:
            await asyncio.to_thread(self.claim.release)   # after every log closed
            self.claim = None
        await asyncio.to_thread(self.metrics.close)
        logger.info("broker stopped; every log closed cleanly")

    # ------------------------------------------------------------------ connections
    def _connections_by_listener(self) -> dict[str, int]:
        counts = {listener.name: 0 for listener in self.config.listeners}
        for name in list(self.connections.values()):
            counts[name] = counts.get(name, 0) + 1
        return counts

    def _new_connection(self, listener) -> FrameConnection:
        return FrameConnection(self.max_request, lambda conn: self._serve_connection(conn, listener),
                               self._produce_now, memory=self.memory, read_timeout=self.read_timeout,
                               limits=self.limits)

    def _session(self, conn: FrameConnection, listener) -> ConnectionSession:
        """The connection's security session: its TLS client certificate's principal, its
        SASL exchange on a SASL listener."""
        peer = conn.peer
        host = peer[0] if isinstance(peer, tuple) else str(peer or "")
        tls_principal = None
        ssl_object = conn.transport.get_extra_info("ssl_object") if conn.transport is not None else None
        if ssl_object is not None:
            der = ssl_object.getpeercert(binary_form=True)
            if der:
                tls_principal = certificate_principal(der)
        authenticator = None
        if listener.sasl:
            settings = self.config.security.listener(listener.name)
            authenticator = SaslAuthenticator(settings.mechanisms, settings.plain_users(),
                                              self.broker.credentials.scram, settings.reauth_ms)
        return ConnectionSession(listener.name, host, tls_principal=tls_principal, authenticator=authenticator)

    def _produce_now(self, conn: FrameConnection, frame) -> bool:
        """A Produce request that arrives while the connection's reader is parked, handled in
        the protocol callback (no task wake-up, one event-loop round less per request). Its
        response is written at once when nothing is ahead of it, else queued in order; anything
        else (another API, a frame that does not parse, a full response queue) is left to the
        reader, which reports errors as usual."""
        queue, sending, session = conn.responses, conn.sending, conn.session
        if queue is None or queue.full() or len(frame) < 2 or frame[0] != 0 or frame[1] != PRODUCE \
                or not session.open or sending.muted_until:   # a throttled client: the reader waits
            return False
        started = time.perf_counter()
        try:
            request = parse_request(frame, self.windows, session)
        except (UnsupportedRequest, ProtocolError):
            return False
        try:
            result = self.broker.produce_now(request)
        except Exception:   # noqa: BLE001 - a bug must cost one connection, not the broker
            logger.exception("connection %s: unexpected error; closing it", conn.peer)
            conn.close()
            return True
        if self.broker.quotas.active or type(result) is ThrottledResponse:
            result = self._charged(request, started, result, sending)
        if result is None or not inspect.isawaitable(result):
            self._requests.done(PRODUCE, started, response_errors(result))
        if result is None:
            return True
        if inspect.isawaitable(result):
            queue.put_nowait((request, asyncio.ensure_future(self._timed(PRODUCE, started, result, sending))))
            return True
        item = (request, result)
        if not sending.busy and queue.empty() and not conn.write_paused:
            conn.write(_ready_frame(item))
        else:
            queue.put_nowait(item)
        return True

    async def _serve_connection(self, conn: FrameConnection, listener) -> None:
        task = asyncio.current_task()
        self.connections[task] = listener.name
        peer = conn.peer
        session = conn.session = self._session(conn, listener)
        queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        sending = _Sending()
        conn.responses, conn.sending = queue, sending       # for _produce_now
        sender = asyncio.get_running_loop().create_task(self._send_responses(queue, conn, peer, sending))
        try:
            while True:
                frame = await conn.read_frame(self.idle_timeout)
                if frame is None:
                    break
                if sending.muted_until:
                    await sending.unmuted()
                if session.authenticator is not None and session.authenticator.raw_tokens:
                    item = await self.sasl.raw_token(session, frame, peer) or _CLOSE
                else:
                    item = await self._dispatch(frame, peer, session, sending)
                if item is _CLOSE:
                    break
                if item is None:
                    continue
                if isinstance(item, _Closing):      # its response goes out, then the connection closes
                    await queue.put(item.item)
                    break
                if not sending.busy and queue.empty() and not conn.write_paused:
                    ready = _ready_frame(item)
                    if ready is not None:       # nothing ahead of it: no hop through the sender
                        conn.write(ready)
                        continue
                await queue.put(item)
        except asyncio.CancelledError:
            pass
        except ConnectionError:
            pass
        except Exception:   # noqa: BLE001 - a bug must cost one connection, not the broker
            logger.exception("connection %s: unexpected error; closing it", peer)
        finally:
            try:
                await queue.put(None)
                await asyncio.wait_for(sender, 30)
            except (asyncio.CancelledError, asyncio.TimeoutError, Exception):
                sender.cancel()
            conn.responses = None
            conn.close()
            self.connections.pop(task, None)

    async def _timed(self, api_key: int, started: float, pending, sending: _Sending):
        """A request answered later (a produce waiting for its commit, a long-polling fetch):
        counted when its response is ready, before the sender can write it; a throttled
        client's connection muted from then on."""
        try:
            result = await pending
        except Exception:
            self._requests.done(api_key, started)
            raise
        if type(result) is ThrottledResponse:
            sending.mute(result.throttle_ms)
            self._requests.throttled(api_key, result.throttle_ms)
            result = result.response
        self._requests.done(api_key, started, response_errors(result))
        return result

    def _charged(self, request, started: float, result, sending: _Sending):
        """Client quotas in force: the request's handling time counted against its
        request_percentage, and the response's throttle time (the larger of that quota's and
        the one a handler answered for a byte rate) written into a dict response; the
        connection is then muted for it. Returns the response to send."""
        throttle = self.broker.quotas.handled(request, time.perf_counter() - started)
        if type(result) is ThrottledResponse:
            throttle = max(throttle, result.throttle_ms)
            result = result.response
        if throttle:
            if isinstance(result, dict) and "throttle_time" in result:
                result["throttle_time"] = max(throttle, result["throttle_time"] or 0)
            sending.mute(throttle)
            self._requests.throttled(request.api_key, throttle)
        return result

    async def _rewritten(self, request, pending):
        """An answer that names brokers, given later, with the client's listener's endpoints."""
        return self.endpoints.rewrite(request, await pending)

    async def _dispatch(self, frame: bytearray, peer, session: ConnectionSession, sending: _Sending):
        started = time.perf_counter()
        try:
            request = parse_request(frame, self.windows, session)
        except UnsupportedRequest as exc:
            if exc.api_key == API_VERSIONS:
                # Kafka answers an ApiVersions version it does not know in v0, with the list.
                body = response(API_VERSIONS, 0, self.broker.api_versions_body(E.UNSUPPORTED_VERSION))
                return encode_response(exc.correlation_id, body)
            answer = _unsupported_answer(frame, exc)
            if answer is not _CLOSE:
                logger.info("connection %s: %s; answered UNSUPPORTED_VERSION", peer, exc)
                return answer
            logger.warning("connection %s: %s; closing the connection", peer, exc)
            return _CLOSE
        except ProtocolError as exc:
            logger.warning("connection %s: %s; closing the connection", peer, exc)
            return _CLOSE
        if not session.open:
            admission = session.admit(request.api_key)
            if admission == CLOSE:
                logger.info("connection %s (listener %s): %s; closing the connection", peer, session.listener,
                            session.close_reason)
                return _CLOSE
            if admission == SASL:
                item, close = await self.sasl.handle(request, session, peer)
                return _Closing(item) if close else item
        elif request.api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            item, close = await self.sasl.handle(request, session, peer)
            return _Closing(item) if close else item
        result = await self.broker.handle(request)
        if self.broker.quotas.active or type(result) is ThrottledResponse:
            result = self._charged(request, started, result, sending)
        if request.api_key in self.endpoints.rewritten and session.listener != self.config.inter_broker_listener:
            if isinstance(result, dict):
                result = self.endpoints.rewrite(request, result)
            elif result is not None and inspect.isawaitable(result):
                result = self._rewritten(request, result)
        if isinstance(result, (bytes, dict)):       # the common answers (isawaitable is an ABC check)
            self._requests.done(request.api_key, started, response_errors(result))
            return (request, result)
        if inspect.isawaitable(result):
            return (request, asyncio.ensure_future(self._timed(request.api_key, started, result, sending)))
        self._requests.done(request.api_key, started)
        if result is None:
            return None
        return (request, result)

    async def _send_responses(self, queue: asyncio.Queue, writer: FrameConnection, peer,
                              sending: _Sending) -> None:
        try:
            while True:
                sending.busy = False
                item = await queue.get()
                sending.busy = True
                if item is None:
                    break
                if isinstance(item, bytes):
                    writer.write(item)
                else:
                    request, result = item
                    if isinstance(result, asyncio.Future):
                        try:
                            result = await result
                        except Exception:   # noqa: BLE001
                            logger.exception("connection %s: request %d v%d failed; closing the connection",
                                             peer, request.api_key, request.api_version)
                            break
                        if result is None:
                            continue
                    if isinstance(result, EncodedResponse):
                        await _send_pieces(writer, result)
                    else:
                        writer.write(_encoded(request, result))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except (_ShortSend, OSError) as exc:     # a file range that cannot be read or sent whole
            logger.error("connection %s: %s; closing the connection", peer, exc)
        finally:
            writer.close()
            # drop what is still queued: the connection is gone
            while not queue.empty():
                item = queue.get_nowait()
                if isinstance(item, tuple) and isinstance(item[1], asyncio.Future):
                    _discard(item[1])


_CLOSE = object()


class _Closing:
    """A response after which the connection closes (a failed SASL exchange)."""

    def __init__(self, item):
        self.item = item


class ListenerError(SegLogError):
    """The configured listener cannot be bound (port in use, address not local, no permission)."""


def _unsupported_answer(frame, exc: UnsupportedRequest):
    """UNSUPPORTED_VERSION for a request outside the served windows (see unsupported.py): the
    response frame, None for an acks=0 Produce, or _CLOSE when no response can be written."""
    from logcore.broker.unsupported import error_response, old_produce_response

    if exc.api_key == PRODUCE and 0 <= exc.api_version <= 2:
        try:
            return old_produce_response(frame, exc.api_version, exc.correlation_id)
        except (ValueError, struct.error):
            return _CLOSE
    answer = error_response(exc.api_key, exc.api_version, exc.correlation_id)
    return _CLOSE if answer is None else answer


def claim_root(root: LogRoot, advertised: tuple[str, int], node_id: int) -> OwnerClaim:
    """Claim the log root for this broker (blocking); the root's own writes then pass its check."""
    host, port = advertised
    bootstrap = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    claim = OwnerClaim(root.storage, kind="broker", address=f"PLAINTEXT://{bootstrap}",
                       bootstrap=bootstrap, node_id=node_id)
    claim.acquire()
    root.owner_id = claim.owner_id
    return claim


async def _renew_claim(claim: OwnerClaim) -> None:
    """Object stores: rewrite the claim's heartbeat every lease / 3 so that it stays live."""
    while True:
        await asyncio.sleep(claim.heartbeat_interval_s)
        try:
            await asyncio.to_thread(claim.heartbeat)
        except asyncio.CancelledError:
            raise
        except Exception as exc:   # noqa: BLE001 - retried at the next beat; the lease is 3 beats
            logger.warning("renewing the claim on %s failed: %s", claim.storage.url, exc)


class _Sending:
    """Whether a connection's sender task is working on a response (else it waits for one),
    and until when its reader is muted: a client over a quota is answered at once with the
    throttle time, then nothing more is read from it until that time has passed (KIP-219)."""
    busy = False
    muted_until = 0.0             # time.monotonic(); 0: not muted

    def mute(self, throttle_ms: int) -> None:
        self.muted_until = max(self.muted_until, time.monotonic() + throttle_ms / 1000.0)

    async def unmuted(self) -> None:
        while (delay := self.muted_until - time.monotonic()) > 0:   # a later response may extend it
            await asyncio.sleep(delay)
        self.muted_until = 0.0


def _encoded(request, result: dict | bytes) -> bytes:
    if isinstance(result, bytes):
        return result
    body = response_type(request.api_key, request.api_version)
    return encode_response(request.correlation_id, build(body, result))


def _ready_frame(item) -> bytes | None:
    """The response frame of a queue item that needs no waiting and no sendfile, else None."""
    if isinstance(item, bytes):
        return item
    request, result = item
    if isinstance(result, (asyncio.Future, EncodedResponse)):
        return None
    return _encoded(request, result)


class _ShortSend(Exception):
    """A file range ended before the length its response announced: the frame cannot be completed."""


async def _send_pieces(writer: FrameConnection, response: EncodedResponse) -> None:
    """Send a response's pieces in order: bytes through the transport, file ranges with sendfile
    (the kernel copies page cache to the socket; asyncio falls back to read+send on transports
    that cannot). The slices are closed whatever happens."""
    loop = asyncio.get_running_loop()
    try:
        for piece in response.pieces:
            if isinstance(piece, FileSlice):
                sent = _sendfile_now(writer.transport, piece)
                if sent < piece.size:
                    try:
                        sent += await loop.sendfile(writer.transport, piece.file, piece.position + sent,
                                                    piece.size - sent)
                    except RuntimeError as exc:      # the transport is closing
                        raise ConnectionError(str(exc)) from None
                if sent != piece.size:
                    raise _ShortSend(f"{piece.source} gave {sent} of {piece.size} bytes from {piece.position}")
            else:
                writer.write(piece)
    finally:
        response.close()


def _sendfile_now(transport: asyncio.Transport, piece: FileSlice) -> int:
    """Bytes of the slice that the socket takes at once, with os.sendfile and no waiting: the
    usual case (a replica fetch's range fits the socket buffer) then costs one system call
    instead of asyncio's sendfile machinery (a future, a writer callback, reading paused and
    resumed). 0 when the transport still holds bytes to send (they must go first), is closing,
    or is not a plain socket; asyncio's sendfile sends the rest."""
    if transport.is_closing() or transport.get_write_buffer_size() or transport.get_extra_info("sslcontext"):
        return 0
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    out, fd, sent = sock.fileno(), piece.file.fileno(), 0
    while sent < piece.size:
        try:
            n = os.sendfile(out, fd, piece.position + sent, piece.size - sent)
        except OSError:         # the socket is full (asyncio waits for it), or an error that
            break               # asyncio's sendfile meets again and reports
        if n == 0:
            break               # the file ended early: the caller reports the short range
        sent += n
    return sent


def _discard(future: asyncio.Future) -> None:
    """Cancel a queued response that will not be sent, closing the files it holds."""
    if not future.done():
        future.cancel()
    elif not future.cancelled() and future.exception() is None:
        result = future.result()
        if isinstance(result, EncodedResponse):
            result.close()


def _return_large_blocks() -> None:
    """Make glibc serve blocks of 1 MiB and more with mmap, and give them back when freed.

    By default glibc raises its mmap threshold each time a large block is freed (up to 32 MiB),
    so later blocks of that size come from the heaps of the worker threads' arenas and stay in
    the process after they are freed: a few decompression-bomb attempts (each inflating up to
    32 x max.message.bytes in a worker thread) left the broker hundreds of MB larger for good.
    A fixed threshold also stops that adjustment. Not glibc: nothing to do."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        return
    if mallopt is not None:
        M_MMAP_THRESHOLD = -3
        mallopt(M_MMAP_THRESHOLD, 1 << 20)


async def run_broker(config: BrokerConfig, *, ready=None, on_log_dir_failure=None) -> None:
    """Run a broker until SIGINT/SIGTERM; `ready(endpoints)` is called once it listens, with
    each listener's NAME://host:port as bound. `on_log_dir_failure`: see BrokerServer."""
    from logcore.broker.resources import check_remote_before_root, raise_nofile_limit
    raise_nofile_limit()
    await asyncio.to_thread(check_remote_before_root, config)
    server = BrokerServer(config, on_log_dir_failure)
    await server.start()
    endpoints = [listener.endpoint(*server.bound[listener.name]) for listener in config.listeners]
    logger.info("seglog broker (node %d) serving %s on %s (inter-broker listener %s)", config.node_id,
                config.log_dir, ",".join(endpoints), config.inter_broker_listener)
    if ready is not None:
        ready(endpoints)
    await server.serve_until_stopped()


def run_from_properties(path: str, overrides: dict[str, str] | None = None) -> int:
    """`seglog broker --config FILE`: run until SIGINT/SIGTERM, then close every log cleanly.

    Prints `seglog broker listening on PLAINTEXT://host:port[,SSL://host:port...]` (every listener,
    as bound) on stdout once clients can connect.
    """
    import sys

    from logcore.log.config import load_properties

    props = load_properties(path)
    props.update(overrides or {})
    config = BrokerConfig.from_props(props, source=str(path))
    _return_large_blocks()
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from logcore.security.jaas import login_secrets
    from logcore.storage.secrets import RedactingFilter, secret_values
    for handler in logging.getLogger().handlers:    # no log line shows a configured credential
        handler.addFilter(RedactingFilter(secret_values(props) + login_secrets(props)))

    def ready(endpoints: list[str]) -> None:
        sys.stdout.write(f"seglog broker listening on {','.join(endpoints)}\n")
        sys.stdout.flush()

    # A failed log dir (a full disk, an I/O error) ends the process at once, status 1 (Kafka's
    # Exit.halt when all log dirs have failed): no controlled shutdown, nothing more written.
    asyncio.run(run_broker(config, ready=ready, on_log_dir_failure=HaltProcess(status=1)))
    return 0
