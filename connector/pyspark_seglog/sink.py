"""The seglog sink: `df.writeStream.format("seglog")` (exactly-once) and `df.write.format("seglog")`.

Protocol (docs/sink-protocol.md has the full argument):
- tasks (`write`) encode their rows into RecordBatch v2 batches per target partition and stage
  them under `<root>/.seglog-staging/<query>/<batch>/<topic>-<p>/<task>-<attempt>-<uuid>-<n>`;
  nothing a task does is visible; the commit message lists the staged objects;
- the driver (`commit`) pins the batch's content in a manifest (first commit attempt wins), checks
  every target partition's commit marker (already has this batch: skip; another query: fenced),
  appends the staged batches (`Log.append_staged`) and commits each partition with the marker
  {"query", "batch"}; then records the batch as done and deletes the staging.

The task side is task_stager.py; the staging folder's layout is staging_area.py; a staged part
and how the commit appends it, staged_part.py; the input's columns, sink_columns.py.
"""
from __future__ import annotations

import abc
import json
import logging
import uuid
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from logcore.errors import (
    CommitFailedError,
    FencedWriterError,
    InvalidConfigError,
    SegLogError,
    TopicExistsError,
    TopicNotFoundError,
)
from logcore.log.config import LogConfig
from logcore.log.log_root import LogRoot
from logcore.tiered import install_remote_tier
from logcore.storage import open_storage

from pyspark_seglog import segment_uploads
from pyspark_seglog.offset_reservation import seed_offsets
from pyspark_seglog.plain_errors import plain_errors
from pyspark_seglog.publish_pool import run_all, run_each, shared_publish_pool
from pyspark_seglog.row_router import is_compacted, keyless_rows_error
from pyspark_seglog.segment_uploads import MULTIPART
from pyspark_seglog.sink_columns import input_columns
from pyspark_seglog.sink_options import SinkOptions, parse_sink_options
from pyspark_seglog.staged_part import PartReads, StagedPart, append_parts, stamped
from pyspark_seglog.staging_area import (COMMITTED, JOB_MARKER, MANIFEST, cleanup, end_job, held_epochs,
                                         read_json, staging_path)
from pyspark_seglog.task_stager import TaskStager, TopicFacts
from pyspark_seglog.worker_heap import freeze_import_heap

install_remote_tier()  # roots that enable tiering have a remote tier

logger = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


# ------------------------------------------------------------------------------- commit messages

@dataclass
class SeglogCommitMessage(WriterCommitMessage):
    query_id: str
    batch_id: int
    task: int
    attempt: int
    parts: list[StagedPart] = field(default_factory=list)


# ------------------------------------------------------------------------------- the writers

def _end_batch_job(storage, job_id: str) -> None:
    """A committed batch job has one batch and no `_committed.json`: its whole staging folder
    goes, once its marker is gone (see JOB_MARKER)."""
    end_job(storage, job_id)
    storage.delete_dir(staging_path(job_id))


class _SeglogWriterBase(abc.ABC):
    streaming = True
    topic_partitions: int | None = None     # the `topic` option's partitions (path mode)
    reserves_offsets = False                # tasks stamp reserved offsets (offset_reservation.py)
    topic_facts: TopicFacts | None = None   # the `topic` option's config, for a batch job's tasks
    created_topic: str | None = None        # the topic the planning created

    def __init__(self, options: dict, schema, overwrite: bool):
        self.opts: SinkOptions = parse_sink_options(options)
        self.columns = input_columns(schema, self.opts.topic is not None)
        self.overwrite = overwrite
        if self.opts.bootstrap_servers is not None:
            # imported here: the Kafka protocol package is heavy, and file-root writes never use it
            from pyspark_seglog.broker_client import BrokerClient
            from pyspark_seglog.broker_sink import check_guarantee, ensure_topic
            with BrokerClient(self.opts.bootstrap_servers, client_id="seglog-spark-sink",
                              security=self.opts.security.client()) as client:
                check_guarantee(client, self.opts)
                if self.opts.topic is not None:
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
                    info = self.ensure_topic(root, self.opts.topic)
                    self.topic_partitions = info.partitions
                    config = LogConfig.from_props(info.config, root.defaults())
                    if "key" not in self.columns:
                        self._check_keys(",".join(config.cleanup_policy))
                    if not self.streaming:
                        # a batch job's tasks take the topic as planned (no root open each)
                        self.topic_facts = TopicFacts.of(info.partitions, config)
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
            info = root.create_topic(topic, self.opts.topic_partitions, self.opts.topic_config)
            self.created_topic = topic
            return info
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
        query_id, batch_id = self._identity(ctx)
        if self.opts.bootstrap_servers is not None:
            from pyspark_seglog.broker_sink import produce_task
            return produce_task(self.opts, self.columns, iterator, task, attempt, query_id, batch_id,
                                self.streaming)
        stager = TaskStager(self, query_id, batch_id, task, attempt)
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
        if not self.streaming and not stager.storage.exists(f"{staging_path(query_id)}/{JOB_MARKER}"):
            # The job ended (aborted, or committed without this attempt) while this attempt
            # staged: the marker goes before the staging is swept, so these parts may have
            # been made after the sweep.
            logger.info("seglog sink: job %s ended before task %s attempt %s finished; its parts"
                        " are removed", query_id, task, attempt)
            stager.discard()
            return SeglogCommitMessage(query_id, batch_id, task, attempt, [])
        return SeglogCommitMessage(query_id, batch_id, task, attempt, stager.parts)

    # -- driver -----------------------------------------------------------------------------
    def _commit(self, messages, batch_id: int) -> bool:
        """Publish the batch; whether its staging is swept (False: no message came)."""
        if self.opts.bootstrap_servers is not None:
            from pyspark_seglog.broker_sink import commit_batch
            commit_batch(self.opts, messages, batch_id)     # ends the tasks' transactions
            return True
        msgs = [m for m in messages if m is not None]
        if not msgs:
            return False                    # no task succeeded: nothing was ever staged for commit
        query_id = msgs[0].query_id
        storage = open_storage(self.opts.root, self.opts.storage_options)
        staging = staging_path(query_id, batch_id)
        parts = [p for m in msgs for p in m.parts]
        held: dict[tuple[str, int], tuple[int, str]] = {}
        if self.streaming:
            committed = read_json(storage, f"{staging_path(query_id)}/{COMMITTED}")
            # (epoch, writer id) this query last held each partition with: taken back at the
            # same epoch if nobody took the partition since (no leader-epoch entry per batch)
            held = held_epochs(committed)
            if committed is not None and committed.get("batch", -1) >= batch_id:
                logger.info("seglog sink: batch %s of query %s was already committed", batch_id, query_id)
                cleanup(storage, query_id, batch_id)
                return True
            # The first commit attempt pins what this batch is (its manifest); a replay after a
            # crash publishes exactly that, whatever its own tasks staged.
            pinned = read_json(storage, f"{staging}/{MANIFEST}")
            if pinned is not None:
                parts = [StagedPart(**p) for p in pinned["parts"]]
        by_partition: dict[tuple[str, int], list[StagedPart]] = {}
        for p in parts:
            by_partition.setdefault((p.topic, p.partition), []).append(p)
        # On an object store the commit copies each part into its partition's log: its first
        # parts are read while the partitions are taken below.
        # (parts stamped with reserved offsets are copied on the server, not read)
        reads = PartReads(storage, {tp: sorted((p for p in found if p.upload_id is None), key=lambda p: (p.task, p.seq))
                                    for tp, found in by_partition.items() if not stamped(found)})
        # staging.publish=multipart: other uploads under the partitions, listed before they are taken
        leftovers = []
        if self.opts.staging_publish == MULTIPART and self.opts.topic is not None:
            leftovers = segment_uploads.others(storage, self.opts.topic, {p for t, p in by_partition if t == self.opts.topic},
                                               {p.upload_id for p in parts if p.upload_id is not None})
        root = LogRoot.open(self.opts.root, storage_options=self.opts.storage_options)
        pool = shared_publish_pool()
        published = False
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
                segment_uploads.abort(storage, leftovers)
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
                # uploaded parts cannot be re-stamped: every partition is checked before any publishes
                segment_uploads.check_publishable(logs, by_partition)
                commit_marker = {"query": query_id, "batch": batch_id} if self.streaming else None
                # Parts this job's tasks staged and reported in this driver's lifetime are as
                # they wrote them: their CRCs are not read back. A replay of a pinned manifest
                # (after a crash, maybe of the machine) checks every CRC.
                verify_crc = pinned is not None if self.streaming else False
                appended = run_each(pool, [(append_parts, storage, log, parts, self.opts.staging_adopt_bytes,
                                             verify_crc, reads.take((log.topic, log.partition)))
                                            for log, parts in todo])
                # The partitions whose parts are all in place commit together: they share rounds
                # of the root checkpoint files (and their fsyncs) instead of each rewriting them
                # in turn. A partition whose append failed stays as it was (the replay finishes it).
                committed = run_each(pool, [(log.commit, commit_marker)
                                             for (log, _), error in zip(todo, appended) if error is None])
                for error in appended + committed:
                    if error is not None:
                        raise error
                held.update((tp, (log.leader_epoch, log.fence.writer_id)) for tp, log in logs.items())
                published = True
            finally:
                reads.cancel()
                closes = [(log.close,) for log in logs.values()]
                if published and not self.streaming:
                    # Every partition is committed: a batch job's staging is swept while the
                    # partitions are released (their round trips overlap).
                    closes.append((_end_batch_job, storage, query_id))
                run_all(pool, closes)
        finally:
            root.close()
        if self.streaming:
            # Read by the next commit, after the logs released their partitions (close above).
            epochs = [[topic, p, epoch, writer] for (topic, p), (epoch, writer) in sorted(held.items())]
            storage.write_atomic(f"{staging_path(query_id)}/{COMMITTED}",
                                 json.dumps({"batch": batch_id, "epochs": epochs}).encode())
            cleanup(storage, query_id, batch_id)
        return True

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
            from pyspark_seglog.broker_sink import abort_batch
            abort_batch(self.opts, messages, batch_id)
            return
        msgs = [m for m in messages if m is not None]
        if not msgs:
            return      # nothing known; leftovers go with the next commit's cleanup
        storage = open_storage(self.opts.root, self.opts.storage_options)
        segment_uploads.abort(storage, segment_uploads.ids([p for m in msgs for p in m.parts]))
        staging = staging_path(msgs[0].query_id, batch_id)
        if storage.exists(f"{staging}/{MANIFEST}"):
            # an earlier commit attempt pinned this batch: its parts must survive for the replay
            pinned = {p["path"] for p in read_json(storage, f"{staging}/{MANIFEST}")["parts"]}
            for m in msgs:
                for p in m.parts:
                    if p.path not in pinned:
                        storage.delete(p.path)
        elif storage.exists(staging):
            storage.delete_dir(staging)



@plain_errors
class SeglogStreamWriter(_SeglogWriterBase, DataSourceStreamArrowWriter):
    """writeStream.format("seglog"): exactly-once per (query id, batch id)."""

    streaming = True

    def __init__(self, options: dict, schema, overwrite: bool):
        super().__init__(options, schema, overwrite)
        if self.opts.staging_publish == MULTIPART:
            raise InvalidConfigError(
                "option staging.publish=multipart is for a batch df.write with the topic option (its"
                " tasks reserve their parts' offsets); a streaming query's commit assigns the offsets:"
                " leave the option out")

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
        multipart = self.opts.staging_publish == MULTIPART
        if multipart and (self.opts.bootstrap_servers is not None or self.opts.topic is None):
            raise InvalidConfigError(
                "option staging.publish=multipart needs the topic option and a root written in path"
                " mode (not kafka.bootstrap.servers): its tasks reserve offsets of the topic's partitions")
        if self.opts.bootstrap_servers is None:
            storage = open_storage(self.opts.root, self.opts.storage_options)
            if multipart:
                segment_uploads.check_store(storage, staging_path(self.job_id))
            storage.write_atomic(f"{staging_path(self.job_id)}/{JOB_MARKER}", b"", durable=False)
            if not storage.is_local and self.topic_partitions is not None:
                # object store: the tasks stamp their parts' final offsets, the commit copies
                # them (or completes their uploads: staging.publish=multipart)
                seed_offsets(storage, self.job_id, self.opts.topic, self.topic_partitions,
                             created=self.created_topic == self.opts.topic)
                self.reserves_offsets = True

    def _identity(self, ctx) -> tuple[str, int]:
        return self.job_id, 0

    def commit(self, messages) -> None:
        try:
            done = self._commit(messages, 0)
        except BaseException:
            if self.opts.staging_publish == MULTIPART:
                # what was not completed is aborted now (Spark's abort may not follow)
                storage = open_storage(self.opts.root, self.opts.storage_options)
                segment_uploads.abort(storage, segment_uploads.ids([p for m in messages if m is not None
                                                                    for p in m.parts]))
            raise
        if not done:
            self._sweep()           # a job none of whose tasks staged anything

    def abort(self, messages) -> None:
        if self.opts.bootstrap_servers is None:
            end_job(open_storage(self.opts.root, self.opts.storage_options), self.job_id)
        self._abort(messages, 0)
        self._sweep()

    def _sweep(self) -> None:
        if self.opts.bootstrap_servers is not None:
            return
        storage = open_storage(self.opts.root, self.opts.storage_options)
        end_job(storage, self.job_id)
        if storage.exists(staging_path(self.job_id)):
            storage.delete_dir(staging_path(self.job_id))
