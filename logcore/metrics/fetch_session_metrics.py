"""The fetch session cache's figures (KIP-227), as Kafka's FetchSessionCache exports them:
`kafka.server:type=FetchSessionCache` NumIncrementalFetchSessions and
NumIncrementalFetchPartitionsCached (gauges), and IncrementalFetchSessionEvictionsPerSec (a
meter, exported here as its count). Read at scrape time from the broker's cache (`len()`,
partitions_cached() and evictions)."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class FetchSessionMetrics:
    def __init__(self, cache):
        self.cache = cache

    def describe(self):
        return []

    def collect(self):
        sessions = GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                                     "Incremental fetch sessions this broker holds")
        sessions.add_metric([], len(self.cache))
        partitions = GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                                       "Partitions held over all incremental fetch sessions")
        partitions.add_metric([], self.cache.partitions_cached())
        evictions = CounterMetricFamily("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                                        "Sessions evicted to make room for new ones")
        evictions.add_metric([], self.cache.evictions)
        return [sessions, partitions, evictions]
