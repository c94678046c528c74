"""The KIP-848 consumer-group records of `__consumer_offsets`, in Kafka 4.3's byte layout.

Keys are an int16 record type followed by the key struct (version 0, not flexible: int16-length
strings); values an int16 version (0) followed by the value struct (flexible: compact strings and
arrays, tagged fields). Record types (Kafka's group-coordinator `*Key.json` / `*Value.json` apiKeys):

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

A tombstone (null value) deletes. Sans-IO: imports only kbroker.protocol primitives.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from kbroker.coord.assignors import Assignment
from kbroker.coord.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from kbroker.protocol.types import (
    read_compact_nullable_string,
    read_compact_string,
    read_string,
    read_tag_section,
    write_compact_nullable_string,
    write_compact_string,
    write_string,
    write_uvarint,
)
from kbroker.protocol.varint import read_unsigned_varint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_RECORD_TYPES = frozenset(range(3, 9))
GROUP_KEYS = (GROUP_METADATA, PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA)

# Kafka's MemberState values.
STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1,
               MemberState.UNRELEASED_PARTITIONS: 2, MemberState.UNKNOWN: 127}
STATES = {v: k for k, v in STATE_CODES.items()}


@dataclass(slots=True, frozen=True)
class ConsumerGroupRecordKey:
    record_type: int
    group: str
    member: str | None = None


def encode_key(record_type: int, group: str, member: str | None = None) -> bytes:
    out = bytearray(_I16.pack(record_type))
    write_string(out, group)
    if record_type not in GROUP_KEYS:
        write_string(out, member or "")
    return bytes(out)


def decode_consumer_key(record_type: int, buf: memoryview) -> ConsumerGroupRecordKey:
    group, pos = read_string(buf, 2)
    member = None
    if record_type not in GROUP_KEYS:
        member, _ = read_string(buf, pos)
    return ConsumerGroupRecordKey(record_type, group, member)


def _value_header(out: bytearray) -> None:
    out += _I16.pack(0)


def _write_assignment(out: bytearray, a: Assignment, epochs: dict[tuple[uuid.UUID, int], int] | None = None) -> None:
    """[]TopicPartitions; with `epochs`, each entry carries its AssignmentEpochs (tag 0, KIP-1251)
    aligned with its partitions."""
    items = sorted((t, sorted(ps)) for t, ps in a.items() if ps)
    write_uvarint(out, len(items) + 1)
    for tid, parts in items:
        out += tid.bytes
        write_uvarint(out, len(parts) + 1)
        out += struct.pack(f">{len(parts)}i", *parts)
        if epochs is None:
            out += b"\x00"
            continue
        tag = bytearray()
        write_uvarint(tag, len(parts) + 1)
        tag += struct.pack(f">{len(parts)}i", *(epochs.get((tid, p), 0) for p in parts))
        out += b"\x01\x00"
        write_uvarint(out, len(tag))
        out += tag


def _read_assignment(buf: memoryview, pos: int,
                     epochs: dict[tuple[uuid.UUID, int], int] | None = None) -> tuple[Assignment, int]:
    n, pos = read_unsigned_varint(buf, pos)
    out: Assignment = {}
    for _ in range(max(n - 1, 0)):
        tid = uuid.UUID(bytes=bytes(buf[pos : pos + 16]))
        count, pos = read_unsigned_varint(buf, pos + 16)
        count = max(count - 1, 0)
        parts = struct.unpack_from(f">{count}i", buf, pos)
        out[tid] = set(parts)
        tags: dict[int, bytes] = {}
        pos = read_tag_section(buf, pos + 4 * count, tags)
        raw = tags.get(0)
        if epochs is not None and raw:
            m, at = read_unsigned_varint(memoryview(raw), 0)
            if m - 1 == count:
                for p, e in zip(parts, struct.unpack_from(f">{count}i", raw, at), strict=True):
                    epochs[(tid, p)] = e
    return out, pos


def group_metadata_value(group: ConsumerGroup) -> bytes:
    out = bytearray()
    _value_header(out)
    out += _I32.pack(group.group_epoch)
    out += b"\x00"
    return bytes(out)


def member_metadata_value(m: ConsumerGroupMember) -> bytes:
    out = bytearray()
    _value_header(out)
    write_compact_nullable_string(out, m.instance_id)
    write_compact_nullable_string(out, m.rack_id)
    write_compact_string(out, m.client_id)
    write_compact_string(out, m.client_host)
    write_uvarint(out, len(m.subscribed_topic_names) + 1)
    for name in m.subscribed_topic_names:
        write_compact_string(out, name)
    write_compact_nullable_string(out, m.subscribed_topic_regex)
    out += _I32.pack(m.rebalance_timeout_ms)
    write_compact_nullable_string(out, m.server_assignor)
    if m.classic is None:
        out += b"\x00"
        return bytes(out)
    # ClassicMemberMetadata (tag 0), a nullable struct: presence byte 1, SessionTimeoutMs,
    # SupportedProtocols[Name, Metadata] (the bytes Kafka 4.3.1 writes for a classic member).
    tag = bytearray(b"\x01" + _I32.pack(m.classic.session_timeout_ms))
    write_uvarint(tag, len(m.classic.supported_protocols) + 1)
    for name, meta in m.classic.supported_protocols:
        write_compact_string(tag, name)
        write_uvarint(tag, len(meta) + 1)
        tag += meta
        tag += b"\x00"
    tag += b"\x00"
    out += b"\x01\x00"
    write_uvarint(out, len(tag))
    out += tag
    return bytes(out)


def _read_classic(raw: bytes) -> ClassicMemberMetadata | None:
    """Tag 0 of a member record: a presence byte (1: present; Kafka writes a lone 0 for a member
    using the consumer protocol), then the struct."""
    if len(raw) < 5 or raw[0] != 1:
        return None
    buf = memoryview(raw)
    (session_timeout_ms,) = _I32.unpack_from(buf, 1)
    n, pos = read_unsigned_varint(buf, 5)
    protocols = []
    for _ in range(max(n - 1, 0)):
        name, pos = read_compact_string(buf, pos)
        size, pos = read_unsigned_varint(buf, pos)
        meta = bytes(buf[pos : pos + size - 1])
        pos = read_tag_section(buf, pos + size - 1, {})
        protocols.append((name, meta))
    return ClassicMemberMetadata(session_timeout_ms, protocols)


def target_metadata_value(group: ConsumerGroup) -> bytes:
    out = bytearray()
    _value_header(out)
    out += _I32.pack(group.target_assignment_epoch)
    # AssignmentTimestamp (tag 0, Kafka 4.3, KIP-1263)
    out += b"\x01\x00\x08" + _I64.pack(group.target_assignment_timestamp_ms)
    return bytes(out)


def target_member_value(a: Assignment) -> bytes:
    out = bytearray()
    _value_header(out)
    _write_assignment(out, a)
    out += b"\x00"
    return bytes(out)


def current_assignment_value(m: ConsumerGroupMember) -> bytes:
    out = bytearray()
    _value_header(out)
    out += _I32.pack(m.member_epoch)
    out += _I32.pack(m.previous_member_epoch)
    out += _I8.pack(STATE_CODES[m.state])
    _write_assignment(out, m.assigned, m.assignment_epochs)
    _write_assignment(out, m.pending_revocation, m.assignment_epochs)
    out += b"\x00"
    return bytes(out)


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
    buf = memoryview(value)
    pos = 2  # int16 version 0
    if rt == GROUP_METADATA:
        (group.group_epoch,) = _I32.unpack_from(buf, pos)
    elif rt == TARGET_ASSIGNMENT_METADATA:
        (group.target_assignment_epoch,) = _I32.unpack_from(buf, pos)
    elif rt == TARGET_ASSIGNMENT_MEMBER and key.member is not None:
        group.target_assignment[key.member], _ = _read_assignment(buf, pos)
    elif key.member is not None:
        member = group.members.get(key.member)
        if member is None:
            member = group.members[key.member] = ConsumerGroupMember(key.member)
        if rt == MEMBER_METADATA:
            member.instance_id, pos = read_compact_nullable_string(buf, pos)
            member.rack_id, pos = read_compact_nullable_string(buf, pos)
            member.client_id, pos = read_compact_string(buf, pos)
            member.client_host, pos = read_compact_string(buf, pos)
            n, pos = read_unsigned_varint(buf, pos)
            names = []
            for _ in range(max(n - 1, 0)):
                name, pos = read_compact_string(buf, pos)
                names.append(name)
            member.subscribed_topic_names = names
            member.subscribed_topic_regex, pos = read_compact_nullable_string(buf, pos)
            (member.rebalance_timeout_ms,) = _I32.unpack_from(buf, pos)
            member.server_assignor, pos = read_compact_nullable_string(buf, pos + 4)
            tags: dict[int, bytes] = {}
            read_tag_section(buf, pos, tags)
            member.classic = _read_classic(tags[0]) if tags.get(0) else None
        elif rt == CURRENT_MEMBER_ASSIGNMENT:
            member.member_epoch, member.previous_member_epoch = struct.unpack_from(">ii", buf, pos)
            (state,) = _I8.unpack_from(buf, pos + 8)
            member.state = STATES.get(state, MemberState.UNKNOWN)
            member.assignment_epochs = {}
            member.assigned, pos = _read_assignment(buf, pos + 9, member.assignment_epochs)
            member.pending_revocation, pos = _read_assignment(buf, pos, member.assignment_epochs)


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
    (rt,) = _I16.unpack_from(key, 0)
    return {CURRENT_MEMBER_ASSIGNMENT: 0, TARGET_ASSIGNMENT_MEMBER: 1, MEMBER_METADATA: 2,
            TARGET_ASSIGNMENT_METADATA: 3, PARTITION_METADATA: 4, GROUP_METADATA: 5}[rt]
