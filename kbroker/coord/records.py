"""The records the group coordinator writes to `__consumer_offsets`, in Kafka's exact byte layout.

Every key and value is an int16 version followed by the struct of that version (Kafka's
`CoordinatorRecordSerde`). The key version doubles as the record type:

- 0 / 1: `OffsetCommitKey` {group, topic, partition}. Kafka writes 1.
- 2: `GroupMetadataKey` {group}.
- 3-8: KIP-848 consumer-group records (`kbroker.coord.consumer_records`).

Values (a tombstone is a null value):

- `OffsetCommitValue` v0-v4 {offset, leaderEpoch (v3+), metadata, commitTimestamp, expireTimestamp (v1
  only)}; v4 is flexible (compact strings, tag buffer). Kafka writes v3, or v1 when the commit carried an
  explicit retention time (OffsetCommit v2-v4 `retention_time_ms`), as we do.
- `GroupMetadataValue` v0-v4 {protocolType, generation, protocol?, leader?, currentStateTimestamp (v2+),
  members[memberId, groupInstanceId? (v3+), clientId, clientHost, rebalanceTimeout (v1+),
  sessionTimeout, subscription, assignment]}; v4 is flexible. Kafka writes v3 for classic groups.

Sans-IO: imports only kbroker.protocol primitives.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kbroker.coord.consumer_records import CONSUMER_RECORD_TYPES, ConsumerGroupRecordKey, decode_consumer_key
from kbroker.protocol.types import (
    read_bytes,
    read_compact_nullable_string,
    read_compact_string,
    read_nullable_string,
    read_string,
    read_tag_section,
    write_bytes,
    write_compact_nullable_string,
    write_compact_string,
    write_nullable_string,
    write_string,
    write_uvarint,
)
from kbroker.protocol.varint import read_unsigned_varint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2


class CoordinatorRecordError(ValueError):
    """A `__consumer_offsets` record we cannot parse (unknown version or truncated)."""


@dataclass(slots=True, frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(slots=True, frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadata] = field(default_factory=list)


# -- keys ------------------------------------------------------------------------------------------


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    out = bytearray(_I16.pack(OFFSET_COMMIT_KEY_VERSION))
    write_string(out, group)
    write_string(out, topic)
    out += _I32.pack(partition)
    return bytes(out)


def encode_group_metadata_key(group: str) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_KEY_VERSION))
    write_string(out, group)
    return bytes(out)


def decode_key(data: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupRecordKey | None:
    """The key of a `__consumer_offsets` record; None for record types this coordinator ignores
    (share and streams records: types 9 and up)."""
    buf = memoryview(data)
    try:
        (version,) = _I16.unpack_from(buf, 0)
        if version in (0, 1):
            group, pos = read_string(buf, 2)
            topic, pos = read_string(buf, pos)
            (partition,) = _I32.unpack_from(buf, pos)
            return OffsetCommitKey(group, topic, partition)
        if version == GROUP_METADATA_KEY_VERSION:
            group, _ = read_string(buf, 2)
            return GroupMetadataKey(group)
        if version in CONSUMER_RECORD_TYPES:
            return decode_consumer_key(version, buf)
    except Exception as exc:
        raise CoordinatorRecordError(f"cannot parse __consumer_offsets key: {exc}") from exc
    return None


# -- offset commit values --------------------------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Kafka's choice of version: v1 when an expire timestamp is set, else v3."""
    out = bytearray()
    if value.expire_timestamp >= 0:
        out += _I16.pack(1)
        out += _I64.pack(value.offset)
        write_string(out, value.metadata)
        out += _I64.pack(value.commit_timestamp)
        out += _I64.pack(value.expire_timestamp)
    else:
        out += _I16.pack(3)
        out += _I64.pack(value.offset)
        out += _I32.pack(value.leader_epoch)
        write_string(out, value.metadata)
        out += _I64.pack(value.commit_timestamp)
    return bytes(out)


def decode_offset_commit_value(data: bytes | memoryview) -> OffsetCommitValue:
    buf = memoryview(data)
    try:
        (version,) = _I16.unpack_from(buf, 0)
        if not 0 <= version <= 4:
            raise CoordinatorRecordError(f"unknown OffsetCommitValue version {version}")
        flexible = version >= 4
        (offset,) = _I64.unpack_from(buf, 2)
        pos = 10
        leader_epoch = -1
        if version >= 3:
            (leader_epoch,) = _I32.unpack_from(buf, pos)
            pos += 4
        metadata, pos = read_compact_string(buf, pos) if flexible else read_string(buf, pos)
        (commit_ts,) = _I64.unpack_from(buf, pos)
        pos += 8
        expire_ts = -1
        if version == 1:
            (expire_ts,) = _I64.unpack_from(buf, pos)
            pos += 8
        if flexible:
            read_tag_section(buf, pos, {})
    except CoordinatorRecordError:
        raise
    except Exception as exc:
        raise CoordinatorRecordError(f"cannot parse OffsetCommitValue: {exc}") from exc
    return OffsetCommitValue(offset, metadata, commit_ts, leader_epoch, expire_ts)


# -- group metadata values -------------------------------------------------------------------------

GROUP_METADATA_VALUE_VERSION = 3


def encode_group_metadata_value(value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue has no version {version}")
    flexible = version >= 4
    s = write_compact_string if flexible else write_string
    ns = write_compact_nullable_string if flexible else write_nullable_string
    out = bytearray(_I16.pack(version))
    s(out, value.protocol_type)
    out += _I32.pack(value.generation)
    ns(out, value.protocol)
    ns(out, value.leader)
    if version >= 2:
        out += _I64.pack(value.current_state_timestamp)
    n = len(value.members)
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)
    for m in value.members:
        s(out, m.member_id)
        if version >= 3:
            ns(out, m.group_instance_id)
        s(out, m.client_id)
        s(out, m.client_host)
        if version >= 1:
            out += _I32.pack(m.rebalance_timeout)
        out += _I32.pack(m.session_timeout)
        write_bytes(out, m.subscription, False, flexible)
        write_bytes(out, m.assignment, False, flexible)
        if flexible:
            out += b"\x00"
    if flexible:
        out += b"\x00"
    return bytes(out)


def decode_group_metadata_value(data: bytes | memoryview) -> GroupMetadataValue:
    buf = memoryview(data)
    try:
        (version,) = _I16.unpack_from(buf, 0)
        if not 0 <= version <= 4:
            raise CoordinatorRecordError(f"unknown GroupMetadataValue version {version}")
        flexible = version >= 4
        rs = read_compact_string if flexible else read_string
        rns = read_compact_nullable_string if flexible else read_nullable_string
        protocol_type, pos = rs(buf, 2)
        (generation,) = _I32.unpack_from(buf, pos)
        protocol, pos = rns(buf, pos + 4)
        leader, pos = rns(buf, pos)
        state_ts = -1
        if version >= 2:
            (state_ts,) = _I64.unpack_from(buf, pos)
            pos += 8
        if flexible:
            n, pos = read_unsigned_varint(buf, pos)
            n -= 1
        else:
            (n,) = _I32.unpack_from(buf, pos)
            pos += 4
        members = []
        for _ in range(max(n, 0)):
            member_id, pos = rs(buf, pos)
            instance_id = None
            if version >= 3:
                instance_id, pos = rns(buf, pos)
            client_id, pos = rs(buf, pos)
            client_host, pos = rs(buf, pos)
            rebalance_timeout = -1
            if version >= 1:
                (rebalance_timeout,) = _I32.unpack_from(buf, pos)
                pos += 4
            (session_timeout,) = _I32.unpack_from(buf, pos)
            subscription, pos = read_bytes(buf, pos + 4, False, flexible, True)
            assignment, pos = read_bytes(buf, pos, False, flexible, True)
            if flexible:
                pos = read_tag_section(buf, pos, {})
            members.append(MemberMetadata(member_id, client_id, client_host, rebalance_timeout,
                                          session_timeout, bytes(subscription), bytes(assignment), instance_id))
        if flexible:
            read_tag_section(buf, pos, {})
    except CoordinatorRecordError:
        raise
    except Exception as exc:
        raise CoordinatorRecordError(f"cannot parse GroupMetadataValue: {exc}") from exc
    if rebalance_default := [m for m in members if m.rebalance_timeout < 0]:
        # v0 has no rebalance timeout: Kafka uses the session timeout.
        for m in rebalance_default:
            m.rebalance_timeout = m.session_timeout
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, members)
