"""The KIP-932 share-group records of `__consumer_offsets`: a share group to records and back.

The byte layout is Kafka 4.3's, generated from the group-coordinator record specs
(`kbroker.protocol.coordinator_records`), written as Kafka's `GroupCoordinatorRecordHelpers` write
them for a share group:

- 10 `ShareGroupMemberMetadata` {group, member} -> {RackId?, ClientId, ClientHost, SubscribedTopicNames}
- 11 `ShareGroupMetadata` {group} -> {Epoch, MetadataHash}
- 12 `ShareGroupTargetAssignmentMetadata` {group} -> {AssignmentEpoch, AssignmentTimestamp}
- 13 `ShareGroupTargetAssignmentMember` {group, member} -> {TopicPartitions[TopicId, Partitions]}
- 14 `ShareGroupCurrentMemberAssignment` {group, member} -> {MemberEpoch, PreviousMemberEpoch, State (0,
  stable), AssignedPartitions}
- 15 `ShareGroupStatePartitionMetadata` {group}: which partitions the share coordinator initialized;
  not written (kbroker has no share coordinator yet), read and ignored.

MetadataHash (KIP-1101) is written as 0: kbroker re-reads the subscribed topics' metadata when a group
is loaded instead of comparing a hash. A tombstone (null value) deletes. Sans-IO: imports only
kbroker.protocol and the share group types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbroker.coord.assignors import Assignment
from kbroker.coord.share_group import ShareGroup, ShareGroupMember
from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records import GroupCoordinatorRecordType as RecordType
from kbroker.protocol.coordinator_records.serde import (
    decode_coordinator_value,
    encode_coordinator_key,
    encode_coordinator_value,
    record_type_of,
)
from kbroker.protocol.coordinator_records.share_group_current_member_assignment import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
)
from kbroker.protocol.coordinator_records.share_group_member_metadata import (
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
)
from kbroker.protocol.coordinator_records.share_group_metadata import (
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
)
from kbroker.protocol.coordinator_records.share_group_state_partition_metadata import (
    ShareGroupStatePartitionMetadataKey,
)
from kbroker.protocol.coordinator_records.share_group_target_assignment_member import (
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
)
from kbroker.protocol.coordinator_records.share_group_target_assignment_metadata import (
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

MEMBER_METADATA = int(RecordType.SHARE_GROUP_MEMBER_METADATA)
GROUP_METADATA = int(RecordType.SHARE_GROUP_METADATA)
TARGET_ASSIGNMENT_METADATA = int(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA)
TARGET_ASSIGNMENT_MEMBER = int(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER)
CURRENT_MEMBER_ASSIGNMENT = int(RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT)
STATE_PARTITION_METADATA = int(RecordType.SHARE_GROUP_STATE_PARTITION_METADATA)
SHARE_RECORD_TYPES = frozenset(range(MEMBER_METADATA, STATE_PARTITION_METADATA + 1))
GROUP_KEYS = (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA, STATE_PARTITION_METADATA)

_KEYS: dict[int, Any] = {
    MEMBER_METADATA: ShareGroupMemberMetadataKey,
    GROUP_METADATA: ShareGroupMetadataKey,
    TARGET_ASSIGNMENT_METADATA: ShareGroupTargetAssignmentMetadataKey,
    TARGET_ASSIGNMENT_MEMBER: ShareGroupTargetAssignmentMemberKey,
    CURRENT_MEMBER_ASSIGNMENT: ShareGroupCurrentMemberAssignmentKey,
    STATE_PARTITION_METADATA: ShareGroupStatePartitionMetadataKey,
}
_TargetPartitions = ShareGroupTargetAssignmentMemberValue.TopicPartition
_CurrentPartitions = ShareGroupCurrentMemberAssignmentValue.TopicPartitions


@dataclass(slots=True, frozen=True)
class ShareGroupRecordKey:
    """The key of any share-group record: its type, group and (member records) member."""

    record_type: int
    group: str
    member: str | None = None


def encode_key(record_type: int, group: str, member: str | None = None) -> bytes:
    cls = _KEYS[record_type]
    key = cls(group_id=group) if record_type in GROUP_KEYS else cls(group_id=group, member_id=member or "")
    return encode_coordinator_key(key)


def share_key(record_type: int, key: Any) -> ShareGroupRecordKey:
    return ShareGroupRecordKey(record_type, key.group_id, None if record_type in GROUP_KEYS else key.member_id)


def _partitions(cls: Any, a: Assignment) -> list[Any]:
    return [cls(topic_id=tid, partitions=sorted(ps)) for tid, ps in sorted(a.items()) if ps]


def _assignment(items: list[Any]) -> Assignment:
    return {tp.topic_id: set(tp.partitions) for tp in items}


def group_records(group: ShareGroup) -> dict[bytes, bytes]:
    """Every record describing `group` now (key -> value), in Kafka's write order."""
    gid = group.group_id
    out: dict[bytes, bytes] = {}
    for m in group.members.values():
        out[encode_key(MEMBER_METADATA, gid, m.member_id)] = _member_value(m)
    out[encode_key(GROUP_METADATA, gid)] = encode_coordinator_value(
        ShareGroupMetadataValue(epoch=group.group_epoch, metadata_hash=0), 0)
    for mid, a in group.target_assignment.items():
        out[encode_key(TARGET_ASSIGNMENT_MEMBER, gid, mid)] = encode_coordinator_value(
            ShareGroupTargetAssignmentMemberValue(topic_partitions=_partitions(_TargetPartitions, a)), 0)
    out[encode_key(TARGET_ASSIGNMENT_METADATA, gid)] = encode_coordinator_value(
        ShareGroupTargetAssignmentMetadataValue(assignment_epoch=group.target_assignment_epoch,
                                                assignment_timestamp=group.target_assignment_timestamp_ms), 0)
    for m in group.members.values():
        out[encode_key(CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id)] = encode_coordinator_value(
            ShareGroupCurrentMemberAssignmentValue(
                member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=0,
                assigned_partitions=_partitions(_CurrentPartitions, m.assigned)), 0)
    return out


def _member_value(m: ShareGroupMember) -> bytes:
    return encode_coordinator_value(ShareGroupMemberMetadataValue(
        rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names)), 0)


def tombstone_order(key: bytes) -> int:
    """Deletions are written members first (assignment, target, subscription), the group last."""
    return {CURRENT_MEMBER_ASSIGNMENT: 0, TARGET_ASSIGNMENT_MEMBER: 1, MEMBER_METADATA: 2,
            TARGET_ASSIGNMENT_METADATA: 3, STATE_PARTITION_METADATA: 4, GROUP_METADATA: 5}[record_type_of(key)]


def replay(groups: dict[str, ShareGroup], key: ShareGroupRecordKey, value: bytes | memoryview | None) -> None:
    """Apply one share-group record to the image being loaded (Kafka's replay)."""
    rt, gid = key.record_type, key.group
    if rt == STATE_PARTITION_METADATA:
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
        group = groups[gid] = ShareGroup(gid)
    v, _version = decode_coordinator_value(Coordinator.GROUP, rt, value)
    if isinstance(v, ShareGroupMetadataValue):
        group.group_epoch = v.epoch
    elif isinstance(v, ShareGroupTargetAssignmentMetadataValue):
        group.target_assignment_epoch = v.assignment_epoch
        group.target_assignment_timestamp_ms = v.assignment_timestamp
    elif isinstance(v, ShareGroupTargetAssignmentMemberValue) and key.member is not None:
        group.target_assignment[key.member] = _assignment(v.topic_partitions)
    elif key.member is not None:
        member = group.members.get(key.member)
        if member is None:
            member = group.members[key.member] = ShareGroupMember(key.member)
        if isinstance(v, ShareGroupMemberMetadataValue):
            member.rack_id, member.client_id, member.client_host = v.rack_id, v.client_id, v.client_host
            member.subscribed_topic_names = sorted(v.subscribed_topic_names)
        elif isinstance(v, ShareGroupCurrentMemberAssignmentValue):
            member.member_epoch, member.previous_member_epoch = v.member_epoch, v.previous_member_epoch
            member.assigned = _assignment(v.assigned_partitions)
