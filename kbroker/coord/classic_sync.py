"""The classic protocol's SyncGroup and LeaveGroup.

Kafka's `GroupMetadataManager` (classic SyncGroup / LeaveGroup half): the leader's assignment is
stored and handed to every member waiting in SyncGroup; leaving members (batched, by member id or
group.instance.id) trigger a rebalance. A mixin of `kbroker.coord.coordinator.GroupCoordinator`, split
out only to keep modules small.

Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kbroker.coord.config import heartbeat_key, map_append_error, sync_key
from kbroker.coord.group import UNKNOWN_MEMBER_ID, ClassicGroup, ClassicGroupMember, GroupState, SyncResult
from kbroker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.coord.config import CoordinatorConfig, Scheduler
    from kbroker.coord.consumer_group import ConsumerGroup

S = GroupState


class ClassicSyncMixin:
    if TYPE_CHECKING:
        config: CoordinatorConfig
        scheduler: Scheduler
        time_ms: Callable[[], int]
        group_status: Callable[[str], ErrorCode]
        groups: dict[str, ClassicGroup]
        consumer_groups: dict[str, ConsumerGroup]

        def classic_sync_to_consumer_group(self, group: ConsumerGroup, generation_id: int, member_id: str,
                                           instance_id: str | None, protocol_type: str | None,
                                           protocol_name: str | None) -> SyncResult: ...
        def classic_leave_consumer_group(self, group: ConsumerGroup, member_id: str,
                                         instance_id: str | None) -> ErrorCode: ...
        def schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None: ...
        def _store_group(self, group: ClassicGroup) -> ErrorCode: ...
        def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None: ...
        def _maybe_complete_join_phase(self, group: ClassicGroup) -> None: ...
        def _remove_member_and_update_group(self, group: ClassicGroup, member: ClassicGroupMember,
                                            reason: str) -> None: ...

    # -- SyncGroup -----------------------------------------------------------------------------------

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
                   respond: Callable[[SyncResult], None]) -> None:
        error = self.group_status(group_id)
        group = self.groups.get(group_id)
        consumer_group = self.consumer_groups.get(group_id) if group is None else None
        if error == ErrorCode.NONE and consumer_group is not None:
            respond(self.classic_sync_to_consumer_group(consumer_group, generation_id, member_id, group_instance_id,
                                                        protocol_type, protocol_name))
            return
        if error == ErrorCode.NONE:
            error = self._validate_sync(group, generation_id, member_id, group_instance_id, protocol_type,
                                        protocol_name)
        if error != ErrorCode.NONE or group is None:
            respond(SyncResult(error))
            return
        member = group.member(member_id)
        if group.state == S.PREPARING_REBALANCE:
            respond(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.state == S.COMPLETING_REBALANCE:
            if member.await_sync is not None:
                member.await_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            member.await_sync = respond
            self.schedule_heartbeat(group, member_id, member.session_timeout_ms)
            group.pending_sync_members.discard(member_id)
            if group.is_leader(member_id):
                self._on_leader_assignment(group, assignments)
        elif group.state == S.STABLE:
            self.schedule_heartbeat(group, member_id, member.session_timeout_ms)
            group.pending_sync_members.discard(member_id)
            if not group.pending_sync_members:
                self.scheduler.cancel(sync_key(group_id))
            respond(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
        else:
            respond(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    @staticmethod
    def _validate_sync(group: ClassicGroup | None, generation_id: int, member_id: str, instance_id: str | None,
                       protocol_type: str | None, protocol_name: str | None) -> ErrorCode:
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(member_id, instance_id)
        except KafkaError as e:
            return e.error_code
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _on_leader_assignment(self, group: ClassicGroup, assignments: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = bytes(assignments.get(member.member_id, b""))
        error = self._store_group(group)
        if group.state != S.COMPLETING_REBALANCE:
            return
        if error != ErrorCode.NONE:
            self._reset_and_propagate_assignment_with_error(group, map_append_error(error))
            self._maybe_prepare_rebalance_or_complete_join(group, "failed to store the group assignment")
            return
        for member in group.members.values():
            callback, member.await_sync = member.await_sync, None
            if callback is not None:
                callback(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
        group.transition_to(S.STABLE, self.time_ms())
        if not group.pending_sync_members:
            self.scheduler.cancel(sync_key(group.group_id))

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            callback, member.await_sync = member.await_sync, None
            if callback is not None:
                callback(SyncResult(error))

    # -- LeaveGroup ----------------------------------------------------------------------------------

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group-level error, one error per leaving member identity)."""
        error = self.group_status(group_id)
        if error != ErrorCode.NONE:
            return error, []
        group = self.groups.get(group_id)
        consumer_group = self.consumer_groups.get(group_id) if group is None else None
        if consumer_group is not None:
            return ErrorCode.NONE, [self.classic_leave_consumer_group(consumer_group, mid, iid) for mid, iid in members]
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        if group.state == S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
                found = group.static_member_id(instance_id)
                if found is None:
                    results.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                member_id = found
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self.scheduler.cancel(heartbeat_key(group_id, member_id))
                self._maybe_complete_join_phase(group)
                results.append(ErrorCode.NONE)
                continue
            try:
                group.validate_member(member_id, instance_id)
            except KafkaError as e:
                results.append(e.error_code)
                continue
            self._remove_member_and_update_group(group, group.member(member_id), "the consumer left the group")
            results.append(ErrorCode.NONE)
        return ErrorCode.NONE, results
