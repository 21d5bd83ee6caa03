"""Coordinators: the group coordinator (consumer groups and committed offsets in
`__consumer_offsets`) and the transaction coordinator (transactional producers in
`__transaction_state`). Each coordinates the keys of the internal-topic partitions this broker
leads, loads their state when it gains leadership and drops it when it loses it.

Above the log and replication; below the broker, which hands requests to them.
"""
