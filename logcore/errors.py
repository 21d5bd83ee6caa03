"""The seglog error hierarchy: shallow and semantic, one root.

Broker handlers map these to Kafka error codes; the CLI prints their message.
Storage credentials never appear in a message.
"""
from __future__ import annotations


class SegLogError(Exception):
    """Root of every error seglog raises on purpose."""


class CorruptRecordError(SegLogError):
    """Bytes that are not a valid RecordBatch v2 (bad size, magic, CRC or record layout)."""

    def __init__(self, message: str, *, file: str | None = None, position: int | None = None):
        where = []
        if file is not None:
            where.append(f"file {file}")
        if position is not None:
            where.append(f"position {position}")
        full = f"{message} ({', '.join(where)})" if where else message
        super().__init__(full)
        self.file = file
        self.position = position
        self.reason = message


class DamagedLogError(CorruptRecordError):
    """Committed data of a partition (below its high watermark or recovery point) is damaged:
    the partition is not opened for writing, since going on would need dropping that data.
    `seglog repair` truncates the log at the damage and reports what it dropped."""


class UnsupportedMagicError(CorruptRecordError):
    """A legacy (magic 0/1) message set: seglog reads and writes RecordBatch v2 only."""


class InvalidRecordError(SegLogError):
    """A well-formed batch that a log must not accept (client sent offsets, control batch, null key on a compacted topic...)."""


class RecordTooLargeError(InvalidRecordError):
    """A batch larger than max.message.bytes or segment.bytes."""


class CorruptIndexError(SegLogError):
    """An index or checkpoint file that fails its sanity checks."""

    def __init__(self, message: str, *, file: str | None = None):
        super().__init__(f"{message} (file {file})" if file else message)
        self.file = file


class OffsetOutOfRangeError(SegLogError):
    """A requested offset below the log start offset or above the log end offset."""

    def __init__(self, message: str, *, topic: str | None = None, partition: int | None = None,
                 offset: int | None = None, log_start_offset: int | None = None,
                 log_end_offset: int | None = None):
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class FencedWriterError(SegLogError):
    """This writer's leader epoch is no longer the partition's: another writer took over."""


class NotLeaderOrFollowerError(SegLogError):
    """A replica's log was asked for a write its role forbids: a leader's append on a replica
    that no longer leads, or a follower's append or truncation for an epoch it no longer
    follows at (the role changed under the caller; the client goes to the current leader)."""


class PartitionInUseError(SegLogError):
    """Another live writer holds the partition, and the caller asked not to take it over."""


class RootServedError(SegLogError):
    """The log root is served by a running broker: it is written only through that broker.
    `owner` is the broker's claim (logcore.log.root_owner.OwnerRecord)."""

    def __init__(self, message: str, owner=None):
        super().__init__(message)
        self.owner = owner


class PolicyViolationError(SegLogError):
    """An operation the topic's config forbids (DeleteRecords on a topic without `delete` policy)."""


class CommitFailedError(SegLogError):
    """A conditional write lost a race; refresh state and retry."""


class CommitStateUnknownError(SegLogError):
    """A commit may or may not have happened (e.g. a timeout after sending); re-read before retrying."""


class DuplicateSequenceError(SegLogError):
    """An idempotent producer resent a batch that is already in the log."""


class OutOfOrderSequenceError(InvalidRecordError):
    """An idempotent producer's sequence number is not the next one expected."""


class InvalidTxnStateError(InvalidRecordError):
    """A non-transactional batch from a producer whose transaction is still open."""


class InvalidProducerEpochError(FencedWriterError):
    """An idempotent producer's epoch is older than the one the log knows."""


class StorageError(SegLogError):
    """Root of storage-backend failures."""


class RetriableStorageError(StorageError):
    """A transient backend failure (timeout, throttling, 5xx): the operation may be retried."""


class ResourceNotFoundError(StorageError):
    """A file, object, bucket or topic that does not exist."""


class TopicNotFoundError(ResourceNotFoundError):
    """The topic does not exist in the log root."""


class ReplicaNotAvailableError(ResourceNotFoundError):
    """A broker's log dir holds no replica of the partition asked for: another broker of the
    cluster holds it (Kafka's REPLICA_NOT_AVAILABLE)."""


class TopicExistsError(SegLogError):
    """A topic with that name already exists in the log root."""


class NotALogRootError(SegLogError):
    """The given location is not a seglog / Kafka log root."""


class ReadOnlyLogError(SegLogError):
    """A write was attempted on a log opened read-only (e.g. a copy of a Kafka broker's log dir)."""


class InvalidConfigError(SegLogError, ValueError):
    """A config or option with an unknown name, a bad value, or a bad combination."""


class InvalidTopicError(InvalidConfigError):
    """A topic name Kafka would reject."""


class RemoteStorageError(StorageError):
    """A remote storage manager operation failed (KIP-405 RemoteStorageException); the caller may
    retry the whole operation with a fresh segment id (copy) or as is (fetch, delete)."""


class RemoteResourceNotFoundError(RemoteStorageError, ResourceNotFoundError):
    """A remote segment, one of its indexes, or its manifest does not exist
    (KIP-405 RemoteResourceNotFoundException)."""


class RejectedRecordsError(InvalidRecordError):
    """A batch refused because of some of its records (Kafka's per-record errors, KIP-467).

    `record_errors` lists (index of the record in the batch, Kafka's message for it); the broker
    answers them as the Produce response's `record_errors`.
    """

    def __init__(self, message: str, *, record_errors: list[tuple[int, str]]):
        super().__init__(message)
        self.record_errors = record_errors


class InvalidReplicationFactorError(SegLogError):
    """A replication factor below 1 or above the number of available brokers
    (Kafka's INVALID_REPLICATION_FACTOR)."""


class CoordinatorUnavailableError(RetriableStorageError):
    """The cluster's coordinator (ZooKeeper) could not be reached or lost the session mid-call."""


class ZkVersionConflictError(CommitFailedError):
    """A conditional (versioned) ZooKeeper update found another version: someone else wrote the
    znode first. Re-read it; the writer may have been deposed."""


class ControllerMovedError(FencedWriterError):
    """A controller write carried a controller epoch that is no longer the current one
    (Kafka's ControllerMovedException): another broker is the controller now."""


class BrokerIdInUseError(SegLogError):
    """Another live session holds this broker id's registration in ZooKeeper."""
