"""Writing a group's state to `__consumer_offsets` and rebuilding it from loaded records.

Kafka writes a `GroupMetadataValue` when a generation's assignment is stored, when a group becomes
empty and when a static member is replaced; loading replays it. A group loaded with members is Stable
at its stored generation: members that keep heartbeating carry on, the others expire. A part of
`kbroker.coord.group_metadata_manager.GroupMetadataManager`. Pure: no asyncio, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbroker.coord.config import heartbeat_key
from kbroker.coord.group import ClassicGroup, ClassicGroupMember, GroupState, JoinResult, SyncResult
from kbroker.coord.records import (
    GroupMetadataValue,
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coord.group_metadata_manager import GroupMetadataManager

S = GroupState


class ClassicGroupPersistence:
    """The GroupMetadata records of a GroupMetadataManager's classic groups."""

    def __init__(self, gm: GroupMetadataManager) -> None:
        self.gm = gm

    def store_group(self, group: ClassicGroup) -> ErrorCode:
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id if group.members else None,
            current_state_timestamp=group.state_timestamp_ms,
            members=[
                MemberMetadata(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                               client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                               session_timeout=m.session_timeout_ms, subscription=m.metadata(group.protocol_name),
                               assignment=m.assignment)
                for m in group.members.values()
            ],
        )
        record = (encode_group_metadata_key(group.group_id), encode_group_metadata_value(value))
        return self.gm.writer(group.group_id, [record])

    def replay_group_metadata(self, group_id: str, value: GroupMetadataValue | None) -> None:
        """Replay a GroupMetadata record: a loaded group with members is Stable until they heartbeat."""
        old = self.gm.groups.pop(group_id, None)
        if old is not None:
            for member_id in list(old.members):
                self.gm.scheduler.cancel(heartbeat_key(group_id, member_id))
        if value is None:
            return
        group = ClassicGroup(group_id, state_timestamp_ms=value.current_state_timestamp,
                             protocol_type=value.protocol_type or None, protocol_name=value.protocol,
                             generation_id=value.generation, leader_id=value.leader)
        for m in value.members:
            member = ClassicGroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                        m.rebalance_timeout, m.session_timeout, value.protocol_type,
                                        [(value.protocol or "", bytes(m.subscription))], bytes(m.assignment))
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        if group.members:
            group.state = S.STABLE
            group.subscribed_topics = group._compute_subscribed_topics()
        self.gm.groups[group_id] = group

    def unload_all(self) -> None:
        """The broker stops coordinating: waiting JoinGroup/SyncGroup requests get NOT_COORDINATOR
        so that clients look for the coordinator again (Kafka's onUnloaded)."""
        for group in self.gm.groups.values():
            for member in group.members.values():
                join_cb, member.await_join = member.await_join, None
                sync_cb, member.await_sync = member.await_sync, None
                if join_cb is not None:
                    join_cb(JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                if sync_cb is not None:
                    sync_cb(SyncResult(ErrorCode.NOT_COORDINATOR))

    def start_member_sessions(self, group_ids: list[str]) -> None:
        """After loading: members of loaded groups must heartbeat within their session timeout."""
        self.gm.consumer_persistence.finish_consumer_load(group_ids)
        for gid in group_ids:
            group = self.gm.groups.get(gid)
            if group is None:
                continue
            for member in group.members.values():
                self.gm.classic.schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
