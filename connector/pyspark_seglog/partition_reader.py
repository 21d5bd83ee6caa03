"""The source's task side: `SeglogInputPartition` (one task's offset range) and `read_partition`,
which reads it from where the option readFrom says (read_path.py): the files here (`open_files`
opens the partition read-only, with several log dirs a replica on the task's own host first:
replicas.py; `read_files` decodes bounded windows of whole batches straight into Arrow), or
through the brokers (broker_reader.py)."""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql.datasource import InputPartition

from logcore.errors import CorruptRecordError, OffsetOutOfRangeError, ResourceNotFoundError
from logcore.log.log_root import LogRoot, partition_dir
from logcore.tiered import install_remote_tier
from logcore.records.arrow import decode_batches
from logcore.records.batch import F_BASE_OFFSET, F_LAST_DELTA, batch_fields
from logcore.storage.read_facts import REPLAY, ReadFacts
from pyspark_seglog.data_loss import damaged, data_loss
from pyspark_seglog.kafka_rows import COLUMN_BUFFERS, ConstantColumns
from pyspark_seglog.read_path import READ_PATHS
from pyspark_seglog.replicas import choose_replica
from pyspark_seglog.schema import arrow_schema
from pyspark_seglog.source_options import DEFAULT_FETCH_BYTES

install_remote_tier()  # roots that enable tiering have a remote tier

# the source's logger, as before this module was split from source.py (users configure it by name)
logger = logging.getLogger("pyspark_seglog.source")

# A task reads and decodes bounded windows of whole batches, at most the option
# kafka.max.partition.fetch.bytes (8 MiB by default, about 70k rows of 100-byte values): bounds a
# task's memory and makes each yielded Arrow batch large. On local disk a task starts with a small
# window and grows it, so that a tiny range (a micro-batch of a few records) reads and checks a
# few KiB.
FIRST_READ_WINDOW_BYTES = 64 << 10
# On an object store each read is a round trip: each window (the first included) is sized from
# the offset index to hold the rest of the range, up to the fetch bound (the next one read ahead),
# with this much slack for the batches past the last index entry below the range's end
# (index.interval.bytes is 4 KiB by default).
RANGE_SLACK_BYTES = 64 << 10
# On an object store a window is also at most this, read in one GET, and the next window's GET
# is sent as soon as the current one's bytes are in, so that it overlaps the decoding and Spark
# taking the batch. At 1M records (30 MB per task) 2 MiB windows of one GET each left a task
# waiting on the S3 server for 55-70% of its time, and the server spent 1.5-2x the CPU per GB on
# 2 MiB GETs that it spends on 8 MiB ones (SeaweedFS, local[2]). A task holds at most two windows'
# bytes at a time (the one being decoded and the next one arriving): 16 MiB at this bound.
STORE_WINDOW_BYTES = 8 << 20
# A task's first window on an object store is at most this (one GET): its first rows come one
# short round trip after its open (an 8 MiB first window took 37 ms against 14 ms), and the
# larger windows after it are read ahead.
FIRST_STORE_WINDOW_BYTES = 2 << 20


class SeglogInputPartition(InputPartition):
    """One task's work: offsets [start, until) of one partition, and how to reach it."""

    def __init__(self, root: str, storage_options: dict, topic: str, partition: int, start: int,
                 until: int, isolation: str, include_headers: bool, fail_on_data_loss: bool,
                 fetch_bytes: int = DEFAULT_FETCH_BYTES, tiered: dict | None = None,
                 broker_bound: bool = False, replicas: tuple | None = None,
                 read_path: str = "files", bootstrap_servers: str | None = None, client_rack: str = "",
                 retry_timeout: float = 60.0, security=None, read_facts=None):
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
        # readFrom (read_path.py): the files, the brokers, or the files when this host sees them.
        self.read_path = read_path
        self.bootstrap_servers = bootstrap_servers
        self.client_rack = client_rack          # kafka.client.rack: fetch from a replica in this rack
        self.retry_timeout = retry_timeout      # seconds without progress before a fetch gives up
        self.security = security                # a KafkaSecurity (None: PLAINTEXT): the brokers' TLS / SASL
        # What the driver read of this partition while planning (an object store's listings,
        # topics file, partition state, last segment's indexes and tail: a ReadFacts): the
        # task's open answers from it instead of asking the store again.
        self.read_facts = read_facts

    def __repr__(self) -> str:          # storage options (credentials) are never printed
        return (f"SeglogInputPartition({self.topic}-{self.partition} [{self.start}, {self.until}),"
                f" {self.isolation}, readFrom={self.read_path})")


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


class _ReadAhead:
    """The next window's read on an object store, in flight while the current window is decoded
    and its Arrow batch handed to Spark (which writes it to the JVM): the GETs overlap both.

    At most one read is in flight per task, and the task's own thread touches the log only
    after taking its result (`take`), so the log is never read by two threads at once.
    """

    _pool: ThreadPoolExecutor | None = None
    _pool_lock = threading.Lock()

    def __init__(self):
        self._key = None
        self._future = None

    @classmethod
    def _executor(cls) -> ThreadPoolExecutor:
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="seglog-read-ahead")
            return cls._pool

    def start(self, key, read) -> None:
        self._key, self._future = key, self._executor().submit(read)

    def take(self, key):
        """The read started for `key` (its result or its exception), or None when none was
        started for it; a read started for another key is waited for and dropped."""
        future, started, self._future, self._key = self._future, self._key, None, None
        if future is None:
            return None
        if started != key:
            future.exception()      # let it finish: the log is the task's again
            return None
        return future

    def finish(self) -> None:
        if self._future is not None:
            self._future.exception()
            self._future = self._key = None


def _range_bytes(log, offset: int, until: int) -> int | None:
    """Bytes of the segment holding `offset` from its batch to `until`'s (an estimate from the
    offset index, with slack), or None when that segment is not open here (tiered)."""
    segments = log.segments
    if not segments or offset < segments[0].base_offset:
        return None
    seg = next(s for s in reversed(segments) if s.base_offset <= offset)
    begin = seg.offset_index.lookup(offset)[1]
    later = [s.base_offset for s in segments if s.base_offset > seg.base_offset]
    if later and until >= later[0] or until >= log.log_end_offset:
        end = seg.size()
    else:
        end = seg.offset_index.lookup(until)[1] + RANGE_SLACK_BYTES
    return max(0, end - begin)


def _first_window(log, offset: int, until: int, fetch_bytes: int, remote: bool) -> int:
    """The first read's size. On local disk a small one grown 4x per read (a read there is a copy
    from the page cache). On an object store the first is sized from the offset index: the
    whole range when it fits `fetch_bytes` (one GET: the round trip of a short first GET saved),
    else that bound."""
    window = min(FIRST_READ_WINDOW_BYTES, fetch_bytes)
    if remote:
        span = _range_bytes(log, offset, until)
        if span is not None:
            window = min(fetch_bytes, max(window, span))
    return window


def _offset_after(data) -> int | None:
    """The offset after the last whole batch in `data` (its headers scanned in C), or None when
    it holds none or a damaged header (the decoder then says what is wrong)."""
    try:
        fields = batch_fields(data, verify_crc=False, allow_partial_tail=True)
    except CorruptRecordError:
        return None
    if not len(fields):
        return None
    return int(fields[-1, F_BASE_OFFSET] + fields[-1, F_LAST_DELTA]) + 1


def read_partition(p: SeglogInputPartition):
    """Yield Arrow record batches of the exact Kafka schema for offsets [p.start, p.until), from
    the files or through the brokers as the option readFrom says (read_path.py)."""
    return READ_PATHS[p.read_path].read(p)


def open_files(p: SeglogInputPartition):
    """(root, log, broker_bound) of the files task `p` reads; raises SegLogError / OSError when
    this host cannot open them."""
    if getattr(p, "replicas", None):
        return choose_replica(p)
    planned = getattr(p, "read_facts", None)
    if planned is not None:
        try:
            # A copy: the open adds to its facts, and the same partition may be read again here.
            return _open_range(p, planned.for_folder(partition_dir(p.topic, p.partition)))
        except ResourceNotFoundError as exc:
            # Something the driver listed is gone (retention, a cleaner's swap, a deleted
            # topic): list again.
            logger.info("%s-%d: %s since planning; opening it again from a fresh listing",
                        p.topic, p.partition, exc)
    # No facts from the driver: the open still asks the store for each thing once.
    return _open_range(p, ReadFacts(REPLAY))


def _open_range(p: SeglogInputPartition, facts: ReadFacts):
    root = LogRoot.open(p.root, storage_options=p.storage_options, read_only=True,
                        defaults=getattr(p, "tiered", None), read_facts=facts)
    try:
        # Only what reading [start, until) needs: not every segment's index nor the producer state.
        log = root.log(p.topic, p.partition, read_range=(p.start, p.until))
    except BaseException:
        root.close()
        raise
    if not root.storage.is_local:
        # Open: later reads see a fresh listing and state (a segment deleted meanwhile is
        # found missing and the log refreshes its view); the segments' bytes stay known.
        root.storage.settle_reads()
    return root, log, p.broker_bound


def read_files(p: SeglogInputPartition, root: LogRoot, log, broker_bound: bool):
    schema = arrow_schema(p.include_headers)
    planned = getattr(p, "read_facts", None) is not None
    remote = not root.storage.is_local
    ahead = _ReadAhead()
    buffer = None
    try:
        name = f"{p.topic}-{p.partition}"
        constants = ConstantColumns(p.topic, p.partition)
        offset = p.start
        if offset < log.log_start_offset:
            offset = data_loss(p.topic, p.partition, offset, log.log_start_offset, p.fail_on_data_loss)
        bound = min(p.fetch_bytes, STORE_WINDOW_BYTES) if remote else p.fetch_bytes
        window = _first_window(log, offset, p.until, min(bound, FIRST_STORE_WINDOW_BYTES) if remote else bound,
                               remote)
        rechecked = False
        if broker_bound:
            log.assume_high_watermark(p.until)
        while offset < p.until:
            try:
                pending = ahead.take((offset, window))
                if pending is not None:
                    fetch = pending.result()
                elif remote:
                    # An object store's reads allocate their bytes (a GET's body): no buffer.
                    fetch = log.read(offset, window, isolation=p.isolation, view=True)
                else:
                    if buffer is None or len(buffer) < window:
                        if buffer is not None:
                            _WINDOW_BUFFERS.give_back(buffer)
                        buffer = _WINDOW_BUFFERS.take(window)
                    # Read into one reused buffer: the decoder copies what it keeps into Arrow
                    # buffers, so the window's bytes are free again at the next read.
                    fetch = log.read(offset, window, isolation=p.isolation, view=True, buffer=buffer)
                window = min(bound, window * 4)
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
            if not data and (broker_bound or planned) and not rechecked:
                # A read that refreshed the view (a segment replaced under it) took the stored HW
                # again: look at the log once more with the broker's bound. Opened from the
                # planner's facts, the listing may be older than the state it came with (the
                # driver re-read one and not the other): look at a fresh one before calling the
                # log short.
                rechecked = True
                log.refresh()
                if broker_bound:
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
            if remote:
                # The next window's GETs go out now, before this one is decoded: they overlap
                # the decoding and Spark taking the batch (its start: after this window's last
                # whole batch, where the decoder's next offset is).
                following = _offset_after(data)
                if following is not None and following < p.until:
                    span = _range_bytes(log, following, p.until)
                    if span is not None:
                        window = min(bound, max(window, span))
                    ahead.start((following, window), lambda at=following, size=window: log.read(
                        at, size, isolation=p.isolation, view=True))
            aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in fetch.aborted] or None
            where = {"source": fetch.source or name, "base_position": fetch.position}
            try:
                decoded = decode_batches(data, min_offset=offset, max_offset=p.until,
                                         include_headers=p.include_headers, aborted=aborted,
                                         allocate=COLUMN_BUFFERS, **where)
            except CorruptRecordError as exc:
                good = (exc.position or 0) - fetch.position
                if exc.file != where["source"] or good <= 0:
                    ahead.finish()      # the log is the task's alone while it handles the damage
                    offset = damaged(log, offset, exc, p.fail_on_data_loss)
                    continue
                # the batches before the damaged one are fine: serve them, fail or skip after
                decoded = decode_batches(data[:good], min_offset=offset, max_offset=p.until,
                                         include_headers=p.include_headers, aborted=aborted,
                                         allocate=COLUMN_BUFFERS, **where)
            del data, fetch     # no view of the window outlives this read
            batch = decoded.batch
            rows = batch.num_rows
            if decoded.next_offset <= offset:
                if rows:
                    yield constants.rows(batch, schema, p.include_headers)
                return
            offset = decoded.next_offset
            if rows:
                yield constants.rows(batch, schema, p.include_headers)
    finally:
        ahead.finish()
        if buffer is not None:
            _WINDOW_BUFFERS.give_back(buffer)
        root.close()
