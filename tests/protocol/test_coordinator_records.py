"""Generated coordinator records (``kbroker.protocol.coordinator_records``) and their int16 framing.

1. Byte-exactness against the hand-written formats of ``kbroker/coord/`` (records.py,
   consumer_records.py), whose tests pin the bytes Kafka writes: for every record type coord writes
   today, the generated codec gives the same bytes for the same content and decodes coord's bytes
   back to that content.
2. Every record type of the three coordinators round-trips in every value version.
3. Malformed input raises the serde's errors, never anything else.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.coord import consumer_records as cr
from kbroker.coord import records as coord_records
from kbroker.coord.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from kbroker.protocol.coordinator_records import (
    COORDINATOR_RECORDS,
    Coordinator,
    GroupCoordinatorRecordType,
    ShareCoordinatorRecordType,
    TransactionCoordinatorRecordType,
)
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
from kbroker.protocol.coordinator_records.group_metadata import GroupMetadataKey, GroupMetadataValue
from kbroker.protocol.coordinator_records.legacy_offset_commit import LegacyOffsetCommitKey
from kbroker.protocol.coordinator_records.offset_commit import OffsetCommitKey, OffsetCommitValue
from kbroker.protocol.coordinator_records.serde import (
    CoordinatorRecord,
    CoordinatorRecordParseError,
    UnknownRecordTypeError,
    UnknownRecordVersionError,
    decode_coordinator_key,
    decode_coordinator_record,
    decode_coordinator_value,
    encode_coordinator_key,
    encode_coordinator_value,
    record_module,
)
from kbroker.protocol.coordinator_records.transaction_log import TransactionLogKey, TransactionLogValue
from tests.protocol.test_roundtrip import message_strategy

G = Coordinator.GROUP
T1 = uuid.UUID("6a1b6c0e-4c4f-4b8e-9d7c-0123456789ab")
T2 = uuid.UUID("00000000-0000-0000-0000-00000000002a")


def _kv(key: object, value: object | None, version: int | None = None) -> tuple[bytes, bytes | None]:
    return encode_coordinator_key(key), None if value is None else encode_coordinator_value(value, version)


# -- 1. the same bytes as kbroker/coord/ ---------------------------------------------------------------


def test_offset_commit_key_matches_coord() -> None:
    key = OffsetCommitKey(group="my-group", topic="orders", partition=7)
    raw = coord_records.encode_offset_commit_key("my-group", "orders", 7)
    assert encode_coordinator_key(key) == raw
    assert decode_coordinator_key(G, raw) == (GroupCoordinatorRecordType.OFFSET_COMMIT, key)
    # Type 0 (keys written by old brokers as "version 0") is LegacyOffsetCommitKey: the same layout.
    legacy = struct.pack(">h", 0) + raw[2:]
    record_type, old = decode_coordinator_key(G, legacy)
    assert record_type == GroupCoordinatorRecordType.LEGACY_OFFSET_COMMIT == 0
    assert old == LegacyOffsetCommitKey(group="my-group", topic="orders", partition=7)
    assert encode_coordinator_key(old) == legacy


def test_group_metadata_key_matches_coord() -> None:
    raw = coord_records.encode_group_metadata_key("grp")
    assert encode_coordinator_key(GroupMetadataKey(group="grp")) == raw
    assert decode_coordinator_key(G, raw) == (2, GroupMetadataKey(group="grp"))


@pytest.mark.parametrize(
    ("coord_value", "version", "generated"),
    [
        (
            coord_records.OffsetCommitValue(offset=1234, metadata="meta", commit_timestamp=1_700_000_000_000, leader_epoch=5),
            3,
            OffsetCommitValue(offset=1234, leader_epoch=5, metadata="meta", commit_timestamp=1_700_000_000_000),
        ),
        (
            coord_records.OffsetCommitValue(offset=99, metadata="", commit_timestamp=1000, expire_timestamp=61000),
            1,
            OffsetCommitValue(offset=99, metadata="", commit_timestamp=1000, expire_timestamp=61000),
        ),
    ],
    ids=["v3", "v1-expire-timestamp"],
)
def test_offset_commit_value_matches_coord(
    coord_value: coord_records.OffsetCommitValue, version: int, generated: OffsetCommitValue
) -> None:
    raw = coord_records.encode_offset_commit_value(coord_value)
    assert encode_coordinator_value(generated, version) == raw
    assert decode_coordinator_value(G, 1, raw) == (generated, version)


def test_offset_commit_value_versions_coord_reads() -> None:
    for version in (0, 4):
        value = OffsetCommitValue(offset=5, metadata="m", commit_timestamp=77, leader_epoch=2 if version else -1)
        raw = encode_coordinator_value(value, version)
        assert coord_records.decode_offset_commit_value(raw) == coord_records.OffsetCommitValue(
            offset=5, metadata="m", commit_timestamp=77, leader_epoch=value.leader_epoch, expire_timestamp=-1
        )


def _group_metadata(version: int) -> tuple[coord_records.GroupMetadataValue, GroupMetadataValue]:
    theirs = coord_records.GroupMetadataValue(
        protocol_type="consumer", generation=3, protocol="range", leader="m1", current_state_timestamp=555,
        members=[
            coord_records.MemberMetadata(member_id="m1", client_id="client", client_host="/127.0.0.1", rebalance_timeout=30000, session_timeout=10000, subscription=b"SUB", assignment=b"ASSIGN", group_instance_id="inst-1"),
            coord_records.MemberMetadata(member_id="m2", client_id="c2", client_host="/10.0.0.2", rebalance_timeout=45000, session_timeout=9000, subscription=b"", assignment=b"A", group_instance_id=None),
        ],
    )  # fmt: skip
    ours = GroupMetadataValue(
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="m1",
        current_state_timestamp=555,
        members=[
            GroupMetadataValue.MemberMetadata(
                member_id="m1", group_instance_id="inst-1", client_id="client", client_host="/127.0.0.1",
                rebalance_timeout=30000, session_timeout=10000, subscription=b"SUB", assignment=b"ASSIGN",
            ),
            GroupMetadataValue.MemberMetadata(
                member_id="m2", group_instance_id=None, client_id="c2", client_host="/10.0.0.2",
                rebalance_timeout=45000, session_timeout=9000, subscription=b"", assignment=b"A",
            ),
        ],
    )  # fmt: skip
    return theirs, ours


@pytest.mark.parametrize("version", [3, 4])
def test_group_metadata_value_matches_coord(version: int) -> None:
    theirs, ours = _group_metadata(version)
    raw = coord_records.encode_group_metadata_value(theirs, version)
    assert encode_coordinator_value(ours, version) == raw
    assert decode_coordinator_value(G, 2, raw) == (ours, version)


def test_empty_group_metadata_value_matches_coord() -> None:
    theirs = coord_records.GroupMetadataValue(protocol_type="consumer", generation=4, protocol=None, leader=None, current_state_timestamp=1, members=[])
    ours = GroupMetadataValue(protocol_type="consumer", generation=4, protocol=None, leader=None,
                              current_state_timestamp=1)  # fmt: skip
    raw = coord_records.encode_group_metadata_value(theirs)
    assert encode_coordinator_value(ours, 3) == raw
    assert decode_coordinator_value(G, 2, raw) == (ours, 3)


def test_consumer_group_keys_match_coord() -> None:
    cases = [
        (cr.GROUP_METADATA, None, ConsumerGroupMetadataKey(group_id="g")),
        (cr.PARTITION_METADATA, None, ConsumerGroupPartitionMetadataKey(group_id="g")),
        (cr.MEMBER_METADATA, "m", ConsumerGroupMemberMetadataKey(group_id="g", member_id="m")),
        (cr.TARGET_ASSIGNMENT_METADATA, None, ConsumerGroupTargetAssignmentMetadataKey(group_id="g")),
        (cr.TARGET_ASSIGNMENT_MEMBER, "m", ConsumerGroupTargetAssignmentMemberKey(group_id="g", member_id="m")),
        (cr.CURRENT_MEMBER_ASSIGNMENT, "m", ConsumerGroupCurrentMemberAssignmentKey(group_id="g", member_id="m")),
    ]
    for record_type, member, key in cases:
        raw = cr.encode_key(record_type, "g", member)
        assert encode_coordinator_key(key) == raw, record_type
        assert decode_coordinator_key(G, raw) == (record_type, key)


def _member(classic: ClassicMemberMetadata | None) -> ConsumerGroupMember:
    return ConsumerGroupMember(
        "m-1", instance_id="i-1", rack_id=None, client_id="cli", client_host="/1.2.3.4",
        rebalance_timeout_ms=45000, subscribed_topic_names=["a", "b"], subscribed_topic_regex=None,
        server_assignor="uniform", member_epoch=7, previous_member_epoch=6, state=MemberState.UNREVOKED_PARTITIONS,
        assigned={T1: {0, 2}, T2: {1}}, pending_revocation={T1: {3}},
        assignment_epochs={(T1, 0): 5, (T1, 2): 6, (T2, 1): 7, (T1, 3): 4}, classic=classic,
    )  # fmt: skip


def _member_value(classic: ConsumerGroupMemberMetadataValue.ClassicMemberMetadata | None) -> object:
    value = ConsumerGroupMemberMetadataValue(
        instance_id="i-1", rack_id=None, client_id="cli", client_host="/1.2.3.4", subscribed_topic_names=["a", "b"],
        subscribed_topic_regex=None, rebalance_timeout_ms=45000, server_assignor="uniform",
    )  # fmt: skip
    if classic is not None:
        value.classic_member_metadata = classic
    return value


def test_member_metadata_value_matches_coord() -> None:
    # A consumer-protocol member: coord sets ClassicMemberMetadata to null as Kafka does, written as
    # tag 0 with a lone 0 byte (see test_null_classic_member_metadata_is_a_lone_zero).
    raw = cr.member_metadata_value(_member(None))
    consumer_member = _member_value(None)
    consumer_member.classic_member_metadata = None  # type: ignore[attr-defined]
    assert encode_coordinator_value(consumer_member, 0) == raw
    assert decode_coordinator_value(G, 5, raw) == (consumer_member, 0)
    # A classic-protocol member: tag 0 holds the nullable struct (presence 1).
    classic = ClassicMemberMetadata(10000, [("range", b"\x00\x01sub"), ("roundrobin", b"")])
    ours = ConsumerGroupMemberMetadataValue.ClassicMemberMetadata(
        session_timeout_ms=10000,
        supported_protocols=[
            ConsumerGroupMemberMetadataValue.ClassicProtocol(name="range", metadata=b"\x00\x01sub"),
            ConsumerGroupMemberMetadataValue.ClassicProtocol(name="roundrobin", metadata=b""),
        ],
    )
    raw = cr.member_metadata_value(_member(classic))
    assert encode_coordinator_value(_member_value(ours), 0) == raw
    assert decode_coordinator_value(G, 5, raw) == (_member_value(ours), 0)


def test_null_classic_member_metadata_is_a_lone_zero() -> None:
    """Kafka's generated code writes a null tagged struct as tag, size 1, unsigned varint 0 (a present
    one as varint 1 then the struct); its reader takes 0 as null."""
    value = _member_value(None)
    value.classic_member_metadata = None  # type: ignore[attr-defined]
    raw = encode_coordinator_value(value, 0)
    assert raw.endswith(b"\x01\x00\x01\x00")
    back, _ = decode_coordinator_value(G, 5, raw)
    assert back.classic_member_metadata is None
    # coord's reader sees no classic member in it either.
    groups: dict[str, ConsumerGroup] = {}
    cr.replay(groups, cr.ConsumerGroupRecordKey(cr.MEMBER_METADATA, "g", "m-1"), raw)
    assert groups["g"].members["m-1"].classic is None and groups["g"].members["m-1"].client_id == "cli"


def _topic_partitions(cls: type, parts: dict[uuid.UUID, list[int]], epochs: dict[uuid.UUID, list[int]] | None) -> list:
    out = []
    for tid in sorted(parts):
        kwargs = {} if epochs is None else {"assignment_epochs": epochs[tid]}
        out.append(cls(topic_id=tid, partitions=parts[tid], **kwargs))
    return out


def test_consumer_group_values_match_coord() -> None:
    group = ConsumerGroup("g", group_epoch=7, target_assignment_epoch=6, target_assignment_timestamp_ms=1_750_000_000_123)
    raw = cr.group_metadata_value(group)
    assert encode_coordinator_value(ConsumerGroupMetadataValue(epoch=7), 0) == raw
    assert decode_coordinator_value(G, 3, raw) == (ConsumerGroupMetadataValue(epoch=7), 0)

    target_meta = ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=6, assignment_timestamp=1_750_000_000_123)
    raw = cr.target_metadata_value(group)
    assert encode_coordinator_value(target_meta, 0) == raw
    assert decode_coordinator_value(G, 6, raw) == (target_meta, 0)

    tp = ConsumerGroupTargetAssignmentMemberValue.TopicPartition
    target = ConsumerGroupTargetAssignmentMemberValue(
        topic_partitions=_topic_partitions(tp, {T1: [0, 2], T2: [1]}, None)
    )
    raw = cr.target_member_value({T1: {2, 0}, T2: {1}})
    assert encode_coordinator_value(target, 0) == raw
    assert decode_coordinator_value(G, 7, raw) == (target, 0)

    cp = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
    current = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=7,
        previous_member_epoch=6,
        state=cr.STATE_CODES[MemberState.UNREVOKED_PARTITIONS],
        assigned_partitions=_topic_partitions(cp, {T1: [0, 2], T2: [1]}, {T1: [5, 6], T2: [7]}),
        partitions_pending_revocation=_topic_partitions(cp, {T1: [3]}, {T1: [4]}),
    )
    raw = cr.current_assignment_value(_member(None))
    assert encode_coordinator_value(current, 0) == raw
    assert decode_coordinator_value(G, 8, raw) == (current, 0)


def test_tombstone_and_whole_record() -> None:
    key = ConsumerGroupMetadataKey(group_id="g")
    raw_key, _ = _kv(key, None)
    assert decode_coordinator_record(G, raw_key, None) == CoordinatorRecord(3, key, None, None)
    raw_key, raw_value = _kv(key, ConsumerGroupMetadataValue(epoch=3))
    assert raw_value is not None
    assert decode_coordinator_record(G, raw_key, raw_value) == CoordinatorRecord(
        3, key, ConsumerGroupMetadataValue(epoch=3), 0
    )


def test_transaction_log_record() -> None:
    """``__transaction_state``: type 0 is TransactionLog (v1 is flexible, with tagged producer ids)."""
    key = TransactionLogKey(transactional_id="tx-1")
    assert encode_coordinator_key(key) == struct.pack(">hh", 0, 4) + b"tx-1"
    value = TransactionLogValue(producer_id=42, producer_epoch=3, transaction_timeout_ms=60000, transaction_status=1,
                                transaction_last_update_timestamp_ms=5, transaction_start_timestamp_ms=4,
                                previous_producer_id=41, client_transaction_version=2)  # fmt: skip
    raw_key, raw_value = _kv(key, value, 1)
    assert raw_value is not None
    record = decode_coordinator_record(Coordinator.TRANSACTION, raw_key, raw_value)
    assert (record.record_type, record.key, record.value, record.value_version) == (0, key, value, 1)
    assert TransactionCoordinatorRecordType.TRANSACTION_LOG == 0
    assert ShareCoordinatorRecordType.SHARE_SNAPSHOT == 0 and ShareCoordinatorRecordType.SHARE_UPDATE == 1


# -- 2. every record type, every value version -----------------------------------------------------


def _cases() -> list[tuple[str, Coordinator, int, int]]:
    out = []
    for coordinator, by_type in COORDINATOR_RECORDS.items():
        for record_type, spec in by_type.items():
            for v in range(spec.value_min_version, spec.value_max_version + 1):
                out.append((f"{coordinator}-{spec.name}-v{v}", coordinator, record_type, v))
    return out


CASES = _cases()


def test_the_registries_cover_the_three_coordinators() -> None:
    assert sorted(COORDINATOR_RECORDS) == [Coordinator.GROUP, Coordinator.SHARE, Coordinator.TRANSACTION]
    # 9 (ShareGroupPartitionMetadata) and 18 (StreamsGroupPartitionMetadata) are gone from Kafka 4.3.
    assert sorted(COORDINATOR_RECORDS[G]) == sorted(set(range(24)) - {9, 18})
    assert GroupCoordinatorRecordType.STREAMS_GROUP_TOPOLOGY == 23


@pytest.mark.parametrize(("case_id", "coordinator", "record_type", "version"), CASES, ids=[c[0] for c in CASES])
@settings(max_examples=5, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_record_round_trips(
    data: st.DataObject, case_id: str, coordinator: Coordinator, record_type: int, version: int
) -> None:
    module = record_module(coordinator, record_type)
    key = data.draw(message_strategy(module.KEY_CLASS, 0, False))
    flexible = module.VALUE_FLEXIBLE_VERSIONS is not None and module.VALUE_FLEXIBLE_VERSIONS[0] <= version
    value = data.draw(message_strategy(module.VALUE_CLASS, version, flexible))
    raw_key, raw_value = _kv(key, value, version)
    assert raw_value is not None
    record = decode_coordinator_record(coordinator, raw_key, raw_value)
    assert record == CoordinatorRecord(record_type, key, value, version), case_id


# -- 3. malformed input ------------------------------------------------------------------------------


def test_unknown_types_and_versions() -> None:
    with pytest.raises(UnknownRecordTypeError) as err:
        decode_coordinator_key(G, struct.pack(">h", 99) + b"\x00\x01g")
    assert err.value.record_type == 99
    with pytest.raises(UnknownRecordTypeError):
        decode_coordinator_key(Coordinator.TRANSACTION, struct.pack(">h", 1) + b"\x00\x01g")
    with pytest.raises(UnknownRecordVersionError):
        decode_coordinator_value(G, 1, struct.pack(">h", 5) + bytes(30))


@pytest.mark.parametrize(
    "raw", [b"", b"\x00", struct.pack(">h", 1) + b"\x00\x05ab", struct.pack(">h", 2) + b"\xff\xff"]
)
def test_truncated_or_corrupt_keys_raise_the_parse_error(raw: bytes) -> None:
    with pytest.raises(CoordinatorRecordParseError):
        decode_coordinator_key(G, raw)


@given(st.binary(max_size=40), st.integers(0, 23))
@settings(max_examples=300, deadline=None, database=None)
def test_random_values_never_escape_the_parse_error(raw: bytes, record_type: int) -> None:
    try:
        decode_coordinator_value(G, record_type, raw)
    except CoordinatorRecordParseError:
        pass


def test_encoding_checks_its_input() -> None:
    with pytest.raises(ValueError):
        encode_coordinator_key(OffsetCommitValue())
    with pytest.raises(ValueError):
        encode_coordinator_value(OffsetCommitKey())
    with pytest.raises(ValueError):
        encode_coordinator_value(OffsetCommitValue(), 9)
    with pytest.raises(ValueError):
        encode_coordinator_key(object())
