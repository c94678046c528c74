"""The offset and classic-group records of `__consumer_offsets`, on the generated codecs.

The byte layout is Kafka's, generated from the group-coordinator record specs
(`kbroker.protocol.coordinator_records`, framed by its `serde`: a key is an int16 record type and the
key struct, a value an int16 version and the value struct). This module only makes the group
coordinator's choices Kafka makes:

- `OffsetCommitKey` is written as record type 1 (type 0, LegacyOffsetCommit, has the same layout and
  is still read). `OffsetCommitValue` is written at v3, or v1 when the commit carried an explicit
  retention time (OffsetCommit v2-v4 `retention_time_ms` -> expire timestamp), as Kafka does.
- `GroupMetadataKey` is type 2; `GroupMetadataValue` is written at v3 for classic groups; a v0 value
  (no rebalance timeout) reads with the session timeout as rebalance timeout.
- Types 3-8 are the KIP-848 consumer-group records (`kbroker.coord.consumer_records`); share and
  streams group records (types 9+) and types this broker does not know are not ours to replay.

The in-memory offset image keeps the generated `OffsetCommitValue` objects as they are.
Sans-IO: imports only kbroker.protocol.
"""

from __future__ import annotations

from kbroker.coord.consumer_records import CONSUMER_RECORD_TYPES, ConsumerGroupRecordKey, consumer_key
from kbroker.coord.share_records import SHARE_RECORD_TYPES, ShareGroupRecordKey, share_key
from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records import GroupCoordinatorRecordType as RecordType
from kbroker.protocol.coordinator_records.group_metadata import GroupMetadataKey, GroupMetadataValue
from kbroker.protocol.coordinator_records.legacy_offset_commit import LegacyOffsetCommitKey
from kbroker.protocol.coordinator_records.offset_commit import OffsetCommitKey, OffsetCommitValue
from kbroker.protocol.coordinator_records.serde import (
    CoordinatorRecordParseError,
    UnknownRecordTypeError,
    decode_coordinator_key,
    decode_coordinator_value,
    encode_coordinator_key,
    encode_coordinator_value,
)

MemberMetadata = GroupMetadataValue.MemberMetadata
GROUP_METADATA_VALUE_VERSION = 3


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return encode_coordinator_key(OffsetCommitKey(group=group, topic=topic, partition=partition))


def encode_group_metadata_key(group: str) -> bytes:
    return encode_coordinator_key(GroupMetadataKey(group=group))


def decode_key(data: bytes | memoryview
               ) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupRecordKey | ShareGroupRecordKey | None:
    """The key of a `__consumer_offsets` record: an `OffsetCommitKey` (a LegacyOffsetCommitKey reads as
    one), a `GroupMetadataKey`, a consumer-group `ConsumerGroupRecordKey` or a share-group
    `ShareGroupRecordKey`. None for the types this coordinator does not replay (streams groups; unknown
    types are skipped, as Kafka's
    loader does). A malformed key raises `CoordinatorRecordParseError`."""
    try:
        record_type, key = decode_coordinator_key(Coordinator.GROUP, data)
    except UnknownRecordTypeError:
        return None
    if isinstance(key, OffsetCommitKey | GroupMetadataKey):
        return key
    if isinstance(key, LegacyOffsetCommitKey):
        return OffsetCommitKey(group=key.group, topic=key.topic, partition=key.partition)
    if record_type in CONSUMER_RECORD_TYPES:
        return consumer_key(record_type, key)
    if record_type in SHARE_RECORD_TYPES:
        return share_key(record_type, key)
    return None


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Kafka's choice of version: v1 when an expire timestamp is set, else v3."""
    return encode_coordinator_value(value, 1 if value.expire_timestamp >= 0 else 3)


def decode_offset_commit_value(data: bytes | memoryview) -> OffsetCommitValue:
    value, _version = decode_coordinator_value(Coordinator.GROUP, RecordType.OFFSET_COMMIT, data)
    assert isinstance(value, OffsetCommitValue)
    return value


def encode_group_metadata_value(value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    return encode_coordinator_value(value, version)


def decode_group_metadata_value(data: bytes | memoryview) -> GroupMetadataValue:
    value, version = decode_coordinator_value(Coordinator.GROUP, RecordType.GROUP_METADATA, data)
    assert isinstance(value, GroupMetadataValue)
    if version == 0:
        # v0 has no rebalance timeout: Kafka uses the session timeout.
        for m in value.members:
            m.rebalance_timeout = m.session_timeout
    return value


__all__ = ["CONSUMER_RECORD_TYPES", "CoordinatorRecordParseError", "GroupMetadataKey", "GroupMetadataValue",
           "MemberMetadata", "OffsetCommitKey", "OffsetCommitValue", "RecordType", "decode_group_metadata_value",
           "decode_key", "decode_offset_commit_value", "encode_group_metadata_key", "encode_group_metadata_value",
           "encode_offset_commit_key", "encode_offset_commit_value"]
