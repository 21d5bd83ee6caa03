"""The replication throttles' measured rates (KIP-73), as Kafka's ReplicationQuotaManager exports
them: the `byte-rate` of the MBeans `kafka.server:type=LeaderReplication` and
`kafka.server:type=FollowerReplication`, which the JMX exporter names
kafka_server_leaderreplication_byte_rate and kafka_server_followerreplication_byte_rate: bytes
per second of the throttled replicas' traffic (as leader: sent to followers; as follower:
fetched) over the quota's windows. As in Kafka, only the traffic of throttled replicas while a
rate bound is set is measured: 0 otherwise.

The quotas are the broker's ReplicationQuotas, read duck-typed at scrape time (`.leader` and
`.follower`, each with rate() and bound)."""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily


class ReplicationThrottleMetrics:
    def __init__(self, quotas):
        self.quotas = quotas

    def describe(self):
        return []

    def collect(self):
        out = []
        for kind, quota in (("leader", self.quotas.leader), ("follower", self.quotas.follower)):
            family = GaugeMetricFamily(f"kafka_server_{kind}replication_byte_rate",
                                       f"Bytes/s of throttled replicas' replication as {kind}"
                                       f" ({kind}.replication.throttled.rate bounds it)")
            family.add_metric([], quota.rate())
            out.append(family)
        return out
