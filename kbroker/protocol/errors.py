"""Kafka's protocol error codes (the ``Errors`` table of Apache Kafka 4.3) and the base domain error.

Owns the numeric codes every response carries, their Kafka names, whether Kafka's client treats them
as retriable (the exception class extends ``RetriableException``), and a short default message.
Sans-IO; imports nothing from kbroker.
"""

from __future__ import annotations

from enum import IntEnum

# (name, code, retriable, default message). Retriable flags follow Kafka's Java exception hierarchy
# (RetriableException / InvalidMetadataException subclasses), which is what the generated
# "Error Codes" table on kafka.apache.org reports; third-party clients sometimes differ (franz-go
# marks PRODUCER_FENCED retriable, Kafka does not).
_TABLE: tuple[tuple[str, int, bool, str], ...] = (
    ("UNKNOWN_SERVER_ERROR", -1, False, "Unexpected server error while processing the request."),
    ("NONE", 0, False, ""),
    ("OFFSET_OUT_OF_RANGE", 1, False, "The requested offset is outside the partition's offset range."),
    (
        "CORRUPT_MESSAGE",
        2,
        True,
        "Record batch failed its CRC, exceeds the valid size, or is otherwise corrupt.",
    ),
    ("UNKNOWN_TOPIC_OR_PARTITION", 3, True, "This server does not host this topic-partition."),
    ("INVALID_FETCH_SIZE", 4, False, "The requested fetch size is invalid."),
    ("LEADER_NOT_AVAILABLE", 5, True, "The partition has no leader (leader election in progress)."),
    ("NOT_LEADER_OR_FOLLOWER", 6, True, "This broker is not the leader (or not a replica) of the partition."),
    ("REQUEST_TIMED_OUT", 7, True, "The request timed out."),
    ("BROKER_NOT_AVAILABLE", 8, False, "The broker is not available."),
    ("REPLICA_NOT_AVAILABLE", 9, True, "The replica is not available for the requested topic-partition."),
    ("MESSAGE_TOO_LARGE", 10, False, "The request included a record batch larger than the server accepts."),
    ("STALE_CONTROLLER_EPOCH", 11, False, "The controller moved to another broker."),
    ("OFFSET_METADATA_TOO_LARGE", 12, False, "The committed offset metadata is too large."),
    ("NETWORK_EXCEPTION", 13, True, "The server disconnected before a response was received."),
    ("COORDINATOR_LOAD_IN_PROGRESS", 14, True, "The coordinator is still loading its state."),
    ("COORDINATOR_NOT_AVAILABLE", 15, True, "The coordinator is not available."),
    ("NOT_COORDINATOR", 16, True, "This broker is not the coordinator."),
    (
        "INVALID_TOPIC_EXCEPTION",
        17,
        False,
        "The topic name is invalid or the operation is not allowed on it.",
    ),
    ("RECORD_LIST_TOO_LARGE", 18, False, "The produced record set exceeds the segment size."),
    ("NOT_ENOUGH_REPLICAS", 19, True, "Fewer in-sync replicas than min.insync.replicas."),
    ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20, True, "Written, but to fewer in-sync replicas than required."),
    ("INVALID_REQUIRED_ACKS", 21, False, "The requested acks value is invalid."),
    ("ILLEGAL_GENERATION", 22, False, "The group generation id is not valid."),
    (
        "INCONSISTENT_GROUP_PROTOCOL",
        23,
        False,
        "The member's protocol type or protocols are incompatible with the group.",
    ),
    ("INVALID_GROUP_ID", 24, False, "The group id is invalid."),
    ("UNKNOWN_MEMBER_ID", 25, False, "The coordinator does not know this member id."),
    ("INVALID_SESSION_TIMEOUT", 26, False, "The session timeout is outside the broker's allowed range."),
    ("REBALANCE_IN_PROGRESS", 27, False, "The group is rebalancing; rejoin."),
    ("INVALID_COMMIT_OFFSET_SIZE", 28, False, "The offset commit was rejected because of its size."),
    ("TOPIC_AUTHORIZATION_FAILED", 29, False, "Topic authorization failed."),
    ("GROUP_AUTHORIZATION_FAILED", 30, False, "Group authorization failed."),
    ("CLUSTER_AUTHORIZATION_FAILED", 31, False, "Cluster authorization failed."),
    ("INVALID_TIMESTAMP", 32, False, "A record timestamp is outside the acceptable range."),
    ("UNSUPPORTED_SASL_MECHANISM", 33, False, "The broker does not support this SASL mechanism."),
    ("ILLEGAL_SASL_STATE", 34, False, "The request is not valid in the current SASL state."),
    ("UNSUPPORTED_VERSION", 35, False, "This API version is not supported."),
    ("TOPIC_ALREADY_EXISTS", 36, False, "A topic with this name already exists."),
    ("INVALID_PARTITIONS", 37, False, "The number of partitions is invalid."),
    ("INVALID_REPLICATION_FACTOR", 38, False, "The replication factor is invalid."),
    ("INVALID_REPLICA_ASSIGNMENT", 39, False, "The replica assignment is invalid."),
    ("INVALID_CONFIG", 40, False, "The configuration is invalid."),
    ("NOT_CONTROLLER", 41, True, "This broker is not the active controller."),
    ("INVALID_REQUEST", 42, False, "The request is malformed or not valid for this broker."),
    ("UNSUPPORTED_FOR_MESSAGE_FORMAT", 43, False, "The message format does not support this request."),
    ("POLICY_VIOLATION", 44, False, "The request does not satisfy the configured policy."),
    ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45, False, "The broker received an out-of-order sequence number."),
    ("DUPLICATE_SEQUENCE_NUMBER", 46, False, "The broker received a duplicate sequence number."),
    ("INVALID_PRODUCER_EPOCH", 47, False, "The producer epoch is stale."),
    ("INVALID_TXN_STATE", 48, False, "The transactional operation is invalid in the current state."),
    ("INVALID_PRODUCER_ID_MAPPING", 49, False, "The producer id is not assigned to this transactional id."),
    ("INVALID_TRANSACTION_TIMEOUT", 50, False, "The transaction timeout exceeds max.transaction.timeout.ms."),
    ("CONCURRENT_TRANSACTIONS", 51, True, "Another operation on this transaction is in progress."),
    (
        "TRANSACTION_COORDINATOR_FENCED",
        52,
        False,
        "The transaction coordinator sending markers is no longer current.",
    ),
    ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 53, False, "Transactional id authorization failed."),
    ("SECURITY_DISABLED", 54, False, "Security features are disabled."),
    ("OPERATION_NOT_ATTEMPTED", 55, False, "The broker did not attempt this operation."),
    ("KAFKA_STORAGE_ERROR", 56, True, "Disk error while accessing the log."),
    ("LOG_DIR_NOT_FOUND", 57, False, "The log directory does not exist."),
    ("SASL_AUTHENTICATION_FAILED", 58, False, "SASL authentication failed."),
    ("UNKNOWN_PRODUCER_ID", 59, False, "The broker has no state for this producer id."),
    ("REASSIGNMENT_IN_PROGRESS", 60, False, "A partition reassignment is in progress."),
    ("DELEGATION_TOKEN_AUTH_DISABLED", 61, False, "Delegation token authentication is disabled."),
    ("DELEGATION_TOKEN_NOT_FOUND", 62, False, "The delegation token was not found."),
    ("DELEGATION_TOKEN_OWNER_MISMATCH", 63, False, "The principal does not own the delegation token."),
    (
        "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        64,
        False,
        "Delegation token requests are not allowed on this channel.",
    ),
    ("DELEGATION_TOKEN_AUTHORIZATION_FAILED", 65, False, "Delegation token authorization failed."),
    ("DELEGATION_TOKEN_EXPIRED", 66, False, "The delegation token has expired."),
    ("INVALID_PRINCIPAL_TYPE", 67, False, "The principal type is not supported."),
    ("NON_EMPTY_GROUP", 68, False, "The group is not empty."),
    ("GROUP_ID_NOT_FOUND", 69, False, "The group id does not exist."),
    ("FETCH_SESSION_ID_NOT_FOUND", 70, True, "The fetch session id was not found."),
    ("INVALID_FETCH_SESSION_EPOCH", 71, True, "The fetch session epoch is invalid."),
    ("LISTENER_NOT_FOUND", 72, True, "The leader has no endpoint for the listener the request arrived on."),
    ("TOPIC_DELETION_DISABLED", 73, False, "Topic deletion is disabled."),
    ("FENCED_LEADER_EPOCH", 74, True, "The leader epoch in the request is older than the epoch on the broker."),
    ("UNKNOWN_LEADER_EPOCH", 75, True, "The request's leader epoch is newer than the broker's."),
    (
        "UNSUPPORTED_COMPRESSION_TYPE",
        76,
        False,
        "The requesting client does not support the compression type.",
    ),
    ("STALE_BROKER_EPOCH", 77, False, "The broker epoch is stale."),
    ("OFFSET_NOT_AVAILABLE", 78, True, "The leader's high watermark has not caught up yet."),
    ("MEMBER_ID_REQUIRED", 79, False, "The group member must rejoin with the given member id."),
    ("PREFERRED_LEADER_NOT_AVAILABLE", 80, True, "The preferred leader is not available."),
    ("GROUP_MAX_SIZE_REACHED", 81, False, "The group has reached group.max.size."),
    ("FENCED_INSTANCE_ID", 82, False, "Another member registered with the same group.instance.id."),
    ("ELIGIBLE_LEADERS_NOT_AVAILABLE", 83, True, "No eligible leader is available for the partition."),
    ("ELECTION_NOT_NEEDED", 84, True, "Leader election is not needed for the partition."),
    ("NO_REASSIGNMENT_IN_PROGRESS", 85, False, "No partition reassignment is in progress."),
    (
        "GROUP_SUBSCRIBED_TO_TOPIC",
        86,
        False,
        "The group is subscribed to the topic whose offsets are being deleted.",
    ),
    ("INVALID_RECORD", 87, False, "A record failed broker-side validation."),
    ("UNSTABLE_OFFSET_COMMIT", 88, True, "There are pending transactional offsets for the partition."),
    ("THROTTLING_QUOTA_EXCEEDED", 89, True, "The throttling quota has been exceeded."),
    ("PRODUCER_FENCED", 90, False, "A newer producer with the same transactional id fenced this one."),
    ("RESOURCE_NOT_FOUND", 91, False, "The referenced resource does not exist."),
    ("DUPLICATE_RESOURCE", 92, False, "The same resource was referenced twice."),
    ("UNACCEPTABLE_CREDENTIAL", 93, False, "The credential does not meet the acceptability criteria."),
    ("INCONSISTENT_VOTER_SET", 94, False, "The sender or recipient is not one of the expected voters."),
    ("INVALID_UPDATE_VERSION", 95, False, "The update version is invalid."),
    ("FEATURE_UPDATE_FAILED", 96, False, "Finalized features could not be updated."),
    (
        "PRINCIPAL_DESERIALIZATION_FAILURE",
        97,
        False,
        "The forwarded request principal could not be deserialized.",
    ),
    ("SNAPSHOT_NOT_FOUND", 98, False, "The requested snapshot was not found."),
    ("POSITION_OUT_OF_RANGE", 99, False, "The snapshot position is out of range."),
    ("UNKNOWN_TOPIC_ID", 100, True, "This server does not host this topic id."),
    ("DUPLICATE_BROKER_REGISTRATION", 101, False, "This broker id is already registered."),
    ("BROKER_ID_NOT_REGISTERED", 102, False, "This broker id is not registered."),
    ("INCONSISTENT_TOPIC_ID", 103, True, "The topic id does not match the topic id in the log."),
    ("INCONSISTENT_CLUSTER_ID", 104, False, "The cluster id does not match the stored cluster id."),
    ("TRANSACTIONAL_ID_NOT_FOUND", 105, False, "The transactional id was not found."),
    ("FETCH_SESSION_TOPIC_ID_ERROR", 106, True, "The fetch session saw inconsistent topic ids."),
    ("INELIGIBLE_REPLICA", 107, False, "The new ISR contains at least one ineligible replica."),
    ("NEW_LEADER_ELECTED", 108, False, "A new leader was elected; the ISR change was not applied."),
    ("OFFSET_MOVED_TO_TIERED_STORAGE", 109, False, "The requested offset has moved to tiered storage."),
    ("FENCED_MEMBER_EPOCH", 110, False, "The member epoch is fenced; rejoin with epoch 0."),
    ("UNRELEASED_INSTANCE_ID", 111, False, "The group.instance.id has not been released yet."),
    ("UNSUPPORTED_ASSIGNOR", 112, False, "The assignor is not supported by the group."),
    ("STALE_MEMBER_EPOCH", 113, False, "The member epoch is stale."),
    ("MISMATCHED_ENDPOINT_TYPE", 114, False, "The request was sent to an endpoint of the wrong type."),
    ("UNSUPPORTED_ENDPOINT_TYPE", 115, False, "This endpoint type does not support the request."),
    ("UNKNOWN_CONTROLLER_ID", 116, False, "The controller id is unknown."),
    ("UNKNOWN_SUBSCRIPTION_ID", 117, False, "The client telemetry subscription id is unknown."),
    ("TELEMETRY_TOO_LARGE", 118, False, "The client telemetry payload is too large."),
    ("INVALID_REGISTRATION", 119, False, "The controller rejected the broker registration."),
    (
        "TRANSACTION_ABORTABLE",
        120,
        False,
        "The server hit an error the transaction can recover from by aborting.",
    ),
    (
        "INVALID_RECORD_STATE",
        121,
        False,
        "The share-group record is not in a state that allows the acknowledgement.",
    ),
    ("SHARE_SESSION_NOT_FOUND", 122, True, "The share session was not found."),
    ("INVALID_SHARE_SESSION_EPOCH", 123, True, "The share session epoch is invalid."),
    ("FENCED_STATE_EPOCH", 124, False, "The share coordinator rejected the request because the share-group state epoch did not match."),
    ("INVALID_VOTER_KEY", 125, False, "The voter key does not match the receiving replica."),
    ("DUPLICATE_VOTER", 126, False, "The voter is already in the voter set."),
    ("VOTER_NOT_FOUND", 127, False, "The voter is not in the voter set."),
    ("INVALID_REGULAR_EXPRESSION", 128, False, "The regular expression is invalid."),
    ("REBOOTSTRAP_REQUIRED", 129, False, "Client metadata is stale; rebootstrap."),
    ("STREAMS_INVALID_TOPOLOGY", 130, False, "The streams topology is invalid."),
    ("STREAMS_INVALID_TOPOLOGY_EPOCH", 131, False, "The streams topology epoch is invalid."),
    ("STREAMS_TOPOLOGY_FENCED", 132, False, "The streams topology epoch is outdated."),
    ("SHARE_SESSION_LIMIT_REACHED", 133, True, "The limit of share sessions has been reached."),
)

_RETRIABLE: dict[int, bool] = {code: retriable for _, code, retriable, _ in _TABLE}
_MESSAGES: dict[int, str] = {code: message for _, code, _, message in _TABLE}


class ErrorCode(IntEnum):
    """Kafka's int16 error codes, with ``.retriable`` and ``.message``."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
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
    INVALID_TIMESTAMP = 32
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
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133

    @property
    def retriable(self) -> bool:
        """True when Kafka's exception for this code is a ``RetriableException``."""
        return _RETRIABLE[self.value]

    @property
    def message(self) -> str:
        """A short default message (empty for NONE)."""
        return _MESSAGES[self.value]

    @classmethod
    def for_code(cls, code: int) -> ErrorCode:
        """The member for ``code``; unknown codes map to UNKNOWN_SERVER_ERROR as Kafka's clients do."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


class KafkaError(Exception):
    """Base of kbroker's domain errors: the API layer maps ``error_code`` onto the response.

    Subclasses set ``error_code`` as a class attribute; an instance may override it.
    """

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    # (batch index, message) of the records that failed validation (Kafka's RecordValidationException
    # recordErrors), answered in ProduceResponse v8+.
    record_errors: list[tuple[int, str | None]] | None = None

    def __init__(self, message: str | None = None, *, error_code: ErrorCode | None = None) -> None:
        if error_code is not None:
            self.error_code = error_code
        super().__init__(message if message is not None else self.error_code.message)


def error_fields(exc: BaseException) -> tuple[int, str | None]:
    """(error code, error message) for a per-resource result, as Kafka's `ApiError.fromThrowable` gives them.

    An error raised without a message of its own (e.g. an unknown topic in CreatePartitions) goes out
    with a null message, as Kafka's exceptions created without one do; clients then show their own.
    """
    if isinstance(exc, KafkaError):
        message = str(exc)
        return int(exc.error_code), (None if not message or message == exc.error_code.message else message)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR), (str(exc) or None)
