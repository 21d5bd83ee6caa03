"""The API version windows this broker serves, advertised verbatim in ApiVersions.

The windows follow what librdkafka and kafka-python send: librdkafka's classic group client
never goes past FindCoordinator v2, JoinGroup v5, SyncGroup v3, Heartbeat v3, LeaveGroup v1, so
those older, non-flexible versions are kept (LeaveGroup goes on to v4 for the admin client's
batch removal of static members). Produce/Fetch start at v3/v4 (RecordBatch v2).

ApiVersions advertises Produce from v0 although v0..v2 are refused (answered with
UNSUPPORTED_VERSION, see unsupported.py), as Apache Kafka 4.0 does (KAFKA-18659): librdkafka
before 2.8 checks for gzip/snappy/lz4 support with a Produce window that must include v0
(librdkafka issue #4956) and otherwise sends those batches uncompressed. Every API not listed
here is not advertised; a client that sends one anyway gets UNSUPPORTED_VERSION where Kafka's
response format allows it.

A member of a cluster (Broker.join_cluster) serves CLUSTER_SERVED too: the APIs that only mean
something with other brokers (elections, reassignments). The API tables of docs/broker.md and
docs/cli.md are printed from these tables (`python -m logcore.broker.api_table`).
"""
from __future__ import annotations

# api key -> (name, min version, max version)
SERVED: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 10),
    1: ("Fetch", 4, 16),
    2: ("ListOffsets", 1, 7),
    3: ("Metadata", 1, 12),
    8: ("OffsetCommit", 2, 9),
    9: ("OffsetFetch", 1, 9),
    10: ("FindCoordinator", 0, 4),
    11: ("JoinGroup", 0, 5),
    12: ("Heartbeat", 0, 3),
    13: ("LeaveGroup", 0, 4),
    14: ("SyncGroup", 0, 3),
    15: ("DescribeGroups", 0, 5),
    16: ("ListGroups", 0, 5),
    # SASL (logcore.security; the server answers them before any handler)
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 3),
    19: ("CreateTopics", 2, 5),
    20: ("DeleteTopics", 1, 6),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 4),
    23: ("OffsetForLeaderEpoch", 2, 4),
    # transactions (transaction_handlers.py); AddPartitionsToTxn v4 is the brokers' form (KIP-890)
    24: ("AddPartitionsToTxn", 0, 4),
    25: ("AddOffsetsToTxn", 0, 3),
    26: ("EndTxn", 0, 3),
    27: ("WriteTxnMarkers", 1, 1),
    28: ("TxnOffsetCommit", 0, 3),
    # the ACL APIs (acl_handlers.py); SECURITY_DISABLED without authorizer.class.name, as Kafka
    29: ("DescribeAcls", 1, 3),
    30: ("CreateAcls", 1, 3),
    31: ("DeleteAcls", 1, 3),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    35: ("DescribeLogDirs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    47: ("OffsetDelete", 0, 0),
    # client quotas (quota_handlers.py)
    48: ("DescribeClientQuotas", 0, 1),
    49: ("AlterClientQuotas", 0, 1),
    # users' SCRAM credentials (scram_handlers.py)
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    # describe_handlers.py
    60: ("DescribeCluster", 0, 1),
    61: ("DescribeProducers", 0, 0),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 1),
    # the consumer group protocol (KIP-848; consumer_group_handlers.py), unless
    # group.coordinator.rebalance.protocols leaves it out
    68: ("ConsumerGroupHeartbeat", 0, 1),
    69: ("ConsumerGroupDescribe", 0, 1),
    # config_handlers.py: v1 (KIP-1142); v0 listed client metrics resources only
    74: ("ListConfigResources", 1, 1),
}

# What a cluster member serves besides SERVED (api key -> (name, min, max)).
CLUSTER_SERVED: dict[int, tuple[str, int, int]] = {
    43: ("ElectLeaders", 0, 2),
    45: ("AlterPartitionReassignments", 0, 1),
    46: ("ListPartitionReassignments", 0, 0),
}


def cluster_served() -> dict[int, tuple[str, int, int]]:
    """What a cluster member advertises: SERVED and CLUSTER_SERVED."""
    return {**SERVED, **CLUSTER_SERVED}


# api key -> the min version advertised in ApiVersions when it differs from the served one
ADVERTISED_MIN: dict[int, int] = {0: 0}


def advertised(served: dict[int, tuple[str, int, int]] = SERVED) -> list[tuple[int, int, int]]:
    """(api key, min, max) as ApiVersions lists them."""
    return [(key, ADVERTISED_MIN.get(key, lo), hi) for key, (_, lo, hi) in sorted(served.items())]


def windows(served: dict[int, tuple[str, int, int]] = SERVED) -> dict[int, tuple[int, int]]:
    return {key: (lo, hi) for key, (_, lo, hi) in served.items()}
