"""The asyncio server: connections, framing, dispatch, in-order responses, clean shutdown.

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
from logcore.broker.api_versions import windows
from logcore.broker.broker import Broker
from logcore.broker.cluster_member import ClusterMember
from logcore.broker.config import BrokerConfig
from logcore.broker.fetch_response import EncodedResponse
from logcore.broker.framing import ConnectionLimits, FrameConnection, RequestMemory
from logcore.broker.log_dir_failure import HaltProcess, LogDirFailureChannel, RecordedStop
from logcore.errors import SegLogError
from logcore.log.file_slice import FileSlice
from logcore.log.log_root import LogRoot
from logcore.log.root_owner import OwnerClaim
from logcore.metrics.broker_metrics import BrokerMetrics
from logcore.metrics.request_metrics import response_errors
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
        self.server: asyncio.base_events.Server | None = None
        self.connections: set[asyncio.Task] = set()
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

    async def start(self) -> tuple[str, int]:
        host, port = self.config.listener()
        warning = self.config.listener_warning()
        if warning is not None:
            logger.warning("%s", warning)
        # Bound first (port 0 resolves), so that a port in use fails before anything is created
        # in the root, but accepting only once every partition is open: a client that connects
        # during start-up waits in the backlog instead of being told that existing partitions
        # are unknown.
        try:
            self.server = await asyncio.get_running_loop().create_server(
                self._new_connection, host, port, reuse_address=True, start_serving=False)
        except OSError as exc:
            raise ListenerError(
                f"{self.config.source}: listeners={','.join(self.config['listeners'])}: cannot listen on "
                f"{host}:{port}: {exc.strerror or exc}") from None
        try:
            if self.config["metrics.listener"]:      # bound now too: a port in use fails the start
                endpoint = self.metrics.serve(self.config["metrics.listener"])
                logger.info("metrics endpoint on %s", endpoint.url)
            root = await asyncio.to_thread(LogRoot.open, self.config.log_dir, create=True,
                                           defaults=self.config.log_defaults)
        except BaseException:
            self.server.close()
            self.metrics.close()
            raise
        bound = self.server.sockets[0].getsockname()
        advertised = self.config.advertised(bound[0], bound[1])
        # Claim the root before any partition is opened: other writers now refuse it, and a
        # second broker on the same root fails here, naming this one (root_owner).
        try:
            self.claim = await asyncio.to_thread(claim_root, root, advertised, self.config.node_id)
        except BaseException:
            self.server.close()
            self.metrics.close()
            await asyncio.to_thread(root.close)
            raise
        self.broker = Broker(self.config, root, advertised, self.log_dir_failure, self.metrics)
        self.member = None
        listener = self.config["listeners"][0].partition("://")[0] if "://" in self.config["listeners"][0] \
            else "PLAINTEXT"
        self.metrics.watch(self.broker, controller=lambda: self.member.controller if self.member else None,
                           connections=lambda: {listener: len(self.connections)},
                           cleaner=self.broker.maintenance.service.cleaner)
        try:
            if self.config.cluster:
                # Before the logs open: a cluster member's logs open as replicas.
                self.member = ClusterMember(self.config, self.broker)
                await self.member.connect()
                self.windows = windows(self.broker.served)
            await asyncio.to_thread(self.broker.open)
        except BaseException:
            self.server.close()
            await asyncio.to_thread(self.broker.close)
            self.broker = None
            if self.member is not None:
                await self.member.close()
            await asyncio.to_thread(self.claim.release)
            self.claim = None
            self.metrics.close()
            raise
        await self.broker.start()
        await self.server.start_serving()      # clients connect only once every partition is open
        if self.member is not None:
            await self.member.register(*advertised)
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
        if self.server is not None:
            self.server.close()
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
        await self._close_connections()
        if self.broker is not None:
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
    def _new_connection(self) -> FrameConnection:
        return FrameConnection(self.max_request, self._serve_connection, self._produce_now,
                               memory=self.memory, read_timeout=self.read_timeout, limits=self.limits)

    def _produce_now(self, conn: FrameConnection, frame) -> bool:
        """A Produce request that arrives while the connection's reader is parked, handled in
        the protocol callback (no task wake-up, one event-loop round less per request). Its
        response is written at once when nothing is ahead of it, else queued in order; anything
        else (another API, a frame that does not parse, a full response queue) is left to the
        reader, which reports errors as usual."""
        queue, sending = conn.responses, conn.sending
        if queue is None or queue.full() or len(frame) < 2 or frame[0] != 0 or frame[1] != PRODUCE:
            return False
        started = time.perf_counter()
        try:
            request = parse_request(frame, self.windows)
        except (UnsupportedRequest, ProtocolError):
            return False
        try:
            result = self.broker.produce_now(request)
        except Exception:   # noqa: BLE001 - a bug must cost one connection, not the broker
            logger.exception("connection %s: unexpected error; closing it", conn.peer)
            conn.close()
            return True
        if result is None or not inspect.isawaitable(result):
            self._requests.done(PRODUCE, started, response_errors(result))
        if result is None:
            return True
        if inspect.isawaitable(result):
            queue.put_nowait((request, asyncio.ensure_future(self._timed(PRODUCE, started, result))))
            return True
        item = (request, result)
        if not sending.busy and queue.empty() and not conn.write_paused:
            conn.write(_ready_frame(item))
        else:
            queue.put_nowait(item)
        return True

    async def _serve_connection(self, conn: FrameConnection) -> None:
        task = asyncio.current_task()
        self.connections.add(task)
        peer = conn.peer
        queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        sending = _Sending()
        conn.responses, conn.sending = queue, sending       # for _produce_now
        sender = asyncio.get_running_loop().create_task(self._send_responses(queue, conn, peer, sending))
        try:
            while True:
                frame = await conn.read_frame(self.idle_timeout)
                if frame is None:
                    break
                item = await self._dispatch(frame, peer)
                if item is _CLOSE:
                    break
                if item is None:
                    continue
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
            self.connections.discard(task)

    async def _timed(self, api_key: int, started: float, pending):
        """A request answered later (a produce waiting for its commit, a long-polling fetch):
        counted when its response is ready, before the sender can write it."""
        try:
            result = await pending
        except Exception:
            self._requests.done(api_key, started)
            raise
        self._requests.done(api_key, started, response_errors(result))
        return result

    async def _dispatch(self, frame: bytearray, peer):
        started = time.perf_counter()
        try:
            request = parse_request(frame, self.windows, client_host(peer))
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
        result = await self.broker.handle(request)
        if isinstance(result, (bytes, dict)):       # the common answers (isawaitable is an ABC check)
            self._requests.done(request.api_key, started, response_errors(result))
            return (request, result)
        if inspect.isawaitable(result):
            return (request, asyncio.ensure_future(self._timed(request.api_key, started, result)))
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


class ListenerError(SegLogError):
    """The configured listener cannot be bound (port in use, address not local, no permission)."""


def client_host(peer) -> str:
    """A client's address as Kafka names it in group member descriptions ("/127.0.0.1")."""
    return f"/{peer[0]}" if isinstance(peer, tuple) and peer else ""


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
    """Whether a connection's sender task is working on a response (else it waits for one)."""
    busy = False


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
    """Run a broker until SIGINT/SIGTERM; `ready(host, port)` is called once it listens.
    `on_log_dir_failure`: see BrokerServer."""
    from logcore.broker.resources import check_remote_before_root, raise_nofile_limit
    raise_nofile_limit()
    await asyncio.to_thread(check_remote_before_root, config)
    server = BrokerServer(config, on_log_dir_failure)
    host, port = await server.start()
    logger.info("seglog broker (node %d) serving %s on %s:%d", config.node_id, config.log_dir, host, port)
    if ready is not None:
        ready(host, port)
    await server.serve_until_stopped()


def run_from_properties(path: str, overrides: dict[str, str] | None = None) -> int:
    """`seglog broker --config FILE`: run until SIGINT/SIGTERM, then close every log cleanly.

    Prints `seglog broker listening on PLAINTEXT://host:port` on stdout once clients can connect.
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
    from logcore.storage.secrets import RedactingFilter, secret_values
    for handler in logging.getLogger().handlers:    # no log line shows a configured credential
        handler.addFilter(RedactingFilter(secret_values(props)))

    def ready(host: str, port: int) -> None:
        sys.stdout.write(f"seglog broker listening on PLAINTEXT://{host}:{port}\n")
        sys.stdout.flush()

    # A failed log dir (a full disk, an I/O error) ends the process at once, status 1 (Kafka's
    # Exit.halt when all log dirs have failed): no controlled shutdown, nothing more written.
    asyncio.run(run_broker(config, ready=ready, on_log_dir_failure=HaltProcess(status=1)))
    return 0
