"""What the broker serves as: one broker alone, or a member of a cluster. The handler groups
share it and read it at each request, so that what `Broker.join_cluster` sets (before the broker
serves) reaches every one of them.

A broker alone: its log root's cluster id, `LocalTopics`, `SingleNodeFetch`, no replica manager
and no catalog. A cluster member: ZooKeeper's cluster id, `ClusterTopics`, `ClusterFetch`, the
`ReplicaManager` (the cluster's metadata as ZooKeeper's watches report it, and this broker's
replicas) and the `ZooKeeperCatalog`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from logcore.broker.cluster_fetch import SingleNodeFetch


@dataclass
class Membership:
    cluster_id: str
    topic_catalog: object = None        # topic_catalog.LocalTopics | ClusterTopics
    fetch_checks: object = field(default_factory=SingleNodeFetch)   # or cluster_fetch.ClusterFetch
    replica_manager: object = None      # logcore.replication.replica_manager.ReplicaManager
    catalog: object = None              # logcore.cluster.catalog.ZooKeeperCatalog
