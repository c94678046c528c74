"""The group state machine of one `__consumer_offsets` partition: Kafka's `GroupMetadataManager`.

Owns the classic groups and KIP-848 consumer groups of the partition (the state, declared here once)
and composes the parts that change it, one per responsibility, each holding this manager:

- `ClassicGroupProtocol` (`classic_protocol`): JoinGroup / SyncGroup / Heartbeat / LeaveGroup, the
  join phase, session expiry;
- `ConsumerGroupProtocol` (`consumer_coordinator`): ConsumerGroupHeartbeat, target assignment,
  reconciliation, ConsumerGroupDescribe, the member-epoch checks of offset commits and fetches;
- `GroupMigration` (`migration`): online upgrade/downgrade and classic members in consumer groups;
- `ShareGroupProtocol` (`share_group_protocol`): KIP-932 ShareGroupHeartbeat / ShareGroupDescribe;
  it and `ConsumerGroupProtocol` are `ModernGroupProtocol`s (`modern_group_protocol`), which holds
  what the two share (sessions, fencing, epoch bump + target assignment, rollback, record diff);
- `ClassicGroupPersistence` (`persistence`) and `ConsumerGroupPersistence` (`consumer_persistence`):
  the records written for a group and their replay when loading.

DescribeGroups / ListGroups read the state here. Committed offsets are not here: the
`OffsetMetadataManager` owns them (this manager reads the shared `OffsetStore`: an empty group with
offsets is kept), and `kbroker.coord.shard.GroupCoordinatorShard` combines the two.

Writes go through the injected `RecordWriter` (the coordinator runtime appends them to the shard's
`__consumer_offsets` partition, synchronously, and holds every answer until they are committed); the
in-memory state follows only appends that succeeded: an operation whose append fails undoes its change
(per-operation undo; `failed_appends` tells an operation that one of its appends failed) and answers
the mapped error. Pure: no asyncio, no I/O; timers on the injected `Scheduler`.

Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kbroker.coord.classic_protocol import ClassicGroupProtocol
from kbroker.coord.config import CoordinatorConfig, RecordWriter, Scheduler, TopicLookup
from kbroker.coord.consumer_coordinator import ConsumerGroupProtocol, HeartbeatRequestData, HeartbeatResult
from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.coord.consumer_persistence import ConsumerGroupPersistence
from kbroker.coord.consumer_records import ConsumerGroupRecordKey
from kbroker.coord.group import ClassicGroup, GroupState, JoinResult, SyncResult
from kbroker.coord.group_config import GroupConfig
from kbroker.coord.migration import GroupMigration
from kbroker.coord.offsets import OffsetStore
from kbroker.coord.persistence import ClassicGroupPersistence
from kbroker.coord.records import GroupMetadataValue
from kbroker.coord.share_group import ShareGroup
from kbroker.coord.share_group_protocol import ShareGroupProtocol, ShareHeartbeatRequestData
from kbroker.protocol.errors import ErrorCode

S = GroupState


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    # (member id, instance id, client id, client host, metadata, assignment)
    members: list[tuple[str, str | None, str, str, bytes, bytes]]


class GroupMetadataManager:
    """Every group (classic and consumer) of one `__consumer_offsets` partition."""

    def __init__(self, config: CoordinatorConfig, scheduler: Scheduler, writer: RecordWriter,
                 time_ms: Callable[[], int], offsets: OffsetStore,
                 group_status: Callable[[str], ErrorCode] | None = None, topics: TopicLookup | None = None) -> None:
        self.config = config
        self.scheduler = scheduler
        self.time_ms = time_ms
        # NONE when this broker serves the group, else NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS.
        self.group_status = group_status or (lambda _g: ErrorCode.NONE)
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        # KIP-932 share groups, and their records last written to the log, per group.
        self.share_groups: dict[str, ShareGroup] = {}
        self.share_written: dict[str, dict[bytes, bytes]] = {}
        # The consumer-group records last written to the log, per group (what a change is diffed with).
        self.consumer_written: dict[str, dict[bytes, bytes]] = {}
        # The partition's committed offsets (owned by the OffsetMetadataManager; read here).
        self.offsets = offsets
        # The topics image (`topic(name)`, `topic_by_id(id)`, `topics()`): what consumer groups subscribe to.
        self.topics = topics
        # Appends that failed so far: an operation that sees this move knows to undo its change.
        self.failed_appends = 0
        # The group's configs (the GROUP config resource, kbroker.coord.group_config); None: the broker's.
        self.group_config: Callable[[str], GroupConfig] | None = None

        def write(group_id: str, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
            error = writer(group_id, records)
            if error != ErrorCode.NONE:
                self.failed_appends += 1
            return error

        self.writer: RecordWriter = write
        self.classic = ClassicGroupProtocol(self)
        self.consumer = ConsumerGroupProtocol(self)
        self.migration = GroupMigration(self)
        self.classic_persistence = ClassicGroupPersistence(self)
        self.consumer_persistence = ConsumerGroupPersistence(self)
        self.share = ShareGroupProtocol(self)

    # -- requests ------------------------------------------------------------------------------------

    def session_timeouts(self, group_id: str) -> tuple[int, int, int, int]:
        """(consumer session timeout, consumer heartbeat interval, share session timeout, share heartbeat
        interval) of the group: its group configs where set (KIP-848 / KIP-932), else the broker's."""
        c = self.config
        if self.group_config is None:
            return (c.consumer_session_timeout_ms, c.consumer_heartbeat_interval_ms, c.share_session_timeout_ms,
                    c.share_heartbeat_interval_ms)
        g = self.group_config(group_id)
        return (g.consumer_session_timeout_ms, g.consumer_heartbeat_interval_ms, g.share_session_timeout_ms,
                g.share_heartbeat_interval_ms)

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   client_id: str, client_host: str, require_known_member_id: bool,
                   respond: Callable[[JoinResult], None], supports_skip_assignment: bool = False) -> None:
        self.classic.join_group(group_id, member_id, group_instance_id, protocol_type, protocols,
                                session_timeout_ms, rebalance_timeout_ms, client_id, client_host,
                                require_known_member_id, respond, supports_skip_assignment)

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
                   respond: Callable[[SyncResult], None]) -> None:
        self.classic.sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type,
                                protocol_name, assignments, respond)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        return self.classic.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        return self.classic.leave_group(group_id, members)

    def consumer_group_heartbeat(self, req: HeartbeatRequestData) -> HeartbeatResult:
        return self.consumer.consumer_group_heartbeat(req)

    def consumer_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        return self.consumer.consumer_group_describe(group_id)

    def share_group_heartbeat(self, req: ShareHeartbeatRequestData) -> HeartbeatResult:
        return self.share.share_group_heartbeat(req)

    def share_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        return self.share.share_group_describe(group_id)

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        return self.consumer.preferred_assignor(group)

    # -- DescribeGroups / ListGroups -----------------------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        error = self.group_status(group_id)
        group = self.groups.get(group_id)
        if error != ErrorCode.NONE or group is None:
            return error, GroupDescription(group_id, str(S.DEAD), "", "", [])
        stable = group.state == S.STABLE
        members = [
            (m.member_id, m.group_instance_id, m.client_id, m.client_host,
             m.metadata(group.protocol_name) if stable else b"", m.assignment if stable else b"")
            for m in group.members.values()
        ]
        return ErrorCode.NONE, GroupDescription(group_id, str(group.state), group.protocol_type or "",
                                                (group.protocol_name or "") if stable else "", members)

    def list_groups(self, states: list[str], types: list[str]) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, type) of the groups whose state/type pass the filters
        (case-insensitive, as Kafka's ListGroups v4/v5)."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listed: list[tuple[str, str, str, str]] = []
        if not wanted_types or "classic" in wanted_types:
            listed += [(gid, g.protocol_type or "", str(g.state), "classic") for gid, g in self.groups.items()
                       if g.state != S.DEAD]
        if not wanted_types or "consumer" in wanted_types:
            listed += [(gid, "consumer", str(g.state), "consumer") for gid, g in self.consumer_groups.items()]
        if not wanted_types or "share" in wanted_types:
            listed += [(gid, "share", str(g.state), "share") for gid, g in self.share_groups.items()]
        return sorted(entry for entry in listed if self.group_status(entry[0]) == ErrorCode.NONE
                      and (not wanted_states or entry[2].lower() in wanted_states))

    # -- what the offset manager and the shard need ---------------------------------------------------

    def schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        self.classic.schedule_heartbeat(group, member_id, timeout_ms)

    def validate_consumer_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                                        api_version: int, partitions: list[tuple[str, int]]) -> list[ErrorCode]:
        return self.consumer.validate_consumer_offset_commit(group, member_id, member_epoch, api_version, partitions)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        return self.consumer.validate_offset_fetch(group_id, member_id, member_epoch)

    def delete_consumer_group_records(self, group_id: str) -> ErrorCode:
        return self.consumer_persistence.delete_consumer_group_records(group_id)

    def replay_group_metadata(self, group_id: str, value: GroupMetadataValue | None) -> None:
        self.classic_persistence.replay_group_metadata(group_id, value)

    def replay_consumer_record(self, key: ConsumerGroupRecordKey, value: bytes | memoryview | None) -> None:
        self.consumer_persistence.replay_consumer_record(key, value)

    def start_member_sessions(self, group_ids: list[str]) -> None:
        self.classic_persistence.start_member_sessions(group_ids)

    def unload_all(self) -> None:
        self.classic_persistence.unload_all()

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.consumer.topic_name(topic_id)


__all__ = ["GroupDescription", "GroupMetadataManager"]
