"""The source over several brokers' log dirs (`path` = a comma-separated list): each partition is
bounded by the committed offset its replicas prove, and each task reads a replica on its own host.

PySpark's Python DataSource API has no preferred locations for an InputPartition, so locality
is decided at read time: the driver passes every replica of the partition (log dir, broker id,
the broker's advertised host) and the task, on the executor, reads the first replica on its own
host whose log holds the whole range, else the first other one that holds it, else fails naming
what each replica holds.

A log dir says which host it is on by its broker's record in its topics file (`broker`: node id
and advertised host, written by a cluster member at each start and kept when it stops; else its
owner claim's address). It is on the executor's host when that host is one of the executor's
names (host name, FQDN, SPARK_LOCAL_HOSTNAME) or one of its addresses (SPARK_LOCAL_IP and the
addresses those names resolve to).
"""
from __future__ import annotations

import functools
import logging
import os
import socket
from dataclasses import dataclass

from logcore.errors import ReplicaNotAvailableError, SegLogError, TopicNotFoundError
from logcore.log.log_root import LogRoot
from logcore.tiered import install_remote_tier

install_remote_tier()  # roots that enable tiering have a remote tier

logger = logging.getLogger("pyspark_seglog.source")


@dataclass(frozen=True)
class Replica:
    """One replica of a partition, as the driver found it."""
    url: str                    # the log dir
    node: int | None            # its broker's id, when the log dir says
    host: str | None            # its broker's advertised host, when the log dir says
    leader_bound: bool = False  # the leader's log dir, bounded by the leader's answer (kafka.bootstrap.servers)

    def describe(self) -> str:
        who = f"broker {self.node}" if self.node is not None else "unknown broker"
        return f"{self.url} ({who} on {self.host or 'an unknown host'})"


# ------------------------------------------------------------------------------- the host

def _resolve(host: str) -> frozenset:
    try:
        return frozenset(info[4][0] for info in socket.getaddrinfo(host, None))
    except (OSError, UnicodeError):
        return frozenset()


@functools.lru_cache(maxsize=1)
def this_host() -> tuple[frozenset, frozenset]:
    """(names, addresses) of the host this process runs on."""
    names = {socket.gethostname(), socket.getfqdn(), os.environ.get("SPARK_LOCAL_HOSTNAME", "")}
    names = {n.lower() for n in names if n}
    addresses = {a for a in (os.environ.get("SPARK_LOCAL_IP", "").strip(),) if a}
    for name in names:
        addresses |= _resolve(name)
    return frozenset(names), frozenset(addresses)


@functools.lru_cache(maxsize=64)
def is_local(host: str | None) -> bool:
    """Whether a broker advertising `host` runs on this process's host."""
    if not host:
        return False
    names, addresses = this_host()
    return host.lower() in names or bool(_resolve(host) & addresses)


def log_dir_identity(root: LogRoot) -> tuple[int | None, str | None]:
    """(broker id, advertised host) of the broker whose log dir `root` is, or Nones."""
    try:
        record = root.broker_record()
    except SegLogError:
        record = None
    if record:
        return record.get("node_id"), record.get("host")
    from logcore.log.root_owner import read_claim
    try:
        claim = read_claim(root.storage)
    except SegLogError:
        claim = None
    if claim is None:
        return None, None
    address = claim.address.split("://", 1)[-1]
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return (claim.node_id if claim.node_id >= 0 else None), (host or None)


# ------------------------------------------------------------------------------- task side

def choose_replica(p):
    """(root, log, leader_bound) of the replica task `p` reads: on this host and holding
    [p.start, p.until) first, then any that holds it; when none holds the start (retention
    removed it everywhere) the first that reaches p.until, whose data-loss rules then apply."""
    replicas = list(p.replicas)
    order = sorted(range(len(replicas)), key=lambda i: not is_local(replicas[i].host))
    tried, fallback = [], None
    for i in order:
        r = replicas[i]
        root = None
        try:
            root = LogRoot.open(r.url, storage_options=p.storage_options, read_only=True,
                                defaults=getattr(p, "tiered", None))
            log = root.log(p.topic, p.partition, read_range=(p.start, p.until))
            start = log.log_start_offset
            bound = p.until if r.leader_bound else (
                log.last_stable_offset if p.isolation == "read_committed" else log.high_watermark)
        except (SegLogError, OSError) as exc:
            tried.append(f"{r.describe()}: {exc}")
            if root is not None:
                root.close()
            continue
        where = "on this host" if is_local(r.host) else "on another host"
        if start <= p.start and bound >= p.until:
            logger.info("%s-%d [%d, %d): reading the replica in %s, %s", p.topic, p.partition,
                        p.start, p.until, r.describe(), where)
            if fallback is not None:
                fallback[0].close()
            return root, log, r.leader_bound
        tried.append(f"{r.describe()} holds [{start}, {bound})")
        if fallback is None and bound >= p.until:
            fallback = (root, log, r.leader_bound)
        else:
            root.close()
    if fallback is not None:
        return fallback
    raise ReplicaNotAvailableError(
        f"{p.topic}-{p.partition}: no replica in the log dirs holds the planned offsets"
        f" [{p.start}, {p.until}) committed: " + "; ".join(tried)
        + ". A follower's files count up to its own checkpointed high watermark; give the leader's"
        " log dir too, or retry")


# ------------------------------------------------------------------------------- driver side

class ReplicaLogs:
    """The driver's view of several log dirs, each one broker's log.dirs (or any log root).

    A partition's replicas are the log dirs that hold it (a cluster member's log dir records
    which partitions it holds; a plain root holds all). Its latest offset is the most any
    replica proves committed: the highest HW (LSO with read_committed) of the replicas'
    checkpoints; with kafka.bootstrap.servers, the leader's answer when the leader's log dir is
    among them, else min(the answer, that highest HW). Its earliest offset and timestamp
    lookups come from the replica that gives the bound.
    """

    def __init__(self, opts, make_logs):
        self.opts = opts
        self.dirs = [make_logs(url) for url in opts.roots]     # one single-root root_logs.RootLogs each
        self._ids: dict[int, tuple] = {}
        self._held: dict[tuple, list[int]] = {}
        self._latest: dict[tuple, int] = {}
        self._ref: dict[tuple, int] = {}
        self._leader_dir: dict[tuple, int | None] = {}
        self._broker = None

    def identity(self, i: int) -> tuple[int | None, str | None]:
        if i not in self._ids:
            self._ids[i] = log_dir_identity(self.dirs[i].root)
        return self._ids[i]

    def _describe_dirs(self) -> str:
        parts = []
        for i, d in enumerate(self.dirs):
            node, _host = self.identity(i)
            parts.append(f"{d.opts.root}" + (f" (broker {node})" if node is not None else ""))
        return ", ".join(parts)

    def topic_partitions(self) -> list:
        opts = self.opts
        counts: dict[str, int] = {}
        held: dict[tuple, list[int]] = {}
        for i, d in enumerate(self.dirs):
            for topic in d.root.list_topics():
                if not opts.matches(topic):
                    continue
                try:
                    info = d.root.describe_topic(topic)
                except TopicNotFoundError:
                    continue
                counts[topic] = max(counts.get(topic, 0), info.partitions)
                for p in range(info.partitions) if info.hosted is None else info.hosted:
                    held.setdefault((topic, p), []).append(i)
        if opts.strategy == "assign":
            out = [(t, p) for t, p in opts.assigned if p < counts.get(t, 0)]
        else:
            out = sorted((t, p) for t, n in counts.items() for p in range(n))
        missing = [tp for tp in out if tp not in held]
        if missing:
            t, p = missing[0]
            more = ", ".join(f"{a}-{b}" for a, b in missing[1:6]) + (" ..." if len(missing) > 6 else "")
            raise ReplicaNotAvailableError(
                f"{t}-{p} has no replica in any of the log dirs {self._describe_dirs()}: add the"
                f" log.dirs of a broker that holds it to the option path, or subscribe (assign)"
                f" only partitions they hold" + (f"; also not there: {more}" if more else ""))
        self._held = held
        return out

    def _holders(self, tp) -> list[int]:
        if tp not in self._held:
            self.topic_partitions()
        if tp not in self._held:
            raise TopicNotFoundError(f"{tp[0]}-{tp[1]} is in none of the log dirs {self._describe_dirs()}")
        return self._held[tp]

    def refresh(self, tps) -> None:
        tps = list(tps)
        answers = None
        if self.opts.bootstrap_servers is not None and tps:
            answers = self._ask_broker(tps)
        for i, d in enumerate(self.dirs):
            mine = [tp for tp in tps if i in self._holders(tp)]
            if mine:
                d.refresh(mine)
        for tp in tps:
            holders = self._holders(tp)
            bounds = {i: self.dirs[i].local_bound(tp) for i in holders}
            ref = max(holders, key=lambda i: (bounds[i], -self.dirs[i].earliest(tp)))
            latest, leader_dir = bounds[ref], None
            if answers is not None and tp in answers:
                info = self._broker.partitions.get(tp)
                leader = info.leader if info is not None else None
                leader_dir = next((i for i in holders if leader is not None
                                   and self.identity(i)[0] == leader), None)
                if leader_dir is not None:
                    latest, ref = answers[tp], leader_dir
                else:
                    latest = min(answers[tp], latest)
            self._latest[tp], self._ref[tp], self._leader_dir[tp] = latest, ref, leader_dir

    def _ask_broker(self, tps: list) -> dict:
        from pyspark_seglog.broker_client import BrokerClient
        if self._broker is None:
            self._broker = BrokerClient(self.opts.bootstrap_servers, client_id="seglog-spark-source",
                                        security=self.opts.security.client())
        return self._broker.list_offsets(tps, isolation=self.opts.isolation)

    def _reference(self, tp) -> int:
        if tp not in self._ref:
            self.refresh([tp])
        return self._ref[tp]

    def seen(self, tp) -> bool:
        """Whether this partition was already looked at here (the stream reader asks)."""
        return tp in self._ref

    def log(self, tp):
        return self.dirs[self._reference(tp)].log(tp)

    def earliest(self, tp) -> int:
        return self.dirs[self._reference(tp)].earliest(tp)

    def offset_for_timestamp(self, tp, timestamp_ms: int):
        return self.log(tp).offset_for_timestamp(timestamp_ms)

    def latest(self, tp) -> int:
        if tp not in self._latest:
            self.refresh([tp])
        return self._latest[tp]

    def replicas(self, tp) -> tuple:
        leader_dir = self._leader_dir.get(tp)
        out = []
        for i in self._holders(tp):
            node, host = self.identity(i)
            out.append(Replica(self.dirs[i].opts.root, node, host, leader_bound=i == leader_dir))
        return tuple(out)

    def close(self) -> None:
        for d in self.dirs:
            d.close()
        if self._broker is not None:
            self._broker.close()
            self._broker = None
        self._ids.clear()
        self._held.clear()
        self._latest.clear()
        self._ref.clear()
        self._leader_dir.clear()
