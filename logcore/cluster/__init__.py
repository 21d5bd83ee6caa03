"""Cluster metadata: topics, replica assignment, leaders, ISR and epochs, and their stores.

- `assignment`: Kafka's rack-unaware replica assignment.
- `catalog`: the topic catalog interface (the JSON catalog of a log root and ZooKeeper both fit).
- `zookeeper_store`: the metadata in ZooKeeper, the only way into it (needs `kazoo`); composed of
  `zookeeper_session` (the session), `admin_requests` (what the controller is asked), with the
  layout in `znode_paths`, each znode's JSON in `znode_json`, and `compare_and_set` (the one
  read-update-conditional-write loop).
- `change_notices`: a folder of sequential change notices (/config/changes, the ACL ones):
  written with the change they announce, watched, purged after Kafka's 15 minutes.
- `controller`: leader-election rules and the ZooKeeper-backed controller; its reassignment
  pass in `reassignments`.
- `liveness`: the listener probe that tells a dead broker before its session expires.
"""
