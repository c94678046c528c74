"""The KIP-932 share group protocol: ShareGroupHeartbeat and ShareGroupDescribe.

Kafka's `GroupMetadataManager` (share half). One heartbeat does everything synchronously, as a
consumer-group heartbeat does (`kbroker.coord.consumer_coordinator`, whose result type and checks it
reuses): it checks the request and the member's epoch, applies the member's subscription, refreshes the
metadata of the subscribed topics, bumps the group epoch and recomputes the target assignment (the
share `simple` assignor, `kbroker.coord.share_group.simple_assign`) when something changed, and hands
the member its target at once (share groups have no revocation: members share partitions).

Timers on the injected `Scheduler`: the member session (`group.share.session.timeout.ms`, renewed by
every heartbeat); expiry fences the member (removed, a new group epoch, and the share-partition
manager is told, so the records the member had acquired become available again).

Every change is written to `__consumer_offsets` as Kafka's share-group records
(`kbroker.coord.share_records`: the difference with what was last written, members' tombstones before
the group's) before the heartbeat is answered; a failed append puts the group back as it was and
answers the mapped error. Loading replays the records, so a restarted broker knows the groups, members,
epochs and assignments; every member must heartbeat within its session timeout.

Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.coord.config import map_append_error
from kbroker.coord.consumer_coordinator import HeartbeatResult, _Reject
from kbroker.coord.share_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ShareGroup,
    ShareGroupMember,
    simple_assign,
)
from kbroker.coord.share_records import ShareGroupRecordKey, group_records, replay, tombstone_order
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coord.group_metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)

# (group id, member id) -> None: a member left or was fenced (the share-partition manager releases
# the records it holds).
ShareMemberListener = Callable[[str, str], None]


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


class ShareGroupProtocol:
    """The share groups of a GroupMetadataManager."""

    def __init__(self, gm: GroupMetadataManager) -> None:
        self.gm = gm
        self.listener: ShareMemberListener | None = None
        # group id -> None: an empty share group was deleted (its share-partition states go too).
        self.deleted_listener: Callable[[str], None] | None = None

    def share_group_heartbeat(self, req: ShareHeartbeatRequestData) -> HeartbeatResult:
        error = self.gm.group_status(req.group_id)
        if error != ErrorCode.NONE:
            return HeartbeatResult(error)
        group = self.gm.share_groups.get(req.group_id)
        saved = copy.deepcopy(group) if group is not None else None
        written = self.gm.share_written.get(req.group_id)
        try:
            self._validate(req)
            if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                result = self._leave(req)
            else:
                result = self._heartbeat(req)
        except _Reject as r:
            return HeartbeatResult(r.error, r.message)
        if result.error != ErrorCode.NONE:
            # The append failed: the group is put back as it was (and its members' sessions with it).
            now = self.gm.share_groups.get(req.group_id)
            for mid in list(now.members) if now is not None else []:
                self.gm.scheduler.cancel(share_session_key(req.group_id, mid))
            if saved is None:
                self.gm.share_groups.pop(req.group_id, None)
            else:
                self.gm.share_groups[req.group_id] = saved
                for member in saved.members.values():
                    self.schedule_session(saved, member)
            if written is None:
                self.gm.share_written.pop(req.group_id, None)
            else:
                self.gm.share_written[req.group_id] = written
        return result

    @staticmethod
    def _validate(req: ShareHeartbeatRequestData) -> None:
        bad = ErrorCode.INVALID_REQUEST
        if not req.group_id:
            raise _Reject(bad, "GroupId can't be empty.")
        if not req.member_id:
            raise _Reject(bad, "MemberId can't be empty.")
        if req.rack_id is not None and not req.rack_id:
            raise _Reject(bad, "RackId can't be empty.")
        if req.member_epoch == 0:
            if not req.subscribed_topic_names:
                raise _Reject(bad, "SubscribedTopicNames must be set in first request.")
        elif req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise _Reject(bad, f"MemberEpoch is invalid: {req.member_epoch}.")

    def _group_for(self, group_id: str, create: bool) -> ShareGroup:
        group = self.gm.share_groups.get(group_id)
        if group is not None:
            return group
        if group_id in self.gm.consumer_groups or group_id in self.gm.groups:
            raise _Reject(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if not create:
            raise _Reject(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        group = self.gm.share_groups[group_id] = ShareGroup(group_id, state_timestamp_ms=self.gm.time_ms())
        return group

    def _heartbeat(self, req: ShareHeartbeatRequestData) -> HeartbeatResult:
        group = self._group_for(req.group_id, create=req.member_epoch == 0)
        member = group.members.get(req.member_id)
        bump = False
        if req.member_epoch == 0:
            if member is None:
                if len(group.members) >= self.gm.config.share_max_size:
                    raise _Reject(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                  f"The share group has reached its maximum capacity of "
                                  f"{self.gm.config.share_max_size} members.")
                member = group.members[req.member_id] = ShareGroupMember(req.member_id)
                bump = True
        elif member is None:
            raise _Reject(ErrorCode.UNKNOWN_MEMBER_ID,
                          f"Member {req.member_id} is not a member of group {req.group_id}.")
        elif req.member_epoch != member.member_epoch:
            raise _Reject(ErrorCode.FENCED_MEMBER_EPOCH,
                          f"The share group member has a {'greater' if req.member_epoch > member.member_epoch else 'smaller'}"
                          f" member epoch ({req.member_epoch}) than the one known by the group coordinator "
                          f"({member.member_epoch}).")
        before = {t: set(ps) for t, ps in member.assigned.items()}
        if req.subscribed_topic_names is not None and \
                sorted(set(req.subscribed_topic_names)) != member.subscribed_topic_names:
            member.subscribed_topic_names = sorted(set(req.subscribed_topic_names))
            bump = True
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        member.client_id, member.client_host = req.client_id, req.client_host
        if self.refresh_subscribed_metadata(group) or bump:
            group.group_epoch += 1
            group.state_timestamp_ms = self.gm.time_ms()
        if group.assignment_epoch < group.group_epoch:
            self.compute_target_assignment(group)
        target = group.target_assignment.get(member.member_id, {})
        member.assigned = {t: set(ps) for t, ps in target.items() if ps}
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        self.schedule_session(group, member)
        error = self.persist(group)
        if error != ErrorCode.NONE:
            return HeartbeatResult(map_append_error(error))
        send = req.member_epoch == 0 or req.subscribed_topic_names is not None or member.assigned != before
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member.member_epoch,
                               self.gm.session_timeouts(group.group_id)[3],
                               {t: set(ps) for t, ps in member.assigned.items()} if send else None)

    def _leave(self, req: ShareHeartbeatRequestData) -> HeartbeatResult:
        group = self._group_for(req.group_id, create=False)
        member = group.members.get(req.member_id)
        if member is None:
            raise _Reject(ErrorCode.UNKNOWN_MEMBER_ID,
                          f"Member {req.member_id} is not a member of group {req.group_id}.")
        error = self.fence_member(group, member, "the member left the group")
        if error != ErrorCode.NONE:
            return HeartbeatResult(map_append_error(error))
        return HeartbeatResult(ErrorCode.NONE, None, req.member_id, LEAVE_GROUP_MEMBER_EPOCH)

    def refresh_subscribed_metadata(self, group: ShareGroup) -> bool:
        """Re-read the subscribed topics' ids and partition counts; True when they changed."""
        image: dict[str, tuple[uuid.UUID, int]] = {}
        if self.gm.topics is not None:
            for name in group.subscribed_topic_names():
                info = self.gm.topics.topic(name)
                if info is not None:
                    image[name] = (info.topic_id, int(info.num_partitions))
        if image == group.subscribed_metadata:
            return False
        group.subscribed_metadata = image
        return True

    def compute_target_assignment(self, group: ShareGroup) -> None:
        partitions = {tid: n for tid, n in group.subscribed_metadata.values()}
        subscriptions = {
            mid: {group.subscribed_metadata[t][0] for t in m.subscribed_topic_names if t in group.subscribed_metadata}
            for mid, m in group.members.items()
        }
        group.target_assignment = simple_assign(subscriptions, partitions)
        group.assignment_epoch = group.group_epoch
        group.assignment_timestamp_ms = self.gm.time_ms()

    def schedule_session(self, group: ShareGroup, member: ShareGroupMember) -> None:
        gid, mid = group.group_id, member.member_id
        self.gm.scheduler.schedule(share_session_key(gid, mid), self.gm.session_timeouts(gid)[2],
                                   lambda: self._on_session_expired(gid, mid))

    def _on_session_expired(self, group_id: str, member_id: str) -> None:
        group = self.gm.share_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and member is not None:
            self.fence_member(group, member, "its session timeout expired")

    def fence_member(self, group: ShareGroup, member: ShareGroupMember, reason: str) -> ErrorCode:
        """Remove the member and compute a new target assignment for the others."""
        log.info("Member %s of share group %s removed: %s", member.member_id, group.group_id, reason)
        self.gm.scheduler.cancel(share_session_key(group.group_id, member.member_id))
        group.members.pop(member.member_id, None)
        group.target_assignment.pop(member.member_id, None)
        group.group_epoch += 1
        group.state_timestamp_ms = self.gm.time_ms()
        self.refresh_subscribed_metadata(group)
        self.compute_target_assignment(group)
        if self.listener is not None:
            self.listener(group.group_id, member.member_id)
        error = self.persist(group)
        if error != ErrorCode.NONE:
            log.warning("Failed to write share group %s after removing %s: %s", group.group_id,
                        member.member_id, error.name)
        return error

    def share_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        error = self.gm.group_status(group_id)
        if error != ErrorCode.NONE:
            return error, None, None
        group = self.gm.share_groups.get(group_id)
        if group is not None:
            return ErrorCode.NONE, None, group
        if group_id in self.gm.groups or group_id in self.gm.consumer_groups:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", None
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None

    def offsets_alterable(self, group_id: str, create: bool) -> tuple[ErrorCode, str | None]:
        """Whether a share group's start offsets may be altered (AlterShareGroupOffsets, `create`: a
        missing share group is created empty, as Kafka 4.3's `getOrMaybeCreateShareGroup(id, true)`) or
        deleted (DeleteShareGroupOffsets): another type of group is GROUP_ID_NOT_FOUND, a group with
        members NON_EMPTY_GROUP (Kafka's `throwIfShareGroupIsNotEmpty`)."""
        error = self.gm.group_status(group_id)
        if error != ErrorCode.NONE:
            return error, None
        existed = group_id in self.gm.share_groups
        if not existed and not create and group_id not in self.gm.consumer_groups and group_id not in self.gm.groups:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        try:
            group = self._group_for(group_id, create)
        except _Reject as r:
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
        old = self.gm.share_written.get(group_id, {})
        if old:
            error = self.gm.writer(group_id, [(k, None) for k in sorted(old, key=tombstone_order)])
            if error != ErrorCode.NONE:
                return map_append_error(error)
        self.gm.share_written.pop(group_id, None)
        del self.gm.share_groups[group_id]
        group.dead = True
        if self.deleted_listener is not None:
            self.deleted_listener(group_id)
        return ErrorCode.NONE

    # -- records -------------------------------------------------------------------------------------

    def persist(self, group: ShareGroup) -> ErrorCode:
        """Write the difference between the group's records now and what was last written."""
        now = group_records(group)
        old = self.gm.share_written.get(group.group_id, {})
        gone = sorted((k for k in old if k not in now), key=tombstone_order)
        batch: list[tuple[bytes, bytes | None]] = [(k, None) for k in gone if tombstone_order(k) < 3]
        batch += [(k, v) for k, v in now.items() if old.get(k) != v]
        batch += [(k, None) for k in gone if tombstone_order(k) >= 3]
        if not batch:
            return ErrorCode.NONE
        error = self.gm.writer(group.group_id, batch)
        if error == ErrorCode.NONE:
            self.gm.share_written[group.group_id] = now
        return error

    def replay_record(self, key: ShareGroupRecordKey, value: bytes | memoryview | None) -> None:
        replay(self.gm.share_groups, key, value)

    def finish_load(self) -> None:
        """After loading: what was written is what the records say; every member must heartbeat
        within its session timeout; the subscribed topics are read again (a changed topic gets a new
        assignment at the next heartbeat)."""
        for gid, group in self.gm.share_groups.items():
            group.state_timestamp_ms = self.gm.time_ms()
            self.gm.share_written[gid] = group_records(group)
            if self.refresh_subscribed_metadata(group) and group.members:
                expected = {(tid, p) for tid, n in group.subscribed_metadata.values() for p in range(n)}
                covered = {(t, p) for a in group.target_assignment.values() for t, ps in a.items() for p in ps}
                if covered != expected:
                    group.subscribed_metadata = {}
            for member in group.members.values():
                self.schedule_session(group, member)
