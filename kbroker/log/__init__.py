"""Kafka's storage engine: partitions as directories of segments in Kafka's exact on-disk formats.

``LogManager`` (every partition under ``log.dirs``, checkpoints, retention, clean shutdown) ->
``UnifiedLog`` (one partition: appends, reads returning ``FileRegion``s, offsets, producer state,
leader epochs) -> ``LogSegment`` (``.log`` + ``OffsetIndex`` + ``TimeIndex``); ``LogCleaner``
compacts ``cleanup.policy=compact`` logs (``cleaner_manager``/``cleaner``). See docs/storage.md.

Plain synchronous code: must not import asyncio, sockets, or any kbroker package other than
``kbroker.protocol`` (record batches, compression, error codes, file regions).
"""

from kbroker.log.cleaner_manager import LogCleaner
from kbroker.log.config import TOPIC_CONFIGS, TOPIC_CONFIGS_BY_NAME, LogConfig, TopicConfigDef
from kbroker.log.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    LogOfflineError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnknownProducerIdError,
)
from kbroker.log.manager import LogManager
from kbroker.log.unified_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    LogAppendInfo,
    UnifiedLog,
)

__all__ = [
    "TOPIC_CONFIGS", "TOPIC_CONFIGS_BY_NAME", "LogConfig", "TopicConfigDef", "CorruptRecordError",
    "InvalidProducerEpochError", "InvalidRecordError", "InvalidTimestampError", "KafkaStorageError",
    "LogOfflineError", "OffsetOutOfRangeError", "OutOfOrderSequenceError", "RecordBatchTooLargeError",
    "RecordTooLargeError", "UnknownProducerIdError", "LogManager", "LogCleaner", "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "FetchDataInfo", "LogAppendInfo", "UnifiedLog",
]
