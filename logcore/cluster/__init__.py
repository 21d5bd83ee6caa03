"""Cluster metadata: topics, replica assignment, leaders, ISR and epochs, and their stores.

- `assignment`: Kafka's rack-unaware replica assignment.
- `catalog`: the topic catalog interface (the JSON catalog of a log root and ZooKeeper both fit).
- `zk_store`: the metadata in ZooKeeper with Kafka's znode layout and JSON (needs `kazoo`).
- `controller`: leader-election rules and the ZooKeeper-backed controller.

The brokers do not use this package yet (see docs/cluster.md).
"""
