"""A copy of a Kafka broker's log dir opened as a log root: it has no `seglog-topics.json`, so its
topics and partition counts come from the `<topic>-<partition>` folder names and its topic ids
from their `partition.metadata` files. Such a root opens read-only, with Kafka's default configs.
"""
from __future__ import annotations

import re

from logcore.errors import SegLogError
from logcore.log.log_loader import KAFKA_CLEAN_SHUTDOWN
from logcore.log.partition_metadata import FILE_NAME as PARTITION_METADATA
from logcore.log.partition_metadata import PartitionMetadataFile, format_topic_id
from logcore.log.partition_state import HW_CHECKPOINT, LOG_START_CHECKPOINT, RECOVERY_POINT_CHECKPOINT

META_PROPERTIES = "meta.properties"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_KAFKA_ROOT_FILES = (HW_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, LOG_START_CHECKPOINT,
                     "cleaner-offset-checkpoint", META_PROPERTIES, KAFKA_CLEAN_SHUTDOWN)


def looks_like_kafka_log_dir(storage, names: list[str]) -> bool:
    """Whether the root listing `names` has a Kafka broker's root files or partition folders."""
    return any(n in _KAFKA_ROOT_FILES for n in names) or any(
        _PARTITION_DIR.match(n) and storage.exists(storage.join(n, "")) for n in names
        if _PARTITION_DIR.match(n))


def kafka_topics(storage) -> dict[str, dict]:
    """The topics of the Kafka log dir in `storage`, as entries shaped like the topics file's."""
    topics: dict[str, dict] = {}
    for name in storage.list_dir(""):
        m = _PARTITION_DIR.match(name)
        if not m or "." in name.rsplit("-", 1)[1]:
            continue
        t = topics.setdefault(m["topic"], {"partitions": 0, "config": {}, "topic_id": ""})
        t["partitions"] = max(t["partitions"], int(m["partition"]) + 1)
        if not t["topic_id"]:
            try:
                meta = PartitionMetadataFile(storage, storage.join(name, PARTITION_METADATA)).read()
                t["topic_id"] = format_topic_id(meta.topic_id) if meta else ""
            except SegLogError:
                pass
    return topics
