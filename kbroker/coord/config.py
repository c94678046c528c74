"""The group coordinator's injected dependencies and settings.

`Scheduler` (keyed one-shot timers), `RecordWriter` (appends coordinator records to the group's
`__consumer_offsets` partition), `CoordinatorConfig` (the broker's group.* / offsets.* settings), how
append errors reach clients, and the timer keys. Pure: no asyncio, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kbroker.metadata.views import TopicInfo
from kbroker.protocol.errors import ErrorCode


class TopicLookup(Protocol):
    """The topics a consumer group can subscribe to: the broker's `MetadataCache` (a fake in tests)."""

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def topics(self) -> list[TopicInfo]: ...


class Scheduler(Protocol):
    """Keyed one-shot timers (Kafka's coordinator timer): scheduling a key replaces its timer."""

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None: ...

    def cancel(self, key: str) -> None: ...


# (key, value or None for a tombstone) records for one group's partition -> the append's error code.
RecordWriter = Callable[[str, list[tuple[bytes, bytes | None]]], ErrorCode]


@dataclass(slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = 300000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096
    # KIP-848 consumer groups (group.consumer.*)
    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    # group.consumer.migration.policy: disabled / upgrade / downgrade / bidirectional (Kafka's
    # ConsumerGroupMigrationPolicy): which online conversions of non-empty groups are allowed.
    consumer_migration_policy: str = "bidirectional"
    # KIP-932 share groups (group.share.*)
    share_session_timeout_ms: int = 45000
    share_heartbeat_interval_ms: int = 5000
    share_max_size: int = 200

    @property
    def upgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("downgrade", "bidirectional")


def map_append_error(error: ErrorCode, for_commit: bool = False) -> ErrorCode:
    """How Kafka reports a failed write of a coordinator record to the client."""
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if for_commit else ErrorCode.UNKNOWN_SERVER_ERROR
    return error


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"
