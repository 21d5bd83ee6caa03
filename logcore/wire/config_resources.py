"""The config resources of DescribeConfigs / IncrementalAlterConfigs (Kafka's
`ConfigResource.Type`) and where a described value comes from (`ConfigSource`), defined here
once."""
from __future__ import annotations

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32               # Kafka 4's per-group configs (KIP-848)

# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# DescribeConfigs config_source values
SOURCE_TOPIC = 1                # DYNAMIC_TOPIC_CONFIG: the topic's own override
SOURCE_DYNAMIC_BROKER = 2       # DYNAMIC_BROKER_CONFIG: set at runtime for one broker
SOURCE_DYNAMIC_DEFAULT = 3      # DYNAMIC_DEFAULT_BROKER_CONFIG: set at runtime for every broker
SOURCE_STATIC_BROKER = 4        # STATIC_BROKER_CONFIG: the broker's properties
SOURCE_DEFAULT = 5              # DEFAULT_CONFIG
SOURCE_DYNAMIC_GROUP = 8        # DYNAMIC_GROUP_CONFIG: the group's own config
