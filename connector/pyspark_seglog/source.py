"""The seglog source: Spark's Kafka source over a log root, for streaming and batch queries.

Driver side (`SeglogStreamReader`, `SeglogBatchReader`): resolve the subscription to partitions,
offsets to ranges `[from, until)` never above the HW (LSO with read_committed), rate-limit them
and cut them into `SeglogInputPartition`s. Task side (`read_partition`, partition_reader.py):
open the partition read-only (with several log dirs, a replica on the task's own host first:
replicas.py) and decode bounded windows of whole batches straight into Arrow. The driver's view
of the root is root_logs.py; offset options are resolved in offsets.py.

Spark pickles the reader for its tasks and keeps the driver's stream reader alive for the whole
query: the open logs live in `_logs`, created lazily and never pickled.
"""
from __future__ import annotations

import logging
import time

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows, ReadMinRows,
                                              SupportsTriggerAvailableNow)

from logcore.errors import InvalidConfigError, OffsetOutOfRangeError
from pyspark_seglog.data_loss import data_loss
from pyspark_seglog.plain_errors import plain_errors
from pyspark_seglog.offsets import (OffsetRange, from_spark, prorate, resolve, split_ranges, to_spark)
from pyspark_seglog.partition_reader import SeglogInputPartition, read_partition
from pyspark_seglog.replicas import ReplicaLogs
from pyspark_seglog.root_logs import RootLogs, check_subscription, open_logs
from pyspark_seglog.source_options import SourceOptions, parse_source_options
from pyspark_seglog.worker_heap import freeze_import_heap

logger = logging.getLogger("pyspark_seglog.source")


def _input_partitions(opts: SourceOptions, ranges: list[OffsetRange], logs=None) -> list[SeglogInputPartition]:
    pieces = split_ranges(ranges, min_partitions=opts.min_partitions,
                          max_records_per_partition=opts.max_records_per_partition)
    replicas = logs.replicas if isinstance(logs, ReplicaLogs) else (lambda tp: None)
    facts = logs.read_facts if isinstance(logs, RootLogs) else (lambda tp: None)
    return [SeglogInputPartition(opts.root, opts.storage_options, r.topic, r.partition, r.start,
                                 r.until, opts.isolation, opts.include_headers, opts.fail_on_data_loss,
                                 opts.fetch_bytes, opts.tiered,
                                 broker_bound=opts.bootstrap_servers is not None,
                                 replicas=replicas((r.topic, r.partition)),
                                 read_path=opts.read_path, bootstrap_servers=opts.bootstrap_servers,
                                 client_rack=opts.client_rack, retry_timeout=opts.retry_timeout_ms / 1000.0,
                                 security=opts.security,
                                 read_facts=facts((r.topic, r.partition)))
            for r in pieces]


class _ReaderBase:
    """State shared by both readers: the options and the lazily opened root."""

    opts: SourceOptions

    def _driver_logs(self) -> RootLogs | ReplicaLogs:
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
        # Partitions whose view prepareForTriggerAvailableNow has just refreshed: Spark calls
        # initialOffset right after it, at the query's start, which resolves the starting offsets
        # from that view instead of asking the store again (on an object store a LIST and the
        # partition state per partition). Without AvailableNow latestOffset always refreshes, so
        # that data lost or appended since is found while planning.
        self._just_refreshed: set = set()
        # The query's starting offsets, resolved once: pyspark 4.3 calls initialOffset twice at
        # a fresh query's start (the second inside the first trigger, where on an object store
        # resolving again cost a LIST and a partition state per partition: 40-50 ms of a 1M-record
        # query's 1 s). Spark's Kafka source also resolves them once per query.
        self._initial: dict | None = None

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
        self._just_refreshed = set(tps)

    # -- offsets
    def initialOffset(self) -> dict:
        if self._initial is None:
            logs = self._driver_logs()
            # Right after prepareForTriggerAvailableNow: the partitions it found, which are what
            # AvailableNow reads (on an object store the topics file is not read again).
            tps = sorted(self._just_refreshed) if self._just_refreshed else logs.topic_partitions()
            check_subscription(self.opts, tps)
            self._refresh(logs, tps)
            self._initial = to_spark(resolve(self.opts.starting, tps, logs, self.opts, starting=True))
        return {topic: dict(offsets) for topic, offsets in self._initial.items()}

    def _refresh(self, logs, tps) -> None:
        """Refresh the views of `tps`, but for those the previous planning call just refreshed."""
        logs.refresh([tp for tp in tps if tp not in self._just_refreshed])
        self._just_refreshed = set()

    def latestOffset(self, start: dict, limit) -> dict:
        logs = self._driver_logs()
        begin_given = from_spark(start)
        # Partitions that vanished (a deleted topic) are not read; their offsets are carried on.
        if self._available_now is not None:
            # AvailableNow reads up to what prepareForTriggerAvailableNow found, from the views
            # it read then: records appended since are not read, so a refresh here could only
            # find records lost since, which the task finds as it reads (a planned segment gone
            # makes its open list the partition again; a log now ending below the planned end
            # is data loss there). On an object store that saves a LIST and the partition
            # state per partition and trigger.
            live = sorted(self._available_now)
        else:
            live = logs.topic_partitions()
            logs.refresh(live)
        self._just_refreshed = set()
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
            check_subscription(self.opts, tps)
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
