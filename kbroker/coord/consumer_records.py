"""The KIP-848 consumer-group records of `__consumer_offsets`: a group to records and back.

The byte layout is Kafka 4.3's, generated from the group-coordinator record specs
(`kbroker.protocol.coordinator_records`): keys are an int16 record type and the key struct (version
0), values an int16 version (0) and the value struct (flexible). This module maps a `ConsumerGroup`
to those records (what the coordinator writes) and replays them into one (loading). Record types
(Kafka's group-coordinator `*Key.json` / `*Value.json` apiKeys):

- 3 `ConsumerGroupMetadata` {group} -> {Epoch}
- 4 `ConsumerGroupPartitionMetadata` {group}: no longer written since Kafka 4.1 (KIP-1101 replaced it
  by a metadata hash); read and ignored.
- 5 `ConsumerGroupMemberMetadata` {group, member} -> {InstanceId?, RackId?, ClientId, ClientHost,
  SubscribedTopicNames, SubscribedTopicRegex?, RebalanceTimeoutMs, ServerAssignor?,
  ClassicMemberMetadata? (tag 0: SessionTimeoutMs, SupportedProtocols[Name, Metadata]) for a member
  using the classic protocol}
- 6 `ConsumerGroupTargetAssignmentMetadata` {group} -> {AssignmentEpoch, AssignmentTimestamp (tag 0)}
- 7 `ConsumerGroupTargetAssignmentMember` {group, member} -> {TopicPartitions[TopicId, Partitions]}
- 8 `ConsumerGroupCurrentMemberAssignment` {group, member} -> {MemberEpoch, PreviousMemberEpoch, State,
  AssignedPartitions (with AssignmentEpochs, tag 0, KIP-1251), PartitionsPendingRevocation}

A tombstone (null value) deletes. Sans-IO: imports only kbroker.protocol.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kbroker.coord.assignors import Assignment
from kbroker.coord.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records import GroupCoordinatorRecordType as RecordType
from kbroker.protocol.coordinator_records.consumer_group_current_member_assignment import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
)
from kbroker.protocol.coordinator_records.consumer_group_member_metadata import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
)
from kbroker.protocol.coordinator_records.consumer_group_metadata import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
)
from kbroker.protocol.coordinator_records.consumer_group_partition_metadata import (
    ConsumerGroupPartitionMetadataKey,
)
from kbroker.protocol.coordinator_records.consumer_group_target_assignment_member import (
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
)
from kbroker.protocol.coordinator_records.consumer_group_target_assignment_metadata import (
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from kbroker.protocol.coordinator_records.serde import (
    decode_coordinator_value,
    encode_coordinator_key,
    encode_coordinator_value,
    record_type_of,
)

GROUP_METADATA = int(RecordType.CONSUMER_GROUP_METADATA)
PARTITION_METADATA = int(RecordType.CONSUMER_GROUP_PARTITION_METADATA)
MEMBER_METADATA = int(RecordType.CONSUMER_GROUP_MEMBER_METADATA)
TARGET_ASSIGNMENT_METADATA = int(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)
TARGET_ASSIGNMENT_MEMBER = int(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER)
CURRENT_MEMBER_ASSIGNMENT = int(RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)
CONSUMER_RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
GROUP_KEYS = (GROUP_METADATA, PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA)

# The generated key class of each record type (group keys take the group id, the others a member id too).
_KEYS: dict[int, Any] = {
    GROUP_METADATA: ConsumerGroupMetadataKey,
    PARTITION_METADATA: ConsumerGroupPartitionMetadataKey,
    MEMBER_METADATA: ConsumerGroupMemberMetadataKey,
    TARGET_ASSIGNMENT_METADATA: ConsumerGroupTargetAssignmentMetadataKey,
    TARGET_ASSIGNMENT_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
    CURRENT_MEMBER_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentKey,
}

# Kafka's MemberState values.
STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1,
               MemberState.UNRELEASED_PARTITIONS: 2, MemberState.UNKNOWN: 127}
STATES = {v: k for k, v in STATE_CODES.items()}

_ClassicMetadata = ConsumerGroupMemberMetadataValue.ClassicMemberMetadata
_ClassicProtocol = ConsumerGroupMemberMetadataValue.ClassicProtocol
_TargetPartitions = ConsumerGroupTargetAssignmentMemberValue.TopicPartition
_CurrentPartitions = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions


@dataclass(slots=True, frozen=True)
class ConsumerGroupRecordKey:
    """The key of any consumer-group record: its type, group and (member records) member."""

    record_type: int
    group: str
    member: str | None = None


def encode_key(record_type: int, group: str, member: str | None = None) -> bytes:
    cls = _KEYS[record_type]
    key = cls(group_id=group) if record_type in GROUP_KEYS else cls(group_id=group, member_id=member or "")
    return encode_coordinator_key(key)


def consumer_key(record_type: int, key: Any) -> ConsumerGroupRecordKey:
    """A decoded generated key of a consumer-group record type."""
    return ConsumerGroupRecordKey(record_type, key.group_id,
                                  None if record_type in GROUP_KEYS else key.member_id)


def _target_partitions(a: Assignment) -> list[Any]:
    return [_TargetPartitions(topic_id=tid, partitions=sorted(ps)) for tid, ps in sorted(a.items()) if ps]


def _current_partitions(a: Assignment, epochs: dict[tuple[uuid.UUID, int], int]) -> list[Any]:
    """With each topic's AssignmentEpochs (tag 0, KIP-1251) aligned with its partitions."""
    out = []
    for tid, ps in sorted(a.items()):
        if not ps:
            continue
        parts = sorted(ps)
        out.append(_CurrentPartitions(topic_id=tid, partitions=parts,
                                      assignment_epochs=[epochs.get((tid, p), 0) for p in parts]))
    return out


def _assignment(items: list[Any], epochs: dict[tuple[uuid.UUID, int], int] | None = None) -> Assignment:
    out: Assignment = {}
    for tp in items:
        out[tp.topic_id] = set(tp.partitions)
        if epochs is not None and tp.assignment_epochs and len(tp.assignment_epochs) == len(tp.partitions):
            for p, e in zip(tp.partitions, tp.assignment_epochs, strict=True):
                epochs[(tp.topic_id, p)] = e
    return out


def group_metadata_value(group: ConsumerGroup) -> bytes:
    return encode_coordinator_value(ConsumerGroupMetadataValue(epoch=group.group_epoch), 0)


def member_metadata_value(m: ConsumerGroupMember) -> bytes:
    classic = None
    if m.classic is not None:
        # A member using the classic protocol: its session timeout and JoinGroup protocols.
        classic = _ClassicMetadata(session_timeout_ms=m.classic.session_timeout_ms, supported_protocols=[
            _ClassicProtocol(name=name, metadata=meta) for name, meta in m.classic.supported_protocols])
    return encode_coordinator_value(ConsumerGroupMemberMetadataValue(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
        classic_member_metadata=classic), 0)


def target_metadata_value(group: ConsumerGroup) -> bytes:
    return encode_coordinator_value(ConsumerGroupTargetAssignmentMetadataValue(
        assignment_epoch=group.target_assignment_epoch,
        assignment_timestamp=group.target_assignment_timestamp_ms), 0)


def target_member_value(a: Assignment) -> bytes:
    return encode_coordinator_value(ConsumerGroupTargetAssignmentMemberValue(topic_partitions=_target_partitions(a)), 0)


def current_assignment_value(m: ConsumerGroupMember) -> bytes:
    return encode_coordinator_value(ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=STATE_CODES[m.state],
        assigned_partitions=_current_partitions(m.assigned, m.assignment_epochs),
        partitions_pending_revocation=_current_partitions(m.pending_revocation, m.assignment_epochs)), 0)


def replay(groups: dict[str, ConsumerGroup], key: ConsumerGroupRecordKey, value: bytes | memoryview | None) -> None:
    """Apply one consumer-group record to the image being loaded (Kafka's replay)."""
    rt, gid = key.record_type, key.group
    if rt == PARTITION_METADATA:
        return
    group = groups.get(gid)
    if value is None:
        if group is None:
            return
        if rt == GROUP_METADATA:
            del groups[gid]
        elif rt == MEMBER_METADATA and key.member is not None:
            group.members.pop(key.member, None)
        elif rt == TARGET_ASSIGNMENT_MEMBER and key.member is not None:
            group.target_assignment.pop(key.member, None)
        return
    if group is None:
        group = groups[gid] = ConsumerGroup(gid)
    v, _version = decode_coordinator_value(Coordinator.GROUP, rt, value)
    if isinstance(v, ConsumerGroupMetadataValue):
        group.group_epoch = v.epoch
    elif isinstance(v, ConsumerGroupTargetAssignmentMetadataValue):
        group.target_assignment_epoch = v.assignment_epoch
    elif isinstance(v, ConsumerGroupTargetAssignmentMemberValue) and key.member is not None:
        group.target_assignment[key.member] = _assignment(v.topic_partitions)
    elif key.member is not None:
        member = group.members.get(key.member)
        if member is None:
            member = group.members[key.member] = ConsumerGroupMember(key.member)
        if isinstance(v, ConsumerGroupMemberMetadataValue):
            member.instance_id, member.rack_id = v.instance_id, v.rack_id
            member.client_id, member.client_host = v.client_id, v.client_host
            member.subscribed_topic_names = list(v.subscribed_topic_names)
            member.subscribed_topic_regex = v.subscribed_topic_regex
            member.rebalance_timeout_ms = v.rebalance_timeout_ms
            member.server_assignor = v.server_assignor
            c = v.classic_member_metadata
            # Kafka writes a consumer-protocol member's ClassicMemberMetadata as an explicit null; an
            # absent tag reads as the field's default, an empty struct (kbroker wrote records without
            # the tag before it used the generated codecs): no protocols means not a classic member.
            member.classic = None if c is None or not c.supported_protocols else ClassicMemberMetadata(
                c.session_timeout_ms, [(p.name, bytes(p.metadata)) for p in c.supported_protocols])
        elif isinstance(v, ConsumerGroupCurrentMemberAssignmentValue):
            member.member_epoch, member.previous_member_epoch = v.member_epoch, v.previous_member_epoch
            member.state = STATES.get(v.state, MemberState.UNKNOWN)
            member.assignment_epochs = {}
            member.assigned = _assignment(v.assigned_partitions, member.assignment_epochs)
            member.pending_revocation = _assignment(v.partitions_pending_revocation, member.assignment_epochs)


def group_records(group: ConsumerGroup) -> dict[bytes, bytes]:
    """Every record describing `group` now (key -> value), in Kafka's write order."""
    gid = group.group_id
    out: dict[bytes, bytes] = {}
    for m in group.members.values():
        out[encode_key(MEMBER_METADATA, gid, m.member_id)] = member_metadata_value(m)
    out[encode_key(GROUP_METADATA, gid)] = group_metadata_value(group)
    for mid, a in group.target_assignment.items():
        out[encode_key(TARGET_ASSIGNMENT_MEMBER, gid, mid)] = target_member_value(a)
    out[encode_key(TARGET_ASSIGNMENT_METADATA, gid)] = target_metadata_value(group)
    for m in group.members.values():
        out[encode_key(CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id)] = current_assignment_value(m)
    return out


def tombstone_order(key: bytes) -> int:
    """Deletions are written members first (assignment, target, subscription), the group last."""
    return {CURRENT_MEMBER_ASSIGNMENT: 0, TARGET_ASSIGNMENT_MEMBER: 1, MEMBER_METADATA: 2,
            TARGET_ASSIGNMENT_METADATA: 3, PARTITION_METADATA: 4, GROUP_METADATA: 5}[record_type_of(key)]
