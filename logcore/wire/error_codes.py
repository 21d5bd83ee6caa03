"""Kafka error codes (the numbers of Kafka's `Errors` enum), the one place they are defined, and
which seglog error answers as which code.
"""
from __future__ import annotations

from logcore.errors import (InvalidReplicationFactorError, CommitFailedError, CommitStateUnknownError, CorruptRecordError,
                            FencedWriterError, InvalidConfigError, InvalidProducerEpochError,
                            InvalidRecordError, InvalidTopicError, InvalidTxnStateError, NotLeaderOrFollowerError,
                            OffsetOutOfRangeError,
                            OutOfOrderSequenceError, RecordTooLargeError, RejectedRecordsError, StorageError,
                            TopicExistsError, TopicNotFoundError, UnsupportedMagicError)

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
POLICY_VIOLATION = 44
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_COORDINATOR_FENCED = 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
SECURITY_DISABLED = 54
OPERATION_NOT_ATTEMPTED = 55
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
OFFSET_NOT_AVAILABLE = 78
PREFERRED_LEADER_NOT_AVAILABLE = 80
FENCED_INSTANCE_ID = 82
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
GROUP_SUBSCRIBED_TO_TOPIC = 86
MEMBER_ID_REQUIRED = 79
INVALID_RECORD = 87
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
UNKNOWN_TOPIC_ID = 100
TRANSACTIONAL_ID_NOT_FOUND = 105
FETCH_SESSION_TOPIC_ID_ERROR = 106
OFFSET_MOVED_TO_TIERED_STORAGE = 109
# the consumer group protocol (KIP-848)
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128

# Most specific class first: the first match wins.
_BY_CLASS: tuple[tuple[type, int], ...] = (
    (UnsupportedMagicError, UNSUPPORTED_FOR_MESSAGE_FORMAT),
    (CorruptRecordError, CORRUPT_MESSAGE),
    (RecordTooLargeError, MESSAGE_TOO_LARGE),
    (OutOfOrderSequenceError, OUT_OF_ORDER_SEQUENCE_NUMBER),
    (InvalidTxnStateError, INVALID_TXN_STATE),
    (InvalidProducerEpochError, INVALID_PRODUCER_EPOCH),
    (InvalidRecordError, INVALID_RECORD),
    (OffsetOutOfRangeError, OFFSET_OUT_OF_RANGE),
    (TopicNotFoundError, UNKNOWN_TOPIC_OR_PARTITION),
    (TopicExistsError, TOPIC_ALREADY_EXISTS),
    (InvalidReplicationFactorError, INVALID_REPLICATION_FACTOR),
    (InvalidTopicError, INVALID_TOPIC_EXCEPTION),
    (InvalidConfigError, INVALID_CONFIG),
    (FencedWriterError, NOT_LEADER_OR_FOLLOWER),
    (NotLeaderOrFollowerError, NOT_LEADER_OR_FOLLOWER),
    (CommitFailedError, NOT_LEADER_OR_FOLLOWER),
    (CommitStateUnknownError, KAFKA_STORAGE_ERROR),
    (StorageError, KAFKA_STORAGE_ERROR),
    (OSError, KAFKA_STORAGE_ERROR),
)


def error_code(exc: BaseException) -> int:
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code
    return UNKNOWN_SERVER_ERROR


def produce_error_detail(exc: BaseException) -> tuple[str, list[tuple[int, str]]]:
    """(error_message, record_errors) of a refused Produce partition, as Kafka answers them.

    A batch refused for some of its records (RejectedRecordsError: e.g. records without a key on
    a compacted topic) gets Kafka's per-record errors and Kafka's summary message (LogValidator's
    RecordValidationException); any other error its own message and no record errors.
    """
    errors = getattr(exc, "record_errors", None)
    if not isinstance(exc, RejectedRecordsError) or not errors:
        return str(exc), []
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return (f"One or more records have been rejected due to {len(errors)} record errors in total,"
            f" and only showing the first three errors at most: [{shown}]"), list(errors)
