"""The KIP-932 share group protocol: ShareGroupHeartbeat and ShareGroupDescribe.

Kafka's `GroupMetadataManager` (share half). A `kbroker.coord.modern_group_protocol.ModernGroupProtocol`,
as the KIP-848 consumer protocol is: the heartbeat's rollback on a failed append, the request checks,
the subscribed-topic metadata refresh, the group-epoch bump and target assignment, member sessions,
fencing and the record writing are that base's, shared with consumer groups. What is only a share
group's is here: the request checks of ShareGroupHeartbeat, the `simple` assignor
(`kbroker.coord.share_group.simple_assign`), a member handed its target at once (share groups have no
revocation: members share partitions, so the member epoch jumps to the target assignment epoch), the
share-partition manager told when a member is fenced (the records it had acquired become available
again: `listener`), AlterShareGroupOffsets / DeleteShareGroupOffsets checks and group deletion.

Assignment gating (Kafka 4.3's `initializedAssignmentPending` and the target assignment's topic
partitions filter): only the share-partitions the group coordinator initialized
(ShareGroupStatePartitionMetadata's InitializedTopics, `initialized_partitions`) are assigned. The
heartbeat that finds uninitialized subscribed partitions is answered at once (without them); the group
coordinator initializes them in the background (`kbroker.coord.share_group_initialization`); the next
heartbeat of any member after that finds initialized partitions the target does not hand out, bumps
the group epoch and computes a new target, which every member takes on its next heartbeat.

Timers on the injected `Scheduler`: the member session (`group.share.session.timeout.ms`, renewed by
every heartbeat); expiry fences the member (removed, a new group epoch and target assignment).

Every change is written to `__consumer_offsets` as Kafka's share-group records
(`kbroker.coord.share_records`: the difference with what was last written, members' tombstones before
the group's) before the heartbeat is answered; a failed append puts the group back as it was and
answers the mapped error. Loading replays the records, so a restarted broker knows the groups, members,
epochs and assignments; every member must heartbeat within its session timeout.

Must not import asyncio, kbroker.net, kbroker.api or the consumer-group modules.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.coord.assignors import Assignment
from kbroker.coord.config import map_append_error
from kbroker.coord.modern_group import copy_assignment
from kbroker.coord.modern_group_protocol import (
    HeartbeatReject,
    HeartbeatResult,
    ModernGroupProtocol,
    invalid_request_unless,
)
from kbroker.coord.share_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    SHARE_ASSIGNOR_NAME,
    ShareGroup,
    ShareGroupMember,
    simple_assign,
    simple_assign_partitions,
)
from kbroker.coord.share_records import ShareGroupRecordKey, group_records, replay, tombstone_order
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coord.group_metadata_manager import GroupMetadataManager

# (group id, member id) -> None: a member left or was fenced (the share-partition manager releases
# the records it holds).
ShareMemberListener = Callable[[str, str], None]
# group id -> its initialized share-partitions (topic id -> partitions: ShareGroupStatePartitionMetadata's
# InitializedTopics), or None: no gating (no share coordinator, every subscribed partition is assignable).
InitializedPartitions = Callable[[str], "dict[uuid.UUID, set[int]] | None"]


@dataclass(slots=True)
class ShareHeartbeatRequestData:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = ""


def share_session_key(group_id: str, member_id: str) -> str:
    return f"share-session-{group_id}-{member_id}"


class ShareGroupProtocol(ModernGroupProtocol[ShareGroup, ShareGroupMember]):
    """The share groups of a GroupMetadataManager."""

    group_type = "share"

    def __init__(self, gm: GroupMetadataManager) -> None:
        super().__init__(gm)
        self.listener: ShareMemberListener | None = None
        # group id -> None: an empty share group was deleted (its share-partition states go too).
        self.deleted_listener: Callable[[str], None] | None = None
        # Kafka's assignment gating: only initialized share-partitions are assigned (set by the shard's
        # owner when a share coordinator initializes them; None: every subscribed partition).
        self.initialized_partitions: InitializedPartitions | None = None

    # -- ModernGroupProtocol -------------------------------------------------------------------------

    def groups(self) -> dict[str, ShareGroup]:
        return self.gm.share_groups

    def written(self) -> dict[str, dict[bytes, bytes]]:
        return self.gm.share_written

    def session_key(self, group_id: str, member_id: str) -> str:
        return share_session_key(group_id, member_id)

    def session_timeout_ms(self, group: ShareGroup, member: ShareGroupMember) -> int:
        return self.gm.session_timeouts(group.group_id)[2]

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.gm.session_timeouts(group_id)[3]

    def assignor_name(self, group: ShareGroup) -> str:
        return SHARE_ASSIGNOR_NAME

    def assign(self, group: ShareGroup, subscriptions: dict[str, set[uuid.UUID]],
               partitions: dict[uuid.UUID, int]) -> dict[str, Assignment]:
        """Kafka's target assignment of a share group (`withTopicAssignablePartitionsMap`): only the
        initialized share-partitions of the subscribed topics are assignable, so no member fetches a
        share-partition whose state the group coordinator has not initialized yet."""
        initialized = self._initialized(group.group_id)
        if initialized is None:
            return simple_assign(subscriptions, partitions)
        return simple_assign_partitions(subscriptions, {
            tid: [p for p in sorted(initialized.get(tid, set())) if p < n] for tid, n in partitions.items()})

    def _initialized(self, group_id: str) -> dict[uuid.UUID, set[int]] | None:
        return None if self.initialized_partitions is None else self.initialized_partitions(group_id)

    def initialized_assignment_pending(self, group: ShareGroup) -> bool:
        """Kafka's `initializedAssignmentPending`: some initialized share-partitions of a subscribed
        topic are not what the target assignment hands out (an initialization completed since the target
        was computed), so the heartbeat bumps the group epoch and computes a new target. False for an
        empty group, without initialized partitions or without subscriptions."""
        initialized = self._initialized(group.group_id)
        if not group.members or not initialized:
            return False
        names = group.subscribed_topic_names()
        subscribed = {tid for name, (tid, _n) in group.subscribed_metadata.items() if name in names}
        assigned: dict[uuid.UUID, set[int]] = {}
        for assignment in group.target_assignment.values():
            for tid, ps in assignment.items():
                assigned.setdefault(tid, set()).update(ps)
        return any(assigned.get(tid) != ps for tid, ps in initialized.items() if tid in subscribed and ps)

    def group_records(self, group: ShareGroup) -> dict[bytes, bytes]:
        return group_records(group)

    def tombstone_order(self, key: bytes) -> int:
        return tombstone_order(key)

    def on_member_fenced(self, group: ShareGroup, member: ShareGroupMember) -> None:
        if self.listener is not None:
            self.listener(group.group_id, member.member_id)

    # -- ShareGroupHeartbeat -------------------------------------------------------------------------

    def share_group_heartbeat(self, req: ShareHeartbeatRequestData) -> HeartbeatResult:
        error = self.gm.group_status(req.group_id)
        if error != ErrorCode.NONE:
            return HeartbeatResult(error)

        def heartbeat() -> HeartbeatResult:
            self._validate(req)
            return self._leave(req) if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH else self._heartbeat(req)

        return self.run_with_rollback(req.group_id, heartbeat)

    @staticmethod
    def _validate(req: ShareHeartbeatRequestData) -> None:
        invalid_request_unless(bool(req.group_id), "GroupId can't be empty.")
        invalid_request_unless(bool(req.member_id), "MemberId can't be empty.")
        invalid_request_unless(req.rack_id is None or bool(req.rack_id), "RackId can't be empty.")
        if req.member_epoch == 0:
            invalid_request_unless(bool(req.subscribed_topic_names),
                                   "SubscribedTopicNames must be set in first request.")
        else:
            invalid_request_unless(req.member_epoch >= LEAVE_GROUP_MEMBER_EPOCH,
                                   f"MemberEpoch is invalid: {req.member_epoch}.")

    def _group_for(self, group_id: str, create: bool) -> ShareGroup:
        """Kafka's getOrMaybeCreateShareGroup (messages included)."""
        group = self.gm.share_groups.get(group_id)
        if group is not None:
            return group
        if self.other_group_type(group_id):
            raise self.not_this_type(group_id)
        if not create:
            raise HeartbeatReject(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        group = self.gm.share_groups[group_id] = ShareGroup(group_id, state_timestamp_ms=self.gm.time_ms())
        return group

    def _heartbeat(self, req: ShareHeartbeatRequestData) -> HeartbeatResult:
        group = self._group_for(req.group_id, create=req.member_epoch == 0)
        member = group.members.get(req.member_id)
        bump = False
        if req.member_epoch == 0:
            if member is None:
                self.check_group_size(group, self.gm.config.share_max_size)
                member = group.members[req.member_id] = ShareGroupMember(req.member_id)
                bump = True
        elif member is None:
            raise self.unknown_member(req.group_id, req.member_id)
        elif req.member_epoch != member.member_epoch:
            raise self.fenced_member_epoch(req.member_epoch, member)
        before = {t: set(ps) for t, ps in member.assigned.items()}
        bump = member.update_subscribed_topic_names(req.subscribed_topic_names) or bump
        member.update_client(req.rack_id, req.client_id, req.client_host)
        bump = self.initialized_assignment_pending(group) or bump
        self.update_group_epoch_and_target_assignment(group, bump)
        # No revocation: the member gets its target now and moves to the target assignment epoch.
        member.assigned = copy_assignment(group.target_assignment.get(member.member_id, {}))
        member.advance_epoch(group.target_assignment_epoch)
        self.schedule_session(group, member)
        error = self.persist(group)
        if error != ErrorCode.NONE:
            return HeartbeatResult(map_append_error(error))
        send = req.member_epoch == 0 or req.subscribed_topic_names is not None or member.assigned != before
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member.member_epoch,
                               self.heartbeat_interval_ms(group.group_id),
                               copy_assignment(member.assigned) if send else None)

    def _leave(self, req: ShareHeartbeatRequestData) -> HeartbeatResult:
        group = self._group_for(req.group_id, create=False)
        member = group.members.get(req.member_id)
        if member is None:
            raise self.unknown_member(req.group_id, req.member_id)
        return self.leave(group, member)

    # -- ShareGroupDescribe, offsets, deletion -------------------------------------------------------

    def share_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        return self.describe(group_id)

    def offsets_alterable(self, group_id: str, create: bool) -> tuple[ErrorCode, str | None]:
        """Whether a share group's start offsets may be altered (AlterShareGroupOffsets, `create`: a
        missing share group is created empty, as Kafka 4.3's `getOrMaybeCreateShareGroup(id, true)`) or
        deleted (DeleteShareGroupOffsets): another type of group is GROUP_ID_NOT_FOUND, a group with
        members NON_EMPTY_GROUP (Kafka's `throwIfShareGroupIsNotEmpty`)."""
        error = self.gm.group_status(group_id)
        if error != ErrorCode.NONE:
            return error, None
        existed = group_id in self.gm.share_groups
        if not existed and not create and not self.other_group_type(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        try:
            group = self._group_for(group_id, create)
        except HeartbeatReject as r:
            return r.error, r.message
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, ErrorCode.NON_EMPTY_GROUP.message
        if not existed:
            error = self.persist(group)
            if error != ErrorCode.NONE:
                self.gm.share_groups.pop(group_id, None)
                return map_append_error(error), None
        return ErrorCode.NONE, None

    def delete_share_group(self, group_id: str) -> ErrorCode:
        group = self.gm.share_groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        error = self.write_group_tombstones(group_id)
        if error != ErrorCode.NONE:
            return map_append_error(error)
        del self.gm.share_groups[group_id]
        group.dead = True
        if self.deleted_listener is not None:
            self.deleted_listener(group_id)
        return ErrorCode.NONE

    # -- loading -------------------------------------------------------------------------------------

    def replay_record(self, key: ShareGroupRecordKey, value: bytes | memoryview | None) -> None:
        replay(self.gm.share_groups, key, value)

    def finish_load(self) -> None:
        """After loading: every share group rebuilt as `finish_group_load` says."""
        for group in self.gm.share_groups.values():
            group.state_timestamp_ms = self.gm.time_ms()
            self.finish_group_load(group)
