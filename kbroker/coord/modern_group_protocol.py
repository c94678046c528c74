"""The heartbeat machinery KIP-848 consumer groups and KIP-932 share groups share: Kafka's
`GroupMetadataManager` helpers for modern groups, its `TargetAssignmentBuilder` and
`SubscribedTopicDescriberImpl` steps.

`ModernGroupProtocol[G, M]` is the base of `kbroker.coord.consumer_coordinator.ConsumerGroupProtocol`
and `kbroker.coord.share_group_protocol.ShareGroupProtocol`. It owns, once for both:

- the heartbeat's transaction: run the heartbeat on the group, and when one of its appends failed put
  the group (members' session timers included) and its last-written records back as they were
  (`run_with_rollback`), so the in-memory state only follows appends that succeeded;
- the common request checks and their Kafka messages (empty ids, unknown member, fenced member epoch,
  group full, wrong group type);
- the subscribed-topic metadata refresh (topic ids and partition counts of what members subscribe to);
- the group-epoch bump and the target assignment (`update_group_epoch_and_target_assignment`), with
  the assignor a subclass supplies;
- member sessions on the injected `Scheduler` (renewed by every heartbeat; expiry fences the member);
- fencing (the member leaves or its session expires: removed, a new group epoch and target assignment
  for the others, written);
- writing a group as the difference between its records now and what was last written (members'
  tombstones before the group's) and the load-time rebuild (sessions restarted, stale metadata
  dropped).

A subclass says what differs (`groups`, `written`, `session_key`, `session_timeout_ms`,
`heartbeat_interval_ms`, `assign`, `group_records`, `tombstone_order`, and the hooks `member_topics`,
`after_member_removed`, `on_member_fenced`, `on_group_epoch_bumped`, `cancel_member_timers`):
consumer groups add reconciliation/revocation, the rebalance timeout, static members, regex
subscriptions and classic interop; share groups the `simple` assignor, no revocation, and telling the
share-partition manager about a fenced member.

Must not import asyncio, kbroker.net, kbroker.api, or the consumer/share modules built on it.
"""

from __future__ import annotations

import abc
import copy
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from kbroker.coord.assignors import Assignment
from kbroker.coord.config import map_append_error
from kbroker.coord.modern_group import LEAVE_GROUP_MEMBER_EPOCH, ModernGroup, ModernGroupMember
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coord.group_metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)

M = TypeVar("M", bound=ModernGroupMember)
G = TypeVar("G", bound=ModernGroup[ModernGroupMember])


@dataclass(slots=True)
class HeartbeatResult:
    """The answer to a ConsumerGroupHeartbeat or ShareGroupHeartbeat (assignment None: not sent)."""

    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class HeartbeatReject(Exception):
    """A heartbeat refused with Kafka's error code and message (Kafka's ApiException)."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def invalid_request_unless(ok: bool, message: str) -> None:
    if not ok:
        raise HeartbeatReject(ErrorCode.INVALID_REQUEST, message)


@dataclass(slots=True)
class GroupSnapshot(Generic[G]):
    """One group and its last-written records before a heartbeat changed them; `restore_extra`
    puts back what a subclass saved besides (a consumer group: the classic group it replaced)."""

    group_id: str
    group: G | None
    written: dict[bytes, bytes] | None
    restore_extra: Callable[[], None] | None = None


def write_group_difference(writer: Callable[[str, list[tuple[bytes, bytes | None]]], ErrorCode],
                           written: dict[str, dict[bytes, bytes]], group_id: str, now: dict[bytes, bytes],
                           tombstone_order: Callable[[bytes], int]) -> ErrorCode:
    """Write what changed since the records last written for the group: member tombstones (order < 3),
    new or changed records, then the group-level tombstones. A failed write leaves `written` as it
    was, so the next change writes the difference again."""
    old = written.get(group_id, {})
    gone = sorted((k for k in old if k not in now), key=tombstone_order)
    batch: list[tuple[bytes, bytes | None]] = [(k, None) for k in gone if tombstone_order(k) < 3]
    batch += [(k, v) for k, v in now.items() if old.get(k) != v]
    batch += [(k, None) for k in gone if tombstone_order(k) >= 3]
    if not batch:
        return ErrorCode.NONE
    error = writer(group_id, batch)
    if error == ErrorCode.NONE:
        written[group_id] = now
    return error


class ModernGroupProtocol(abc.ABC, Generic[G, M]):
    """What the consumer and the share group protocols of a GroupMetadataManager share."""

    # "consumer" / "share": in Kafka's messages ("The share group member has a ...") and logs.
    group_type: str

    def __init__(self, gm: GroupMetadataManager) -> None:
        self.gm = gm

    # -- what a group type says ----------------------------------------------------------------------

    @abc.abstractmethod
    def groups(self) -> dict[str, G]:
        """This type's groups of the manager."""

    @abc.abstractmethod
    def written(self) -> dict[str, dict[bytes, bytes]]:
        """This type's records last written, per group."""

    @abc.abstractmethod
    def session_key(self, group_id: str, member_id: str) -> str: ...

    @abc.abstractmethod
    def session_timeout_ms(self, group: G, member: M) -> int: ...

    @abc.abstractmethod
    def heartbeat_interval_ms(self, group_id: str) -> int: ...

    @abc.abstractmethod
    def assignor_name(self, group: G) -> str: ...

    @abc.abstractmethod
    def assign(self, group: G, subscriptions: dict[str, set[uuid.UUID]],
               partitions: dict[uuid.UUID, int]) -> dict[str, Assignment]:
        """Member id -> target assignment, from each member's subscribed topic ids and the partition
        count of every subscribed topic."""

    @abc.abstractmethod
    def group_records(self, group: G) -> dict[bytes, bytes]: ...

    @abc.abstractmethod
    def tombstone_order(self, key: bytes) -> int: ...

    def member_topics(self, group: G, member: M) -> set[str]:
        """The topic names a member is subscribed to (consumer groups add their regex's matches)."""
        return set(member.subscribed_topic_names)

    def after_member_removed(self, group: G, member: M) -> ErrorCode | None:
        """Called by `fence_member` once the member is out of the group; an error code instead of None
        ends the fencing there with that answer (a consumer group converted back to a classic one)."""
        return None

    def on_member_fenced(self, group: G, member: M) -> None:
        """Called by `fence_member` after the new target assignment, before it is written."""

    def on_group_epoch_bumped(self, group: G) -> None:
        """Called after every group-epoch bump (metrics)."""

    def cancel_member_timers(self, group: G, member_id: str) -> None:
        self.gm.scheduler.cancel(self.session_key(group.group_id, member_id))

    # -- lookups and checks --------------------------------------------------------------------------

    def other_group_type(self, group_id: str) -> bool:
        """Whether `group_id` is a group of another type (classic, consumer or share)."""
        return any(group_id in groups and groups is not self.groups()
                   for groups in (self.gm.groups, self.gm.consumer_groups, self.gm.share_groups))

    def not_this_type(self, group_id: str) -> HeartbeatReject:
        return HeartbeatReject(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {self.group_type} group.")

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, G | None]:
        """ConsumerGroupDescribe / ShareGroupDescribe of one group (Kafka's consumerGroup(id) /
        shareGroup(id) lookup and its messages)."""
        error = self.gm.group_status(group_id)
        if error != ErrorCode.NONE:
            return error, None, None
        group = self.groups().get(group_id)
        if group is not None:
            return ErrorCode.NONE, None, group
        if self.other_group_type(group_id):
            reject = self.not_this_type(group_id)
            return reject.error, reject.message, None
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None

    @staticmethod
    def unknown_member(group_id: str, member_id: str) -> HeartbeatReject:
        return HeartbeatReject(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")

    def fenced_member_epoch(self, received: int, member: M) -> HeartbeatReject:
        """Kafka's throwIfMemberEpochIsInvalid message."""
        side = "greater" if received > member.member_epoch else "smaller"
        return HeartbeatReject(ErrorCode.FENCED_MEMBER_EPOCH,
                               f"The {self.group_type} group member has a {side} member epoch ({received}) than "
                               f"the one known by the group coordinator ({member.member_epoch}).")

    def check_group_size(self, group: G, max_size: int) -> None:
        if len(group.members) >= max_size:
            raise HeartbeatReject(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                  f"The {self.group_type} group has reached its maximum capacity of "
                                  f"{max_size} members.")

    # -- the heartbeat's transaction -----------------------------------------------------------------

    def run_with_rollback(self, group_id: str, heartbeat: Callable[[], HeartbeatResult]) -> HeartbeatResult:
        """Run a heartbeat that changes the group before it writes the difference; a rejected request
        becomes its error answer, and when an append failed the group is put back exactly as it was
        (copy-on-write of the one group the heartbeat touches)."""
        snapshot = self.snapshot_group(group_id)
        failed = self.gm.failed_appends
        try:
            result = heartbeat()
        except HeartbeatReject as r:
            result = HeartbeatResult(r.error, r.message)
        if self.gm.failed_appends != failed and result.error != ErrorCode.NONE:
            self.restore_group(snapshot)
        return result

    def snapshot_group(self, group_id: str) -> GroupSnapshot[G]:
        group = self.groups().get(group_id)
        written = self.written().get(group_id)
        return GroupSnapshot(group_id, copy.deepcopy(group) if group is not None else None,
                             dict(written) if written is not None else None)

    def restore_group(self, snapshot: GroupSnapshot[G]) -> None:
        gid, groups, written = snapshot.group_id, self.groups(), self.written()
        now = groups.get(gid)
        if now is not None:
            for member_id in list(now.members):
                self.cancel_member_timers(now, member_id)
        if snapshot.group is None:
            groups.pop(gid, None)
        else:
            groups[gid] = snapshot.group
            for member in snapshot.group.members.values():
                self.schedule_session(snapshot.group, self._member(member))
        if snapshot.written is None:
            written.pop(gid, None)
        else:
            written[gid] = snapshot.written
        if snapshot.restore_extra is not None:
            snapshot.restore_extra()

    @staticmethod
    def _member(member: ModernGroupMember) -> M:
        # A G's members are Ms (G = ModernGroup[M]); a TypeVar's bound cannot say so.
        return cast(M, member)

    # -- subscriptions, epochs and the target assignment ---------------------------------------------

    def refresh_subscribed_metadata(self, group: G) -> bool:
        """Re-read the subscribed topics' ids and partition counts; True when they changed."""
        names: set[str] = set()
        for m in group.members.values():
            names |= self.member_topics(group, self._member(m))
        image: dict[str, tuple[uuid.UUID, int]] = {}
        if self.gm.topics is not None:
            for name in names:
                info = self.gm.topics.topic(name)
                if info is not None:
                    image[name] = (info.topic_id, int(info.num_partitions))
        if image == group.subscribed_metadata:
            return False
        group.subscribed_metadata = image
        return True

    def bump_group_epoch(self, group: G) -> None:
        group.bump_group_epoch(self.gm.time_ms())
        self.on_group_epoch_bumped(group)

    def update_group_epoch_and_target_assignment(self, group: G, changed: bool) -> None:
        """A new group epoch when the member's heartbeat `changed` the group or the subscribed topics
        changed; a new target assignment whenever the group epoch is ahead of it."""
        if self.refresh_subscribed_metadata(group) or changed:
            self.bump_group_epoch(group)
        if group.target_assignment_epoch < group.group_epoch:
            self.compute_target_assignment(group)

    def compute_target_assignment(self, group: G) -> None:
        partitions = {tid: n for tid, n in group.subscribed_metadata.values()}
        subscriptions = {
            mid: {group.subscribed_metadata[t][0] for t in self.member_topics(group, self._member(m))
                  if t in group.subscribed_metadata}
            for mid, m in group.members.items()
        }
        group.set_target_assignment(self.assign(group, subscriptions, partitions), self.gm.time_ms())
        log.info("Computed target assignment of %s group %s at epoch %d with %s", self.group_type,
                 group.group_id, group.group_epoch, self.assignor_name(group))

    # -- sessions and fencing ------------------------------------------------------------------------

    def schedule_session(self, group: G, member: M) -> None:
        gid, mid = group.group_id, member.member_id
        self.gm.scheduler.schedule(self.session_key(gid, mid), self.session_timeout_ms(group, member),
                                   lambda: self._on_session_expired(gid, mid))

    def _on_session_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups().get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and member is not None:
            self.fence_member(group, self._member(member), "its session timeout expired")

    def fence_member(self, group: G, member: M, reason: str) -> ErrorCode:
        """Remove the member and compute a new target assignment for the others (Kafka's
        fenceMember / removeMember), then write the group."""
        log.info("Member %s of %s group %s removed: %s", member.member_id, self.group_type, group.group_id, reason)
        self.cancel_member_timers(group, member.member_id)
        group.remove_member(member.member_id)
        stop = self.after_member_removed(group, member)
        if stop is not None:
            return stop
        self.bump_group_epoch(group)
        self.refresh_subscribed_metadata(group)
        self.compute_target_assignment(group)
        self.on_member_fenced(group, member)
        error = self.persist(group)
        if error != ErrorCode.NONE:
            log.warning("Failed to write %s group %s after removing %s: %s", self.group_type, group.group_id,
                        member.member_id, error.name)
        return error

    def leave(self, group: G, member: M, answer_member_id: str | None = None) -> HeartbeatResult:
        """A member leaving with epoch -1: fenced, answered with epoch -1 (and the member id the
        request carried, `answer_member_id`, when it was found another way)."""
        error = self.fence_member(group, member, "the member left the group")
        if error != ErrorCode.NONE:
            return HeartbeatResult(map_append_error(error))
        member_id = member.member_id if answer_member_id is None else answer_member_id
        return HeartbeatResult(ErrorCode.NONE, None, member_id, LEAVE_GROUP_MEMBER_EPOCH)

    # -- records -------------------------------------------------------------------------------------

    def persist(self, group: G) -> ErrorCode:
        """Write the difference between the group's records now and what was last written."""
        return write_group_difference(self.gm.writer, self.written(), group.group_id, self.group_records(group),
                                      self.tombstone_order)

    def write_group_tombstones(self, group_id: str) -> ErrorCode:
        """Tombstones for every record last written for the group (deleted, or converted to another
        type), members' first."""
        old = self.written().get(group_id, {})
        if not old:
            return ErrorCode.NONE
        error = self.gm.writer(group_id, [(k, None) for k in sorted(old, key=self.tombstone_order)])
        if error == ErrorCode.NONE:
            del self.written()[group_id]
        return error

    def finish_group_load(self, group: G) -> None:
        """After loading a group: the subscribed topics are read again (topics that changed while the
        broker was down drop the metadata, so the next heartbeat computes a new target), what was
        written is what the records say, and every member must heartbeat within its session timeout."""
        self.refresh_subscribed_metadata(group)
        if group.members and not group.assignment_covers_subscriptions():
            group.subscribed_metadata = {}
        self.written()[group.group_id] = self.group_records(group)
        for member in group.members.values():
            self.schedule_session(group, self._member(member))
