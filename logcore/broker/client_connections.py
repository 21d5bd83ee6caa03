"""Every client connection of a broker server: its security session, its reader loop, the
dispatch of each request to the broker and the in-order writing of the responses (through
the connection's ResponseWriter, which sends the answers of one event-loop pass together).

Per connection, a reader loop takes one frame at a time (bounded by socket.request.max.bytes),
parses it and runs the handler's immediate part; what the handler leaves to finish later (a
produce waiting for its commit, a long-polling fetch) is queued, and a writer task sends the
responses in request order. A frame that cannot be parsed, is truncated or is too large closes
that connection only, with the reason logged. On a SASL listener nothing but ApiVersions and
the SASL exchange is served before the login; a client over a quota is answered with its
throttle time, then muted (KIP-219).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import os
import struct
import time
import types

from logcore.event_wait import cancel_and_wait
from logcore.broker.api_versions import windows
from logcore.broker.config import BrokerConfig
from logcore.broker.fetch_response import EncodedResponse
from logcore.broker.framing import ConnectionLimits, FrameConnection, RequestMemory
from logcore.broker.quota_handlers import ThrottledResponse
from logcore.broker.response_writer import ResponseWriter
from logcore.broker.sasl_requests import SaslRequests
from logcore.log.file_slice import FileSlice
from logcore.metrics.request_metrics import response_errors
from logcore.security.authenticator import SaslAuthenticator
from logcore.security.principal import certificate_principal
from logcore.security.session import CLOSE, SASL, SASL_AUTHENTICATE, SASL_HANDSHAKE, ConnectionSession
from logcore.wire import error_codes as E
from logcore.wire.api_keys import API_VERSIONS, FETCH, PRODUCE
from logcore.wire.protocol import (ProtocolError, UnsupportedRequest, build, encode_response,
                                   parse_request, response, response_type)

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64           # queued responses per connection before the reader waits


class ClientConnections:
    """The connections of one BrokerServer (`metrics`: its BrokerMetrics). The server sets
    `broker` and `endpoints` once they exist (before it accepts any connection) and `windows`
    (the API versions served) when the broker joins a cluster."""

    def __init__(self, config: BrokerConfig, metrics):
        self.config = config
        self.broker = None
        self.endpoints = None                                       # ListenerEndpoints
        self.windows = windows()
        self.connections: dict[asyncio.Task, str] = {}              # -> its listener's name
        self.max_request = config["socket.request.max.bytes"]
        self.idle_timeout = config["connections.max.idle.ms"] / 1000
        self.failed_login_delay = config["connection.failed.authentication.delay.ms"] / 1000
        self.read_timeout = config["socket.request.read.timeout.ms"] / 1000
        self.memory = RequestMemory(config["queued.max.request.bytes"])
        self.limits = ConnectionLimits(config["max.connections"], config["max.connections.per.ip"])
        self._requests = metrics.requests
        self.sasl = SaslRequests(metrics.authentication, config.security)

    def by_listener(self) -> dict[str, int]:
        """How many connections each listener has now."""
        counts = {listener.name: 0 for listener in self.config.listeners}
        for name in list(self.connections.values()):
            counts[name] = counts.get(name, 0) + 1
        return counts

    async def close_all(self) -> None:
        """End every connection (their tasks cancelled and awaited)."""
        await asyncio.gather(*(cancel_and_wait(task) for task in list(self.connections)))

    def new_connection(self, listener) -> FrameConnection:
        """The protocol of a connection accepted on `listener` (asyncio's protocol factory)."""
        return FrameConnection(self.max_request, lambda conn: self._serve_connection(conn, listener),
                               self._handle_now, memory=self.memory, read_timeout=self.read_timeout,
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
                                              self.broker.credentials.scram, settings.reauth_ms,
                                              oauthbearer=self.sasl.token_validator(listener.name))
        return ConnectionSession(listener.name, host, tls_principal=tls_principal, authenticator=authenticator)

    def _handle_now(self, conn: FrameConnection, frame) -> bool:
        """A Produce or Fetch request that arrives while the connection's reader is parked,
        handled in the protocol callback (no wake-up of the reader task, one event-loop pass
        less per request). A Produce's response is written at once when nothing is ahead of
        it, else queued in order; a Fetch runs here up to its first wait. Anything else (another
        API, a frame that does not parse, a full response queue, client quotas in force for a
        Fetch) is left to the reader, which reports errors as usual."""
        queue, sending, session = conn.responses, conn.sending, conn.session
        if queue is None or queue.full() or len(frame) < 2 or frame[0] != 0 \
                or not session.open or sending.muted_until:   # a throttled client: the reader waits
            return False
        if frame[1] == FETCH:
            return self._fetch_now(conn, frame, queue, sending, session)
        if frame[1] != PRODUCE:
            return False
        started = time.perf_counter()
        request = self._parsed_now(frame, session)
        if request is None:
            return False
        try:
            result = self.broker.produce_now(request)
        except Exception:   # noqa: BLE001 - a bug must cost one connection, not the broker
            logger.exception("connection %s: unexpected error; closing it", conn.peer)
            sending.out.close()
            return True
        if self.broker.quotas.active or type(result) is ThrottledResponse:
            result = self._charged(request, started, result, sending)
        # bytes: the usual answer, committed already (isawaitable is an ABC check)
        if type(result) is not bytes and result is not None and inspect.isawaitable(result):
            queue.put_nowait((request, asyncio.ensure_future(self._timed(request, started, result, sending))))
            return True
        self._requests.done(PRODUCE, started, response_errors(result))
        if result is None:
            return True
        item = (request, result)
        if not sending.busy and queue.empty() and not conn.write_paused:
            sending.out.write(_ready_frame(item))
        else:
            queue.put_nowait(item)
        return True

    def _parsed_now(self, frame, session: ConnectionSession):
        """The frame's request, or None when it does not parse here (the reader reports it)."""
        try:
            return parse_request(frame, self.windows, session)
        except (UnsupportedRequest, ProtocolError):
            return None

    def _fetch_now(self, conn: FrameConnection, frame, queue: asyncio.Queue, sending: _Sending,
                   session: ConnectionSession) -> bool:
        """_handle_now's Fetch: parsed and handled here as the reader's _dispatch would (a
        quota's charge after the handler, and rewritten answers, stay the reader's)."""
        if self.broker.quotas.active or FETCH in self.endpoints.rewritten:
            return False
        started = time.perf_counter()
        request = self._parsed_now(frame, session)
        if request is None:
            return False
        # Run here up to its first wait (a long poll's park, a read in a thread): a fetch that
        # is answered at once (data at hand, or max_wait 0) needs no task and no sender hop.
        handled = self._handled(request)
        try:
            waiting_on = handled.send(None)
        except StopIteration as answered:
            result = answered.value
        except Exception:   # noqa: BLE001 - as the reader's: a bug costs this connection
            logger.exception("connection %s: unexpected error; closing it", conn.peer)
            sending.out.close()
            return True
        else:
            queue.put_nowait((request, asyncio.ensure_future(
                self._timed(request, started, _resumed(handled, waiting_on), sending))))
            return True
        self._requests.done(FETCH, started, response_errors(result))
        if not sending.busy and queue.empty() and not conn.write_paused and type(result) is EncodedResponse \
                and all(type(piece) is not FileSlice for piece in result.pieces):
            for piece in result.pieces:      # nothing ahead of it and no file range: written now
                sending.out.write(piece)
        elif result is not None:
            queue.put_nowait((request, result))
        return True

    async def _handled(self, request):
        """The broker's answer to a request, awaited to its end (a fetch's long poll)."""
        result = await self.broker.handle(request)
        if result is not None and not isinstance(result, (bytes, dict, EncodedResponse)) \
                and inspect.isawaitable(result):
            result = await result
        return result

    async def _serve_connection(self, conn: FrameConnection, listener) -> None:
        task = asyncio.current_task()
        self.connections[task] = listener.name
        peer = conn.peer
        session = conn.session = self._session(conn, listener)
        queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        sending = _Sending(ResponseWriter(conn), queue)
        conn.responses, conn.sending = queue, sending       # for _handle_now
        sender = asyncio.get_running_loop().create_task(self._send_responses(queue, sending.out, peer, sending))
        try:
            while True:
                frame = await conn.read_frame(self.idle_timeout)
                if frame is None:
                    break
                if sending.muted_until:
                    await sending.unmuted()
                if session.authenticator is not None and session.authenticator.raw_tokens:
                    item = await self.sasl.raw_token(session, frame, peer)
                    if item is None:                # a failed login: closed after the delay
                        await asyncio.sleep(self.failed_login_delay)
                        break
                else:
                    item = await self._dispatch(frame, peer, session, sending)
                if item is _CLOSE:
                    break
                if item is None:
                    continue
                if isinstance(item, _Closing):      # a failed login: its answer, then the close
                    # held back as Kafka holds them (KIP-306), so each guess costs the guesser
                    await asyncio.sleep(self.failed_login_delay)
                    await queue.put(item.item)
                    break
                if not sending.busy and queue.empty() and not conn.write_paused:
                    ready = _ready_frame(item)
                    if ready is not None:       # nothing ahead of it: no hop through the sender
                        sending.out.write(ready)
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
            sending.out.close()
            self.connections.pop(task, None)

    async def _timed(self, request, started: float, pending, sending: _Sending):
        """A request answered later (a produce waiting for its commit, a long-polling fetch):
        counted when its response is ready, before the sender can write it (or written here,
        _written_now); a throttled client's connection muted from then on."""
        api_key = request.api_key
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
        if _written_now(sending, request, result):
            return None                   # the sender, which waits on this task, skips it
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
            return (request, asyncio.ensure_future(self._timed(request, started, result, sending)))
        self._requests.done(request.api_key, started)
        if result is None:
            return None
        return (request, result)

    async def _send_responses(self, queue: asyncio.Queue, writer: ResponseWriter, peer,
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
                        sending.awaiting = result
                        try:
                            result = await result
                        except Exception:   # noqa: BLE001
                            logger.exception("connection %s: request %d v%d failed; closing the connection",
                                             peer, request.api_key, request.api_version)
                            break
                        finally:
                            sending.awaiting = None
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


class _Sending:
    """A connection's way out (`out`, its ResponseWriter), whether its sender task is working
    on a response (else it waits for one), and until when its reader is muted: a client over a
    quota is answered at once with the throttle time, then nothing more is read from it until
    that time has passed (KIP-219)."""
    busy = False
    muted_until = 0.0             # time.monotonic(); 0: not muted
    awaiting: asyncio.Future | None = None    # the queued answer the sender task waits for

    def __init__(self, out: ResponseWriter, queue: asyncio.Queue):
        self.out = out
        self.queue = queue            # what the sender has still to take, in order

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


def _written_now(sending: _Sending, request, result) -> bool:
    """An answer given later (a parked fetch's, an acks=all produce's) written and sent by its
    own task as it completes, when the sender task waits for this very answer and nothing is
    queued behind it: the sender's wake-up and the end-of-pass flush after it took two
    event-loop passes more (a follower waits for these records, a producer for this answer).
    Answers queued behind are left to the sender, which writes those that complete together
    as one send; so are file ranges (sendfile) and a transport above its high-water mark."""
    if sending.awaiting is not asyncio.current_task() or not sending.queue.empty():
        return False
    writer = sending.out
    if writer.write_paused:
        return False
    if type(result) is EncodedResponse:
        if any(type(piece) is FileSlice for piece in result.pieces):
            return False
        for piece in result.pieces:
            writer.write(piece)
        result.close()
    elif isinstance(result, (bytes, dict)):
        writer.write(_encoded(request, result))
    else:
        return False
    writer.flush()
    return True


def _ready_frame(item) -> bytes | None:
    """The response frame of a queue item that needs no waiting and no sendfile, else None."""
    if isinstance(item, bytes):
        return item
    request, result = item
    if isinstance(result, (asyncio.Future, EncodedResponse)):
        return None
    return _encoded(request, result)


@types.coroutine
def _resumed(coro, waiting_on):
    """The rest of a coroutine that was run by hand up to its first wait (it yielded
    `waiting_on`, a future): awaited in a task, which waits on each future the coroutine yields
    and hands it what the task gets (a value, or an exception such as its cancellation)."""
    while True:
        try:
            sent = yield waiting_on
        except BaseException as exc:    # noqa: BLE001 - the task's cancellation goes on to the coroutine
            try:
                waiting_on = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                waiting_on = coro.send(sent)
            except StopIteration as done:
                return done.value


class _ShortSend(Exception):
    """A file range ended before the length its response announced: the frame cannot be completed."""


async def _send_pieces(writer: ResponseWriter, response: EncodedResponse) -> None:
    """Send a response's pieces in order: bytes through the writer, file ranges with sendfile
    (the kernel copies page cache to the socket; asyncio falls back to read+send on transports
    that cannot), after what the writer keeps. The slices are closed whatever happens."""
    loop = asyncio.get_running_loop()
    ranges = False
    try:
        for piece in response.pieces:
            if isinstance(piece, FileSlice) and writer.transport.get_extra_info("sslcontext") is not None:
                sent = await _send_chunks(writer, piece, 0)
                if sent != piece.size:
                    raise _ShortSend(f"{piece.source} ended at {piece.position + sent} inside a slice of"
                                     f" {piece.size} bytes from {piece.position}")
            elif isinstance(piece, FileSlice):
                ranges = True
                writer.flush()
                sent = _sendfile_now(writer.transport, piece)
                if sent < piece.size:
                    try:
                        sent += await loop.sendfile(writer.transport, piece.file, piece.position + sent,
                                                    piece.size - sent)
                    except NotImplementedError:      # uvloop has no sendfile: read and written
                        sent += await _send_chunks(writer, piece, sent)
                    except RuntimeError as exc:      # the transport is closing
                        raise ConnectionError(str(exc)) from None
                if sent != piece.size:
                    raise _ShortSend(f"{piece.source} gave {sent} of {piece.size} bytes from {piece.position}")
            else:
                writer.write(piece)
        if ranges:
            # The bytes after the last range (a few tagged-field bytes) end the frame: the
            # client can use none of the megabytes before them until they arrive, so they go
            # now, not at the end of the event-loop pass.
            writer.flush()
    finally:
        response.close()


TLS_CHUNK = 1 << 18     # bytes of a file range read and encrypted at a time (16 TLS records)


async def _send_chunks(writer: ResponseWriter, piece: FileSlice, start: int) -> int:
    """A file range from its byte `start` on, read and written through the transport in chunks
    with a drain between them, where the socket cannot take the file itself: a TLS transport
    (it encrypts in user space; the client decrypts one chunk while the next is read and
    encrypted, where a whole range at once left it waiting for all of it), or a loop without
    sendfile (uvloop). The bytes sent before the file ended (the caller reports a short range).
    Reads are positional: the segment's duplicated descriptors share one file position."""
    fd, position, end = piece.file.fileno(), piece.position + start, piece.position + piece.size
    while position < end:
        if writer.transport.is_closing():        # the rest would be read and dropped
            raise ConnectionResetError("the connection closed during a fetch response")
        try:
            data = os.pread(fd, min(TLS_CHUNK, end - position), position)
        except OSError as exc:
            raise _ShortSend(f"{piece.source}: {exc}") from None
        if not data:
            break
        writer.write(data)
        position += len(data)
        if position < end:
            await writer.drain()
    return position - piece.position - start


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
