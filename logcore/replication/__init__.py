"""Replication (Kafka's server-side replication, ZooKeeper mode): this broker's replicas of the
cluster's partitions.

- partition.py: one replica (Kafka's Partition): role, leader epoch, ISR, follower states, HW
  advance, acks=all waiters;
- replica_manager.py: ZooKeeper's view applied to the partitions (roles from the state znodes);
- isr_writer.py: the leader's ISR changes, written by compare-and-set;
- follower_state.py: the leader's view of a follower and the ISR/HW rules, pure functions;
- replica_fetcher.py, replica_catchup.py: the follower side (Fetch rounds, truncation, catch-up).

Below the broker: the broker hands in its open logs (duck-typed) and never the reverse.
"""
