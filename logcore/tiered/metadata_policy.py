"""Where a remote tier keeps its remote log metadata: the policy `remote.log.metadata.manager.class.name`
names.

- `ObjectStoreMetadata` (empty, `logcore.tiered.metadata_store.RemoteLogMetadataStore`): the
  records beside the remote data (`metadata_store.py`), the source of truth for every process.
- `TopicMetadata` (Kafka's TopicBasedRemoteLogMetadataManager): in a broker that attached
  `__remote_log_metadata` (`attach`), the topic is the source of truth and the object-store
  records are the copy it keeps up to date (`topic_metadata_store.py`). In a process without a
  broker (the Spark source, `seglog tiered`, `seglog dump --remote`) the copy is read; writing it
  there (`seglog maintain`) is refused, since the brokers would not see it.
"""
from __future__ import annotations

import uuid

from logcore.errors import RemoteStorageError
from logcore.storage import Storage
from logcore.tiered.config import TOPIC_BASED_RLMM_CLASS, TieredConfig
from logcore.tiered.metadata import TopicIdPartition
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from logcore.tiered.metadata_topic import MetadataTopicCache, MetadataTopicClient
from logcore.tiered.topic_metadata_store import TopicBasedMetadataStore


class ObjectStoreMetadata:
    name = "object store"

    def __init__(self, config: TieredConfig):
        self.config = config

    def open_store(self, storage: Storage, topic: str, topic_id: uuid.UUID, partition: int):
        return RemoteLogMetadataStore(storage, topic, topic_id, partition,
                                      custom_metadata_max_bytes=self.config.custom_metadata_max_bytes)

    def attach(self, client: MetadataTopicClient) -> None:
        raise RemoteStorageError(
            "remote.log.metadata.manager.class.name does not name TopicBasedRemoteLogMetadataManager: "
            "the remote log metadata is kept in the remote tier, not in __remote_log_metadata")


class TopicMetadata:
    name = "__remote_log_metadata"

    def __init__(self, config: TieredConfig):
        self.config = config
        self.cache: MetadataTopicCache | None = None

    def attach(self, client: MetadataTopicClient) -> None:
        self.cache = MetadataTopicCache(client)

    def open_store(self, storage: Storage, topic: str, topic_id: uuid.UUID, partition: int):
        max_bytes = self.config.custom_metadata_max_bytes
        if self.cache is None:
            return RemoteLogMetadataStore(
                storage, topic, topic_id, partition, custom_metadata_max_bytes=max_bytes,
                read_only_reason=(f"remote.log.metadata.manager.class.name={TOPIC_BASED_RLMM_CLASS}: "
                                  "the brokers write the remote log metadata through __remote_log_metadata; "
                                  "this process has no broker and only reads the copy in the remote tier"))
        mirror = RemoteLogMetadataStore(storage, topic, topic_id, partition, custom_metadata_max_bytes=max_bytes)
        return TopicBasedMetadataStore(self.cache, TopicIdPartition(topic_id, topic, partition),
                                       mirror=mirror, custom_metadata_max_bytes=max_bytes)


def metadata_policy(config: TieredConfig) -> ObjectStoreMetadata | TopicMetadata:
    if config.metadata_manager_class_name == TOPIC_BASED_RLMM_CLASS:
        return TopicMetadata(config)
    return ObjectStoreMetadata(config)
