"""Real ZooKeeper servers on 127.0.0.1 for the cluster tests, started from Debian's jars.

Debian's `zookeeper` package (`apt-get install zookeeper`) ships the server as jars in
/usr/share/java (`zookeeper.jar`, whose manifest Class-Path pulls its dependencies). We run
`org.apache.zookeeper.server.quorum.QuorumPeerMain <zoo.cfg>` with `java` directly: no init
scripts, no writes outside the temporary directory, the AdminServer (Jetty on 8080) off, client
ports bound to 127.0.0.1 only, a small heap, and the `ruok`/`srvr` four-letter words enabled so
that readiness can be polled without a client library.

    cluster = ZooKeeperCluster(tmp_dir, size=1)   # standalone; size=3 for an ensemble
    cluster.start()                               # waits until every node serves
    cluster.connect_string                        # "127.0.0.1:p1,127.0.0.1:p2,..."
    cluster.nodes[0].kill()                       # SIGKILL by pid; .stop() = SIGTERM
    cluster.nodes[0].pause(); ...resume()         # SIGSTOP / SIGCONT
    cluster.stop()

    ZooKeeperCluster(tmp_dir, sasl_users={"kafka": "kafka-secret"})
                                                  # SASL DIGEST-MD5 logins for these users (server
                                                  # JAAS file, SASLAuthenticationProvider); clients
                                                  # without a login still connect (znode ACLs decide)
    ZooKeeperCluster(tmp_dir, tls=ServerTls(...))  # TLS only: secureClientPort (Netty), the server's
                                                  # own keystore/truststore, ssl.clientAuth=need; no
                                                  # plaintext clientPort (probes speak TLS)

Where the jars live can be overridden with ZOOKEEPER_CLASSPATH (a java class path) and the JVM
with JAVA (a path); `find_zookeeper()` raises ZooKeeperUnavailable with the reason otherwise,
which the fixtures turn into a skip.
"""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

JAVA_DIRS = ("/usr/share/java",)
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
TICK_MS = 500            # sessions may then last 1 s .. 10 s (2x .. 20x tickTime)


class ZooKeeperUnavailable(RuntimeError):
    """No java or no ZooKeeper jars on this machine (the reason says which)."""


def find_zookeeper() -> tuple[str, str]:
    """(java executable, class path) for the ZooKeeper server, or ZooKeeperUnavailable."""
    java = os.environ.get("JAVA") or shutil.which("java")
    if not java:
        raise ZooKeeperUnavailable("no `java` on PATH (install default-jre or set JAVA)")
    cp = os.environ.get("ZOOKEEPER_CLASSPATH")
    if cp:
        return java, cp
    for d in JAVA_DIRS:
        jar = Path(d) / "zookeeper.jar"
        if jar.exists():
            parts = [str(jar)]
            # An slf4j binding makes the server's log useful (written to the node's zk.log).
            for extra in ("slf4j-log4j12.jar", "log4j-1.2.jar"):
                if (Path(d) / extra).exists():
                    parts.append(str(Path(d) / extra))
            return java, ":".join(parts)
    raise ZooKeeperUnavailable(
        "ZooKeeper jars not found (zookeeper.jar in /usr/share/java): "
        "`apt-get install zookeeper` or set ZOOKEEPER_CLASSPATH")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections' local ports)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out by this process lately: a server given one may bind it seconds later (a JVM's
# start-up), and a probe meanwhile would find it free and hand it out again.
_HANDED: dict[int, float] = {}
HANDED_HOLD_S = 600.0


def _worker_range(low: int) -> tuple[int, int]:
    """This process's share of [10000, low): under pytest-xdist each worker picks from its own
    slice, so two workers never hand out the same port while its server is still starting."""
    try:
        worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
        workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        worker, workers = 0, 1
    worker = min(worker, workers - 1)
    width = (low - 10_000) // workers
    return 10_000 + worker * width, 10_000 + (worker + 1) * width


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free on 127.0.0.1 a moment ago, chosen below the kernel's
    ephemeral range: a server started on one later cannot find it taken by an outgoing
    connection's local port meanwhile (a port from bind(0) is an ephemeral one, and the suite's
    own clients take those all the time). Each pytest-xdist worker picks from its own slice of
    that range, and a port this process handed out in the last HANDED_HOLD_S is not handed out
    again: a server may take seconds to bind the port it was given."""
    low = _ephemeral_low()
    if low <= 11_000:                       # no room below the range: the kernel's choice
        return _bound_zero_ports(count)
    first, end = _worker_range(low)
    now = time.monotonic()
    for port in [p for p, at in _HANDED.items() if now - at > HANDED_HOLD_S]:
        del _HANDED[port]
    rng = random.SystemRandom()
    ports: list[int] = []
    for _ in range(100 * count + 100):
        if len(ports) == count:
            break
        port = rng.randrange(first, end)
        if port in ports or port in _HANDED:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue                    # in use (or lingering): another one
        ports.append(port)
    if len(ports) != count:
        raise RuntimeError(f"found only {len(ports)} of {count} free ports in [{first}, {end}) on 127.0.0.1")
    for port in ports:
        _HANDED[port] = now
    return ports


def _bound_zero_ports(count: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


@dataclass(frozen=True)
class ServerTls:
    """A ZooKeeper server's TLS: its keystore and truststore (files ZooKeeper reads, PKCS12 or
    PEM, by their names), their password, and the client context the readiness probes use (it
    must hold a client certificate the truststore trusts: ssl.clientAuth=need)."""
    keystore: Path
    truststore: Path
    password: str
    probe: ssl.SSLContext
    client_auth: str = "need"

    def cfg_lines(self) -> list[str]:
        return ["serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"ssl.keyStore.location={self.keystore}", f"ssl.keyStore.password={self.password}",
                f"ssl.trustStore.location={self.truststore}", f"ssl.trustStore.password={self.password}",
                f"ssl.clientAuth={self.client_auth}"]


# Netty's server side needs these beside the jars zookeeper.jar's manifest names.
NETTY_EXTRA = ("netty-codec.jar", "netty-resolver.jar", "netty-transport-native-unix-common.jar")


def four_letter(port: int, word: str, timeout: float = 1.0, tls: ssl.SSLContext | None = None) -> str:
    """Send a four-letter word (ruok, srvr, mntr) and return the answer ('' when none); over TLS
    with the context `tls` when given."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw, \
                (tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else contextlib.nullcontext(raw)) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                b = s.recv(4096)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace")
    except (OSError, ssl.SSLError):
        return ""


def server_jaas(users: dict[str, str]) -> str:
    """The `Server` section of a JAAS file: DIGEST-MD5 logins ZooKeeper accepts (user -> password)."""
    options = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required {options};\n}};\n"


class ZooKeeperNode:
    def __init__(self, myid: int, base: Path, client_port: int, servers: list[str] | None,
                 sasl_users: dict[str, str] | None = None, tls: ServerTls | None = None):
        self.myid = myid
        self.dir = base / f"zk{myid}"
        self.data_dir = self.dir / "data"
        self.client_port = client_port
        self.cfg = self.dir / "zoo.cfg"
        self.log_path = self.dir / "zk.log"
        self.proc: subprocess.Popen | None = None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tls = tls
        port_lines = [f"clientPort={client_port}", "clientPortAddress=127.0.0.1"] if tls is None else \
            [f"secureClientPort={client_port}", "secureClientPortAddress=127.0.0.1", *tls.cfg_lines()]
        lines = [f"tickTime={TICK_MS}", f"dataDir={self.data_dir}", *port_lines, "admin.enableServer=false",
                 "4lw.commands.whitelist=srvr,ruok,mntr,stat", "maxClientCnxns=0"]
        if servers:
            lines += ["initLimit=10", "syncLimit=5", *servers]
            (self.data_dir / "myid").write_text(f"{myid}\n")
        self.jaas: Path | None = None
        if sasl_users:
            self.jaas = self.dir / "server_jaas.conf"
            self.jaas.write_text(server_jaas(sasl_users))
            lines.append("authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider")
        self.cfg.write_text("\n".join(lines) + "\n")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self) -> None:
        java, cp = find_zookeeper()
        if self.tls is not None:
            cp = ":".join([cp, *(str(Path(d) / j) for d in JAVA_DIRS for j in NETTY_EXTRA if (Path(d) / j).exists())])
        log = open(self.log_path, "ab")
        jaas = [f"-Djava.security.auth.login.config={self.jaas}"] if self.jaas else []
        self.proc = subprocess.Popen(
            [java, "-Xms16m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Xshare:auto", "-Dzookeeper.admin.enableServer=false",
             "-Dzookeeper.root.logger=INFO,CONSOLE", "-Dzookeeper.console.threshold=INFO", *jaas,
             "-cp", cp, MAIN_CLASS, str(self.cfg)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mode(self) -> str | None:
        """'standalone', 'leader' or 'follower' when the node serves clients, else None."""
        answer = four_letter(self.client_port, "srvr", tls=self.tls.probe if self.tls else None)
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def _signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
        if self.proc is None:
            return
        if self.alive():
            self._signal(signal.SIGCONT)       # a paused JVM cannot act on SIGTERM
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: a crash, no clean shutdown."""
        if self.proc is None:
            return
        self._signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class ZooKeeperCluster:
    """A standalone server (size=1) or an ensemble of `size` servers on 127.0.0.1."""

    def __init__(self, base: Path | str, size: int = 1, sasl_users: dict[str, str] | None = None,
                 tls: ServerTls | None = None):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        base = Path(base)
        ports = free_ports(3 * size)
        client_ports = ports[:size]
        servers = None
        if size > 1:
            servers = [f"server.{i + 1}=127.0.0.1:{ports[size + 2 * i]}:{ports[size + 2 * i + 1]}"
                       for i in range(size)]
        self.nodes = [ZooKeeperNode(i + 1, base, client_ports[i], servers, sasl_users, tls) for i in range(size)]

    @property
    def connect_string(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def start(self, timeout: float = 60.0) -> None:
        for n in self.nodes:
            n.start()
        self.wait_serving(timeout)
        if len(self.nodes) > 1:
            self.wait_quorum(timeout)

    def wait_quorum(self, timeout: float = 60.0) -> ZooKeeperNode:
        """Wait until the live nodes agree: one leader, the others followers (right after a
        leader dies, followers still say "follower" until they notice). Returns the leader."""
        deadline = time.monotonic() + timeout
        while True:
            live = [n for n in self.nodes if n.alive()]
            modes = [n.mode() for n in live]
            if len(live) * 2 > len(self.nodes) and modes.count("leader") == 1 \
                    and modes.count("follower") == len(live) - 1:
                return live[modes.index("leader")]
            if time.monotonic() > deadline:
                raise ZooKeeperUnavailable(f"no quorum after {timeout:.0f} s: modes {modes}")
            time.sleep(0.05)          # a srvr probe is one loopback connection

    def wait_serving(self, timeout: float = 60.0, nodes=None) -> None:
        """Wait until each node (all, or `nodes`) answers `srvr` with a serving mode."""
        pending = list(nodes if nodes is not None else self.nodes)
        deadline = time.monotonic() + timeout
        while pending:
            pending = [n for n in pending if n.mode() is None]
            for n in pending:
                if n.proc is not None and n.proc.poll() is not None:
                    raise ZooKeeperUnavailable(
                        f"ZooKeeper node {n.myid} exited with {n.proc.returncode}:\n{n.log_tail()}")
            if not pending:
                return
            if time.monotonic() > deadline:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper node(s) {[n.myid for n in pending]} not serving after {timeout:.0f} s:\n"
                    + pending[0].log_tail())
            time.sleep(0.05)          # a srvr probe is one loopback connection

    def leader(self) -> ZooKeeperNode | None:
        for n in self.nodes:
            if n.alive() and n.mode() in ("leader", "standalone"):
                return n
        return None

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def running_zookeeper(base: Path, size: int = 1, **options):
    """A started ZooKeeperCluster in `base` (options: ZooKeeperCluster's), stopped at exit; the
    calling test is skipped with the reason when ZooKeeper is not installed or does not start."""
    import pytest
    try:
        find_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(str(exc))
    zk = ZooKeeperCluster(base, size=size, **options)
    try:
        zk.start()
    except ZooKeeperUnavailable as exc:
        zk.stop()
        pytest.skip(f"ZooKeeper did not start: {exc}")
    try:
        yield zk
    finally:
        zk.stop()


SESSION_TIMEOUT = 2.0     # seconds; the servers run with tickTime 500 ms (1 s .. 10 s allowed)


@contextlib.contextmanager
def started_client(hosts: str, timeout: float = SESSION_TIMEOUT):
    """A started KazooClient on `hosts`, stopped and closed at exit."""
    from kazoo.client import KazooClient
    c = KazooClient(hosts=hosts, timeout=timeout)
    c.start(timeout=15)
    try:
        yield c
    finally:
        c.stop()
        c.close()


def fresh_chroot(connect_string: str, prefix: str = "t") -> str:
    """`connect_string` with a new chroot ("127.0.0.1:p/<prefix>-<hex>"), created, so that tests
    share a server but never see each other's znodes."""
    import uuid
    chroot = f"/{prefix}-{uuid.uuid4().hex[:12]}"
    with started_client(connect_string) as c:
        c.ensure_path(chroot)
    return connect_string + chroot


# -- pytest fixtures (tests/conftest.py alone imports them: one ZooKeeper for the session) ---------


def _fixtures():
    import pytest

    @pytest.fixture(scope="session")
    def zk_server(tmp_path_factory):
        """One standalone ZooKeeper for the whole session (started on first use)."""
        pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo)")
        with running_zookeeper(tmp_path_factory.mktemp("zk")) as cluster:
            yield cluster

    @pytest.fixture
    def zk_hosts(zk_server):
        """A connect string with a fresh chroot (fresh_chroot)."""
        return fresh_chroot(zk_server.connect_string)

    @pytest.fixture
    def zk_client(zk_hosts):
        """A started KazooClient on zk_hosts, stopped after the test."""
        with started_client(zk_hosts) as c:
            yield c

    return zk_server, zk_hosts, zk_client


zk_server, zk_hosts, zk_client = _fixtures()
