"""The driver's view of the root the source reads: its subscribed partitions, their open
(read-only) logs and latest offsets; `open_logs` gives one (or, for several log dirs, a
replicas.ReplicaLogs over one each)."""
from __future__ import annotations

import dataclasses
import logging

from logcore.errors import ReplicaNotAvailableError, SegLogError, TopicNotFoundError
from logcore.log.log_root import LogRoot, partition_dir
from logcore.storage.read_facts import RECORD, ReadFacts
from logcore.tiered import install_remote_tier
from pyspark_seglog.replicas import ReplicaLogs
from pyspark_seglog.subscription import subscribed_partitions
from pyspark_seglog.source_options import SourceOptions

install_remote_tier()  # roots that enable tiering have a remote tier

# the source's logger, as before this module was split from source.py (users configure it by name)
logger = logging.getLogger("pyspark_seglog.source")

# Without kafka.bootstrap.servers, the broker that serves the root is asked (Metadata) which
# partitions it holds replicas of, for at most this long; the files are read without that
# check when it does not answer.
OWNER_TIMEOUT_S = 5.0


class RootLogs:
    """The driver's view of a root: subscribed partitions and their open (read-only) logs.

    With kafka.bootstrap.servers the latest offsets come from each partition's leader (one
    ListOffsets request per leader and refresh), not from the root's checkpoint. The root may be
    one broker's log.dirs in a cluster (a sidecar): a partition this broker only follows is read
    up to min(the leader's answer, this replica's own committed HW), since a follower's HW lags
    the leader's and its records above its HW may still be cut. Which partitions the broker
    holds replicas of comes from Metadata (kafka.bootstrap.servers, else the broker that serves
    the root, named by its live claim) and the root's claim (its broker id), and from the log
    dir's own record (`hosted`, kept when the broker stops): a subscribed partition held
    elsewhere fails with ReplicaNotAvailableError instead of reading as empty. Several log dirs
    (`path` a comma-separated list) are pyspark_seglog.replicas.ReplicaLogs, one of these each.
    """

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._root: LogRoot | None = None
        self._logs: dict = {}
        self._fresh: set = set()
        self._broker = None             # a BrokerClient, with kafka.bootstrap.servers
        self._broker_latest: dict = {}
        self._owner = None              # a BrokerClient to the root's own broker (no bootstrap servers)
        self._owner_looked = False
        self._node: int | None = None   # the broker id whose log.dirs the root is (its claim)
        self._claim_read = False

    @property
    def root(self) -> LogRoot:
        if self._root is None:
            # On an object store the planner records what it reads, to hand each task the facts
            # of its partition (read_facts): a task then opens with no listing and few requests.
            self._root = LogRoot.open(self.opts.root, storage_options=self.opts.storage_options,
                                      read_only=True, defaults=self.opts.tiered,
                                      read_facts=ReadFacts(RECORD))
        return self._root

    def read_facts(self, tp) -> ReadFacts | None:
        """What planning read of partition `tp` and the root's files, for its task (None on
        local disk, where a task's open costs no request)."""
        facts = getattr(self.root.storage, "read_facts", None)
        return None if facts is None else facts.for_folder(partition_dir(*tp))

    def _new_round(self) -> None:
        """A planning call starts: what earlier calls read is read again, once within this one."""
        facts = getattr(self.root.storage, "read_facts", None)
        if facts is not None:
            facts.new_round()

    def topic_partitions(self) -> list:
        """The partitions the subscription covers right now (new topics and partitions included)."""
        opts, root = self.opts, self.root
        self._new_round()
        if opts.strategy == "assign":
            counts = {}
            for topic in {t for t, _p in opts.assigned}:
                try:
                    counts[topic] = root.describe_topic(topic).partitions
                except TopicNotFoundError:
                    counts[topic] = 0
            out = [(t, p) for t, p in opts.assigned if p < counts[t]]
        else:
            if opts.strategy == "subscribe":
                existing = set(root.list_topics())
                topics = [t for t in opts.topics if t in existing]
            else:
                topics = [t for t in root.list_topics() if opts.matches(t)]
            out = []
            for topic in sorted(topics):
                try:
                    count = root.describe_topic(topic).partitions
                except TopicNotFoundError:
                    continue            # deleted between the listing and now
                out.extend((topic, p) for p in range(count))
        self._check_replicas()
        self._check_hosted(out)
        return out

    def _check_hosted(self, tps) -> None:
        """A cluster member's log dir records the partitions it holds replicas of (written by
        its broker, kept when it stops): a partition held elsewhere fails here, no broker asked."""
        infos = {}
        for t, p in tps:
            info = infos.get(t)
            if info is None:
                info = infos[t] = self.root.describe_topic(t)
            if info.hosted is not None and p not in info.hosted:
                raise self.root.not_hosted(info, p, self.opts.root)

    # -- the root as one broker's log.dirs in a cluster
    def _client(self):
        # Imported here: the Kafka protocol package is large, and Spark tasks never need it.
        from pyspark_seglog.broker_client import BrokerClient
        if self._broker is None:
            self._broker = BrokerClient(self.opts.bootstrap_servers, client_id="seglog-spark-source",
                                        security=self.opts.security.client())
        return self._broker

    def _claim(self):
        if not self._claim_read:
            self._claim_read = True
            from logcore.log.root_owner import read_claim
            try:
                record = read_claim(self.root.storage)
            except SegLogError:
                record = None
            self._node = record.node_id if record is not None else None
            self._claim_record = record
        return getattr(self, "_claim_record", None)

    def _metadata_client(self):
        """Whose Metadata says which partitions the root's broker holds: kafka.bootstrap.servers,
        else the live broker that serves the root; None when there is neither."""
        if self.opts.bootstrap_servers is not None:
            return self._client()
        if not self._owner_looked:
            self._owner_looked = True
            record = self._claim()
            if record is not None and record.kind == "broker":
                from logcore.log.root_owner import claim_is_live
                from pyspark_seglog.broker_client import BrokerClient
                if claim_is_live(self.root.storage, record):
                    self._owner = BrokerClient(record.bootstrap, client_id="seglog-spark-source",
                                               timeout=OWNER_TIMEOUT_S, retry_timeout=OWNER_TIMEOUT_S)
        return self._owner

    def local_node(self, client) -> int | None:
        """The broker id whose log.dirs the root is: its claim's, else the only broker of a
        one-broker cluster (a single-node Apache Kafka); None when unknown."""
        self._claim()
        if self._node is not None:
            return self._node
        if client is not None and len(client.brokers) == 1:
            return next(iter(client.brokers))
        return None

    def _wanted(self, client) -> list:
        """The subscribed partitions as the cluster has them (topics this root may lack)."""
        return subscribed_partitions(self.opts, client)

    def _check_replicas(self) -> None:
        client = self._metadata_client()
        if client is None:
            return
        # Imported only now: the Kafka protocol package takes a second or more to import (its
        # schema types register with hypothesis when that is installed), and a root no broker
        # serves never needs it.
        from logcore.wire.client import KafkaError
        try:
            wanted = self._wanted(client)
        except KafkaError as exc:
            if client is self._broker:
                raise
            # Only the root's own broker was asked (no kafka.bootstrap.servers): the files are
            # still readable without it.
            logger.warning("%s: cannot ask its broker which partitions it holds (%s); reading the"
                           " files without that check", self.opts.root, exc)
            self._owner.close()
            self._owner = None
            return
        node = self.local_node(client)
        if node is None:
            return
        missing = [tp for tp in wanted if node not in client.partitions[tp].replicas]
        if missing:
            t, p = missing[0]
            info = client.partitions[(t, p)]
            others = ", ".join(f"{a}-{b}" for a, b in missing[1:6]) + (" ..." if len(missing) > 6 else "")
            raise ReplicaNotAvailableError(
                f"{t}-{p} has no replica in {self.opts.root}: that log dir is broker {node}'s, and the"
                f" partition's replicas are on brokers {list(info.replicas)} (Metadata from"
                f" {client.where()}). Read it from the log.dirs of one of those brokers, or subscribe"
                f" (assign) only partitions broker {node} holds"
                + (f"; also not here: {others}" if others else ""))

    def seen(self, tp) -> bool:
        """Whether this partition's log is already open here."""
        return tp in self._logs

    def log(self, tp):
        log = self._logs.get(tp)
        if log is None:
            # Range-bounded from the HW on (range_open.py): planning needs the log start, the HW
            # and the LSO, not the producer state a plain open replays from every batch header
            # of the log (one ranged GET per 64 KiB on an object store, the whole log's bytes);
            # lookups by timestamp still work, checked on use.
            log = self.root.log(*tp, read_range=(None, None))
            self._logs[tp] = log
            self._fresh.add(tp)
        return log

    def refresh(self, tps) -> None:
        tps = list(tps)
        self._new_round()
        if self.opts.bootstrap_servers is not None:
            # Ask the leaders first: a leader's HW never runs ahead of its root's checkpoint (the
            # broker checkpoints before it moves the HW), so logs refreshed after this hold every
            # offset a leader on this root returns; a follower's is bounded below.
            answers = self._ask_broker(tps)
        for tp in tps:
            log = self.log(tp)
            if tp in self._fresh:
                self._fresh.discard(tp)
            else:
                log.refresh()
        self._fresh.clear()
        if self.opts.bootstrap_servers is not None:
            self._broker_latest.update(self._bounded(answers))

    def local_bound(self, tp) -> int:
        """The highest offset this root proves readable: its LSO with read_committed, else its HW."""
        log = self.log(tp)
        return log.last_stable_offset if self.opts.isolation == "read_committed" else log.high_watermark

    def _bounded(self, answers: dict) -> dict:
        """The leaders' answers, each cut to this replica's own committed HW (LSO) where the root
        is not the partition's leader (a follower, or a root whose broker is not known)."""
        client = self._broker
        node = self.local_node(client)
        out = {}
        for tp, offset in answers.items():
            info = client.partitions.get(tp)
            if node is not None and info is not None and info.leader == node:
                out[tp] = offset
            else:
                out[tp] = min(offset, self.local_bound(tp))
        return out

    def _ask_broker(self, tps: list) -> dict:
        if not tps:
            return {}
        return self._client().list_offsets(tps, isolation=self.opts.isolation)

    def earliest(self, tp) -> int:
        return self.log(tp).log_start_offset

    def offset_for_timestamp(self, tp, timestamp_ms: int):
        return self.log(tp).offset_for_timestamp(timestamp_ms)

    def latest(self, tp) -> int:
        if self.opts.bootstrap_servers is not None:
            if tp not in self._broker_latest:
                self._broker_latest.update(self._bounded(self._ask_broker([tp])))
            return self._broker_latest[tp]
        return self.local_bound(tp)

    def close(self) -> None:
        if self._root is not None:
            self._root.close()
        for client in (self._broker, self._owner):
            if client is not None:
                client.close()
        self._root = None
        self._broker = None
        self._owner = None
        self._owner_looked = False
        self._claim_read = False
        self._logs.clear()
        self._fresh.clear()
        self._broker_latest.clear()


def open_logs(opts: SourceOptions):
    """The driver's view of the root, or of several log dirs (`path` a comma-separated list:
    pyspark_seglog.replicas), each read as a root of its own without asking brokers; or of the
    brokers alone (readFrom=brokers, or no path: pyspark_seglog.broker_logs)."""
    if opts.read_path == "brokers" or not opts.root:
        from pyspark_seglog.broker_logs import BrokerLogs
        return BrokerLogs(opts)
    if len(opts.roots) > 1:
        return ReplicaLogs(opts, lambda url: RootLogs(dataclasses.replace(opts, root=url,
                                                                        bootstrap_servers=None)))
    return RootLogs(opts)


def check_subscription(opts: SourceOptions, tps) -> None:
    """When a query starts: a subscribed or assigned topic that does not exist fails, as
    Spark's Kafka source fails on UnknownTopicOrPartition (not an empty result that looks like
    a topic without records); a subscribePattern that matches nothing is a warning (Spark's
    Kafka source reads nothing then, and topics may come later)."""
    found = {t for t, _p in tps}
    where = opts.root + (f" (kafka.bootstrap.servers={opts.bootstrap_servers})"
                         if opts.bootstrap_servers is not None else "")
    if opts.strategy == "subscribepattern":
        if not found:
            logger.warning("subscribePattern=%s matches no topic in %s: nothing is read", opts.pattern, where)
        return
    wanted = opts.topics if opts.strategy == "subscribe" else sorted({t for t, _p in opts.assigned})
    missing = [t for t in wanted if t not in found]
    if opts.strategy == "assign":
        missing += sorted({f"{t}-{p}" for t, p in opts.assigned if t in found and (t, p) not in set(tps)})
    if missing:
        what = "topic" if opts.strategy == "subscribe" else "topic or partition"
        raise TopicNotFoundError(
            f"UNKNOWN_TOPIC_OR_PARTITION: {what}{'s' if len(missing) > 1 else ''} {', '.join(missing)} of option"
            f" {'subscribe' if opts.strategy == 'subscribe' else 'assign'} do{'' if len(missing) > 1 else 'es'}"
            f" not exist in {where}")
