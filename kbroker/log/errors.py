"""Storage-layer exceptions, each a ``KafkaError`` carrying the error code the API layer puts on the wire.

Owns the mapping from storage failures (disk errors, offsets out of range, validation failures of
produced batches, idempotent-producer state violations) to Kafka's error codes. Record-format
errors (CRC mismatch, malformed batch) come from ``kbroker.protocol.records`` when it defines them,
so one exception class is used across the layers.
"""

from __future__ import annotations

from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CorruptRecordError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "UnknownProducerIdError",
    "LogOfflineError",
]


try:  # protocol.records owns the record-format errors; fall back while it is being written.
    from kbroker.protocol.records import CorruptRecordError, InvalidRecordError
except ImportError:  # pragma: no cover - only before protocol/records.py exists

    class CorruptRecordError(KafkaError):  # type: ignore[no-redef]
        """A batch failed its CRC-32C or its framing is broken (CORRUPT_MESSAGE)."""

        error_code = ErrorCode.CORRUPT_MESSAGE

    class InvalidRecordError(KafkaError):  # type: ignore[no-redef]
        """A batch is well formed but violates a broker rule (INVALID_RECORD)."""

        error_code = ErrorCode.INVALID_RECORD


class KafkaStorageError(KafkaError):
    """An I/O error on a log directory (ENOSPC, EIO...). Retriable for clients: KAFKA_STORAGE_ERROR."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogOfflineError(KafkaStorageError):
    """The log was marked offline after a failure it could not undo; every operation fails."""


class OffsetOutOfRangeError(KafkaError):
    """A fetch/read offset is below the log start offset or above the log end offset."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(KafkaError):
    """A batch is larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(KafkaError):
    """The whole append is larger than ``segment.bytes`` (RECORD_LIST_TOO_LARGE), as in Kafka."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidTimestampError(KafkaError):
    """A CreateTime timestamp is outside message.timestamp.before/after.max.ms (INVALID_TIMESTAMP)."""

    error_code = ErrorCode.INVALID_TIMESTAMP


class OutOfOrderSequenceError(KafkaError):
    """An idempotent producer's batch does not follow its last sequence (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class TransactionCoordinatorFencedError(KafkaError):
    """A transaction marker from a coordinator epoch older than one this producer's markers already
    came from (Kafka's ProducerAppendInfo.checkCoordinatorEpoch): a zombie coordinator."""

    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class InvalidProducerEpochError(KafkaError):
    """A batch carries an older producer epoch than the one last seen (INVALID_PRODUCER_EPOCH)."""

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(KafkaError):
    """A non-transactional batch from a producer whose transaction is open in the partition (Kafka's
    ProducerAppendInfo.appendDataBatch: "Expected transactional write")."""

    error_code = ErrorCode.INVALID_TXN_STATE


class UnknownProducerIdError(KafkaError):
    """Kept for the API layer's mapping; since KIP-360 the log accepts unknown producers instead."""

    error_code = ErrorCode.UNKNOWN_PRODUCER_ID
