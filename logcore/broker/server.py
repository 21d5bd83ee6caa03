"""The asyncio server: listeners, start-up, clean shutdown (and halt when the log dir fails).

Listeners (logcore.security): one server per listener of `listeners`, TLS ones with their
listener's context (reloaded when its stores change); each connection gets a security session
(its listener, the client's address, its principal) stamped on every request it sends; on a
SASL listener nothing but ApiVersions and the SASL exchange is served before the login.
Metadata, FindCoordinator and DescribeCluster name the brokers by the endpoint of the listener
the client connected to (advertised.listeners), as Kafka does; the handlers answer with the
inter-broker listener's, which is what each broker registers as its host and port.

Each connection's reader loop, dispatch and in-order responses: logcore.broker.client_connections.
"""
from __future__ import annotations

import asyncio
import logging
import signal

from logcore.broker import event_loop, stack_dump
from logcore.broker.api_versions import windows
from logcore.broker.broker import Broker
from logcore.broker.client_connections import ClientConnections
from logcore.broker.cluster_member import ClusterMember
from logcore.broker.config import BrokerConfig
from logcore.broker.listener_endpoints import ListenerEndpoints
from logcore.broker.log_dir_failure import HaltProcess, LogDirFailureChannel, RecordedStop
from logcore.errors import SegLogError
from logcore.log.log_root import LogRoot
from logcore.log.root_owner import OwnerClaim
from logcore.metrics.broker_metrics import BrokerMetrics
from logcore.security.tls_context import ServerTls
from logcore.security.tls_reconfiguration import ListenerTlsUpdates
from logcore.security.tls_transport import server_reads

logger = logging.getLogger(__name__)


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
        self._accepting: list = []      # TLS listeners' protocol factories (their handshakes)
        self.bound: dict[str, tuple[str, int]] = {}
        self.endpoints: ListenerEndpoints | None = None
        self._stopping: asyncio.Event | None = None
        self.claim: OwnerClaim | None = None
        self.member: ClusterMember | None = None
        self._heartbeat: asyncio.Task | None = None
        self.metrics = BrokerMetrics()           # this broker's registry (endpoint: metrics.listener)
        self.clients = ClientConnections(config, self.metrics)

    def _close_servers(self) -> None:
        for server in self.servers.values():
            server.close()
        # A TLS listener's connections still in their handshake are known only to its factory
        # (the application's protocol hears of them once it is done): they end now too.
        for factory in self._accepting:
            close = getattr(factory, "close", None)
            if close is not None:
                close()

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
            factory, tls_options = lambda l=listener: self.clients.new_connection(l), {}
            if tls is not None:       # OpenSSL on the socket where it can (tls_transport.server_reads)
                factory, tls_options = server_reads().serve(loop, factory, tls.context)
                self._accepting.append(factory)
            try:
                server = await loop.create_server(factory, host, port, reuse_address=True,
                                                  start_serving=False, **tls_options)
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
        inter = self.broker.inter_broker_security       # certificate reload: its client side too
        self.broker.configs.dynamic.serve_tls(ListenerTlsUpdates(
            self.tls, self.config.inter_broker_listener, inter.reloading if inter is not None else None))
        self.clients.broker, self.clients.endpoints = self.broker, self.endpoints
        self.member = None
        self.metrics.watch(self.broker, controller=lambda: self.member.controller if self.member else None,
                           connections=self.clients.by_listener,
                           cleaner=self.broker.maintenance.service.cleaner)
        try:
            if self.config.cluster:
                # Before the logs open: a cluster member's logs open as replicas.
                self.member = ClusterMember(self.config, self.broker)
                await self.member.connect()
                self.clients.windows = windows(self.broker.served)
                self.endpoints.registrations = lambda: self.broker.replica_manager.brokers
            await asyncio.to_thread(self.broker.open)
        except BaseException:
            self._close_servers()
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
        await self.clients.close_all()

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
            logger.info("stopping: closing every log")
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


class ListenerError(SegLogError):
    """The configured listener cannot be bound (port in use, address not local, no permission)."""


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

    from logcore.log.properties_file import load_properties

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
    event_loop.run(run_broker(config, ready=ready, on_log_dir_failure=HaltProcess(status=1)),
                   config["event.loop"])
    return 0
