"""Where topic metadata and the topic admin actions go: the broker's policy, chosen once.

`LocalTopics`: one broker alone; its log root is the catalog, it creates and deletes topics
itself and coordinates every group. `ClusterTopics`: a cluster member; the cluster's catalog in
ZooKeeper (through the replica manager) holds the topics, also those this broker holds no
replica of. Each routes the request to the handler of its mode.
"""
from __future__ import annotations


class LocalTopics:
    """`metadata`: the broker's Metadata of its own topics; `admin`: AdminHandlers; `groups`:
    GroupHandlers; `partitions`: the broker's PartitionManager."""

    def __init__(self, metadata, admin, groups, partitions):
        self.local_metadata = metadata
        self.admin = admin
        self.groups = groups
        self.partitions = partitions

    async def metadata(self, body) -> dict:
        return await self.local_metadata(body)

    async def create_topics(self, req) -> dict:
        return await self.admin.local_create_topics(req)

    async def create_partitions(self, req) -> dict:
        return await self.admin.local_create_partitions(req)

    async def delete_topics(self, req, wanted) -> dict:
        return await self.admin.local_delete_topics(req, wanted)

    async def find_coordinator(self, key) -> dict:
        return await self.groups.local_find_coordinator(key)

    def partition_exists(self, topic: str, index: int) -> bool:
        return self.partitions.get(topic, index) is not None

    def unheld_topic_configs(self, name: str) -> dict | None:
        """The configs of a topic this broker opened no log of: none exists here."""
        return None


class ClusterTopics:
    """`cluster`: ClusterHandlers; `groups`: GroupHandlers; `replica_manager`: the cluster's
    metadata."""

    def __init__(self, cluster, groups, replica_manager):
        self.cluster = cluster
        self.groups = groups
        self.replica_manager = replica_manager

    async def metadata(self, body) -> dict:
        return await self.cluster.cluster_metadata(body)

    async def create_topics(self, req) -> dict:
        return await self.cluster.cluster_create_topics(req)

    async def create_partitions(self, req) -> dict:
        return await self.cluster.cluster_create_partitions(req)

    async def delete_topics(self, req, wanted) -> dict:
        return await self.cluster.cluster_delete_topics(req, wanted)

    async def find_coordinator(self, key) -> dict:
        return await self.groups.cluster_find_coordinator(key)

    def partition_exists(self, topic: str, index: int) -> bool:
        """One of the cluster's (the coordinator need not hold a replica of it)."""
        ta = self.replica_manager.assignments.get(topic)
        return ta is not None and index in ta.partitions

    def unheld_topic_configs(self, name: str) -> dict | None:
        """A cluster member answers for every topic of the cluster, also those it holds no
        replica of (or no longer: reassigned away)."""
        rm = self.replica_manager
        if name not in rm.assignments:
            return None
        return rm.topic_configs.get(name, {})
