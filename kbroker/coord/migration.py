"""Online migration between the classic and the consumer group protocols (KIP-848 upgrade/downgrade).

Kafka's `GroupMetadataManager` conversion paths, under `group.consumer.migration.policy`:

- upgrade: a ConsumerGroupHeartbeat joining a non-empty classic group of protocol type `consumer`
  converts it to a consumer group. Every classic member becomes a consumer-group member carrying
  its classic metadata (session timeout, supported protocols), its subscription (from its
  ConsumerProtocolSubscription) and its current assignment (from its ConsumerProtocolAssignment);
  member epochs, group epoch and target epoch are the classic generation. Requests waiting in
  JoinGroup/SyncGroup are answered REBALANCE_IN_PROGRESS: those members rejoin the consumer group.
- classic members inside a consumer group: JoinGroup is answered at once with the member epoch as
  generation (the rejoin is how a classic member acknowledges a revocation: its subscription's owned
  partitions), SyncGroup with the member's assignment, Heartbeat with REBALANCE_IN_PROGRESS while the
  member must revoke, lags behind the group epoch or can take freed partitions; LeaveGroup removes it.
  Its session timeout is its own; it is fenced if it does not rejoin or sync within its rebalance
  timeout.
- downgrade: when the last consumer-protocol member leaves (or is fenced) and classic members
  remain, the group is converted back to a classic group at the same generation and a rebalance
  starts (the members see REBALANCE_IN_PROGRESS and rejoin the classic group).

A part of `kbroker.coord.group_metadata_manager.GroupMetadataManager`. Must not import asyncio,
kbroker.net or kbroker.api.
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import TYPE_CHECKING

from kbroker.coord.assignors import Assignment
from kbroker.coord.config import heartbeat_key, map_append_error
from kbroker.coord.consumer_coordinator import rebalance_key
from kbroker.coord.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    copy_assignment,
    reconcile,
)
from kbroker.coord.group import (
    CONSUMER_PROTOCOL_TYPE,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    ClassicGroupMember,
    GroupState,
    JoinResult,
    SyncResult,
)
from kbroker.coord.modern_group_protocol import HeartbeatReject
from kbroker.coord.records import encode_group_metadata_key
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coord.group_metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def sync_timeout_key(group_id: str, member_id: str) -> str:
    return f"classic-sync-{group_id}-{member_id}"


def join_timeout_key(group_id: str, member_id: str) -> str:
    return f"classic-join-{group_id}-{member_id}"


# -- ConsumerProtocolSubscription / ConsumerProtocolAssignment ----------------------------------------


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(buf, pos)
    return buf[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


def decode_subscription(metadata: bytes) -> tuple[list[str], dict[str, set[int]]]:
    """(topics, owned partitions by topic name) of a ConsumerProtocolSubscription v0-v3.
    Raises ValueError when the bytes are not one."""
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        if version < 0:
            raise ValueError("negative version")
        (n,) = _I32.unpack_from(metadata, 2)
        pos, topics = 6, []
        for _ in range(n):
            name, pos = _read_str(metadata, pos)
            topics.append(name)
        (user_data,) = _I32.unpack_from(metadata, pos)
        pos += 4 + max(user_data, 0)
        owned: dict[str, set[int]] = {}
        if version >= 1 and pos < len(metadata):
            (n,) = _I32.unpack_from(metadata, pos)
            pos += 4
            for _ in range(n):
                name, pos = _read_str(metadata, pos)
                (count,) = _I32.unpack_from(metadata, pos)
                owned[name] = set(struct.unpack_from(f">{count}i", metadata, pos + 4))
                pos += 4 + 4 * count
        return topics, owned
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(str(exc)) from None


def decode_assignment(data: bytes) -> dict[str, set[int]]:
    """Partitions by topic name of a ConsumerProtocolAssignment (empty when absent or unreadable)."""
    try:
        if len(data) < 6:
            return {}
        (n,) = _I32.unpack_from(data, 2)
        pos, out = 6, {}
        for _ in range(n):
            name, pos = _read_str(data, pos)
            (count,) = _I32.unpack_from(data, pos)
            out[name] = set(struct.unpack_from(f">{count}i", data, pos + 4))
            pos += 4 + 4 * count
        return out
    except (struct.error, UnicodeDecodeError):
        return {}


def encode_assignment(partitions: dict[str, set[int]]) -> bytes:
    """ConsumerProtocolAssignment v0 (the layout every version shares), no user data."""
    out = bytearray(_I16.pack(0))
    out += _I32.pack(len(partitions))
    for name in sorted(partitions):
        raw = name.encode()
        ps = sorted(partitions[name])
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(ps)) + struct.pack(f">{len(ps)}i", *ps)
    out += _I32.pack(-1)
    return bytes(out)


class GroupMigration:
    """Online migration between the protocols for a GroupMetadataManager's groups."""

    def __init__(self, gm: GroupMetadataManager) -> None:
        self.gm = gm

    def _by_id(self, partitions: dict[str, set[int]]) -> Assignment:
        out: Assignment = {}
        for name, ps in partitions.items():
            info = self.gm.topics.topic(name) if self.gm.topics is not None else None
            if info is not None and ps:
                out[info.topic_id] = {p for p in ps if p < int(info.num_partitions)}
        return out

    def _by_name(self, a: Assignment) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for tid, ps in a.items():
            name = self.gm.consumer.topic_name(tid)
            if name is not None and ps:
                out[name] = set(ps)
        return out

    def upgrade_classic_group(self, classic: ClassicGroup) -> ConsumerGroup:
        """Convert a non-empty classic group for a joining consumer-protocol member (or refuse with
        Kafka's GROUP_ID_NOT_FOUND)."""
        gid = classic.group_id
        refuse = HeartbeatReject(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group")
        if not self.gm.config.upgrade_enabled or classic.state == GroupState.DEAD \
                or classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise refuse
        if len(classic.members) >= self.gm.config.consumer_max_size:
            raise HeartbeatReject(ErrorCode.GROUP_MAX_SIZE_REACHED,
                          f"The consumer group has reached its maximum capacity of "
                          f"{self.gm.config.consumer_max_size} members.")
        group = ConsumerGroup(gid, group_epoch=classic.generation_id,
                              target_assignment_epoch=classic.generation_id,
                              target_assignment_timestamp_ms=self.gm.time_ms(), state_timestamp_ms=self.gm.time_ms())
        for cm in classic.members.values():
            try:
                topics, _owned = decode_subscription(cm.metadata(classic.protocol_name) if classic.protocol_name
                                                     else cm.protocols[0][1])
            except (ValueError, IndexError):
                raise refuse from None
            member = ConsumerGroupMember(cm.member_id, instance_id=cm.group_instance_id, client_id=cm.client_id,
                                         client_host=cm.client_host, rebalance_timeout_ms=cm.rebalance_timeout_ms,
                                         subscribed_topic_names=sorted(set(topics)))
            member.classic = ClassicMemberMetadata(cm.session_timeout_ms, list(cm.protocols))
            member.member_epoch = member.previous_member_epoch = classic.generation_id
            group.add_member(member)
            assigned = self._by_id(decode_assignment(cm.assignment))
            # A partition claimed twice (a stale assignment) stays with its first claimant.
            assigned = {t: {p for p in ps if (t, p) not in group.partition_owner} for t, ps in assigned.items()}
            group.set_member_assignment(member, assigned, {})
            group.target_assignment[member.member_id] = copy_assignment(member.assigned)
        self.gm.consumer.refresh_subscribed_metadata(group)
        error = self.gm.writer(gid, [(encode_group_metadata_key(gid), None)])
        if error != ErrorCode.NONE:
            raise HeartbeatReject(map_append_error(error))
        # The classic group's timers and waiting requests go: its members rejoin the consumer group.
        for cm in list(classic.members.values()):
            self.gm.scheduler.cancel(heartbeat_key(gid, cm.member_id))
            join_cb, cm.await_join = cm.await_join, None
            sync_cb, cm.await_sync = cm.await_sync, None
            if join_cb is not None:
                join_cb(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, cm.member_id))
            if sync_cb is not None:
                sync_cb(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        for pending in classic.pending_members:
            self.gm.scheduler.cancel(heartbeat_key(gid, pending))
        for key in (f"join-{gid}", f"sync-{gid}"):
            self.gm.scheduler.cancel(key)
        del self.gm.groups[gid]
        self.gm.consumer_groups[gid] = group
        for member in group.members.values():
            self.gm.consumer.schedule_session(group, member)
        log.info("Classic group %s converted to a consumer group at epoch %d (online upgrade)", gid,
                 group.group_epoch)
        return group

    def classic_join_to_consumer_group(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, protocol_type: str,
        protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
        client_id: str, client_host: str, require_known_member_id: bool,
    ) -> JoinResult:
        gid = group.group_id
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        try:
            topics, owned_names = decode_subscription(protocols[0][1])
        except ValueError:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        member = group.members.get(member_id) if member_id else None
        bump = False
        if member is None and instance_id is not None:
            previous_id = group.static_members.get(instance_id)
            previous = group.members.get(previous_id) if previous_id is not None else None
            if previous is not None and previous.classic is not None:
                # KIP-345: a restarted static member takes over its place under a new member id.
                self.cancel_classic_timers(group, previous.member_id)
                member = group.replace_static_member(previous, member_id or f"{client_id}-{uuid.uuid4()}")
        if member is None:
            if member_id == UNKNOWN_MEMBER_ID and require_known_member_id and instance_id is None:
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, f"{client_id}-{uuid.uuid4()}")
            if len(group.members) >= self.gm.config.consumer_max_size:
                return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
            member = ConsumerGroupMember(member_id or f"{client_id}-{uuid.uuid4()}", instance_id=instance_id)
            group.add_member(member)
            bump = True
        elif member.classic is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        elif member.instance_id != instance_id:
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id)
        names = sorted(set(topics))
        if names != member.subscribed_topic_names:
            member.subscribed_topic_names = names
            bump = True
        member.classic = ClassicMemberMetadata(session_timeout_ms, list(protocols))
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        member.awaiting_rejoin = False
        self.gm.scheduler.cancel(join_timeout_key(gid, member.member_id))
        # Kafka's classicGroupJoinToConsumerGroup runs the consumer heartbeat's step: a new group epoch
        # (counted in consumer-group-rebalance-count, group-rebalance-count{protocol=consumer}) when the
        # member is new or changed its subscription or the subscribed topics changed, then a new
        # target assignment when the group epoch is ahead of it.
        self.gm.consumer.update_group_epoch_and_target_assignment(group, bump)
        was_unrevoked = member.state == MemberState.UNREVOKED_PARTITIONS
        # The rejoin is the classic member's acknowledgement: it owns what its subscription says.
        reconcile(group, member, self._by_id(owned_names))
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if not was_unrevoked:
                self.gm.consumer.schedule_rebalance_timeout(group, member)
        else:
            self.gm.scheduler.cancel(rebalance_key(gid, member.member_id))
        error = self.gm.consumer_persistence.persist_consumer_group(group)
        if error != ErrorCode.NONE:
            return JoinResult(map_append_error(error), member.member_id)
        self.gm.consumer.schedule_session(group, member)
        mid = member.member_id
        self.gm.scheduler.schedule(sync_timeout_key(gid, mid), rebalance_timeout_ms,
                                   lambda: self._on_classic_timeout(gid, mid, "it did not send SyncGroup in time"))
        return JoinResult(ErrorCode.NONE, mid, member.member_epoch, CONSUMER_PROTOCOL_TYPE, protocols[0][0], "")

    def _classic_member(self, group: ConsumerGroup, member_id: str,
                        instance_id: str | None) -> tuple[ErrorCode, ConsumerGroupMember | None]:
        if instance_id is not None:
            found = group.static_members.get(instance_id)
            if found is None:
                return ErrorCode.UNKNOWN_MEMBER_ID, None
            if found != member_id:
                return ErrorCode.FENCED_INSTANCE_ID, None
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        return ErrorCode.NONE, member

    def classic_sync_to_consumer_group(self, group: ConsumerGroup, generation_id: int, member_id: str,
                                       instance_id: str | None, protocol_type: str | None,
                                       protocol_name: str | None) -> SyncResult:
        error, member = self._classic_member(group, member_id, instance_id)
        if member is None or member.classic is None:
            return SyncResult(error)
        if generation_id != member.member_epoch:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        names = [n for n, _ in member.classic.supported_protocols]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
                (protocol_name is not None and protocol_name not in names):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        self.gm.scheduler.cancel(sync_timeout_key(group.group_id, member_id))
        self.gm.consumer.schedule_session(group, member)
        return SyncResult(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE, protocol_name or names[0],
                          encode_assignment(self._by_name(member.assigned)))

    def classic_heartbeat_to_consumer_group(self, group: ConsumerGroup, generation_id: int, member_id: str,
                                            instance_id: str | None) -> ErrorCode:
        error, member = self._classic_member(group, member_id, instance_id)
        if member is None:
            return error
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self.gm.consumer.schedule_session(group, member)
        if member.member_epoch < group.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS or \
                (member.state == MemberState.UNRELEASED_PARTITIONS and self._unreleased_now_free(group, member)):
            if not member.awaiting_rejoin:
                # Kafka's join timeout: a member told to rejoin that does not is fenced.
                member.awaiting_rejoin = True
                gid = group.group_id
                self.gm.scheduler.schedule(join_timeout_key(gid, member_id), member.rebalance_timeout_ms,
                                           lambda: self._on_classic_timeout(gid, member_id, "it did not rejoin in time"))
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    @staticmethod
    def _unreleased_now_free(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        target = group.target_assignment.get(member.member_id, {})
        return any(group.partition_owner.get((tid, p)) is None
                   for tid, ps in target.items() for p in ps if p not in member.assigned.get(tid, ()))

    def classic_leave_consumer_group(self, group: ConsumerGroup, member_id: str,
                                     instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
            member_id = group.static_members.get(instance_id, "")
        error, member = self._classic_member(group, member_id, instance_id)
        if member is None:
            return error
        self.gm.consumer.fence_member(group, member, "the classic member left the group")
        return ErrorCode.NONE

    def _on_classic_timeout(self, group_id: str, member_id: str, reason: str) -> None:
        group = self.gm.consumer_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and member is not None and member.classic is not None:
            self.gm.consumer.fence_member(group, member, reason)

    def cancel_classic_timers(self, group: ConsumerGroup, member_id: str) -> None:
        self.gm.consumer.cancel_member_timers(group, member_id)
        self.gm.scheduler.cancel(sync_timeout_key(group.group_id, member_id))
        self.gm.scheduler.cancel(join_timeout_key(group.group_id, member_id))

    def should_downgrade(self, group: ConsumerGroup, removed: ConsumerGroupMember) -> bool:
        return (removed.classic is None and self.gm.config.downgrade_enabled and bool(group.members)
                and all(m.classic is not None for m in group.members.values())
                and len(group.members) <= self.gm.config.max_size)

    def downgrade_to_classic_group(self, group: ConsumerGroup) -> ErrorCode:
        """The last consumer-protocol member is gone: the classic members make a classic group again,
        at the group epoch as generation, which rebalances at once."""
        gid = group.group_id
        classic = ClassicGroup(gid, state=GroupState.STABLE, state_timestamp_ms=self.gm.time_ms(),
                               protocol_type=CONSUMER_PROTOCOL_TYPE, generation_id=group.group_epoch)
        for m in group.members.values():
            assert m.classic is not None
            cm = ClassicGroupMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                    m.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE,
                                    list(m.classic.supported_protocols))
            cm.assignment = encode_assignment(self._by_name(m.assigned))
            classic.add(cm)
        classic.protocol_name = classic.select_protocol()
        error = self.gm.consumer_persistence.delete_consumer_group_records(gid)
        if error != ErrorCode.NONE:
            return error
        for m in group.members.values():
            self.cancel_classic_timers(group, m.member_id)
        del self.gm.consumer_groups[gid]
        self.gm.groups[gid] = classic
        error = self.gm.classic_persistence.store_group(classic)
        for cm in classic.members.values():
            self.gm.classic.schedule_heartbeat(classic, cm.member_id, cm.session_timeout_ms)
        log.info("Consumer group %s converted to a classic group at generation %d (online downgrade)", gid,
                 classic.generation_id)
        self.gm.classic.prepare_rebalance(classic, "the group was downgraded to the classic protocol")
        return error


__all__ = ["GroupMigration", "decode_subscription", "encode_assignment", "decode_assignment"]
