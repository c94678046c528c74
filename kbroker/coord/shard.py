"""The group coordinator's shard: the groups and offsets of one `__consumer_offsets` partition.

Kafka's `GroupCoordinatorShard`: it combines the `GroupMetadataManager` (the group state machine:
classic and consumer protocols, migration, group records) and the `OffsetMetadataManager` (committed
offsets) of one partition, sharing its `OffsetStore`, its timers and its record writer, and is what
the coordinator runtime (`kbroker.coord.coordinator_runtime`) loads, replays into, runs operations on
and unloads. The operations that touch both halves live here: DeleteGroups (offset and group
tombstones in one write), the periodic cleanup of expired offsets and of groups left with nothing,
and the routing of replayed records by key type.

Pure: no asyncio, no I/O. Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kbroker.coord.config import (
    CoordinatorConfig,
    RecordWriter,
    Scheduler,
    TopicLookup,
    heartbeat_key,
    map_append_error,
)
from kbroker.coord.consumer_coordinator import HeartbeatRequestData, HeartbeatResult
from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.coord.consumer_records import ConsumerGroupRecordKey
from kbroker.coord.group import ClassicGroup, GroupState, JoinResult, SyncResult
from kbroker.coord.group_metadata_manager import GroupDescription, GroupMetadataManager
from kbroker.coord.offset_metadata_manager import CommitRequestPartition, FetchedOffset, OffsetMetadataManager
from kbroker.coord.offsets import OffsetStore
from kbroker.coord.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
)
from kbroker.coord.share_group import ShareGroup
from kbroker.coord.share_group_initialization import ShareGroupStatePartitionMetadataManager
from kbroker.coord.share_group_protocol import ShareHeartbeatRequestData
from kbroker.coord.share_records import STATE_PARTITION_METADATA, ShareGroupRecordKey
from kbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)
S = GroupState


class GroupCoordinatorShard:
    """The groups and committed offsets of one `__consumer_offsets` partition."""

    def __init__(self, config: CoordinatorConfig, scheduler: Scheduler, writer: RecordWriter,
                 time_ms: Callable[[], int], group_status: Callable[[str], ErrorCode] | None = None,
                 topics: TopicLookup | None = None) -> None:
        self.config = config
        self.scheduler = scheduler
        self.writer = writer
        self.time_ms = time_ms
        self.group_status = group_status or (lambda _g: ErrorCode.NONE)
        self.offsets = OffsetStore()
        self.group_manager = GroupMetadataManager(config, scheduler, writer, time_ms, self.offsets,
                                                  self.group_status, topics)
        self.offset_manager = OffsetMetadataManager(config, self.offsets, self.group_manager, writer, time_ms,
                                                    self.group_status)
        # KIP-932: which share-partitions of each share group have a state (ShareGroupStatePartitionMetadata).
        self.share_state_partitions = ShareGroupStatePartitionMetadataManager(writer, time_ms, topics)

    # The state the tests and the request-facing service look at.
    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.group_manager.groups

    @property
    def consumer_groups(self) -> dict[str, ConsumerGroup]:
        return self.group_manager.consumer_groups

    @property
    def consumer_written(self) -> dict[str, dict[bytes, bytes]]:
        return self.group_manager.consumer_written

    # -- the group state machine ---------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   client_id: str, client_host: str, require_known_member_id: bool,
                   respond: Callable[[JoinResult], None], supports_skip_assignment: bool = False) -> None:
        self.group_manager.join_group(group_id, member_id, group_instance_id, protocol_type, protocols,
                                      session_timeout_ms, rebalance_timeout_ms, client_id, client_host,
                                      require_known_member_id, respond, supports_skip_assignment)

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
                   respond: Callable[[SyncResult], None]) -> None:
        self.group_manager.sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type,
                                      protocol_name, assignments, respond)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        return self.group_manager.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        return self.group_manager.leave_group(group_id, members)

    def consumer_group_heartbeat(self, req: HeartbeatRequestData) -> HeartbeatResult:
        return self.group_manager.consumer_group_heartbeat(req)

    def consumer_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        return self.group_manager.consumer_group_describe(group_id)

    def share_group_heartbeat(self, req: ShareHeartbeatRequestData) -> HeartbeatResult:
        return self.group_manager.share_group_heartbeat(req)

    def share_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        return self.group_manager.share_group_describe(group_id)

    def share_offsets_alterable(self, group_id: str, create: bool) -> tuple[ErrorCode, str | None]:
        return self.group_manager.share.offsets_alterable(group_id, create)

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        return self.group_manager.describe_group(group_id)

    def list_groups(self, states: list[str], types: list[str]) -> list[tuple[str, str, str, str]]:
        return self.group_manager.list_groups(states, types)

    # -- offsets -------------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       retention_ms: int, partitions: list[CommitRequestPartition],
                       api_version: int = 8) -> list[ErrorCode]:
        return self.offset_manager.commit_offsets(group_id, generation_id, member_id, group_instance_id,
                                                  retention_ms, partitions, api_version)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None, member_id: str | None = None,
                      member_epoch: int = -1, require_stable: bool = False) -> tuple[ErrorCode, list[FetchedOffset]]:
        return self.offset_manager.fetch_offsets(group_id, partitions, member_id, member_epoch, require_stable)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        return self.offset_manager.delete_offsets(group_id, partitions)

    def remove_offsets_of_topics(self, topics: set[str]) -> int:
        return self.offset_manager.remove_offsets_of_topics(topics)

    # -- both halves ---------------------------------------------------------------------------------

    def delete_groups(self, group_ids: list[str]) -> list[ErrorCode]:
        results: list[ErrorCode] = []
        for gid in group_ids:
            error = self.group_status(gid)
            if error != ErrorCode.NONE:
                results.append(error)
                continue
            if gid in self.group_manager.share_groups:
                error = self.group_manager.share.delete_share_group(gid)
                if error == ErrorCode.NONE:
                    self.share_state_partitions.on_group_deleted(gid)
                results.append(error)
                continue
            consumer_group = self.consumer_groups.get(gid)
            if consumer_group is not None:
                if not consumer_group.is_empty():
                    results.append(ErrorCode.NON_EMPTY_GROUP)
                    continue
                error = self.group_manager.delete_consumer_group_records(gid)
                if error == ErrorCode.NONE:
                    error = self._delete_group(ClassicGroup(gid, state_timestamp_ms=self.time_ms()))
                if error == ErrorCode.NONE:
                    consumer_group.dead = True
                    del self.consumer_groups[gid]
                results.append(error)
                continue
            group = self.groups.get(gid)
            if group is None or group.state == S.DEAD:
                results.append(ErrorCode.GROUP_ID_NOT_FOUND)
                continue
            if group.state != S.EMPTY:
                results.append(ErrorCode.NON_EMPTY_GROUP)
                continue
            results.append(self._delete_group(group))
        return results

    def _delete_group(self, group: ClassicGroup) -> ErrorCode:
        """Tombstones for every offset and for the group itself, in one write; the group becomes Dead."""
        gid = group.group_id
        records = self.offset_manager.tombstones(gid)
        records.append((encode_group_metadata_key(gid), None))
        error = self.writer(gid, records)
        if error != ErrorCode.NONE:
            return map_append_error(error)
        self.offsets.remove_group(gid)
        for member_id in list(group.pending_members):
            self.scheduler.cancel(heartbeat_key(gid, member_id))
        group.transition_to(S.DEAD, self.time_ms())
        self.groups.pop(gid, None)
        return ErrorCode.NONE

    def expire_offsets(self) -> int:
        """Kafka's cleanupGroupMetadata: remove offsets past `offsets.retention.minutes` of groups
        without members, then the groups left with nothing. Returns how many offsets were removed."""
        removed = 0
        for gid in sorted(set(self.groups) | set(self.offsets.groups())):
            if self.group_status(gid) != ErrorCode.NONE:
                continue
            consumer_group = self.consumer_groups.get(gid)
            if consumer_group is not None and not consumer_group.is_empty():
                continue
            group = self.groups.get(gid)
            if group is not None and group.state != S.EMPTY:
                continue
            base = None
            if group is not None and group.protocol_type and group.state_timestamp_ms >= 0:
                base = group.state_timestamp_ms
            removed += self.offset_manager.expire_group_offsets(gid, base)
            if group is not None and group.is_empty() and not group.pending_members \
                    and not self.offsets.has_offsets(gid):
                self._delete_group(group)
            elif consumer_group is not None and not self.offsets.has_offsets(gid) \
                    and self.group_manager.delete_consumer_group_records(gid) == ErrorCode.NONE \
                    and self._delete_group(ClassicGroup(gid)) == ErrorCode.NONE:
                del self.consumer_groups[gid]
        return removed

    # -- the runtime's CoordinatorShard --------------------------------------------------------------

    def replay(self, offset: int, key: bytes | memoryview | None, value: bytes | memoryview | None) -> None:
        self.replay_record(key, value)

    def replay_transactional(self, producer_id: int, offset: int, key: bytes | memoryview | None,
                             value: bytes | memoryview | None) -> None:
        """An offset record of a transaction (TxnOffsetCommit): pending until the marker."""
        if key is None:
            return
        k = decode_key(key)
        if isinstance(k, OffsetCommitKey) and value is not None:
            self.offset_manager.replay_pending(producer_id, k.group, k.topic, k.partition,
                                               decode_offset_commit_value(value))
        else:
            self.replay_record(key, value)

    def replay_end_txn(self, producer_id: int, commit: bool) -> None:
        self.offset_manager.complete_txn(producer_id, commit)

    def replay_record(self, key: bytes | memoryview | None, value: bytes | memoryview | None) -> None:
        """Apply one `__consumer_offsets` record read back from the log."""
        if key is None:
            return
        k = decode_key(key)
        groups = self.groups
        if isinstance(k, OffsetCommitKey):
            v = None if value is None else decode_offset_commit_value(value)
            self.offsets.replay(k.group, k.topic, k.partition, v)
            if v is not None and k.group not in groups and k.group not in self.consumer_groups:
                groups[k.group] = ClassicGroup(k.group)  # a group known only by its offsets
        elif isinstance(k, ConsumerGroupRecordKey):
            self.group_manager.replay_consumer_record(k, value)
        elif isinstance(k, ShareGroupRecordKey) and k.record_type == STATE_PARTITION_METADATA:
            self.share_state_partitions.replay(k.group, value)
        elif isinstance(k, ShareGroupRecordKey):
            self.group_manager.share.replay_record(k, value)
        elif isinstance(k, GroupMetadataKey):
            self.group_manager.replay_group_metadata(k.group, None if value is None
                                                     else decode_group_metadata_value(value))
            if value is None and self.offsets.has_offsets(k.group):
                groups[k.group] = ClassicGroup(k.group)

    def on_loaded(self) -> None:
        """Members of the loaded groups must heartbeat within their session timeout."""
        self.group_manager.start_member_sessions(sorted(set(self.groups) | set(self.consumer_groups)))
        self.group_manager.share.finish_load()

    def on_unloaded(self) -> None:
        """Waiting JoinGroup/SyncGroup requests get NOT_COORDINATOR (Kafka's onUnloaded)."""
        self.group_manager.unload_all()


__all__ = ["GroupCoordinatorShard"]
