# Over 600 lines: the sink's writers (stream, batch, broker-routed) share one commit protocol and its staging helpers.
"""The seglog sink: `df.writeStream.format("seglog")` (exactly-once) and `df.write.format("seglog")`.

Protocol (docs/sink-protocol.md has the full argument):
- tasks (`write`) encode their rows into RecordBatch v2 batches per target partition and stage
  them under `<root>/.seglog-staging/<query>/<batch>/<topic>-<p>/<task>-<attempt>-<uuid>-<n>`;
  nothing a task does is visible; the commit message lists the staged objects;
- the driver (`commit`) pins the batch's content in a manifest (first commit attempt wins), checks
  every target partition's commit marker (already has this batch: skip; another query: fenced),
  appends the staged batches (`Log.append_staged`) and commits each partition with the marker
  {"query", "batch"}; then records the batch as done and deletes the staging.
"""
from __future__ import annotations

import abc
import json
import logging
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from logcore.errors import (
    CommitFailedError,
    FencedWriterError,
    InvalidConfigError,
    SegLogError,
    TopicExistsError,
    TopicNotFoundError,
)
from logcore.log.log_root import LogRoot
import logcore.tiered  # noqa: F401 - registers the remote tier roots that enable tiering use
from logcore.records.batch import F_POSITION, batch_fields
from logcore.records.compression import CODEC_BY_NAME, Compression
from logcore.records.encode import encode_batch_run_into, encode_plain_run_into, plain_columns
from logcore.storage import open_storage
from logcore.storage.direct_writer import ALIGN, DirectFileWriter

from pyspark_seglog.buffer_pool import AlignedBufferPool
from pyspark_seglog.plain_errors import plain_errors
from pyspark_seglog.row_router import RowRouter, is_compacted, keyless_rows_error
from pyspark_seglog.sink_options import SinkOptions, default_batch_size, parse_sink_options
from pyspark_seglog.worker_heap import freeze_import_heap

logger = logging.getLogger(__name__)

STAGING_DIR = ".seglog-staging"
MANIFEST = "_manifest.json"
COMMITTED = "_committed.json"
# A batch job's staging folder holds this from planning until its commit or abort ends the job:
# a task attempt that finishes staging when it is gone (a straggler of an aborted job, a zombie
# of a committed one) removes what it staged itself, since no commit or abort will.
JOB_MARKER = "_job"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

# Staged parts: on local disk a task appends to a part file in chunks, and the commit adopts a
# part of at least `staging.adopt.bytes` as a segment (no copy); smaller parts are copied into
# the active segment, so that small micro-batches do not make a segment each.
DEFAULT_LOCAL_PART_BYTES = 256 << 20
DEFAULT_OBJECT_PART_BYTES = 8 << 20
_WRITE_CHUNK_BYTES = 4 << 20
# A local task writes each target partition's batches in chunks of _WRITE_CHUNK_BYTES, from two
# buffers per partition; with many target partitions the chunks shrink so that the buffers stay
# within this budget (down to _MIN_WRITE_CHUNK_BYTES).
_STAGING_MEMORY_BYTES = 64 << 20
_MIN_WRITE_CHUNK_BYTES = 64 << 10
_FIRST_BUFFER_BYTES = 256 << 10
# Encode buffers outlive a task: the worker's next task reuses their pages (see buffer_pool).
_STAGING_BUFFERS = AlignedBufferPool(keep_bytes=_STAGING_MEMORY_BYTES)
_MAX_KEPT_BATCHES = 1 << 16     # a part's batch_fields rows sent with its commit message (4.5 MiB)
_FIELD_ROW_BYTES = 9 * 8        # one batch_fields row: 9 int64
_NO_POSITIONS = np.empty(0, dtype=np.int64)
_PUBLISH_THREADS = 8
_publish_pool: tuple[int, ThreadPoolExecutor] | None = None     # (pid that made it, pool)
_publish_pool_lock = threading.Lock()

# ------------------------------------------------------------------------------- input schema

_BIN_OR_STR = "string or binary"
_ALLOWED = {
    "value": _BIN_OR_STR,
    "key": _BIN_OR_STR,
    "topic": "string",
    "partition": "int",
    "headers": "array<struct<key: string, value: binary>>",
    "timestamp": "timestamp",
}


def _headers_ok(dt) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = dt.elementType.fields
    return (len(fields) == 2 and fields[0].name == "key" and isinstance(fields[0].dataType, StringType)
            and fields[1].name == "value" and isinstance(fields[1].dataType, BinaryType))


def _type_ok(name: str, dt) -> bool:
    if name in ("value", "key"):
        return isinstance(dt, (StringType, BinaryType))
    if name == "topic":
        return isinstance(dt, StringType)
    if name == "partition":
        return isinstance(dt, IntegerType)
    if name == "timestamp":
        return isinstance(dt, TimestampType)
    return _headers_ok(dt)


def input_columns(schema, has_topic_option: bool) -> dict[str, str]:
    """Map of sink column (value, key, ...) -> the input's column name; checks names and types.

    Column names match case-insensitively, as in Spark's Kafka sink; other columns are ignored.
    """
    if isinstance(schema, str):
        raise InvalidConfigError(f"the seglog sink needs a resolved input schema, got {schema!r}")
    found: dict[str, str] = {}
    for f in schema.fields:
        name = f.name.lower()
        if name not in _ALLOWED:
            continue
        if name in found:
            raise InvalidConfigError(f"input has two `{name}` columns ({found[name]!r}, {f.name!r})")
        if not _type_ok(name, f.dataType):
            raise InvalidConfigError(
                f"input column `{f.name}` has type {f.dataType.simpleString()}; the seglog sink needs"
                f" {_ALLOWED[name]} there")
        found[name] = f.name
    if "value" not in found:
        raise InvalidConfigError(
            "input has no `value` column: the seglog sink needs `value` (string or binary), optionally"
            f" key, topic, partition, headers, timestamp (got: {', '.join(schema.fieldNames()) or 'no columns'})")
    if "topic" not in found and not has_topic_option:
        raise InvalidConfigError(
            "no topic: set the `topic` option or give the input a `topic` column (string)")
    return found


# ------------------------------------------------------------------------------- commit messages

@dataclass
class StagedPart:
    topic: str
    partition: int
    path: str            # relative to the root
    records: int
    task: int
    seq: int             # order of this part within its task and partition
    size: int = 0        # bytes (0 in manifests written before the field existed)
    # local disk: the part's batch_fields rows (int64, 9 per batch) as the task encoded them, so
    # the commit need not scan the part; never in a manifest (a replay scans and checks CRCs)
    batches: bytes | None = None

    def manifest_entry(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "batches"}


@dataclass
class SeglogCommitMessage(WriterCommitMessage):
    query_id: str
    batch_id: int
    task: int
    attempt: int
    parts: list[StagedPart] = field(default_factory=list)


def _staging(query_id: str, batch_id: int | None = None) -> str:
    base = f"{STAGING_DIR}/{query_id}"
    return base if batch_id is None else f"{base}/{batch_id}"


# ------------------------------------------------------------------------------- the writers

class _SeglogWriterBase(abc.ABC):
    streaming = True

    def __init__(self, options: dict, schema, overwrite: bool):
        self.opts: SinkOptions = parse_sink_options(options)
        self.columns = input_columns(schema, self.opts.topic is not None)
        self.overwrite = overwrite
        if self.opts.topic is not None and self.opts.bootstrap_servers is not None:
            # imported here: the Kafka protocol package is heavy, and file-root writes never use it
            from pyspark_seglog.broker_client import BrokerClient
            from pyspark_seglog.broker_sink import ensure_topic
            with BrokerClient(self.opts.bootstrap_servers, client_id="seglog-spark-sink") as client:
                ensure_topic(client, self.opts, self.opts.topic)
                if "key" not in self.columns:
                    policy = client.topic_config(self.opts.topic, ["cleanup.policy"]).get("cleanup.policy")
                    self._check_keys(policy or "")
        elif self.opts.bootstrap_servers is None:
            # fail (or create the topic) when the write is planned, not in the tasks; and a root
            # that a broker serves is written only through it (docs/connector.md)
            if self.opts.topic is not None:
                root = self.open_root()
            else:      # the topics come from a column: open only what exists (a served root does)
                try:
                    root = LogRoot.open(self.opts.root, storage_options=self.opts.storage_options)
                except SegLogError:
                    return
            try:
                owner = root.served_by()
                if owner is not None:
                    from logcore.log.root_owner import served_error
                    raise served_error(root.url, owner, "the seglog sink cannot write in path mode",
                                       f"set option kafka.bootstrap.servers={owner.bootstrap} to"
                                       " write through it")
                if self.opts.topic is not None:
                    self.ensure_topic(root, self.opts.topic)
                    if "key" not in self.columns:
                        self._check_keys(",".join(root.topic_config(self.opts.topic).cleanup_policy))
            finally:
                root.close()

    def _check_keys(self, policy: str) -> None:
        """No `key` column for a compacted topic: every row would be refused, so fail at start."""
        if is_compacted(policy):
            raise keyless_rows_error(self.opts.topic, policy, 0, 0, has_key_column=False)

    # -- shared helpers ---------------------------------------------------------------------
    def open_root(self) -> LogRoot:
        return LogRoot.open(self.opts.root, storage_options=self.opts.storage_options,
                            create=self.opts.auto_create)

    def ensure_topic(self, root: LogRoot, topic: str):
        try:
            return root.describe_topic(topic)
        except TopicNotFoundError:
            if not self.opts.auto_create:
                raise TopicNotFoundError(
                    f"topic {topic!r} does not exist in {root.url} and autoCreateTopics=false:"
                    " create it first (seglog topics --create) or set autoCreateTopics=true") from None
        try:
            return root.create_topic(topic, self.opts.topic_partitions, self.opts.topic_config)
        except TopicExistsError:         # another task or query created it meanwhile
            return root.describe_topic(topic)

    # -- tasks ------------------------------------------------------------------------------
    @abc.abstractmethod
    def _identity(self, ctx) -> tuple[str, int]:
        """(query or job id, batch id) of the task's write: each kind of writer says."""

    def write(self, iterator):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        freeze_import_heap()
        task = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        if self.opts.bootstrap_servers is not None:
            return self._produce(iterator, task, attempt)
        query_id, batch_id = self._identity(ctx)
        stager = _TaskStager(self, query_id, batch_id, task, attempt)
        try:
            for batch in iterator:
                stager.add(batch)
            stager.flush_all()
        except BaseException:
            # A failed or killed attempt's parts are never committed: remove them now, also when
            # the job's abort has already swept the staging (it may run before this task ends).
            stager.close()
            stager.discard()
            raise
        stager.close()
        if not self.streaming and not stager.storage.exists(f"{_staging(query_id)}/{JOB_MARKER}"):
            # The job ended (aborted, or committed without this attempt) while this attempt
            # staged: the marker goes before the staging is swept, so these parts may have
            # been made after the sweep.
            logger.info("seglog sink: job %s ended before task %s attempt %s finished; its parts"
                        " are removed", query_id, task, attempt)
            stager.discard()
            return SeglogCommitMessage(query_id, batch_id, task, attempt, [])
        return SeglogCommitMessage(query_id, batch_id, task, attempt, stager.parts)

    def _produce(self, iterator, task: int, attempt: int):
        """kafka.bootstrap.servers: produce this attempt's rows through the broker (at-least-once)."""
        from pyspark_seglog.broker_sink import TaskProducer
        producer = TaskProducer(self.opts, self.columns, task, attempt)
        try:
            for batch in iterator:
                producer.add(batch)
            producer.flush()
        finally:
            producer.close()
        return producer.message()

    # -- driver -----------------------------------------------------------------------------
    def _commit(self, messages, batch_id: int) -> None:
        if self.opts.bootstrap_servers is not None:
            _log_produced(messages, batch_id, "committed")
            return                          # the tasks' rows are in the broker's log already
        msgs = [m for m in messages if m is not None]
        if not msgs:
            return                          # no task succeeded: nothing was ever staged for commit
        query_id = msgs[0].query_id
        storage = open_storage(self.opts.root, self.opts.storage_options)
        staging = _staging(query_id, batch_id)
        parts = [p for m in msgs for p in m.parts]
        held: dict[tuple[str, int], tuple[int, str]] = {}
        if self.streaming:
            committed = _read_json(storage, f"{_staging(query_id)}/{COMMITTED}")
            # (epoch, writer id) this query last held each partition with: taken back at the
            # same epoch if nobody took the partition since (no leader-epoch entry per batch)
            held = _held_epochs(committed)
            if committed is not None and committed.get("batch", -1) >= batch_id:
                logger.info("seglog sink: batch %s of query %s was already committed", batch_id, query_id)
                _cleanup(storage, query_id, batch_id)
                return
            # The first commit attempt pins what this batch is (its manifest); a replay after a
            # crash publishes exactly that, whatever its own tasks staged.
            pinned = _read_json(storage, f"{staging}/{MANIFEST}")
            if pinned is not None:
                parts = [StagedPart(**p) for p in pinned["parts"]]
        by_partition: dict[tuple[str, int], list[StagedPart]] = {}
        for p in parts:
            by_partition.setdefault((p.topic, p.partition), []).append(p)
        root = LogRoot.open(self.opts.root, storage_options=self.opts.storage_options)
        pool = _shared_publish_pool()
        try:
            logs = {}
            try:
                # Take every target partition and check its owner before publishing any of them.
                # Partitions are taken, published and closed in parallel: each has its own fence,
                # files and fsyncs.
                opened = {tp: pool.submit(root.log, *tp, writer=True, resume=held.get(tp))
                          for tp in sorted(by_partition)}
                errors = []
                for tp, future in opened.items():
                    try:
                        logs[tp] = future.result()
                    except Exception as exc:          # noqa: BLE001 - re-raised below
                        errors.append(exc)
                if errors:
                    raise errors[0]
                if self.streaming:
                    for log in logs.values():
                        self._check_owner(log, query_id)
                if self.streaming and pinned is None:
                    manifest = {"query": query_id, "batch": batch_id, "parts": [p.manifest_entry() for p in parts]}
                    if storage.put_if_absent(f"{staging}/{MANIFEST}", json.dumps(manifest).encode()) is None:
                        raise CommitFailedError(
                            f"another commit of batch {batch_id} of query {query_id} is running")
                todo = []
                for tp, log in sorted(logs.items()):
                    marker = log.commit_marker
                    if (self.streaming and marker is not None and marker.get("query") == query_id
                            and marker.get("batch", -1) >= batch_id):
                        continue            # published by an earlier attempt of this commit
                    todo.append((log, sorted(by_partition[tp], key=lambda p: (p.task, p.seq))))
                commit_marker = {"query": query_id, "batch": batch_id} if self.streaming else None
                # Parts this job's tasks staged and reported in this driver's lifetime are as
                # they wrote them: their CRCs are not read back. A replay of a pinned manifest
                # (after a crash, maybe of the machine) checks every CRC.
                verify_crc = pinned is not None if self.streaming else False
                appended = _run_each(pool, [(_append_parts, storage, log, parts, self.opts.staging_adopt_bytes,
                                             verify_crc) for log, parts in todo])
                # The partitions whose parts are all in place commit together: they share rounds
                # of the root checkpoint files (and their fsyncs) instead of each rewriting them
                # in turn. A partition whose append failed stays as it was (the replay finishes it).
                committed = _run_each(pool, [(log.commit, commit_marker)
                                             for (log, _), error in zip(todo, appended) if error is None])
                for error in appended + committed:
                    if error is not None:
                        raise error
                held.update((tp, (log.leader_epoch, log.fence.writer_id)) for tp, log in logs.items())
            finally:
                _run_all(pool, [(log.close,) for log in logs.values()])
        finally:
            root.close()
        if self.streaming:
            # Read by the next commit, after the logs released their partitions (close above).
            epochs = [[topic, p, epoch, writer] for (topic, p), (epoch, writer) in sorted(held.items())]
            storage.write_atomic(f"{_staging(query_id)}/{COMMITTED}",
                                 json.dumps({"batch": batch_id, "epochs": epochs}).encode())
        else:
            _end_job(storage, query_id)
        _cleanup(storage, query_id, batch_id)

    def _check_owner(self, log, query_id: str) -> None:
        marker = log.commit_marker
        if marker is None or "query" not in marker or marker["query"] == query_id:
            return
        if self.opts.takeover:
            logger.warning("seglog sink: query %s takes over %s-%s from query %s (takeover=true)",
                           query_id, log.topic, log.partition, marker["query"])
            return
        raise FencedWriterError(
            f"{log.topic}-{log.partition} was last written by streaming query {marker['query']}"
            f" (batch {marker.get('batch')}); this query is {query_id}. Only one query writes a"
            " topic: stop the other one, or set takeover=true on this one (the other query is then"
            " fenced at its next commit)")

    def _abort(self, messages, batch_id: int) -> None:
        if self.opts.bootstrap_servers is not None:
            _log_produced(messages, batch_id, "aborted (rows already produced stay in the topic)")
            return
        msgs = [m for m in messages if m is not None]
        if not msgs:
            return      # nothing known; leftovers go with the next commit's cleanup
        storage = open_storage(self.opts.root, self.opts.storage_options)
        staging = _staging(msgs[0].query_id, batch_id)
        if storage.exists(f"{staging}/{MANIFEST}"):
            # an earlier commit attempt pinned this batch: its parts must survive for the replay
            pinned = {p["path"] for p in _read_json(storage, f"{staging}/{MANIFEST}")["parts"]}
            for m in msgs:
                for p in m.parts:
                    if p.path not in pinned:
                        storage.delete(p.path)
        elif storage.exists(staging):
            storage.delete_dir(staging)


def _log_produced(messages, batch_id: int, outcome: str) -> None:
    rows = sum(sum(m.records.values()) for m in messages if m is not None)
    logger.info("seglog sink (through a broker): batch %s %s; %d rows produced by %d of %d tasks",
                batch_id, outcome, rows, sum(m is not None for m in messages), len(messages))


def _append_parts(storage, log, parts: list[StagedPart], adopt_bytes: int, verify_crc: bool) -> None:
    """Append one partition's staged parts in order (not committed: its HW stays). Runs of
    parts big enough to adopt are adopted together (one folder fsync, one roll per run)."""
    i = 0
    while i < len(parts):
        run = []
        while i + len(run) < len(parts):
            part = parts[i + len(run)]
            if (part.size or storage.size(part.path)) < adopt_bytes:
                break
            fields = None if part.batches is None else np.frombuffer(part.batches, dtype=np.int64).reshape(-1, 9)
            run.append((part.path, fields))
        # A task leaves the blocks of its parts' batch headers in the page cache (see
        # _TaskStager._header_blocks): no need to start reading them first.
        i += len(log.adopt_staged_many(run, verify_crc=verify_crc, headers_cached=True)) if run else 0
        if i < len(parts):           # too small, or not adoptable: copied into the log
            log.append_staged(storage.read(parts[i].path))
            i += 1


def _held_epochs(committed: dict | None) -> dict[tuple[str, int], tuple[int, str]]:
    """`_committed.json`'s "epochs": [[topic, partition, epoch, writer id], ...] (none in files
    written before it was recorded, and for a query's first batch)."""
    if committed is None:
        return {}
    return {(str(topic), int(p)): (int(epoch), str(writer))
            for topic, p, epoch, writer in committed.get("epochs", [])}


def _shared_publish_pool() -> ThreadPoolExecutor:
    """The driver's threads that take, publish and close partitions, kept from one commit to the
    next: starting them anew was a visible part of a commit's wall time. Every commit waits for
    all it submitted (`_run_all`), so commits may share it. A forked child makes its own (the
    parent's threads do not exist there)."""
    global _publish_pool
    with _publish_pool_lock:
        if _publish_pool is None or _publish_pool[0] != os.getpid():
            _publish_pool = (os.getpid(), ThreadPoolExecutor(_PUBLISH_THREADS, thread_name_prefix="seglog-publish"))
        return _publish_pool[1]


def _run_each(pool: ThreadPoolExecutor, calls: list[tuple]) -> list[BaseException | None]:
    """Run every call (a function and its arguments) in the pool; each one's error or None."""
    futures = [pool.submit(*call) for call in calls]
    return [f.exception() for f in futures]


def _run_all(pool: ThreadPoolExecutor, calls: list[tuple]) -> None:
    """Run every call (a function and its arguments) in the pool; raise the first error."""
    for error in _run_each(pool, calls):
        if error is not None:
            raise error


@plain_errors
class SeglogStreamWriter(_SeglogWriterBase, DataSourceStreamArrowWriter):
    """writeStream.format("seglog"): exactly-once per (query id, batch id)."""

    streaming = True

    def _identity(self, ctx) -> tuple[str, int]:
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if not query_id or batch_id is None:
            raise InvalidConfigError(
                f"seglog stream writer: the task has no {QUERY_ID_PROPERTY} / {BATCH_ID_PROPERTY}"
                " local property (is this a streaming query?)")
        return query_id, int(batch_id)

    def commit(self, messages, batchId: int) -> None:
        self._commit(messages, batchId)

    def abort(self, messages, batchId: int) -> None:
        self._abort(messages, batchId)


@plain_errors
class SeglogBatchWriter(_SeglogWriterBase, DataSourceArrowWriter):
    """df.write.format("seglog"): append only; each partition gets the job's rows in one commit."""

    streaming = False

    def __init__(self, options: dict, schema, overwrite: bool):
        if overwrite:
            raise InvalidConfigError(
                "the seglog sink only appends: save mode Overwrite is not supported; write with"
                " df.write.format(\"seglog\").mode(\"append\"), as with Spark's Kafka sink")
        super().__init__(options, schema, overwrite)
        # made when the write is planned; this instance is pickled to the tasks and to commit()
        self.job_id = f"job-{uuid.uuid4().hex}"
        if self.opts.bootstrap_servers is None:
            storage = open_storage(self.opts.root, self.opts.storage_options)
            storage.write_atomic(f"{_staging(self.job_id)}/{JOB_MARKER}", b"", durable=False)

    def _identity(self, ctx) -> tuple[str, int]:
        return self.job_id, 0

    def commit(self, messages) -> None:
        self._commit(messages, 0)
        self._sweep()           # a job none of whose tasks staged anything

    def abort(self, messages) -> None:
        if self.opts.bootstrap_servers is None:
            _end_job(open_storage(self.opts.root, self.opts.storage_options), self.job_id)
        self._abort(messages, 0)
        self._sweep()

    def _sweep(self) -> None:
        if self.opts.bootstrap_servers is not None:
            return
        storage = open_storage(self.opts.root, self.opts.storage_options)
        _end_job(storage, self.job_id)
        if storage.exists(_staging(self.job_id)):
            storage.delete_dir(_staging(self.job_id))


# ------------------------------------------------------------------------------- staging

def _read_json(storage, path: str):
    if not storage.exists(path):
        return None
    return json.loads(storage.read(path))


def _end_job(storage, job_id: str) -> None:
    """Remove a batch job's marker, before its staging is swept (see JOB_MARKER)."""
    storage.delete(f"{_staging(job_id)}/{JOB_MARKER}", missing_ok=True)


def _cleanup(storage, query_id: str, batch_id: int) -> None:
    """Delete the staging of this batch and of every older batch of the query."""
    base = _staging(query_id)
    if not storage.exists(base):
        return
    for name in storage.list_dir(base):
        if name.isdigit() and int(name) <= batch_id:
            storage.delete_dir(f"{base}/{name}")
    if not any(n.isdigit() for n in storage.list_dir(base)) and not storage.exists(f"{base}/{COMMITTED}"):
        storage.delete_dir(base)


class _PartBuffer:
    """A target partition's encoded batches not yet staged: reusable, page-aligned buffers, so
    encoding costs no allocation (and no fresh pages) per call, and a local part file takes them
    with O_DIRECT. On local disk there are two: the task encodes into one while the other is
    being written (`writing`) on the stager's writer thread. A buffer may start with a few bytes
    already counted in the open part (the unaligned tail carried over from the last write)."""

    def __init__(self):
        self.data = _STAGING_BUFFERS.take(_FIRST_BUFFER_BYTES)
        self.spare = None
        self.writing = None     # the Future of the spare buffer's write
        self.fill = 0
        self.kept = 0           # bytes at the start that belong to the open part already
        self.records = 0
        self.part_base = 0      # the position in the open (or next) part of data[0]
        self.fields: list[bytes] = []      # local: batch_fields rows of the open part (int64 bytes)
        # local: the same rows not yet written out, and positions of headers a write left for
        # the next (their blocks were carried over): see _TaskStager._header_blocks
        self.heads: list[bytes] = []
        self.head_rest = _NO_POSITIONS

    def wait(self) -> None:
        """Wait for the spare buffer's write; raise its error."""
        writing, self.writing = self.writing, None
        if writing is not None:
            writing.result()


class _TaskStager(RowRouter):
    """One task attempt's rows: routed, encoded and staged per target partition."""

    def __init__(self, writer: _SeglogWriterBase, query_id: str, batch_id: int, task: int, attempt: int):
        super().__init__(writer.opts, writer.columns, task)
        self.w = writer
        self.prefix = _staging(query_id, batch_id)
        self.name = f"{task}-{attempt}-{uuid.uuid4().hex[:12]}"
        self.storage = open_storage(self.opts.root, self.opts.storage_options)
        # On local disk a part is a file the task appends to and the commit adopts as a
        # segment; on an object store it is one object written whole.
        self.local = self.storage.is_local
        self.root: LogRoot | None = None
        # topic -> partitions, codec, part limit, batch bytes, write chunk
        self.topics: dict[str, tuple[int, Compression, int, int, int]] = {}
        self.policies: dict[str, str] = {}      # topic -> cleanup.policy
        self.pending: dict[tuple[str, int], _PartBuffer] = {}
        self.open_parts: dict[tuple[str, int], StagedPart] = {}
        self.part_files: dict[tuple[str, int], DirectFileWriter] = {}    # local: the open part's file
        self.seq: dict[tuple[str, int], int] = {}
        self.parts: list[StagedPart] = []
        # local: part files are written on one thread while the task encodes the next chunk
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="seglog-stage") if self.local else None
        # the last Arrow batch's plain_columns: (keys, values, ts, headers, codec, columns)
        self._plain: tuple | None = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.shutdown(wait=True)     # no write may be running on a closed file
        for file in self.part_files.values():
            file.abandon()
        self.part_files.clear()
        for out in self.pending.values():       # no write of them is running either now
            for buffer in (out.data, out.spare):
                if buffer is not None:
                    _STAGING_BUFFERS.give_back(buffer)
            out.data = out.spare = None
        self.pending.clear()
        if self.root is not None:
            self.root.close()

    def discard(self) -> None:
        """Delete every part this attempt staged (best effort: it runs on the failure path)."""
        for part in self.parts + list(self.open_parts.values()):
            try:
                self.storage.delete(part.path, missing_ok=True)
            except Exception as exc:          # noqa: BLE001 - the task's own error matters more
                logger.warning("seglog sink: could not delete staged part %s: %s", part.path, exc)
        self.parts.clear()
        self.open_parts.clear()

    def _topic(self, topic: str) -> tuple[int, Compression, int, int, int]:
        found = self.topics.get(topic)
        if found is None:
            if self.root is None:
                self.root = self.w.open_root()
            info = self.w.ensure_topic(self.root, topic)
            config = self.root.topic_config(topic)
            if self.opts.compression is not None:
                codec = self.opts.compression
            else:
                codec = CODEC_BY_NAME.get(config.compression_type, Compression.NONE)
            if self.opts.staging_part_bytes is not None:
                limit = self.opts.staging_part_bytes
            elif self.local:
                limit = DEFAULT_LOCAL_PART_BYTES
            else:
                limit = DEFAULT_OBJECT_PART_BYTES
            batch_bytes = self.opts.batch_size or default_batch_size(config.max_message_bytes)
            # A part the commit adopts as a segment must fit one (a batch may overshoot by one
            # batch, so leave room for the largest).
            limit = max(1, min(limit, config.segment_bytes - 2 * max(batch_bytes, 1 << 20)))
            chunk = limit
            if self.local:
                # two buffers per partition, each a chunk plus room for an encode call's batches
                # (about as much again)
                per_partition = _STAGING_MEMORY_BYTES // (4 * max(1, info.partitions))
                chunk = min(limit, max(_MIN_WRITE_CHUNK_BYTES, min(_WRITE_CHUNK_BYTES, per_partition)))
            found = self.topics[topic] = (info.partitions, codec, limit, batch_bytes, chunk)
        return found

    def _cleanup_policy(self, topic: str) -> str:
        policy = self.policies.get(topic)
        if policy is None:
            self._topic(topic)                  # opens the root
            policy = self.policies[topic] = ",".join(self.root.topic_config(topic).cleanup_policy)
        return policy

    def _encode(self, topic, partition, codec, keys, values, ts, headers, rows) -> None:
        tp = (topic, partition)
        out = self.pending.get(tp)
        if out is None:
            out = self.pending[tp] = _PartBuffer()
        limit, batch_bytes, threshold = self.topics[topic][2:5]
        plain = self._plain_columns(codec, keys, values, ts, headers)
        while True:
            if plain is not None:
                size, batches, fields = encode_plain_run_into(
                    plain, out.data, out.fill, rows=rows, batch_bytes=batch_bytes,
                    max_records=self.opts.max_records, fields_base=out.part_base + out.fill)
            else:
                size, batches = encode_batch_run_into(
                    out.data, out.fill, keys, values, ts, rows=rows, headers=headers, compression=codec,
                    batch_bytes=batch_bytes, max_records=self.opts.max_records)
                fields = None
            if batches >= 0:
                break
            # No room. A buffer that cannot hold a chunk plus these rows grows (once, usually);
            # a big enough one is staged and reused.
            want = threshold + 2 * size
            if len(out.data) < want:
                grown = _STAGING_BUFFERS.take(want)
                grown[:out.fill] = out.data[:out.fill]
                _STAGING_BUFFERS.give_back(out.data)   # not the one being written: the spare is
                out.data = grown
            else:
                self._write(tp)
        if self.local and batches:
            # The headers just encoded: the commit adopts the part without scanning it (see
            # StagedPart.batches).
            if fields is None:
                scanned = batch_fields(memoryview(out.data)[out.fill:out.fill + size], verify_crc=False)
                scanned[:, F_POSITION] += out.part_base + out.fill
                fields = scanned.tobytes()
            out.fields.append(fields)
            out.heads.append(fields)
        out.fill += size
        out.records += len(values) if rows is None else len(rows)
        if out.fill >= threshold:
            self._write(tp)

    def _plain_columns(self, codec, keys, values, ts, headers):
        """`plain_columns` of an Arrow batch's rows, taken once for all its target partitions
        (the router hands each partition the same arrays)."""
        cached = self._plain
        if (cached is not None and cached[0] is keys and cached[1] is values and cached[2] is ts
                and cached[3] is headers and cached[4] == codec):
            return cached[5]
        columns = plain_columns(keys, values, ts, headers, codec)
        self._plain = (keys, values, ts, headers, codec, columns)
        return columns

    def _write(self, tp) -> None:
        """Stage the encoded batches of `tp`: append them to its open part (local disk), or
        write them as one part object."""
        out = self.pending.get(tp)
        if out is None or out.fill == out.kept:
            return
        part = self.open_parts.get(tp)
        if part is None:
            seq = self.seq.get(tp, 0)
            self.seq[tp] = seq + 1
            path = f"{self.prefix}/{tp[0]}-{tp[1]}/{self.name}-{seq}"
            part = self.open_parts[tp] = StagedPart(tp[0], tp[1], path, 0, self.task, seq)
        # Staging needs no fsync: a staged part that a crash loses fails its commit, and
        # nothing is visible before the commit; the commit itself is durable.
        if self.local:
            file = self.part_files.get(tp)
            if file is None:
                os_path = self.storage.local_path(part.path)
                os.makedirs(os.path.dirname(os_path), exist_ok=True)
                file = self.part_files[tp] = DirectFileWriter(os_path)
            # Write whole blocks of this buffer on the writer thread; carry the rest to the
            # start of the spare one (once its own write is done) and encode on into that.
            out.wait()
            length = file.aligned(out.fill)
            rest = out.fill - length
            if out.spare is None or len(out.spare) < len(out.data):
                if out.spare is not None:
                    _STAGING_BUFFERS.give_back(out.spare)
                out.spare = _STAGING_BUFFERS.take(len(out.data))
            out.spare[:rest] = out.data[length:out.fill]
            out.writing = self.writer.submit(file.write, out.data, length, self._header_blocks(out, length))
            out.data, out.spare = out.spare, out.data
            part.size = out.part_base + out.fill
            out.fill = out.kept = rest
            out.part_base = part.size - rest
        else:
            self.storage.write_atomic(part.path, bytes(out.data[:out.fill]), durable=False)
            part.size += out.fill
            out.fill = 0
        part.records += out.records
        out.records = 0
        if not self.local or part.size >= self.topics[tp[0]][2]:
            self._finish(tp)

    def _finish(self, tp) -> None:
        file = self.part_files.pop(tp, None)
        part = self.open_parts.pop(tp, None)
        if file is not None:
            out = self.pending[tp]
            out.wait()
            file.close(out.data, out.fill)
            out.fill = out.kept = out.part_base = 0
            out.heads, out.head_rest = [], _NO_POSITIONS
            fields, out.fields = out.fields, []
            if part is not None and 0 < sum(len(f) for f in fields) // _FIELD_ROW_BYTES <= _MAX_KEPT_BATCHES:
                part.batches = b"".join(fields)
        if part is not None:
            self.parts.append(part)

    @staticmethod
    def _header_blocks(out: _PartBuffer, length: int) -> np.ndarray:
        """Offsets in out.data of the blocks that hold the first 16 bytes (what the commit
        patches) of the batches written now, `out.data[:length]`: kept in the page cache too,
        so that the commit patches them without reading them from the disk."""
        if not out.heads and not len(out.head_rest):
            return _NO_POSITIONS
        positions = np.frombuffer(b"".join(out.heads), dtype=np.int64)[F_POSITION::9]
        out.heads = []
        if len(out.head_rest):
            positions = np.concatenate((out.head_rest, positions))
        offsets = positions - out.part_base
        now = offsets[offsets + 16 <= length]
        out.head_rest = positions[offsets + 16 > length]
        return np.unique(np.concatenate((now // ALIGN, (now + 15) // ALIGN))) * ALIGN

    def flush_all(self) -> None:
        for tp in sorted(self.pending):
            self._write(tp)
        for tp in sorted(self.open_parts):
            self._finish(tp)


