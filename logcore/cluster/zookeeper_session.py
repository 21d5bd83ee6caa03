"""One ZooKeeper session (kazoo): connecting, its states, what runs after it expired, and the
connection-level failures that mean "ZooKeeper is away", not "the request failed".

kazoo reconnects by itself. SUSPENDED (connection lost) is not LOST (session expired): ephemerals
survive a suspension and nothing is redone. After LOST kazoo starts a new session but recreates
nothing, so the callbacks given to `on_new_session` run then (the store re-registers the broker:
a new czxid, a new broker epoch; the controller re-runs its election). The kazoo listener itself
never blocks: the work runs on kazoo's callback thread via handler.spawn.

With a ZooKeeper login (logcore.security.zookeeper_login) every connection authenticates with
SASL DIGEST-MD5; kazoo reports the session connected before that exchange ends, so `start`
waits for a first answer and a refused login fails the start with a clear error. The znodes the
session creates get the ACLs of its policy (logcore.cluster.znode_acls).

With TLS (logcore.security.zookeeper_tls) each kazoo client connects through a TlsHandler
(logcore.cluster.tls_handler); a start whose every server refused the TLS handshake (an
untrusted certificate, no client certificate, a plaintext port) fails at once with a clear
error naming the setting, not after the connect timeout.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from logcore.cluster.znode_acls import OPEN, ZnodeAcls, kazoo_client
from logcore.cluster.znode_paths import PERSISTENT_PATHS
from logcore.errors import CoordinatorUnavailableError, InvalidConfigError

logger = logging.getLogger(__name__)


def _connection_errors() -> tuple[type[BaseException], ...]:
    from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError
    from kazoo.handlers.threading import KazooTimeoutError
    return ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError, KazooTimeoutError


def is_transient(exc: BaseException) -> bool:
    """A failure of ZooKeeper's connection, not of the request: CoordinatorUnavailableError, or
    kazoo's own connection-level errors. Worth retrying."""
    return isinstance(exc, (CoordinatorUnavailableError, *_connection_errors()))


def coordinator_errors(method):
    """Turn kazoo's connection-level failures into CoordinatorUnavailableError naming the
    ensemble (the object's `hosts`) and the operation (the caller retries or gives up; nothing
    is known to be written for a write that failed this way)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except _connection_errors() as e:
            raise CoordinatorUnavailableError(
                f"zookeeper.connect={self.hosts}: {method.__name__} failed: {type(e).__name__}"
                f" {e or ''}".rstrip()) from e
    return wrapper


class ZooKeeperSession:
    """A kazoo client and its session. `hosts` is Kafka's zookeeper.connect: host:port[,host:port]
    with an optional chroot suffix (`/seglog`); `login` a ZooKeeperLogin (None: none), `acls` the
    policy for the znodes it creates, `tls` a ZooKeeperTls (None: plaintext)."""

    def __init__(self, hosts: str, *, session_timeout_ms: int, connect_timeout_s: float, login=None,
                 acls: ZnodeAcls = OPEN, tls=None):
        self.hosts = hosts
        self.session_timeout_ms = session_timeout_ms
        self.login = login
        self.acls = acls
        self.tls = tls
        self._handler = self._new_handler()
        self.client = self._new_client(hosts)
        self._connect_timeout = connect_timeout_s
        self._session_lost = False
        self._new_session_callbacks: list[Callable[[], None]] = []
        self._closing = False
        self._logged_in = False          # a first login succeeded (a later refusal is logged)
        self.client.add_listener(self._on_state)

    def _new_handler(self):
        if self.tls is None:
            return None
        from logcore.cluster.tls_handler import TlsHandler
        return TlsHandler(self.tls, f"zookeeper.connect={self.hosts}")

    def _new_client(self, hosts: str, handler=None):
        return kazoo_client(hosts, self.session_timeout_ms / 1000.0, self.acls,
                            self.login.sasl_options() if self.login is not None else None,
                            handler or self._handler)

    def start(self) -> None:
        """Connect (CoordinatorUnavailableError when no server answers in time; InvalidConfigError
        when every server refused the TLS handshake) and create the persistent znodes that are
        absent."""
        self._connect(self.client, self._handler)
        if self.login is not None:
            self._check_login()
        from kazoo.exceptions import InvalidACLError
        try:
            if self.client.chroot and self.client.exists("/") is None:
                self._create_chroot()
            for p in PERSISTENT_PATHS:
                self.client.ensure_path(p)
        except InvalidACLError:
            # the creator's-identity ACL names nobody when the session has no identity
            self.close()
            raise InvalidConfigError(
                f"zookeeper.connect={self.hosts}: zookeeper.set.acl=true but ZooKeeper knows this broker by no"
                " identity: its TLS client certificate was not asked for (the servers' ssl.clientAuth) and it"
                " has no SASL login (java.security.auth.login.config)") from None

    def _create_chroot(self) -> None:
        """Create the chroot of zookeeper.connect, as Kafka does, with this session's ACL policy
        (under zookeeper.set.acl a chroot anyone may write to would let anyone delete
        /controller or /brokers), through a short session of its own outside the chroot."""
        handler = self._new_handler()
        outside = self._new_client(self.hosts.split("/", 1)[0], handler)
        self._connect(outside, handler)
        try:
            outside.ensure_path(self.client.chroot)
        finally:
            outside.stop()
            outside.close()
        logger.info("created the chroot %s in ZooKeeper (%s ACLs)", self.client.chroot, self.acls.name)

    def _connect(self, client, handler) -> None:
        """Start `client`, waiting up to the connect timeout; with TLS, give up as soon as every
        server refused the handshake for a reason that trying again will not cure."""
        import time
        deadline = time.monotonic() + self._connect_timeout
        event = client.start_async()
        servers = len({(h, p) for h, p in client.hosts})
        while not event.wait(0.1):
            refused = handler.failure(servers) if handler is not None else None
            if refused is not None or time.monotonic() >= deadline:
                client.stop()
                if refused is not None:
                    raise InvalidConfigError(f"zookeeper.connect={self.hosts}: {refused}")
                raise CoordinatorUnavailableError(
                    f"zookeeper.connect={self.hosts}: no ZooKeeper answered within {self._connect_timeout:.0f} s"
                    + self._tls_hint(handler)) from None
        if not client.connected:         # the event is also set when the client stops
            client.stop()
            raise CoordinatorUnavailableError(f"zookeeper.connect={self.hosts}: the connection ended at once"
                                              + self._tls_hint(handler))

    def _tls_hint(self, handler) -> str:
        if handler is None:
            return ("; if the servers listen with TLS only (secureClientPort), set"
                    " zookeeper.ssl.client.enable=true")
        last = handler.last_failure()
        if last is not None:
            return f"; the last TLS failure: {last}"
        if not self.tls.has_keystore:
            return ("; with TLS: the servers may close connections without a client certificate"
                    " (ssl.clientAuth=need) and zookeeper.ssl.keystore.location is not set")
        return ""

    def _check_login(self) -> None:
        """Wait for the SASL exchange's outcome: the first request is answered only after it."""
        from kazoo.exceptions import AuthFailedError
        try:
            self.client.exists("/")
            self._logged_in = True
        except AuthFailedError:
            self._closing = True
            self.client.stop()
            self.client.close()
            raise InvalidConfigError(
                f"zookeeper.connect={self.hosts}: ZooKeeper refused the SASL DIGEST-MD5 login of user"
                f" {self.login.username!r} ({self.login.origin}): wrong username or password, or the"
                " servers do not accept SASL (authProvider.sasl)") from None

    def close(self) -> None:
        """End the session: its ephemerals go at once."""
        # kazoo reports the end of a session it closed as LOST, the state of an expiry: this
        # flag makes that a closing at INFO, not an expiry WARNING.
        self._closing = True
        self.client.stop()
        self.client.close()

    @property
    def connected(self) -> bool:
        return self.client.connected

    @property
    def session_id(self) -> int:
        return self.client.client_id[0] if self.client.client_id else 0

    def on_new_session(self, fn: Callable[[], None]) -> None:
        """Call `fn()` (on kazoo's callback thread) after the session expired and a new one was
        established; callbacks run in the order given."""
        self._new_session_callbacks.append(fn)

    def bounded(self, result, timeout_s: float | None, what: str):
        """The value of a kazoo async call, waiting at most `timeout_s` (None: as long as it
        takes). While the connection is down kazoo keeps a request queued until it is back, so
        a call on a path that must finish (a stop) is bounded: CoordinatorUnavailableError then,
        and the outcome is unknown."""
        from kazoo.handlers.threading import KazooTimeoutError
        try:
            return result.get(timeout=timeout_s)
        except KazooTimeoutError:
            raise CoordinatorUnavailableError(
                f"zookeeper.connect={self.hosts}: {what} got no answer within {timeout_s:.1f} s") from None

    def _on_state(self, state) -> None:
        from kazoo.protocol.states import KazooState
        # Never block here: kazoo calls listeners on its connection thread.
        if self._closing:
            if state == KazooState.LOST:
                logger.info("ZooKeeper session closed (%s)", self.hosts)
        elif state == KazooState.LOST and self._auth_failed():
            # kazoo stops reconnecting after a refused login: say why this broker is cut off
            logger.error("ZooKeeper refused the SASL login of user %r (%s) on reconnecting (%s): this broker"
                         " stays disconnected until restarted with a login the servers accept",
                         self.login.username, self.login.origin, self.hosts)
        elif state == KazooState.LOST:
            self._session_lost = True
            logger.warning("ZooKeeper session expired (%s): ephemerals are gone", self.hosts)
        elif state == KazooState.SUSPENDED:
            logger.info("ZooKeeper connection lost (%s); session may still be alive", self.hosts)
        elif state == KazooState.CONNECTED:
            if self._handler is not None:
                self._handler.connected()
            if self._session_lost:
                self._session_lost = False
                self.client.handler.spawn(self._after_new_session)

    def _auth_failed(self) -> bool:
        from kazoo.protocol.states import KeeperState
        return self._logged_in and self.client.client_state == KeeperState.AUTH_FAILED

    def _after_new_session(self) -> None:
        for fn in list(self._new_session_callbacks):
            try:
                fn()
            except Exception:                                # noqa: BLE001
                logger.exception("new-session callback %r failed", fn)
