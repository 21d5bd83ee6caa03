"""Tiered storage's figures per topic (what logcore.tiered.metrics records for the remote tier's
copies, fetches and deletes) as Prometheus families.

Kafka 3.6+'s BrokerTopicMetrics meters (RemoteCopyBytesPerSec, RemoteFetchRequestsPerSec, ...)
keep the JMX exporter's names (kafka_server_brokertopicmetrics_remotecopybytes_total{topic});
what Kafka has no meter for (bytes deleted, the time copies and fetches took and waited for their
quota) takes the name of the Aiven plugin's remote-storage-manager-metrics as the JMX exporter
spells an MBean without a rule (aiven_kafka_server_tieredstorage_remote_storage_manager_metrics_
segment_delete_bytes_total{topic}), times in ms like Kafka's.

The collector reads the totals at scrape time from `snapshot()`, a callable giving {topic:
{field: total}} (RemoteStorageMetrics.snapshot's shape) or {} while the broker has no remote tier;
this package does not import the tiered one: the broker hands the callable in."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

KAFKA = "kafka_server_brokertopicmetrics_"
AIVEN = "aiven_kafka_server_tieredstorage_remote_storage_manager_metrics_"

# (family name, kind, help, snapshot field, scale)
FAMILIES = (
    (KAFKA + "remotecopybytes", "counter", "Bytes of log segments copied to remote storage", "copy_bytes", 1),
    (KAFKA + "remotecopyrequests", "counter", "Log segments copied to remote storage", "copy_segments", 1),
    (KAFKA + "remotecopyerrors", "counter", "Segment copies to remote storage that failed", "copy_errors", 1),
    (KAFKA + "remotefetchbytes", "counter", "Bytes read from remote storage for fetches", "fetch_bytes", 1),
    (KAFKA + "remotefetchrequests", "counter", "Reads from remote storage for fetches", "fetch_requests", 1),
    (KAFKA + "remotefetcherrors", "counter", "Reads from remote storage that failed", "fetch_errors", 1),
    (KAFKA + "remotedeleterequests", "counter", "Log segments deleted from remote storage", "delete_segments", 1),
    (KAFKA + "remotedeleteerrors", "counter", "Segment deletions from remote storage that failed",
     "delete_errors", 1),
    (AIVEN + "segment_delete_bytes", "counter", "Bytes of log segments deleted from remote storage",
     "delete_bytes", 1),
    (AIVEN + "segment_copy_time_ms", "counter", "Time segment copies to remote storage took, ms (summed)",
     "copy_seconds", 1000.0),
    (AIVEN + "segment_copy_time_max", "gauge", "Longest segment copy to remote storage, ms",
     "copy_seconds_max", 1000.0),
    (AIVEN + "segment_fetch_time_ms", "counter", "Time reads from remote storage took, ms (summed)",
     "fetch_seconds", 1000.0),
    (AIVEN + "segment_copy_quota_wait_time_ms", "counter",
     "Time segment copies waited for the copy quota, ms", "copy_throttle_seconds", 1000.0),
    (AIVEN + "segment_fetch_quota_wait_time_ms", "counter",
     "Time remote reads waited for the fetch quota, ms", "fetch_throttle_seconds", 1000.0),
)


class RemoteStorageCollector:
    def __init__(self, snapshot=dict):
        self.snapshot = snapshot              # () -> {topic: {field: total}}

    def read_from(self, snapshot) -> None:
        """The remote tier's totals from now on (the broker, once its tier exists)."""
        self.snapshot = snapshot

    def describe(self):
        return []

    def collect(self):
        topics = self.snapshot()
        for name, kind, doc, field, scale in FAMILIES:
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, doc, labels=["topic"])
            for topic, stats in topics.items():
                family.add_metric([topic], stats[field] * scale)
            yield family
