"""A seglog cluster on 127.0.0.1 for fault-injection tests: ZooKeeper, N brokers, a proxy on
every link.

    with Cluster(tmp_path, brokers=3, zookeepers=1) as c:     # or c.start() / c.stop()
        c.create_topic("t", partitions=3, replication_factor=3)
        c.kill(2); c.restart(2)               # SIGKILL, start again on the same port and log.dirs
        c.pause(1); c.resume(1)               # SIGSTOP / SIGCONT
        c.isolate(1)                          # from every broker and from ZooKeeper
        c.cut(1, 2); c.bridge(1, 2, 3)        # 1<->2 silent; 1<->3 silent (2 sees both)
        c.cut_zookeeper(1)                    # broker 1's session to ZooKeeper goes silent
        c.kill_zookeeper_leader()             # an ensemble's leader (zookeepers=3)
        c.zookeeper_of(1).kill()              # the ZooKeeper node broker 1's session is on
        c.one_way(1, 2)                       # what 1 sends to 2 is held, 2 -> 1 flows
        c.drop_zookeeper_replies(1)           # 1's requests reach ZooKeeper, the replies are lost
        c.delay_zookeeper(0.5)                # every broker <-> ZooKeeper link slowed
        c.controller(); c.registration(1)     # /controller's broker id; /brokers/ids/1's session
        c.chop_tail_bytes(1, "t", 0, 4096)    # a stopped broker's page cache lost (the last bytes)
        c.heal()                              # every proxy back to pass

Links. Broker i reaches broker j (j != i) through proxy (i, j): its
`inter.broker.address.overrides` maps j to that proxy. Its `zookeeper.connect` lists its own
proxies in front of each ZooKeeper node. Clients (the test process) talk to the brokers
directly. A cut puts the proxies of the link into blackhole (silence, sockets kept open) or,
with how="reset", reset.

`zookeepers=0` runs brokers without zookeeper.connect (each its own single-node broker), which
is how the harness itself is tested before a cluster exists. Every process is started with
subprocess.Popen and stopped by its pid in stop() (SIGCONT first for paused ones, SIGTERM, then
SIGKILL). Each broker's output goes to `<base>/broker-<id>.log` (appended across restarts);
`logs()` returns their tails, printed by stop(print_logs=True) when a test failed.

`disk_size=N` (bytes) puts each broker's log.dirs on a tmpfs of its own of that size
(`<base>/broker-<id>-disk`, log.dirs its `data` folder), mounted by start() and unmounted by
stop() (the data copied out to `<base>/broker-<id>-data` first, for a look after the run);
`fill_disk(i)` writes a ballast file beside `data` until the filesystem is full (ENOSPC) and
`free_disk(i)` deletes it. Mounting needs root: when it is refused, `disk_error` says why and
the brokers run on the plain folders (a full-disk fault then skips itself).

`fsync_journal=True` starts every broker through fsync_journal.py, which records the size of
each segment file at every fsync/fdatasync, so that `lose_unsynced(i, topic)` can cut a stopped
broker's segments back to what had reached the disk (a power cut rather than a process crash).
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_process import subprocess_env  # noqa: E402
from netproxy import ProxyHub, zookeeper_write  # noqa: E402
from fsync_journal import synced_sizes  # noqa: E402
from zookeeper_reference import ZooKeeperCluster, free_ports  # noqa: E402

START_TIMEOUT = 60.0


class ClusterError(RuntimeError):
    """The cluster did not reach the state a harness call waits for (the message says which)."""


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll until predicate() is truthy; its value, or ClusterError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class BrokerNode:
    def __init__(self, broker_id: int, port: int, base: Path):
        self.id = broker_id
        self.port = port
        self.log_dir = base / f"broker-{broker_id}-data"
        self.conf = base / f"broker-{broker_id}.properties"
        self.log_path = base / f"broker-{broker_id}.log"
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.starts = 0
        self.inter_port: int | None = None  # the inter-broker listener's own port, when it has one
        self.journal: Path | None = None    # fsync journal (fsync_journal.py) when set
        self.disk: Path | None = None       # its own filesystem (Cluster disk_size), log.dirs inside

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self, settings: dict) -> None:
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if v is not None))

    def start(self) -> None:
        if self.alive():
            raise ClusterError(f"broker {self.id} is already running (pid {self.proc.pid})")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_mark = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            log.write(f"---- start {self.starts + 1} of broker {self.id} at {time.time():.3f}\n".encode())
            log.flush()
            self._log_mark = log.tell()
            launcher = (["-m", "logcore.tools.cli"] if self.journal is None else
                        [str(Path(__file__).resolve().parent / "fsync_journal.py"), str(self.journal)])
            self.proc = subprocess.Popen(
                [sys.executable, *launcher, "broker", "--config", str(self.conf)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=subprocess_env(),
                cwd=self.conf.parent)
        self.starts += 1
        self.paused = False

    def wait_listening(self, timeout: float = START_TIMEOUT) -> None:
        """Until this start printed `listening on PLAINTEXT://` (or ClusterError with the log)."""
        def ready():
            if self.proc is None or self.proc.poll() is not None:
                raise ClusterError(f"broker {self.id} exited with {self.proc and self.proc.returncode}:\n"
                                   + self.log_tail())
            with open(self.log_path, "rb") as f:
                f.seek(self._log_mark)
                return b"listening on PLAINTEXT://" in f.read()
        try:
            wait_until(ready, timeout, f"broker {self.id} to listen on {self.address}")
        except ClusterError as e:
            if "timed out" in str(e):
                raise ClusterError(f"{e}\n{self.log_tail()}") from None
            raise

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL (a crash); waits for the process to be gone."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        self.proc.wait(20)
        self.proc = None
        self.paused = False

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (clean shutdown), SIGKILL after `timeout` seconds."""
        if self.proc is None:
            return
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(20)
        self.proc = None
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log at {self.log_path.name})"
        return "\n".join(text[-lines:])


class Cluster:
    def __init__(self, base: Path | str, *, brokers: int = 3, zookeepers: int = 1,
                 session_timeout_ms: int = 3000, props: dict | None = None, fsync_journal: bool = False,
                 disk_size: int | None = None):
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.session_timeout_ms = session_timeout_ms
        ports = free_ports(brokers)
        self.nodes = {i + 1: BrokerNode(i + 1, ports[i], self.base) for i in range(brokers)}
        if fsync_journal:
            for node in self.nodes.values():
                node.journal = self.base / f"broker-{node.id}.fsyncs"
        self.disk_size = disk_size
        self.disk_error: str | None = None      # why the tmpfs mounts were not made
        self.mounted: list[BrokerNode] = []
        if disk_size:
            for node in self.nodes.values():
                node.disk = self.base / f"broker-{node.id}-disk"
                node.log_dir = node.disk / "data"
        self.zk = ZooKeeperCluster(self.base / "zookeeper", size=zookeepers) if zookeepers else None
        self.extra_props = dict(props or {})
        # props naming an inter-broker listener (e.g. SASL_SSL): each broker gets it on a port of
        # its own beside PLAINTEXT (the clients'), and the proxies between brokers go to it
        self.inter_listener = str(self.extra_props.get("inter.broker.listener.name", "")).upper() or None
        if self.inter_listener:
            taken = set(ports)
            for node, port in zip(self.nodes.values(), [p for p in free_ports(2 * brokers) if p not in taken]):
                node.inter_port = port
        self.hub = ProxyHub()
        self.links: dict[tuple[int, int], object] = {}       # (src, dst) broker -> broker
        self.zk_links: dict[tuple[int, int], object] = {}    # (broker, zk myid)
        self._started = False

    # ------------------------------------------------------------------ life cycle
    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes.values())

    @property
    def clustered(self) -> bool:
        return self.zk is not None

    def broker_settings(self, node: BrokerNode) -> dict:
        settings = {"broker.id": node.id, "listeners": f"PLAINTEXT://{node.address}",
                    "log.dirs": node.log_dir, "num.partitions": 1,
                    "group.initial.rebalance.delay.ms": 0}
        if self.clustered:
            n = len(self.nodes)
            overrides = ",".join(f"{j}=127.0.0.1:{self.links[(node.id, j)].port}"
                                 for j in self.nodes if j != node.id)
            zk = ",".join(f"127.0.0.1:{self.zk_links[(node.id, z.myid)].port}" for z in self.zk.nodes)
            settings.update({
                "zookeeper.connect": zk,
                "zookeeper.session.timeout.ms": self.session_timeout_ms,
                "default.replication.factor": min(3, n),
                "min.insync.replicas": min(2, n),
                "offsets.topic.replication.factor": min(3, n),
                "replica.lag.time.max.ms": 2 * self.session_timeout_ms,
                "replica.fetch.wait.max.ms": 200,
                "unclean.leader.election.enable": "false",
                "auto.leader.rebalance.enable": "false",
                "controlled.shutdown.enable": "true",
                "inter.broker.address.overrides": overrides,
            })
        settings.update(self.extra_props)
        if self.inter_listener:
            settings["listeners"] = f"PLAINTEXT://{node.address},{self.inter_listener}://127.0.0.1:{node.inter_port}"
        return settings

    def start(self, timeout: float = START_TIMEOUT) -> "Cluster":
        self._started = True
        self.hub.start()
        try:
            if self.disk_size:
                self._mount_disks()
            if self.zk is not None:
                self.zk.start()
            for src in self.nodes.values():
                for dst in self.nodes.values():
                    if src.id != dst.id:
                        self.links[(src.id, dst.id)] = self.hub.add(("127.0.0.1", dst.inter_port or dst.port),
                                                                    name=f"{src.id}->{dst.id}")
                if self.zk is not None:
                    for z in self.zk.nodes:
                        self.zk_links[(src.id, z.myid)] = self.hub.add(
                            ("127.0.0.1", z.client_port), name=f"{src.id}->zk{z.myid}")
            for node in self.nodes.values():
                node.write_config(self.broker_settings(node))
                node.start()
            for node in self.nodes.values():
                node.wait_listening(timeout)
            self.wait_serving(timeout=timeout)
        except BaseException:
            self.stop(print_logs=True)
            raise
        return self

    def stop(self, print_logs: bool = False) -> None:
        """Stop every process this cluster started, by pid: brokers, ZooKeeper, the proxy loop."""
        if print_logs:
            print(self.logs())
        for node in self.nodes.values():
            try:
                node.stop(timeout=10)
            except Exception as e:      # noqa: BLE001 - keep stopping the others
                print(f"stopping broker {node.id}: {e}")
        if self.zk is not None:
            self.zk.stop()
        self.hub.stop()
        self._unmount_disks()

    # ------------------------------------------------------------------ disks of their own
    def _mount_disks(self) -> None:
        for node in self.nodes.values():
            node.disk.mkdir(parents=True, exist_ok=True)
            if os.geteuid() != 0:
                self.disk_error = "mounting a tmpfs needs root"
                return
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.disk_size},mode=0755", "tmpfs",
                                   str(node.disk)], capture_output=True, text=True)
            if done.returncode != 0:
                self.disk_error = f"mount -t tmpfs refused: {done.stderr.strip() or done.returncode}"
                return
            self.mounted.append(node)

    def _unmount_disks(self) -> None:
        """The brokers stopped: copy each log.dirs out of its tmpfs (sparse files stay sparse)
        and unmount it."""
        while self.mounted:
            node = self.mounted.pop()
            saved = self.base / f"broker-{node.id}-data"
            if node.log_dir.exists():
                subprocess.run(["cp", "-a", "--sparse=always", str(node.log_dir), str(saved)], check=False)
            done = subprocess.run(["umount", str(node.disk)], capture_output=True, text=True)
            if done.returncode != 0:        # still busy (a process that would not die): lazily
                subprocess.run(["umount", "-l", str(node.disk)], check=False)
            node.log_dir = saved

    def _ballast(self, i: int) -> Path:
        node = self.nodes[i]
        if node not in self.mounted:
            raise ClusterError(f"broker {i} has no filesystem of its own: {self.disk_error or 'disk_size not set'}")
        return node.disk / "ballast"

    def fill_disk(self, i: int) -> int:
        """Fill broker i's filesystem with a ballast file until a write fails with ENOSPC;
        returns the ballast's size in bytes (added to one left by an earlier fill)."""
        path = self._ballast(i)
        chunk = b"\0" * (1 << 20)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def free_disk(self, i: int) -> int:
        """Delete broker i's ballast; returns the bytes it held (0: there was none)."""
        path = self._ballast(i)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def free_disks(self) -> None:
        for node in list(self.mounted):
            self.free_disk(node.id)

    def disk_usage(self, i: int) -> dict:
        usage = shutil.disk_usage(self.nodes[i].disk)
        return {"total": usage.total, "used": usage.used, "free": usage.free}

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(print_logs=exc_type is not None)

    def logs(self, lines: int = 80) -> str:
        parts = []
        for node in self.nodes.values():
            parts.append(f"===== broker {node.id} (port {node.port}, pid {node.pid}) {node.log_path.name}\n"
                         + node.log_tail(lines))
        if self.zk is not None:
            for z in self.zk.nodes:
                parts.append(f"===== zookeeper {z.myid} (port {z.client_port})\n" + z.log_tail(20))
        return "\n".join(parts)

    # ------------------------------------------------------------------ readiness
    def registered(self) -> set[int]:
        """Broker ids registered in ZooKeeper (/brokers/ids)."""
        from kazoo.client import KazooClient
        zk = KazooClient(hosts=self.zk.connect_string, timeout=5)
        try:
            zk.start(timeout=10)
            return {int(c) for c in (zk.get_children("/brokers/ids") if zk.exists("/brokers/ids") else [])}
        finally:
            zk.stop()
            zk.close()

    def metadata_brokers(self, node: BrokerNode) -> set[int]:
        """The broker ids `node` lists in a Metadata response (empty when it does not answer)."""
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": node.address, "socket.timeout.ms": 3000, "log_level": 0})
        try:
            md = admin.list_topics(timeout=3)
        except Exception:               # noqa: BLE001 - not serving yet
            return set()
        return set(md.brokers)

    def wait_serving(self, ids=None, timeout: float = START_TIMEOUT) -> None:
        """Until the given (default: all running) brokers are registered in ZooKeeper and each
        of them lists every one of them in its Metadata."""
        ids = set(ids or [i for i, n in self.nodes.items() if n.alive()])
        for i in ids:
            self.nodes[i].wait_listening(timeout)
        if not self.clustered:
            for i in ids:
                wait_until(lambda i=i: i in self.metadata_brokers(self.nodes[i]), timeout,
                           f"broker {i} to answer Metadata")
            return
        wait_until(lambda: ids <= self.registered(), timeout, f"brokers {sorted(ids)} registered in ZooKeeper")
        for i in ids:
            wait_until(lambda i=i: ids <= self.metadata_brokers(self.nodes[i]), timeout,
                       f"broker {i} to list brokers {sorted(ids)} in Metadata")

    # ------------------------------------------------------------------ process faults
    def kill(self, i: int) -> None:
        self.nodes[i].kill()

    def restart(self, i: int, wait: bool = True) -> None:
        """Start broker i again (same port, same log.dirs); kills it first if it runs."""
        node = self.nodes[i]
        if node.alive():
            node.kill()
        node.start()
        if wait:
            node.wait_listening()

    def stop_broker(self, i: int) -> None:
        """SIGTERM: a clean (controlled) shutdown."""
        self.nodes[i].stop()

    def pause(self, i: int) -> None:
        self.nodes[i].pause()

    def resume(self, i: int) -> None:
        self.nodes[i].resume()

    def resume_all(self) -> None:
        for n in self.nodes.values():
            if n.paused:
                n.resume()

    def start_dead(self) -> list[int]:
        """Start every broker that is not running; returns their ids."""
        dead = [i for i, n in self.nodes.items() if not n.alive()]
        for i in dead:
            self.nodes[i].start()
        for i in dead:
            self.nodes[i].wait_listening()
        return dead

    # ------------------------------------------------------------------ network faults
    def _set(self, proxies, mode: str) -> None:
        for p in proxies:
            p.set_mode(mode)

    def cut(self, a: int, b: int, how: str = "blackhole") -> None:
        """Both directions between brokers a and b."""
        self._set([self.links[(a, b)], self.links[(b, a)]], how)

    def cut_one_way(self, src: int, dst: int, how: str = "blackhole") -> None:
        """Only the connections src opens to dst (e.g. a follower's fetches from its leader)."""
        self._set([self.links[(src, dst)]], how)

    def cut_zookeeper(self, i: int, how: str = "blackhole") -> None:
        """Broker i's links to every ZooKeeper node."""
        self._set([p for (b, _z), p in self.zk_links.items() if b == i], how)

    def isolate_from_brokers(self, i: int, how: str = "blackhole") -> None:
        self._set([p for (a, b), p in self.links.items() if i in (a, b)], how)

    def isolate(self, i: int, how: str = "blackhole") -> None:
        """Broker i cut from every other broker and from ZooKeeper."""
        self.isolate_from_brokers(i, how)
        self.cut_zookeeper(i, how)

    def bridge(self, a: int, b: int, c: int, how: str = "blackhole") -> None:
        """a <-> b <-> c, but a and c cannot talk."""
        self.cut(a, c, how)

    def heal(self) -> None:
        self._set(list(self.links.values()) + list(self.zk_links.values()), "pass")

    def delay_links(self, i: int, seconds: float) -> None:
        self._set_delay([p for (a, b), p in self.links.items() if i in (a, b)], seconds)

    def delay_zookeeper(self, seconds: float, brokers=None) -> None:
        """Every link of the given brokers (default: all) to ZooKeeper slowed by `seconds` each way."""
        self._set_delay([p for (b, _z), p in self.zk_links.items() if brokers is None or b in brokers], seconds)

    def _set_delay(self, proxies, seconds: float) -> None:
        for p in proxies:
            p.set_mode("delay", seconds)

    def one_way(self, src: int, dst: int) -> None:
        """A one-way partition: what broker src sends to broker dst is held (its requests on the
        connections it opens, its replies on those dst opens), what dst sends to src flows."""
        self.links[(src, dst)].set_mode("blackhole", direction="up")
        self.links[(dst, src)].set_mode("blackhole", direction="down")

    def drop_zookeeper_replies(self, i: int, after_write=False) -> None:
        """Broker i's requests reach ZooKeeper (its writes are applied, its session kept alive by
        its pings), ZooKeeper's replies are thrown away: broker i cannot tell whether a write
        happened. `after_write` (True, or a predicate such as netproxy.zookeeper_write_to):
        replies (and notifications) pass until broker i sends a (matching) write on a
        connection; from that write's reply on they are lost. At heal those connections are
        reset."""
        after = zookeeper_write if after_write is True else (after_write or None)
        for (b, _z), p in self.zk_links.items():
            if b == i:
                p.set_mode("discard", direction="down", after=after)

    def chop_tail(self, i: int, topic: str, partition: int, batches: int) -> int:
        """Lost unflushed tail ("power loss", replication.md 6.2): with broker i stopped, cut
        the last `batches` batches off the partition's active segment. Returns the new end
        offset of the segment."""
        from logcore.records.batch import iter_batches
        node = self.nodes[i]
        if node.alive():
            raise ClusterError(f"chop_tail: broker {i} is running (pid {node.pid}); kill it first")
        segs = sorted((node.log_dir / f"{topic}-{partition}").glob("*.log"))
        if not segs:
            raise ClusterError(f"chop_tail: no segment of {topic}-{partition} in {node.log_dir}")
        seg = segs[-1]
        data = seg.read_bytes()
        found = [(pos, h) for pos, h in iter_batches(data, source=str(seg))]
        keep = found[:max(0, len(found) - batches)]
        size = keep[-1][0] + keep[-1][1].size if keep else 0
        with open(seg, "r+b") as f:
            f.truncate(size)
        return keep[-1][1].next_offset if keep else int(seg.stem)

    def chop_tail_bytes(self, i: int, topic: str, partition: int, nbytes: int) -> tuple[int, int] | None:
        """Lost page cache: with broker i stopped, cut the last `nbytes` bytes (not batch-aligned)
        off the partition's active segment. Returns (size before, size after), None when the
        broker has no segment of that partition."""
        node = self.nodes[i]
        if node.alive():
            raise ClusterError(f"chop_tail_bytes: broker {i} is running (pid {node.pid}); kill it first")
        segs = sorted((node.log_dir / f"{topic}-{partition}").glob("*.log"))
        if not segs:
            return None
        seg = segs[-1]
        size = seg.stat().st_size
        new = max(0, size - nbytes)
        with open(seg, "r+b") as f:
            f.truncate(new)
        return size, new

    def lose_page_cache(self, i: int, topic: str, partition: int, nbytes: int) -> tuple[int, int] | None:
        """Lost page cache on stopped broker i (fsync_journal=True): up to `nbytes` cut off the
        partition's active segment, never below the size it had at its last fsync (a byte that
        reached the disk survives; seglog refuses, rightly, to open a log cut below its recovery
        point). Returns (size before, size after), None when there is no segment."""
        node = self.nodes[i]
        if node.alive():
            raise ClusterError(f"lose_page_cache: broker {i} is running (pid {node.pid}); kill it first")
        if node.journal is None:
            raise ClusterError("lose_page_cache needs a cluster started with fsync_journal=True")
        segs = sorted((node.log_dir / f"{topic}-{partition}").glob("*.log"))
        if not segs:
            return None
        seg = segs[-1]
        size = seg.stat().st_size
        synced = synced_sizes(node.journal).get(str(seg.resolve()), 0)
        new = max(min(size, synced), size - nbytes)
        if new < size:
            with open(seg, "r+b") as f:
                f.truncate(new)
        return size, new

    def lose_unsynced(self, i: int, topic: str) -> dict[str, tuple[int, int]]:
        """A power cut on stopped broker i (fsync_journal=True): every segment of `topic` cut back
        to the size it had at its last fsync/fdatasync (a segment never synced to 0 bytes; the
        folder entries are kept). Returns {segment name: (size before, size after)} for those cut."""
        node = self.nodes[i]
        if node.alive():
            raise ClusterError(f"lose_unsynced: broker {i} is running (pid {node.pid}); kill it first")
        if node.journal is None:
            raise ClusterError("lose_unsynced needs a cluster started with fsync_journal=True")
        synced = synced_sizes(node.journal)
        cut = {}
        for seg in sorted(node.log_dir.glob(f"{topic}-*/*.log")):
            size = seg.stat().st_size
            keep = min(size, synced.get(str(seg.resolve()), 0))
            if keep < size:
                with open(seg, "r+b") as f:
                    f.truncate(keep)
                cut[f"{seg.parent.name}/{seg.name}"] = (size, keep)
        return cut

    # ------------------------------------------------------------------ ZooKeeper faults
    def kill_zookeeper_leader(self):
        """SIGKILL the ensemble's leader (or the standalone server); returns that node."""
        leader = self.zk.leader() if self.zk else None
        if leader is None:
            raise ClusterError("no ZooKeeper leader to kill")
        leader.kill()
        return leader

    def zookeeper_of(self, i: int):
        """The ZooKeeper node broker i's session is connected to now (its open link), or None."""
        return next((z for z in self.zk.nodes if self.zk_links[(i, z.myid)].carrying), None)

    def restart_zookeeper(self, node) -> None:
        node.start()
        self.zk.wait_serving(nodes=[node])

    def restart_zookeepers(self, nodes) -> None:
        """Start several stopped ZooKeeper servers together (a lost quorum comes back only when
        enough of them are up), then wait for each to serve."""
        for node in nodes:
            node.start()
        self.zk.wait_serving(nodes=list(nodes))

    def _zk_read(self, fn, timeout: float = 5.0):
        from kazoo.client import KazooClient
        zk = KazooClient(hosts=self.zk.connect_string, timeout=timeout)
        try:
            zk.start(timeout=timeout)
            return fn(zk)
        finally:
            zk.stop()
            zk.close()

    def controller(self) -> int | None:
        """The broker id in /controller (None when no broker is controller)."""
        import json as _json
        from kazoo.exceptions import NoNodeError

        def read(zk):
            try:
                data, _ = zk.get("/controller")
            except NoNodeError:
                return None
            return int(_json.loads(data)["brokerid"])
        return self._zk_read(read)

    def partition_states(self, topic: str) -> dict[int, dict]:
        """partition -> its state znode as ZooKeeper has it now ({"leader", "leader_epoch",
        "isr", ...}): what the controller and leaders wrote, whether or not they heard back."""
        import json as _json
        from kazoo.exceptions import NoNodeError

        def read(zk):
            base = f"/brokers/topics/{topic}/partitions"
            out = {}
            try:
                children = zk.get_children(base)
            except NoNodeError:
                return out
            for child in children:
                try:
                    data, _ = zk.get(f"{base}/{child}/state")
                except NoNodeError:
                    continue
                out[int(child)] = _json.loads(data)
            return out
        return self._zk_read(read)

    def registration(self, i: int) -> int | None:
        """The ZooKeeper session owning /brokers/ids/<i> (None when broker i is not registered)."""
        from kazoo.exceptions import NoNodeError

        def read(zk):
            try:
                _, stat = zk.get(f"/brokers/ids/{i}")
            except NoNodeError:
                return None
            return stat.ephemeralOwner
        return self._zk_read(read)

    # ------------------------------------------------------------------ cluster state via clients
    def admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def create_topic(self, name: str, partitions: int, replication_factor: int | None = None,
                     config: dict | None = None, timeout: float = 30) -> None:
        from confluent_kafka.admin import NewTopic
        rf = replication_factor if replication_factor is not None else (min(3, len(self.nodes))
                                                                         if self.clustered else 1)
        admin = self.admin()
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf,
                                                config={k: str(v) for k, v in (config or {}).items()})],
                                      request_timeout=timeout)
        futures[name].result(timeout)

    def describe(self, topic: str, timeout: float = 5) -> dict[int, dict]:
        """partition -> {"leader", "replicas", "isr"} from Metadata (leader -1 when none)."""
        md = self.admin().list_topics(topic, timeout=timeout)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            raise ClusterError(f"topic {topic} not in Metadata: {t.error if t else 'absent'}")
        return {p: {"leader": pm.leader, "replicas": list(pm.replicas), "isr": list(pm.isrs)}
                for p, pm in t.partitions.items()}

    def leader_of(self, topic: str, partition: int) -> int:
        return self.describe(topic)[partition]["leader"]

    def end_offsets(self, topic: str, partitions, timeout: float = 5) -> dict[int, tuple[int, int]]:
        """partition -> (high watermark, leader epoch) from ListOffsets(latest)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec
        admin = self.admin()
        futs = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
                                  request_timeout=timeout)
        out = {}
        for tp, fut in futs.items():
            info = fut.result(timeout)
            out[tp.partition] = (info.offset, info.leader_epoch if info.leader_epoch is not None else -1)
        return out

    def wait_healthy(self, topic: str, partitions: int, timeout: float = 90) -> dict[int, dict]:
        """Until every partition has a live leader and its full replica set in the ISR."""
        live = {i for i, n in self.nodes.items() if n.alive()}

        def healthy():
            try:
                d = self.describe(topic)
            except Exception:           # noqa: BLE001 - leaders moving
                return None
            if len(d) != partitions:
                return None
            for st in d.values():
                if st["leader"] not in live or sorted(st["isr"]) != sorted(st["replicas"]):
                    return None
            return d
        return wait_until(healthy, timeout, f"every partition of {topic} led with a full ISR")


def cluster_support() -> str | None:
    """None when `seglog broker` knows the cluster settings, else the reason it does not (the
    tests that need a cluster skip with it)."""
    from logcore.broker.config import BROKER_KEYS
    missing = [k for k in ("zookeeper.connect", "inter.broker.address.overrides") if k not in BROKER_KEYS]
    if missing:
        return f"seglog broker has no cluster mode yet (unknown settings: {', '.join(missing)})"
    return None
