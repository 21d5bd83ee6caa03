"""Coordinators: the group coordinator (consumer groups and committed offsets in
`__consumer_offsets`) and the transaction coordinator (transactional producers in
`__transaction_state`). Each coordinates the keys of the internal-topic partitions this broker
leads, loads their state when it gains leadership and drops it when it loses it.

Above the log and replication; below the broker, which hands requests to them. What they use of
the broker (its open partitions) and of replication (the replica manager) they take duck-typed:
nothing here imports logcore.broker (tests/test_layers.py).

Group side: `group_coordinator` (GroupCoordinator, the classic group state machine, its
appends to `__consumer_offsets` and its loads), `group` (Group, Member and their states),
`group_offsets` (GroupOffsets, the committed offsets, transactional ones pending until their
marker), `offsets_topic` (the `__consumer_offsets` record codec). Both: `placement` (which keys this
broker coordinates: all, or in a cluster those of the internal-topic partitions it leads) and
`record_fields` (the primitive fields of both internal topics' records).
"""
