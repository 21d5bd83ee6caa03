"""The gauges and counters read from the broker's state when Prometheus scrapes (a custom
collector): nothing is updated on the data path for them.

It reads, duck-typed, the objects the broker hands it (the broker package wires them; nothing
here imports it):
- `broker.replica_manager` (a cluster member's, else None): its `replicas` (leader, ISR,
  assignment, min.insync.replicas), `states` and `brokers` (every partition's leader and the
  live brokers: offline partitions), `controller_id`, and its ISR writer's `shrinks`/`expands`;
- `controller()`: the member's Controller (`active`, `leader_elections`, `election_seconds`);
- `broker.partitions.partitions`: the open logs (their LocalLog's `flushes`/`flush_seconds`,
  high watermarks; the compacted ones' dirty ratio through `cleaner.dirty_ratio`);
- `broker.groups.offsets`: the committed offsets of the groups this broker coordinates;
- `connections()`: {listener name: open connections}.
The scrape runs in the endpoint's thread while the event loop changes these objects: every dict
is copied (one C-level call, atomic under the GIL) before it is walked, and a part that fails is
logged and left out of that scrape, never failing the others.
"""
from __future__ import annotations

import logging

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

logger = logging.getLogger(__name__)


class BrokerStateCollector:
    def __init__(self, broker, cleaner_totals, *, controller=lambda: None, connections=lambda: {},
                 cleaner=None):
        self.broker = broker
        self.cleaner_totals = cleaner_totals
        self.controller = controller          # () -> the Controller, or None (a broker alone)
        self.connections = connections        # () -> {listener: count}
        self.cleaner = cleaner                # what computes a log's dirty ratio (LogCleaner)
        self._failed: set[str] = set()        # parts whose failure was logged already

    def describe(self):
        return []                             # no check at registration: the names are fixed

    def collect(self):
        for part in (self._replication, self._controller, self._logs, self._cleaner, self._groups,
                     self._connections):
            try:
                yield from list(part())
            except Exception as exc:   # noqa: BLE001 - a part of the scrape, never the broker
                if part.__name__ not in self._failed:
                    self._failed.add(part.__name__)
                    logger.warning("metrics: %s left out of the scrape: %r", part.__name__, exc)

    # ------------------------------------------------------------------ replication
    def _replication(self):
        rm = self.broker.replica_manager
        under = under_min = leaders = 0
        shrinks = expands = 0
        if rm is not None:
            for replica in list(rm.replicas.values()):
                if not replica.is_leader:
                    continue
                leaders += 1
                isr = replica.isr
                if len(isr) < len(replica.assignment):
                    under += 1
                if len(isr) < replica.min_insync():
                    under_min += 1
            shrinks, expands = rm.isr_writer.shrinks, rm.isr_writer.expands
        else:
            leaders = sum(1 for p in list(self.broker.partitions.partitions.values()) if not p.closed)
        yield _gauge("kafka_server_replicamanager_underreplicatedpartitions",
                     "Partitions this broker leads whose ISR is smaller than their replica set", under)
        yield _gauge("kafka_server_replicamanager_underminisrpartitioncount",
                     "Partitions this broker leads whose ISR is below min.insync.replicas", under_min)
        yield _gauge("kafka_server_replicamanager_leadercount", "Partitions this broker leads", leaders)
        yield _counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks this broker wrote as leader",
                       shrinks)
        yield _counter("kafka_server_replicamanager_isrexpands", "ISR expansions this broker wrote as leader",
                       expands)

    def _controller(self):
        rm = self.broker.replica_manager
        controller = self.controller()
        if rm is None:          # a broker alone is its own controller (Metadata says so)
            active, offline, elections, seconds = 1, 0, 0, 0.0
        else:
            active = 1 if controller is not None and controller.active else 0
            offline = 0
            if active:          # Kafka reports offline partitions on the active controller only
                live = dict(rm.brokers)
                offline = sum(1 for state in list(rm.states.values())
                              if state.leader < 0 or state.leader not in live)
            elections = controller.leader_elections if controller is not None else 0
            seconds = controller.election_seconds if controller is not None else 0.0
        yield _gauge("kafka_controller_kafkacontroller_activecontrollercount",
                     "1 on the broker that is the active controller", active)
        yield _gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
                     "Partitions without a live leader (reported by the active controller)", offline)
        summary = SummaryMetricFamily("kafka_controller_controllerstats_leaderelectionrateandtimems",
                                      "Leader elections this broker made as controller (count) and the"
                                      " time they took (sum, ms)",
                                      count_value=elections, sum_value=seconds * 1000.0)
        yield summary

    # ------------------------------------------------------------------ logs
    def _open_logs(self):
        for part in list(self.broker.partitions.partitions.values()):
            log = part.log_if_open
            if log is not None:
                yield part, log

    def _logs(self):
        flushes, seconds = 0, 0.0
        current = GaugeMetricFamily("kafka_topic_partition_current_offset",
                                    "High watermark of each partition this broker leads",
                                    labels=["topic", "partition"])
        rm = self.broker.replica_manager
        for part, log in self._open_logs():
            local = log.local
            flushes += local.flushes
            seconds += local.flush_seconds
            if rm is None or _leads(rm, part.topic, part.index):
                current.add_metric([part.topic, str(part.index)], log.high_watermark)
        yield SummaryMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                  "fsyncs of the open logs (count) and their time (sum, ms)",
                                  count_value=flushes, sum_value=seconds * 1000.0)
        yield current

    def _cleaner(self):
        logs, read, written, seconds, last_max, recopy = self.cleaner_totals.snapshot()
        dirty = 0.0
        if self.cleaner is not None:
            for _part, log in self._open_logs():
                if log.config.compact:
                    dirty = max(dirty, self.cleaner.dirty_ratio(log))
        yield _gauge("kafka_log_logcleaner_max_dirty_percent",
                     "Largest dirty share of a compacted log open here, percent", 100.0 * dirty)
        yield _gauge("kafka_log_logcleaner_max_clean_time_secs", "Time the last log cleaned took, s", last_max)
        yield _gauge("kafka_log_logcleaner_cleaner_recopy_percent",
                     "Bytes written over bytes read by the last log cleaned, percent", recopy)
        yield _counter("kafka_log_logcleaner_cleaned_logs", "Logs cleaned (compaction passes)", logs)
        yield _counter("kafka_log_logcleaner_read_bytes", "Bytes the cleaner read", read)
        yield _counter("kafka_log_logcleaner_written_bytes", "Bytes the cleaner wrote", written)
        yield _counter("kafka_log_logcleaner_clean_time_seconds", "Time spent cleaning, s", seconds)

    # ------------------------------------------------------------------ groups
    def _groups(self):
        offsets = self.broker.groups.offsets
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "High watermark less the committed offset, per partition of the groups this"
                                " broker coordinates (where it holds a replica of the partition)",
                                labels=["consumergroup", "topic", "partition"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "Committed offset per partition of the groups this broker coordinates",
                                    labels=["consumergroup", "topic", "partition"])
        for group in offsets.group_ids():
            for topic, parts in offsets.committed(group, None):
                for p, committed in parts:
                    if committed is None or committed.offset < 0:
                        continue
                    labels = [group, topic, str(p)]
                    current.add_metric(labels, committed.offset)
                    part = self.broker.partitions.get(topic, p)
                    log = part.log_if_open if part is not None else None
                    if log is not None:
                        lag.add_metric(labels, max(0, log.high_watermark - committed.offset))
        yield current
        yield lag

    def _connections(self):
        family = GaugeMetricFamily("kafka_server_socketservermetrics_connection_count",
                                   "Open client connections, by listener", labels=["listener"])
        for listener, count in self.connections().items():
            family.add_metric([listener], count)
        yield family


def _leads(rm, topic: str, index: int) -> bool:
    replica = rm.replicas.get((topic, index))
    return replica is not None and replica.is_leader


def _gauge(name: str, doc: str, value) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
