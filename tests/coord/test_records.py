"""`__consumer_offsets` record formats against bytes built by hand from Kafka's specs
(OffsetCommitKey/Value, GroupMetadataKey/Value in the group-coordinator module)."""

from __future__ import annotations

import struct

import pytest

from kbroker.coord.records import (
    CoordinatorRecordParseError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)


def s16(text: str) -> bytes:  # STRING: int16 length + UTF-8
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def ns16(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else s16(text)


def cs(text: str) -> bytes:  # COMPACT_STRING: uvarint(len + 1) (short strings: one byte)
    b = text.encode()
    return bytes([len(b) + 1]) + b


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_offset_commit_key_v1() -> None:
    expected = struct.pack(">h", 1) + s16("my-group") + s16("orders") + struct.pack(">i", 7)
    assert encode_offset_commit_key("my-group", "orders", 7) == expected
    assert decode_key(expected) == OffsetCommitKey(group="my-group", topic="orders", partition=7)
    # Version 0 keys (written by old brokers) have the same layout.
    assert decode_key(struct.pack(">h", 0) + expected[2:]) == OffsetCommitKey(group="my-group", topic="orders", partition=7)


def test_group_metadata_key_v2() -> None:
    expected = struct.pack(">h", 2) + s16("grp")
    assert encode_group_metadata_key("grp") == expected
    assert decode_key(expected) == GroupMetadataKey(group="grp")


def test_keys_of_other_record_types_are_ignored() -> None:
    # Types 3-8 are KIP-848 consumer-group records (tests/coord/test_consumer_group_records.py);
    # 9+ are share and streams group records: not ours to replay.
    assert decode_key(struct.pack(">h", 9) + s16("grp")) is None


def test_offset_commit_value_v3() -> None:
    expected = struct.pack(">hqi", 3, 1234, 5) + s16("meta") + struct.pack(">q", 1_700_000_000_000)
    value = OffsetCommitValue(offset=1234, metadata="meta", commit_timestamp=1_700_000_000_000, leader_epoch=5)
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_v1_with_expire_timestamp() -> None:
    expected = struct.pack(">hq", 1, 99) + s16("") + struct.pack(">qq", 1000, 61000)
    value = OffsetCommitValue(offset=99, metadata="", commit_timestamp=1000, leader_epoch=-1,
                              expire_timestamp=61000)
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_v0_and_v4() -> None:
    v0 = struct.pack(">hq", 0, 5) + s16("m") + struct.pack(">q", 77)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(offset=5, metadata="m", commit_timestamp=77)
    # v4 is flexible: compact string, then an empty tag buffer.
    v4 = struct.pack(">hqi", 4, 5, 2) + cs("m") + struct.pack(">q", 77) + b"\x00"
    assert decode_offset_commit_value(v4) == OffsetCommitValue(offset=5, metadata="m", commit_timestamp=77, leader_epoch=2)


def test_group_metadata_value_v3() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer", generation=3, protocol="range", leader="m1", current_state_timestamp=555,
        members=[MemberMetadata(member_id="m1", client_id="client", client_host="/127.0.0.1", rebalance_timeout=30000,
                                session_timeout=10000, subscription=b"SUB", assignment=b"ASSIGN",
                                group_instance_id="inst-1")],
    )
    expected = (
        struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 3) + ns16("range") + ns16("m1")
        + struct.pack(">q", 555) + struct.pack(">i", 1)
        + s16("m1") + ns16("inst-1") + s16("client") + s16("/127.0.0.1") + struct.pack(">ii", 30000, 10000)
        + b32(b"SUB") + b32(b"ASSIGN")
    )
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_empty_group_metadata_value() -> None:
    value = GroupMetadataValue(protocol_type="consumer", generation=4, protocol=None, leader=None, current_state_timestamp=1,
                               members=[])
    expected = struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 4) + ns16(None) + ns16(None) \
        + struct.pack(">qi", 1, 0)
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_group_metadata_value_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    v0 = (struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 1) + ns16("range") + ns16("m")
          + struct.pack(">i", 1) + s16("m") + s16("c") + s16("/h") + struct.pack(">i", 9000)
          + b32(b"s") + b32(b"a"))
    decoded = decode_group_metadata_value(v0)
    assert decoded.members == [MemberMetadata(member_id="m", client_id="c", client_host="/h", rebalance_timeout=9000,
                                               session_timeout=9000, subscription=b"s", assignment=b"a")]
    assert decoded.current_state_timestamp == -1


def test_group_metadata_value_v4_flexible_round_trip() -> None:
    value = GroupMetadataValue(protocol_type="consumer", generation=2, protocol="range", leader="m",
                               current_state_timestamp=9,
                               members=[MemberMetadata(member_id="m", client_id="c", client_host="/h", rebalance_timeout=1,
                                                       session_timeout=2, subscription=b"s", assignment=b"a")])
    raw = encode_group_metadata_value(value, version=4)
    assert raw[:2] == struct.pack(">h", 4) and raw[2:11] == cs("consumer")
    assert decode_group_metadata_value(raw) == value


@pytest.mark.parametrize("raw", [b"", struct.pack(">h", 9) + b"x", struct.pack(">hq", 3, 1)])
def test_corrupt_values_raise(raw: bytes) -> None:
    with pytest.raises(CoordinatorRecordParseError):
        decode_offset_commit_value(raw)
    with pytest.raises(CoordinatorRecordParseError):
        decode_group_metadata_value(raw)
