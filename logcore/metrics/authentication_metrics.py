"""SASL logins per listener, as Kafka's socket-server-metrics count them
(`failed-authentication-total`, `successful-authentication-total`, which the JMX exporter names
kafka_server_socketservermetrics_failed_authentication_total{listener} and ..._successful_...).

The server's SASL exchange reports each outcome (failed(), succeeded(); a re-authentication
counts again, a refused SaslHandshake is a failure as in Kafka) on the event loop's thread; the
scrape thread reads copies of the dicts (collect())."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily


class AuthenticationMetrics:
    def __init__(self):
        self._failed: dict[str, int] = {}        # listener -> count
        self._succeeded: dict[str, int] = {}

    def failed(self, listener: str) -> None:
        self._failed[listener] = self._failed.get(listener, 0) + 1

    def succeeded(self, listener: str) -> None:
        self._succeeded[listener] = self._succeeded.get(listener, 0) + 1

    def describe(self):
        return []

    def collect(self):
        failed = CounterMetricFamily("kafka_server_socketservermetrics_failed_authentication",
                                     "SASL authentications that failed, by listener", labels=["listener"])
        succeeded = CounterMetricFamily("kafka_server_socketservermetrics_successful_authentication",
                                        "SASL authentications that succeeded, by listener", labels=["listener"])
        for listener, count in sorted(dict(self._failed).items()):
            failed.add_metric([listener], count)
        for listener, count in sorted(dict(self._succeeded).items()):
            succeeded.add_metric([listener], count)
        return [failed, succeeded]
