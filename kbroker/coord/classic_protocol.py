"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and session expiry.

Kafka's `GroupMetadataManager` (classic half), a part of `kbroker.coord.group_metadata_manager.
GroupMetadataManager` (which owns the groups; this class owns the protocol's transitions). Requests
that wait (JoinGroup until every member rejoined, SyncGroup until the leader sent the assignment) are
answered through the callback passed in; delayed work (initial rebalance delay, join and sync
timeouts, member session expiry) runs on the manager's `Scheduler`, so this module stays free of
asyncio and is driven by a fake clock in tests. JoinGroup / SyncGroup / Heartbeat / LeaveGroup for a
classic member inside a consumer group are handed to `GroupMigration`. The group's GroupMetadata
record (a stored assignment, an empty group, a replaced static member) is written through
`ClassicGroupPersistence`; the in-memory group follows only appends that succeeded (an operation
whose append fails undoes its change and answers the mapped error).

Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.coord.config import heartbeat_key, join_key, map_append_error, sync_key
from kbroker.coord.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    ClassicGroupMember,
    GroupState,
    JoinResult,
    SyncResult,
)
from kbroker.metrics.meters import GROUP_COORDINATOR_METRICS
from kbroker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.coord.group_metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)
S = GroupState


@dataclass(slots=True)
class _JoinArgs:
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool
    supports_skip_assignment: bool


class ClassicGroupProtocol:
    """The classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) of a GroupMetadataManager's classic groups."""

    def __init__(self, gm: GroupMetadataManager) -> None:
        self.gm = gm

    def join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
        protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
        client_id: str, client_host: str, require_known_member_id: bool, respond: Callable[[JoinResult], None],
        supports_skip_assignment: bool = False,
    ) -> None:
        """Answer through `respond`, now or when the join phase completes."""
        error = self.gm.group_status(group_id)
        if error == ErrorCode.NONE and not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        if error == ErrorCode.NONE and not (
            self.gm.config.min_session_timeout_ms <= session_timeout_ms <= self.gm.config.max_session_timeout_ms
        ):
            error = ErrorCode.INVALID_SESSION_TIMEOUT
        if error != ErrorCode.NONE:
            respond(JoinResult(error, member_id))
            return
        consumer_group = self.gm.consumer_groups.get(group_id)
        if consumer_group is not None:
            if not consumer_group.is_empty():
                if self.gm.config.consumer_migration_policy == "disabled":
                    # No mixed groups: Kafka's answer to a join it cannot take.
                    respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID))
                    return
                # A classic member inside a consumer group (kbroker.coord.migration): answered at once.
                respond(self.gm.migration.classic_join_to_consumer_group(
                    consumer_group, member_id, group_instance_id, protocol_type, protocols, session_timeout_ms,
                    rebalance_timeout_ms, client_id, client_host, require_known_member_id))
                return
            # An empty consumer group becomes a classic group, keeping its committed offsets.
            write_error = self.gm.consumer_persistence.delete_consumer_group_records(group_id)
            if write_error != ErrorCode.NONE:
                respond(JoinResult(map_append_error(write_error), member_id))
                return
            del self.gm.consumer_groups[group_id]
        group = self.gm.groups.get(group_id)
        unknown = member_id == UNKNOWN_MEMBER_ID
        created = False
        if group is None:
            if not unknown:
                respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            group = self.gm.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=self.gm.time_ms())
            created = True
        if unknown and group.state not in (S.EMPTY, S.DEAD) and \
                len(group.members) + len(group.pending_members) >= self.gm.config.max_size:
            respond(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id))
            return
        args = _JoinArgs(group_instance_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms,
                         client_id, client_host, require_known_member_id, supports_skip_assignment)
        if unknown:
            self._join_new_member(group, args, respond)
        else:
            self._join_existing_member(group, member_id, args, respond)
        if created and group.is_empty() and not group.pending_members and not self.gm.offsets.has_offsets(group_id):
            del self.gm.groups[group_id]

    def _join_new_member(self, group: ClassicGroup, a: _JoinArgs, respond: Callable[[JoinResult], None]) -> None:
        if group.state == S.DEAD:
            respond(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID))
            return
        if not group.supports_protocols(a.protocol_type, a.protocols):
            respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID))
            return
        new_id = f"{a.client_id}-{uuid.uuid4()}"
        if a.group_instance_id is not None:
            existing = group.static_member_id(a.group_instance_id)
            if existing is not None:
                self._update_static_member(group, existing, new_id, a, respond)
                return
        elif a.require_known_member_id:
            # KIP-394: hand out the member id first; the member joins for real with it.
            group.pending_members.add(new_id)
            self.schedule_heartbeat(group, new_id, a.session_timeout_ms)
            respond(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id))
            return
        self._add_member_and_rebalance(group, new_id, a, respond)

    def _join_existing_member(self, group: ClassicGroup, member_id: str, a: _JoinArgs,
                              respond: Callable[[JoinResult], None]) -> None:
        if group.state == S.DEAD:
            respond(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(a.protocol_type, a.protocols):
            respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, a, respond)
            return
        try:
            group.validate_member(member_id, a.group_instance_id)
        except KafkaError as e:
            respond(JoinResult(e.error_code, member_id))
            return
        member = group.member(member_id)
        if group.state == S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, a, respond, "member rejoined")
        elif group.state == S.COMPLETING_REBALANCE:
            if member.matches(a.protocols):
                # The member lost its JoinGroup response: send it again.
                respond(self._current_join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, a, respond, "member changed protocols")
        elif group.state == S.STABLE:
            if group.is_leader(member_id) or not member.matches(a.protocols):
                self._update_member_and_rebalance(group, member, a, respond, "leader or changed member rejoined")
            else:
                respond(JoinResult(ErrorCode.NONE, member_id, group.generation_id, group.protocol_type,
                                   group.protocol_name, group.leader_id or ""))
        else:
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _current_join_result(self, group: ClassicGroup, member: ClassicGroupMember) -> JoinResult:
        members = self._member_list(group) if group.is_leader(member.member_id) else []
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "", False, members)

    @staticmethod
    def _member_list(group: ClassicGroup) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name)) for m in group.members.values()]

    def _add_member_and_rebalance(self, group: ClassicGroup, member_id: str, a: _JoinArgs,
                                  respond: Callable[[JoinResult], None]) -> None:
        member = ClassicGroupMember(member_id, a.group_instance_id, a.client_id, a.client_host,
                                    a.rebalance_timeout_ms, a.session_timeout_ms, a.protocol_type,
                                    list(a.protocols), is_new=True)
        if group.state == S.PREPARING_REBALANCE and group.previous_state == S.EMPTY:
            group.new_member_added = True
        group.add(member, respond)
        group.pending_members.discard(member_id)
        # A new member that never completes its join is expired after this long.
        self.schedule_heartbeat(group, member_id, self.gm.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group, f"adding new member {member_id}")

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicGroupMember, a: _JoinArgs,
                                     respond: Callable[[JoinResult], None], reason: str) -> None:
        if member.await_join is not None:
            # A second JoinGroup while the first still waits: the first is answered now.
            member.await_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        group.update_member(member, list(a.protocols), a.rebalance_timeout_ms, a.session_timeout_ms, respond)
        self._maybe_prepare_rebalance_or_complete_join(group, reason)

    def _update_static_member(self, group: ClassicGroup, old_id: str, new_id: str, a: _JoinArgs,
                              respond: Callable[[JoinResult], None]) -> None:
        """KIP-345: a restarted static member takes over its old identity without a rebalance
        unless the group's protocol would change."""
        old_leader = group.leader_id
        member = group.replace_static_member(a.group_instance_id or "", old_id, new_id)
        self.gm.scheduler.cancel(heartbeat_key(group.group_id, old_id))
        self.schedule_heartbeat(group, new_id, a.session_timeout_ms)
        old_state = (list(member.protocols), member.rebalance_timeout_ms, member.session_timeout_ms)
        if group.state == S.PREPARING_REBALANCE:
            group.update_member(member, list(a.protocols), a.rebalance_timeout_ms, a.session_timeout_ms, respond)
            self._maybe_complete_join_phase(group)
            return
        group.update_member(member, list(a.protocols), a.rebalance_timeout_ms, a.session_timeout_ms, None)
        if group.state == S.COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id: start over.
            member.await_join = respond
            self.prepare_rebalance(group, f"static member {a.group_instance_id} rejoined while completing")
            return
        if group.state == S.STABLE and group.select_protocol() == group.protocol_name:
            error = self.gm.classic_persistence.store_group(group)
            if error != ErrorCode.NONE:
                group.replace_static_member(a.group_instance_id or "", new_id, old_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = old_state
                respond(JoinResult(map_append_error(error), UNKNOWN_MEMBER_ID))
                return
            is_leader = group.is_leader(new_id)
            if is_leader and a.supports_skip_assignment:
                # KIP-814: the leader learns the members but must not compute a new assignment.
                respond(JoinResult(ErrorCode.NONE, new_id, group.generation_id, group.protocol_type,
                                   group.protocol_name, new_id, True, self._member_list(group)))
            else:
                # The old leader id is returned so that the rejoined member does not assign.
                respond(JoinResult(ErrorCode.NONE, new_id, group.generation_id, group.protocol_type,
                                   group.protocol_name, old_leader or ""))
            return
        member.await_join = respond
        self.prepare_rebalance(group, f"static member {a.group_instance_id} changed protocols")

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.state == S.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_with_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.gm.scheduler.cancel(sync_key(group.group_id))
        initial = group.state == S.EMPTY
        group.transition_to(S.PREPARING_REBALANCE, self.gm.time_ms())
        GROUP_COORDINATOR_METRICS.classic_rebalances += 1  # Kafka's group-rebalance-count{protocol=classic}
        log.info("Preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
                 group.group_id, group.state, group.generation_id, reason)
        if initial:
            # group.initial.rebalance.delay.ms: wait for more members of a new group, in steps, up to
            # the rebalance timeout.
            delay = self.gm.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_initial(group.group_id, delay, remaining)
        else:
            self._maybe_complete_join_else_schedule(group)

    def _schedule_initial(self, group_id: str, delay: int, remaining: int) -> None:
        self.gm.scheduler.schedule(join_key(group_id), delay,
                                   lambda: self._try_complete_initial_rebalance(group_id, delay, remaining))

    def _try_complete_initial_rebalance(self, group_id: str, delay: int, remaining: int) -> None:
        group = self.gm.groups.get(group_id)
        if group is None or group.state != S.PREPARING_REBALANCE:
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            self._schedule_initial(group_id, min(self.gm.config.initial_rebalance_delay_ms, remaining),
                                   max(remaining - delay, 0))
        else:
            self._complete_join(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.state == S.PREPARING_REBALANCE and group.has_all_members_joined():
            self.gm.scheduler.cancel(join_key(group.group_id))
            self._complete_join(group)
        else:
            self._schedule_join_timeout(group)

    def _schedule_join_timeout(self, group: ClassicGroup) -> None:
        gid = group.group_id
        self.gm.scheduler.schedule(join_key(gid), group.rebalance_timeout_ms(), lambda: self._on_join_timeout(gid))

    def _on_join_timeout(self, group_id: str) -> None:
        group = self.gm.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        # A new group keeps waiting for its initial rebalance delay even when everyone has joined.
        if group.state == S.PREPARING_REBALANCE and group.has_all_members_joined() \
                and group.previous_state != S.EMPTY:
            self.gm.scheduler.cancel(join_key(group.group_id))
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        if group.state != S.PREPARING_REBALANCE:
            return
        # Dynamic members that did not rejoin are dropped; static ones (KIP-345) stay until their
        # session expires, so a restarting static member does not lose its place.
        for member in [m for m in group.members.values() if not m.is_awaiting_join and not m.is_static]:
            log.info("Member %s of group %s did not rejoin in time: removed", member.member_id, group.group_id)
            self._remove_member(group, member)
        if group.members and not group.maybe_elect_new_joined_leader():
            # Nobody rejoined: wait for the session timeouts to remove the silent members.
            self._schedule_join_timeout(group)
            return
        group.init_next_generation(self.gm.time_ms())
        if group.state == S.EMPTY:
            error = self.gm.classic_persistence.store_group(group)
            if error != ErrorCode.NONE:
                log.warning("Failed to write the empty state of group %s: %s", group.group_id, error.name)
            return
        members = self._member_list(group)
        for member in group.members.values():
            callback, member.await_join = member.await_join, None
            result = JoinResult(ErrorCode.NONE, member.member_id, group.generation_id, group.protocol_type,
                                group.protocol_name, group.leader_id or "", False,
                                members if group.is_leader(member.member_id) else [])
            self.schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
            if callback is not None:
                callback(result)
        gid, generation = group.group_id, group.generation_id
        self.gm.scheduler.schedule(sync_key(gid), group.rebalance_timeout_ms(),
                                   lambda: self._on_sync_timeout(gid, generation))

    def _on_sync_timeout(self, group_id: str, generation: int) -> None:
        group = self.gm.groups.get(group_id)
        if group is None or group.generation_id != generation or not group.pending_sync_members:
            return
        if group.state in (S.COMPLETING_REBALANCE, S.STABLE):
            for member_id in list(group.pending_sync_members):
                member = group.members.get(member_id)
                if member is not None:
                    self._remove_member(group, member)
            self.prepare_rebalance(group, "members did not send SyncGroup in time")

    def _remove_member(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        """Drop a member, answering whatever it still waits in (Kafka answers UNKNOWN_MEMBER_ID)."""
        callback, member.await_join = member.await_join, None
        sync_callback, member.await_sync = member.await_sync, None
        group.remove(member.member_id)
        self.gm.scheduler.cancel(heartbeat_key(group.group_id, member.member_id))
        if callback is not None:
            callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        if sync_callback is not None:
            sync_callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    def _remove_member_and_update_group(self, group: ClassicGroup, member: ClassicGroupMember, reason: str) -> None:
        self._remove_member(group, member)
        log.info("Member %s left group %s (%s)", member.member_id, group.group_id, reason)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, reason)
        elif group.state == S.PREPARING_REBALANCE and group.has_all_members_joined():
            self.gm.scheduler.cancel(join_key(group.group_id))
            self._complete_join(group)

    def schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        gid = group.group_id
        self.gm.scheduler.schedule(heartbeat_key(gid, member_id), timeout_ms,
                                   lambda: self._on_heartbeat_expired(gid, member_id))

    def _on_heartbeat_expired(self, group_id: str, member_id: str) -> None:
        group = self.gm.groups.get(group_id)
        if group is None:
            return
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join_phase(group)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self._remove_member_and_update_group(group, member, "session timeout expired")

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        error = self.gm.group_status(group_id)
        if error != ErrorCode.NONE:
            return error
        group = self.gm.groups.get(group_id)
        if group is None:
            consumer_group = self.gm.consumer_groups.get(group_id)
            if consumer_group is not None:
                return self.gm.migration.classic_heartbeat_to_consumer_group(consumer_group, generation_id, member_id,
                                                                             group_instance_id)
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(member_id, group_instance_id)
        except KafkaError as e:
            return e.error_code
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state == S.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.member(member_id)
        self.schedule_heartbeat(group, member_id, member.session_timeout_ms)
        if group.state == S.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
                   respond: Callable[[SyncResult], None]) -> None:
        error = self.gm.group_status(group_id)
        group = self.gm.groups.get(group_id)
        consumer_group = self.gm.consumer_groups.get(group_id) if group is None else None
        if error == ErrorCode.NONE and consumer_group is not None:
            respond(self.gm.migration.classic_sync_to_consumer_group(
                consumer_group, generation_id, member_id, group_instance_id, protocol_type, protocol_name))
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
                self.gm.scheduler.cancel(sync_key(group_id))
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
        error = self.gm.classic_persistence.store_group(group)
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
        group.transition_to(S.STABLE, self.gm.time_ms())
        if not group.pending_sync_members:
            self.gm.scheduler.cancel(sync_key(group.group_id))

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            callback, member.await_sync = member.await_sync, None
            if callback is not None:
                callback(SyncResult(error))

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group-level error, one error per leaving member identity)."""
        error = self.gm.group_status(group_id)
        if error != ErrorCode.NONE:
            return error, []
        group = self.gm.groups.get(group_id)
        consumer_group = self.gm.consumer_groups.get(group_id) if group is None else None
        if consumer_group is not None:
            leave = self.gm.migration.classic_leave_consumer_group
            return ErrorCode.NONE, [leave(consumer_group, mid, iid) for mid, iid in members]
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
                self.gm.scheduler.cancel(heartbeat_key(group_id, member_id))
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


__all__ = ["ClassicGroupProtocol"]
