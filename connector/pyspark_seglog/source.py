# Over 600 lines: the driver side (subscriptions, offsets, triggers, cluster bounds) and the task side of one source share its read plan.
"""The seglog source: Spark's Kafka source over a log root, for streaming and batch queries.

Driver side (`SeglogStreamReader`, `SeglogBatchReader`): resolve the subscription to partitions,
offsets to ranges `[from, until)` never above the HW (LSO with read_committed), rate-limit them
and cut them into `SeglogInputPartition`s. Task side (`read_partition`): open the partition
read-only (with several log dirs, a replica on the task's own host first: replicas.py) and
decode bounded windows of whole batches straight into Arrow.

Spark pickles the reader for its tasks and keeps the driver's stream reader alive for the whole
query: the open logs live in `_logs`, created lazily and never pickled.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows, ReadMinRows,
                                              SupportsTriggerAvailableNow)

from logcore.errors import (CorruptRecordError, InvalidConfigError, OffsetOutOfRangeError, ReplicaNotAvailableError,
                            SegLogError, TopicNotFoundError)
from logcore.log.log_root import LogRoot
import logcore.tiered  # noqa: F401 - registers the remote tier roots that enable tiering use
from logcore.records.arrow import BufferRecycler, decode_batches
from logcore.wire.error_codes import NONE
from logcore.wire.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from pyspark_seglog.plain_errors import plain_errors
from pyspark_seglog.offsets import (OffsetRange, from_spark, prorate, split_ranges, to_spark)
from pyspark_seglog.replicas import ReplicaLogs as _ReplicaLogs
from pyspark_seglog.replicas import choose_replica
from pyspark_seglog.schema import arrow_schema
from pyspark_seglog.source_options import (DEFAULT_FETCH_BYTES, OffsetSpec, SourceOptions,
                                           parse_source_options)
from pyspark_seglog.worker_heap import freeze_import_heap

logger = logging.getLogger("pyspark_seglog.source")

# A task reads and decodes bounded windows of whole batches, at most the option
# kafka.max.partition.fetch.bytes (8 MiB by default, about 70k rows of 100-byte values): bounds a
# task's memory and makes each yielded Arrow batch large. A task starts with a small window and
# grows it, so that a tiny range (a micro-batch of a few records) reads and checks a few KiB.
FIRST_READ_WINDOW_BYTES = 64 << 10
# Without kafka.bootstrap.servers, the broker that serves the root is asked (Metadata) which
# partitions it holds replicas of, for at most this long; the files are read without that
# check when it does not answer.
OWNER_TIMEOUT_S = 5.0


# ------------------------------------------------------------------------------- input partition

class SeglogInputPartition(InputPartition):
    """One task's work: offsets [start, until) of one partition, and how to reach it."""

    def __init__(self, root: str, storage_options: dict, topic: str, partition: int, start: int,
                 until: int, isolation: str, include_headers: bool, fail_on_data_loss: bool,
                 fetch_bytes: int = DEFAULT_FETCH_BYTES, tiered: dict | None = None,
                 broker_bound: bool = False, replicas: tuple | None = None):
        super().__init__(None)
        self.tiered = tiered            # rsm.config.* options: the remote tier's credentials
        self.root = root
        self.storage_options = storage_options
        self.topic = topic
        self.partition = partition
        self.start = start
        self.until = until
        self.isolation = isolation
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.fetch_bytes = fetch_bytes
        # `until` came from the broker serving the root (kafka.bootstrap.servers): its HW or LSO,
        # which the root's checkpoint may not show yet (Apache Kafka writes it every 5 s).
        self.broker_bound = broker_bound
        # Several log dirs (`path` a comma-separated list): the `Replica`s of this partition
        # there, in the order given; the task reads one on its own host when it can.
        self.replicas = replicas

    def __repr__(self) -> str:          # storage options (credentials) are never printed
        return (f"SeglogInputPartition({self.topic}-{self.partition} [{self.start}, {self.until}),"
                f" {self.isolation})")


def _input_partitions(opts: SourceOptions, ranges: list[OffsetRange], logs=None) -> list[SeglogInputPartition]:
    pieces = split_ranges(ranges, min_partitions=opts.min_partitions,
                          max_records_per_partition=opts.max_records_per_partition)
    replicas = logs.replicas if isinstance(logs, _ReplicaLogs) else (lambda tp: None)
    return [SeglogInputPartition(opts.root, opts.storage_options, r.topic, r.partition, r.start,
                                 r.until, opts.isolation, opts.include_headers, opts.fail_on_data_loss,
                                 opts.fetch_bytes, opts.tiered,
                                 broker_bound=opts.bootstrap_servers is not None,
                                 replicas=replicas((r.topic, r.partition)))
            for r in pieces]


# ------------------------------------------------------------------------------- data loss

def data_loss(topic: str, partition: int, wanted: int, log_start: int, fail: bool, what: str = "") -> int:
    """Offsets below the log start are gone: fail (failOnDataLoss=true) or skip to the log start."""
    message = (f"{topic}-{partition}: offsets {wanted} to {log_start - 1} are no longer in the log"
               f" (it now starts at offset {log_start}: removed by retention or deleted){what}")
    if fail:
        raise OffsetOutOfRangeError(
            f"data loss: {message}. Set the option failOnDataLoss=false to skip lost data with a warning"
            " instead of failing the query",
            topic=topic, partition=partition, offset=wanted, log_start_offset=log_start)
    logger.warning("failOnDataLoss=false: %s; skipping to offset %d", message, log_start)
    return log_start


def damaged(log, offset: int, exc: CorruptRecordError, fail: bool) -> int:
    """Bytes of the log that cannot be read at `offset` (the error names the segment file and
    the byte position in it): fail (failOnDataLoss=true) or skip exactly the unreadable range
    with a warning, returning the offset to go on from."""
    if fail:
        raise CorruptRecordError(
            f"{exc.reason}; set the option failOnDataLoss=false to skip the damaged range with a"
            " warning instead of failing the query", file=exc.file, position=exc.position) from exc
    next_offset, what = log.skip_damage(offset, exc)
    logger.warning("failOnDataLoss=false: %s-%d: %s; skipping to offset %d", log.topic, log.partition,
                   what, next_offset)
    return next_offset


# ------------------------------------------------------------------------------- task side

class _Constants:
    """The constant topic and partition columns, built once and sliced per batch (no copy)."""

    def __init__(self, topic: str, partition: int):
        self.topic = topic.encode()
        self.partition = partition
        self.capacity = 0
        self.topic_array = None
        self.partition_array = None

    def columns(self, rows: int) -> tuple[pa.Array, pa.Array]:
        if rows > self.capacity:
            cap = max(rows, 1 << 16)
            width = len(self.topic)
            offsets = np.arange(0, (cap + 1) * width, width, dtype=np.int32) if width else \
                np.zeros(cap + 1, dtype=np.int32)
            self.topic_array = pa.Array.from_buffers(
                pa.string(), cap, [None, pa.py_buffer(offsets), pa.py_buffer(self.topic * cap)])
            # from_buffers, not pa.array(ndarray): that one imports pandas, whose objects the
            # Spark worker's gc.collect() after every task would then walk.
            self.partition_array = pa.Array.from_buffers(
                pa.int32(), cap, [None, pa.py_buffer(np.full(cap, self.partition, dtype=np.int32))])
            self.capacity = cap
        return self.topic_array.slice(0, rows), self.partition_array.slice(0, rows)


class _WindowBuffers:
    """Read-window buffers kept for the next task of the same (reused) Python worker.

    A fresh multi-MiB bytearray costs a zero-filled page per 4 KiB the read touches; a task
    takes a kept buffer and gives it back when done. At most `keep` are kept (one per task
    that runs at the same time in this process, usually one).
    """

    def __init__(self, keep: int = 2):
        self.keep = keep
        self._free: list[bytearray] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> bytearray:
        with self._lock:
            if self._free:
                buffer = max(self._free, key=len)
                self._free.remove(buffer)
                if len(buffer) >= size:
                    return buffer
        return bytearray(size)

    def give_back(self, buffer: bytearray) -> None:
        with self._lock:
            self._free.append(buffer)
            self._free.sort(key=len, reverse=True)
            del self._free[self.keep:]


_WINDOW_BUFFERS = _WindowBuffers()
# Arrow column buffers, handed out again once Spark has sent (and dropped) the batch using them.
_COLUMN_BUFFERS = BufferRecycler()


def read_partition(p: SeglogInputPartition):
    """Yield Arrow record batches of the exact Kafka schema for offsets [p.start, p.until)."""
    if getattr(p, "replicas", None):
        root, log, broker_bound = choose_replica(p)
    else:
        root = LogRoot.open(p.root, storage_options=p.storage_options, read_only=True,
                            defaults=getattr(p, "tiered", None))
        log, broker_bound = None, p.broker_bound
    return _read(p, root, log, broker_bound)


def _read(p: SeglogInputPartition, root: LogRoot, log, broker_bound: bool):
    schema = arrow_schema(p.include_headers)
    buffer = None
    try:
        # Only what reading [start, until) needs: not every segment's index nor the producer state.
        if log is None:
            log = root.log(p.topic, p.partition, read_range=(p.start, p.until))
        name = f"{p.topic}-{p.partition}"
        constants = _Constants(p.topic, p.partition)
        offset = p.start
        window = min(FIRST_READ_WINDOW_BYTES, p.fetch_bytes)
        if offset < log.log_start_offset:
            offset = data_loss(p.topic, p.partition, offset, log.log_start_offset, p.fail_on_data_loss)
        rechecked = False
        if broker_bound:
            log.assume_high_watermark(p.until)
        while offset < p.until:
            try:
                if buffer is None or len(buffer) < window:
                    if buffer is not None:
                        _WINDOW_BUFFERS.give_back(buffer)
                    buffer = _WINDOW_BUFFERS.take(window)
                # Read into one reused buffer: the decoder copies what it keeps into Arrow
                # buffers, so the window's bytes are free again at the next read.
                fetch = log.read(offset, window, isolation=p.isolation, view=True, buffer=buffer)
                window = min(p.fetch_bytes, window * 4)
            except OffsetOutOfRangeError as exc:
                if exc.log_start_offset is not None and offset < exc.log_start_offset:
                    offset = data_loss(p.topic, p.partition, offset, exc.log_start_offset,
                                       p.fail_on_data_loss, " while the task was reading it")
                    continue
                raise
            except CorruptRecordError as exc:
                offset = damaged(log, offset, exc, p.fail_on_data_loss)
                continue
            data = fetch.data
            if not data and broker_bound and not rechecked:
                # A read that refreshed the view (a segment replaced under it) took the stored HW
                # again: look at the log once more with the broker's bound.
                rechecked = True
                log.refresh()
                log.assume_high_watermark(p.until)
                continue
            if not data:
                bound = fetch.last_stable_offset if p.isolation == "read_committed" else fetch.high_watermark
                if bound >= p.until:
                    return      # no whole batch left below the bound (a Kafka copy's HW can cut one)
                message = (f"{name}: the log now ends at offset {bound}, below the planned end {p.until}"
                           f" (was it truncated or deleted?)")
                if p.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"data loss: {message}. Set the option failOnDataLoss=false to skip it",
                        topic=p.topic, partition=p.partition, offset=offset, log_end_offset=bound)
                logger.warning("failOnDataLoss=false: %s; stopping this range at %d", message, offset)
                return
            aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in fetch.aborted] or None
            where = {"source": fetch.source or name, "base_position": fetch.position}
            try:
                decoded = decode_batches(data, min_offset=offset, max_offset=p.until,
                                         include_headers=p.include_headers, aborted=aborted,
                                         allocate=_COLUMN_BUFFERS, **where)
            except CorruptRecordError as exc:
                good = (exc.position or 0) - fetch.position
                if exc.file != where["source"] or good <= 0:
                    offset = damaged(log, offset, exc, p.fail_on_data_loss)
                    continue
                # the batches before the damaged one are fine: serve them, fail or skip after
                decoded = decode_batches(data[:good], min_offset=offset, max_offset=p.until,
                                         include_headers=p.include_headers, aborted=aborted,
                                         allocate=_COLUMN_BUFFERS, **where)
            del data, fetch     # no view of the window outlives this read
            batch = decoded.batch
            rows = batch.num_rows
            if rows:
                topic_col, partition_col = constants.columns(rows)
                cols = batch.columns     # offset, timestamp, timestampType, key, value[, headers]
                arrays = [cols[3], cols[4], topic_col, partition_col, cols[0], cols[1], cols[2]]
                if p.include_headers:
                    arrays.append(cols[5])
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
            if decoded.next_offset <= offset:
                return
            offset = decoded.next_offset
    finally:
        if buffer is not None:
            _WINDOW_BUFFERS.give_back(buffer)
        root.close()


# ------------------------------------------------------------------------------- driver side

class _Logs:
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
            self._root = LogRoot.open(self.opts.root, storage_options=self.opts.storage_options,
                                      read_only=True, defaults=self.opts.tiered)
        return self._root

    def topic_partitions(self) -> list:
        """The partitions the subscription covers right now (new topics and partitions included)."""
        opts, root = self.opts, self.root
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
            self._broker = BrokerClient(self.opts.bootstrap_servers, client_id="seglog-spark-source")
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
        opts = self.opts
        if opts.strategy == "assign":
            topics = sorted({t for t, _p in opts.assigned})
        elif opts.strategy == "subscribe":
            topics = sorted(opts.topics)
        else:
            topics = None
        codes = client.metadata(topics)
        if opts.strategy == "assign":
            return [tp for tp in opts.assigned if tp in client.partitions]
        names = {t for t, code in codes.items() if code == NONE and t is not None
                 and (opts.strategy == "subscribe" or (opts.matches(t) and not t.startswith("__")))}
        return sorted(tp for tp in client.partitions if tp[0] in names)

    def _check_replicas(self) -> None:
        from logcore.wire.client import KafkaError
        client = self._metadata_client()
        if client is None:
            return
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
            log = self.root.log(*tp)
            self._logs[tp] = log
            self._fresh.add(tp)
        return log

    def refresh(self, tps) -> None:
        tps = list(tps)
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
    pyspark_seglog.replicas), each read as a root of its own without asking brokers."""
    if len(opts.roots) > 1:
        return _ReplicaLogs(opts, lambda url: _Logs(dataclasses.replace(opts, root=url,
                                                                        bootstrap_servers=None)))
    return _Logs(opts)


def _check_covers(spec: OffsetSpec, tps: list) -> None:
    """A JSON of offsets/timestamps must name exactly the subscribed partitions (as Spark asks)."""
    named, current = set(spec.offsets), set(tps)
    missing = sorted(current - named)
    extra = sorted(named - current)
    if missing:
        t, p = missing[0]
        raise InvalidConfigError(
            f"option {spec.option} gives no value for {t}-{p}; give every partition of the subscribed"
            f" topics ({', '.join(f'{a}-{b}' for a, b in sorted(current))}): -2 means earliest, -1 latest")
    if extra:
        t, p = extra[0]
        raise InvalidConfigError(
            f"option {spec.option} names {t}-{p}, which is not a partition of the subscribed topics"
            f" ({', '.join(f'{a}-{b}' for a, b in sorted(current)) or 'none exist yet'})")


def resolve(spec: OffsetSpec, tps: list, logs: _Logs, opts: SourceOptions, *, starting: bool) -> dict:
    """Offsets for `spec` over `tps`: {(topic, partition): offset}, never above latest."""
    out = {}
    if spec.kind in ("offsets", "timestamps"):
        _check_covers(spec, tps)
    for tp in tps:
        earliest, latest = logs.earliest(tp), logs.latest(tp)
        if spec.kind == "earliest":
            out[tp] = earliest
        elif spec.kind == "latest":
            out[tp] = latest
        elif spec.kind == "offsets":
            wanted = spec.offsets[tp]
            if wanted == EARLIEST_TIMESTAMP:
                out[tp] = earliest
            elif wanted == LATEST_TIMESTAMP:
                out[tp] = latest
            elif wanted < earliest:
                out[tp] = data_loss(tp[0], tp[1], wanted, earliest, opts.fail_on_data_loss,
                                    f" (option {spec.option})")
            elif not starting:
                out[tp] = min(wanted, latest)       # never past the HW (LSO)
            else:
                out[tp] = wanted
        else:
            ts = spec.timestamp if spec.kind == "timestamp" else spec.offsets[tp]
            found = logs.log(tp).offset_for_timestamp(ts)
            if found is not None:
                out[tp] = max(earliest, min(found[0], latest))
            elif not starting or opts.timestamp_strategy == "latest":
                out[tp] = latest
            else:
                raise InvalidConfigError(
                    f"option {spec.option}: no record of {tp[0]}-{tp[1]} has a timestamp >= {ts};"
                    " set startingOffsetsByTimestampStrategy=latest to start at the latest offset instead")
    return out


class _ReaderBase:
    """State shared by both readers: the options and the lazily opened root."""

    opts: SourceOptions

    def _driver_logs(self) -> _Logs:
        if self.__dict__.get("_logs") is None:
            self._logs = open_logs(self.opts)
        return self._logs

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_logs"] = None           # open handles stay on the driver
        return state

    def read(self, partition):
        freeze_import_heap()
        if not isinstance(partition, SeglogInputPartition):
            # A batch query with nothing to read: partitions() was empty and Spark runs one
            # task with a placeholder partition.
            return iter(())
        return read_partition(partition)


@plain_errors
class SeglogStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """readStream.format("seglog"): Spark's Kafka micro-batch source over a log root."""

    def __init__(self, options: dict, schema):
        self.opts = parse_source_options(options, streaming=True)
        self.schema = schema
        self._logs = None
        self._available_now: dict | None = None     # offsets recorded for Trigger.AvailableNow
        self._latest: dict | None = None            # latest available, for progress (lag)
        self._last_trigger_ms: float | None = None  # for minOffsetsPerTrigger / maxTriggerDelay
        self._committed: dict | None = None

    # -- limits
    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        logs = self._driver_logs()
        tps = logs.topic_partitions()
        logs.refresh(tps)
        self._available_now = {tp: logs.latest(tp) for tp in tps}

    # -- offsets
    def initialOffset(self) -> dict:
        logs = self._driver_logs()
        tps = logs.topic_partitions()
        logs.refresh(tps)
        return to_spark(resolve(self.opts.starting, tps, logs, self.opts, starting=True))

    def latestOffset(self, start: dict, limit) -> dict:
        logs = self._driver_logs()
        begin_given = from_spark(start)
        # Partitions that vanished (a deleted topic) are not read; their offsets are carried on.
        if self._available_now is not None:
            live = sorted(self._available_now)
        else:
            live = logs.topic_partitions()
        logs.refresh(live)
        latest = {tp: logs.latest(tp) for tp in live}
        begin = {}
        for tp in live:
            if tp in begin_given:
                begin[tp] = begin_given[tp]
                if not self.opts.fail_on_data_loss:
                    begin[tp] = max(begin[tp], logs.earliest(tp))
            else:
                begin[tp] = logs.earliest(tp)       # a new partition starts at earliest
        self._latest = dict(latest)
        if self._available_now is not None:
            latest = {tp: min(latest[tp], self._available_now.get(tp, begin[tp])) for tp in live}
        latest = {tp: max(latest[tp], begin[tp]) for tp in live}

        if (self.opts.min_offsets_per_trigger is not None and self._available_now is None
                and not isinstance(limit, ReadAllAvailable)):
            now = time.monotonic() * 1000
            if self._last_trigger_ms is None:
                self._last_trigger_ms = now
            backlog = sum(latest[tp] - begin[tp] for tp in live)
            if (backlog < self.opts.min_offsets_per_trigger
                    and now - self._last_trigger_ms < self.opts.max_trigger_delay_ms):
                return start            # not enough yet: no batch this trigger
            self._last_trigger_ms = now

        end = prorate(begin, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else latest
        result = dict(begin_given)      # partitions that vanished keep their offset
        result.update(end)
        return to_spark(result)

    def reportLatestOffset(self):
        return None if self._latest is None else to_spark(self._latest)

    def partitions(self, start: dict, end: dict):
        begin_given, until = from_spark(start), from_spark(end)
        if begin_given == until:
            return []
        logs = self._driver_logs()
        ranges = []
        for tp, stop in sorted(until.items()):
            if tp in begin_given:
                first = begin_given[tp]
            else:
                first = min(logs.earliest(tp), stop)     # a new partition: from earliest
            if first > stop:
                message = (f"{tp[0]}-{tp[1]}: the planned range [{first}, {stop}) runs backwards"
                           " (was the log truncated or recreated?)")
                if self.opts.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"data loss: {message}. Set the option failOnDataLoss=false to skip it",
                        topic=tp[0], partition=tp[1], offset=first)
                logger.warning("failOnDataLoss=false: %s; skipped", message)
                continue
            if first < stop and logs.seen(tp) and first < logs.earliest(tp):
                first = min(stop, data_loss(tp[0], tp[1], first, logs.earliest(tp),
                                            self.opts.fail_on_data_loss))
            ranges.append(OffsetRange(tp[0], tp[1], first, stop))
        return _input_partitions(self.opts, ranges, logs)

    def commit(self, end: dict) -> None:
        self._committed = end           # offsets live in Spark's checkpoint; nothing to do here

    def stop(self) -> None:
        if self.__dict__.get("_logs") is not None:
            self._logs.close()


@plain_errors
class SeglogBatchReader(_ReaderBase, DataSourceReader):
    """read.format("seglog"): the offsets between startingOffsets and endingOffsets, once."""

    def __init__(self, options: dict, schema):
        self.opts = parse_source_options(options, streaming=False)
        self.schema = schema
        self._logs = None

    def partitions(self):
        logs = open_logs(self.opts)
        try:
            tps = logs.topic_partitions()
            logs.refresh(tps)
            start = resolve(self.opts.starting, tps, logs, self.opts, starting=True)
            end = resolve(self.opts.ending, tps, logs, self.opts, starting=False)
            ranges = []
            for tp in tps:
                if start[tp] > end[tp]:
                    raise InvalidConfigError(
                        f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} ({self.opts.starting.option})"
                        f" is after the ending offset {end[tp]} ({self.opts.ending.option})")
                ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
            return _input_partitions(self.opts, ranges, logs)
        finally:
            logs.close()
