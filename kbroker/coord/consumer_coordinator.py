"""The KIP-848 consumer rebalance protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Kafka's `GroupMetadataManager` (consumer half). One heartbeat does everything synchronously: it checks
the request and the member's epoch, applies the member's subscription, refreshes the metadata of the
subscribed topics, bumps the group epoch and computes a new target assignment when something changed
(server-side assignor `uniform` or `range`), then reconciles the member towards its target
(`kbroker.coord.consumer_group.reconcile`). Nothing waits: members learn about new assignments in
their next heartbeat (every `group.consumer.heartbeat.interval.ms`).

A `kbroker.coord.modern_group_protocol.ModernGroupProtocol`, as the KIP-932 share protocol is: the
rollback of a heartbeat whose append failed, the common checks and messages, the metadata refresh, the
group-epoch bump and target assignment, member sessions, fencing and the record writing are that
base's, shared with share groups. What is only a consumer group's is here: ConsumerGroupHeartbeat's own
checks, static members (KIP-345), regex subscriptions (with the DESCRIBE filter), the assignor choice,
reconciliation and the rebalance timeout, the classic-group interop hooks (`kbroker.coord.migration`:
online upgrade on join, downgrade when the last consumer-protocol member is fenced) and the member-epoch
checks of offset commits and fetches (KIP-1251).

Timers on the injected `Scheduler`: the member session (`group.consumer.session.timeout.ms`, renewed
by every heartbeat) and the rebalance timeout (the member's `RebalanceTimeoutMs`, started when it is
asked to revoke partitions); either one expiring fences the member (removed, its partitions freed,
a new group epoch). A part of `kbroker.coord.group_metadata_manager.GroupMetadataManager`, which
owns the groups.

Every change is written to `__consumer_offsets` as Kafka's consumer-group records
(`kbroker.coord.consumer_persistence`) before the heartbeat is answered, so a restarted broker knows
the members, their epochs and assignments.

Must not import asyncio, kbroker.net, kbroker.api or the share-group modules.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections import Counter
from dataclasses import dataclass

from kbroker.coord.assignors import Assignment, MemberSpec, assignor
from kbroker.coord.config import map_append_error
from kbroker.coord.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicFilter,
    copy_assignment,
    reconcile,
)
from kbroker.coord.consumer_records import group_records, tombstone_order
from kbroker.coord.modern_group_protocol import (
    GroupSnapshot,
    HeartbeatReject,
    ModernGroupProtocol,
    invalid_request_unless,
)
from kbroker.coord.modern_group_protocol import HeartbeatResult as HeartbeatResult
from kbroker.coord.records import encode_group_metadata_key
from kbroker.metrics.meters import GROUP_COORDINATOR_METRICS
from kbroker.protocol.errors import ErrorCode

# ConsumerGroupDescribe v1 MemberType (KIP-1099): 0 classic (a classic member inside a consumer
# group, online migration), 1 consumer.
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


@dataclass(slots=True)
class HeartbeatRequestData:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1
    # Set by the API layer when an authorizer is on: keeps the regex's matches this principal may
    # DESCRIBE (KIP-848 regex subscriptions never assign a topic the member could not see).
    topic_describe_filter: TopicFilter | None = None


def session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def rebalance_key(group_id: str, member_id: str) -> str:
    return f"consumer-rebalance-{group_id}-{member_id}"


class ConsumerGroupProtocol(ModernGroupProtocol[ConsumerGroup, ConsumerGroupMember]):
    """The KIP-848 consumer protocol of a GroupMetadataManager's consumer groups."""

    group_type = "consumer"

    # -- ModernGroupProtocol -------------------------------------------------------------------------

    def groups(self) -> dict[str, ConsumerGroup]:
        return self.gm.consumer_groups

    def written(self) -> dict[str, dict[bytes, bytes]]:
        return self.gm.consumer_written

    def session_key(self, group_id: str, member_id: str) -> str:
        return session_key(group_id, member_id)

    def session_timeout_ms(self, group: ConsumerGroup, member: ConsumerGroupMember) -> int:
        # A classic member keeps the session timeout of its JoinGroup.
        return self.gm.session_timeouts(group.group_id)[0] if member.classic is None \
            else member.classic.session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.gm.session_timeouts(group_id)[1]

    def group_records(self, group: ConsumerGroup) -> dict[bytes, bytes]:
        return group_records(group)

    def tombstone_order(self, key: bytes) -> int:
        return tombstone_order(key)

    def member_topics(self, group: ConsumerGroup, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            pattern = re.compile(member.subscribed_topic_regex)
            matched = {t for t in self._topic_names() if pattern.fullmatch(t)}
            if member.topic_describe_filter is not None:
                matched = member.topic_describe_filter(matched)
            names |= matched
        return names

    def cancel_member_timers(self, group: ConsumerGroup, member_id: str) -> None:
        self.gm.scheduler.cancel(session_key(group.group_id, member_id))
        self.gm.scheduler.cancel(rebalance_key(group.group_id, member_id))

    def after_member_removed(self, group: ConsumerGroup, member: ConsumerGroupMember) -> ErrorCode | None:
        self.gm.migration.cancel_classic_timers(group, member.member_id)
        if self.gm.migration.should_downgrade(group, member):
            return self.gm.migration.downgrade_to_classic_group(group)  # the last consumer-protocol member left
        return None

    def on_group_epoch_bumped(self, group: ConsumerGroup) -> None:
        GROUP_COORDINATOR_METRICS.consumer_rebalances += 1  # consumer-group-rebalance-count

    def snapshot_group(self, group_id: str) -> GroupSnapshot[ConsumerGroup]:
        """Also the classic group a heartbeat may convert (online upgrade) or replace."""
        snapshot = super().snapshot_group(group_id)
        classic = self.gm.groups.get(group_id)
        if classic is not None:
            def restore_classic() -> None:
                if self.gm.groups.get(group_id) is not classic:
                    self.gm.groups[group_id] = classic
                    for cm in classic.members.values():
                        self.gm.classic.schedule_heartbeat(classic, cm.member_id, cm.session_timeout_ms)
            snapshot.restore_extra = restore_classic
        return snapshot

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------------------

    def consumer_group_heartbeat(self, req: HeartbeatRequestData) -> HeartbeatResult:
        error = self.gm.group_status(req.group_id)
        if error != ErrorCode.NONE:
            return HeartbeatResult(error)

        def heartbeat() -> HeartbeatResult:
            self._validate_heartbeat(req)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._consumer_leave(req)
            return self._consumer_heartbeat(req)

        return self.run_with_rollback(req.group_id, heartbeat)

    def _validate_heartbeat(self, req: HeartbeatRequestData) -> None:
        invalid_request_unless(bool(req.group_id), "GroupId can't be empty.")
        invalid_request_unless(req.instance_id is None or bool(req.instance_id), "InstanceId can't be empty.")
        invalid_request_unless(req.rack_id is None or bool(req.rack_id), "RackId can't be empty.")
        # KIP-1082: from v1 the consumer generates its member id.
        invalid_request_unless(req.api_version < 1 or bool(req.member_id), "MemberId can't be empty.")
        if req.member_epoch == 0:
            invalid_request_unless(req.rebalance_timeout_ms != -1,
                                   "RebalanceTimeoutMs must be provided in first request.")
            invalid_request_unless(req.owned is not None and not any(req.owned.values()),
                                   "TopicPartitions must be empty when (re-)joining.")
            invalid_request_unless(req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None,
                                   "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            invalid_request_unless(req.instance_id is not None, "InstanceId can't be null.")
        else:
            invalid_request_unless(req.member_epoch > LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                   f"MemberEpoch is invalid: {req.member_epoch}.")
            invalid_request_unless(bool(req.member_id), "MemberId can't be empty.")
        if req.server_assignor is not None and req.server_assignor not in self.gm.config.consumer_assignors:
            raise HeartbeatReject(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                  f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                                  f"{', '.join(self.gm.config.consumer_assignors)}.")
        if req.subscribed_topic_regex is not None:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as exc:
                raise HeartbeatReject(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                      f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular "
                                      f"expression: {exc}.") from None

    def _consumer_group_for(self, group_id: str, create: bool) -> ConsumerGroup:
        """Kafka's getOrMaybeCreateConsumerGroup (messages included)."""
        group = self.gm.consumer_groups.get(group_id)
        if group is not None:
            return group
        if group_id in self.gm.share_groups:
            raise self.not_this_type(group_id)
        classic = self.gm.groups.get(group_id)
        if classic is None and not create:
            raise HeartbeatReject(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if classic is not None:
            if create and not classic.is_empty():
                return self.gm.migration.upgrade_classic_group(classic)  # online upgrade (kbroker.coord.migration)
            if not create or classic.pending_members:
                raise HeartbeatReject(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group")
            # An empty classic group (committed offsets only) becomes a consumer group; its offsets
            # stay. The classic group's metadata record is tombstoned, as Kafka does on conversion.
            if classic.protocol_type is not None:
                self.gm.writer(group_id, [(encode_group_metadata_key(group_id), None)])
            del self.gm.groups[group_id]
        group = self.gm.consumer_groups[group_id] = ConsumerGroup(group_id, state_timestamp_ms=self.gm.time_ms())
        return group

    def _consumer_heartbeat(self, req: HeartbeatRequestData) -> HeartbeatResult:
        group = self._consumer_group_for(req.group_id, create=req.member_epoch == 0)
        member, bump = self._member_for(group, req)
        before = copy_assignment(member.assigned)
        # Subscription and member attributes; a subscription change calls for a new assignment.
        bump = member.update_subscribed_topic_names(req.subscribed_topic_names) or bump
        # librdkafka's full heartbeat carries "" for "no regex": compare normalised values, or every
        # full heartbeat would look like a subscription change and bump the group epoch.
        regex = req.subscribed_topic_regex or None
        if req.subscribed_topic_regex is not None and regex != member.subscribed_topic_regex:
            member.subscribed_topic_regex = regex
            bump = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            bump = True
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.update_client(req.rack_id, req.client_id, req.client_host)
        if req.topic_describe_filter is not None:
            member.topic_describe_filter = req.topic_describe_filter
        self.update_group_epoch_and_target_assignment(group, bump)
        was_unrevoked = member.state == MemberState.UNREVOKED_PARTITIONS
        reconcile(group, member, req.owned)
        self.schedule_session(group, member)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if not was_unrevoked:
                self.schedule_rebalance_timeout(group, member)
        else:
            self.gm.scheduler.cancel(rebalance_key(group.group_id, member.member_id))
        error = self.persist(group)
        if error != ErrorCode.NONE:
            return HeartbeatResult(map_append_error(error))
        # Kafka sends the assignment on a join, on a full request (a client that lost track sends
        # every field) and when the member's assigned partitions changed; otherwise none.
        full = req.rebalance_timeout_ms != -1 and req.owned is not None and \
            (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        send = req.member_epoch == 0 or full or member.assigned != before
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member.member_epoch,
                               self.heartbeat_interval_ms(group.group_id),
                               copy_assignment(member.assigned) if send else None)

    def _member_for(self, group: ConsumerGroup, req: HeartbeatRequestData) -> tuple[ConsumerGroupMember, bool]:
        """The member the heartbeat is for (created on join) and whether it is new to the group."""
        member = group.members.get(req.member_id) if req.member_id else None
        if req.member_epoch == 0:
            if req.instance_id is not None:
                previous_id = group.static_members.get(req.instance_id)
                previous = group.members.get(previous_id) if previous_id is not None else None
                if previous is not None and (previous.member_id != req.member_id
                                             or previous.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    if previous.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise HeartbeatReject(ErrorCode.UNRELEASED_INSTANCE_ID,
                                              f"Static member {previous.member_id} with instance id {req.instance_id} "
                                              f"is not released yet.")
                    # KIP-345: a restarted static member takes over its assignment and epoch.
                    self.cancel_member_timers(group, previous.member_id)
                    replaced = group.replace_static_member(previous, req.member_id or _new_member_id())
                    replaced.member_epoch = replaced.previous_member_epoch
                    return replaced, False
            if member is not None:
                # The member says it owns nothing (it was fenced, or lost its join response): it
                # restarts from an empty assignment and gets its target partitions back.
                group.set_member_assignment(member, {}, {})
                member.previous_member_epoch, member.member_epoch = member.member_epoch, 0
                member.state = MemberState.STABLE
                return member, False
            self.check_group_size(group, self.gm.config.consumer_max_size)
            member = ConsumerGroupMember(req.member_id or _new_member_id(), instance_id=req.instance_id)
            group.add_member(member)
            return member, True
        if member is None:
            raise self.unknown_member(req.group_id, req.member_id)
        if req.instance_id is not None and member.instance_id != req.instance_id:
            raise HeartbeatReject(ErrorCode.FENCED_INSTANCE_ID,
                                  f"Static member {req.member_id} with instance id {req.instance_id} was fenced.")
        if req.member_epoch != member.member_epoch:
            # A member whose previous response was lost may retry with its previous epoch, as long
            # as it owns nothing beyond what it is assigned now (Kafka's throwIfMemberEpochIsInvalid).
            if not (req.member_epoch == member.previous_member_epoch and req.owned is not None and all(
                    ps <= member.assigned.get(t, set()) for t, ps in req.owned.items())):
                raise self.fenced_member_epoch(req.member_epoch, member)
        return member, False

    def _consumer_leave(self, req: HeartbeatRequestData) -> HeartbeatResult:
        group = self.gm.consumer_groups.get(req.group_id)
        if group is None:
            raise HeartbeatReject(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        member = group.members.get(req.member_id)
        if member is None and req.instance_id is not None:
            found = group.static_members.get(req.instance_id)
            member = group.members.get(found) if found is not None else None
        if member is None:
            raise self.unknown_member(req.group_id, req.member_id)
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if member.instance_id != req.instance_id:
                raise HeartbeatReject(ErrorCode.FENCED_INSTANCE_ID,
                                      f"Static member with instance id {req.instance_id} was fenced.")
            # A static member leaving temporarily keeps its partitions until its session expires.
            if member.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            self.gm.scheduler.cancel(rebalance_key(group.group_id, member.member_id))
            self.schedule_session(group, member)
            error = self.persist(group)
            if error != ErrorCode.NONE:
                return HeartbeatResult(map_append_error(error))
            return HeartbeatResult(ErrorCode.NONE, None, member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        return self.leave(group, member, req.member_id)

    def _topic_names(self) -> list[str]:
        if self.gm.topics is None:
            return []
        return [t.name for t in self.gm.topics.topics() if not t.is_internal and not t.name.startswith("__")]

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members asked for (ties: the configured order), else the first configured."""
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if not votes:
            return self.gm.config.consumer_assignors[0]
        order = {name: i for i, name in enumerate(self.gm.config.consumer_assignors)}
        return min(votes, key=lambda n: (-votes[n], order.get(n, len(order))))

    def assignor_name(self, group: ConsumerGroup) -> str:
        return self.preferred_assignor(group)

    def assign(self, group: ConsumerGroup, subscriptions: dict[str, set[uuid.UUID]],
               partitions: dict[uuid.UUID, int]) -> dict[str, Assignment]:
        """The preferred server-side assignor (`uniform` / `range`), sticky to the current target and
        aware of static members."""
        specs = {mid: MemberSpec(ids, group.target_assignment.get(mid, {}), group.members[mid].instance_id)
                 for mid, ids in subscriptions.items()}
        return assignor(self.preferred_assignor(group))(specs, partitions)

    def schedule_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        gid, mid, epoch = group.group_id, member.member_id, member.member_epoch
        self.gm.scheduler.schedule(rebalance_key(gid, mid), member.rebalance_timeout_ms,
                                   lambda: self._on_rebalance_timeout(gid, mid, epoch))

    def _on_rebalance_timeout(self, group_id: str, member_id: str, epoch: int) -> None:
        group = self.gm.consumer_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and member is not None and member.member_epoch == epoch \
                and member.state == MemberState.UNREVOKED_PARTITIONS:
            self.fence_member(group, member, "it did not revoke its partitions within the rebalance timeout")

    def consumer_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        return self.describe(group_id)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        if self.gm.topics is None:
            return None
        info = self.gm.topics.topic_by_id(topic_id)
        return None if info is None else str(info.name)

    def validate_consumer_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                                        api_version: int, partitions: list[tuple[str, int]]) -> list[ErrorCode]:
        """Kafka's ConsumerGroup.validateOffsetCommit, one error per partition. The member's current
        epoch is valid for every partition; an older epoch only for partitions the member was
        assigned at or before that epoch (KIP-1251 assignment epochs: a commit sent just before a
        heartbeat bumped the epoch is not a zombie's)."""
        if member_epoch < 0 and not group.members:
            return [ErrorCode.NONE] * len(partitions)  # an admin / simple commit to an empty group
        member = group.members.get(member_id)
        error = ErrorCode.NONE
        if member is None:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif member.classic is not None:
            # A classic member commits with its generation, the member epoch (any version).
            error = ErrorCode.NONE if member_epoch == member.member_epoch else ErrorCode.ILLEGAL_GENERATION
            return [error] * len(partitions)
        elif api_version < 9:
            error = ErrorCode.UNSUPPORTED_VERSION
        elif member_epoch > member.member_epoch:
            error = ErrorCode.STALE_MEMBER_EPOCH
        if error != ErrorCode.NONE or member is None or member_epoch == member.member_epoch:
            return [error] * len(partitions)
        out = []
        for topic, partition in partitions:
            info = self.gm.topics.topic(topic) if self.gm.topics is not None else None
            assigned_at = None if info is None else member.assignment_epochs.get((info.topic_id, partition))
            ok = assigned_at is not None and assigned_at <= member_epoch
            out.append(ErrorCode.NONE if ok else ErrorCode.STALE_MEMBER_EPOCH)
        return out

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        group = self.gm.consumer_groups.get(group_id)
        if group is None or (member_epoch < 0 and member_id is None):
            return ErrorCode.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is not None:
            return ErrorCode.NONE
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE


def _new_member_id() -> str:
    # Kafka's Uuid.randomUuid().toString(): url-safe base64 without padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
