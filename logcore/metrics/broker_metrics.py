"""One broker's metrics: its own registry and what records into it. The broker holds one
(Broker.metrics) whether or not an endpoint serves it, so the data path never asks; the server
starts the endpoint when metrics.listener is set, and registers the state collector once the
broker's objects exist (watch()).

The server's SASL exchange counts logins in `authentication`; the broker points `remote` at its
remote tier's totals when tiered storage is on (its families are exported, empty, either way).
Other parts add their own figures with add(collector): an object whose collect() yields
prometheus_client metric families."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from logcore.metrics.authentication_metrics import AuthenticationMetrics
from logcore.metrics.broker_state import BrokerStateCollector
from logcore.metrics.cleaner_metrics import CleanerTotals
from logcore.metrics.endpoint import MetricsEndpoint
from logcore.metrics.remote_storage_metrics import RemoteStorageCollector
from logcore.metrics.replication_throttle_metrics import ReplicationThrottleMetrics
from logcore.metrics.request_metrics import RequestMetrics
from logcore.metrics.topic_metrics import TopicMetrics


class BrokerMetrics:
    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = RequestMetrics()
        self.topics = TopicMetrics()
        self.registry.register(self.requests)
        self.registry.register(self.topics)
        self.authentication = AuthenticationMetrics()
        self.remote = RemoteStorageCollector()
        self.registry.register(self.authentication)
        self.registry.register(self.remote)
        self.cleaner = CleanerTotals()
        self.endpoint: MetricsEndpoint | None = None
        self._state: BrokerStateCollector | None = None
        self._throttles: ReplicationThrottleMetrics | None = None

    def watch(self, broker, *, controller=lambda: None, connections=lambda: {}, cleaner=None) -> None:
        """Export the broker's state (broker_state.py) and its replication throttles' rates
        from now on; again: replaces them."""
        for collector in (self._state, self._throttles):
            if collector is not None:
                self.registry.unregister(collector)
        self._state = BrokerStateCollector(broker, self.cleaner, controller=controller,
                                           connections=connections, cleaner=cleaner)
        self.registry.register(self._state)
        self._throttles = ReplicationThrottleMetrics(broker.replication_quotas)
        self.registry.register(self._throttles)

    def add(self, collector) -> None:
        self.registry.register(collector)

    def serve(self, listener: str) -> MetricsEndpoint:
        """Start the HTTP endpoint on `listener` (http://host:port)."""
        self.endpoint = MetricsEndpoint(self.registry, listener)
        return self.endpoint

    def exposition(self) -> bytes:
        """The text a scrape returns (for the tests and `seglog` tools; no HTTP)."""
        return generate_latest(self.registry)

    def close(self) -> None:
        if self.endpoint is not None:
            self.endpoint.close()
            self.endpoint = None
