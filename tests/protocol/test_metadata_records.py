"""Generated KRaft metadata records (``kbroker.protocol.metadata_records``) and their frame.

Every record type round-trips through ``encode_metadata_record``/``read_metadata_record`` in every
version; the frame is Kafka's (unsigned varints: frame version 1, api key, version); malformed input
raises ``MetadataParseError`` only.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.protocol.metadata_records import METADATA_RECORDS, MetadataRecordType
from kbroker.protocol.metadata_records.config_record import ConfigRecord
from kbroker.protocol.metadata_records.partition_change_record import PartitionChangeRecord
from kbroker.protocol.metadata_records.serde import (
    ApiMessageAndVersion,
    MetadataParseError,
    decode_metadata_record,
    encode_metadata_record,
    read_metadata_record,
    record_class,
    record_module,
)
from kbroker.protocol.metadata_records.topic_record import TopicRecord
from tests.protocol.test_roundtrip import message_strategy

TOPIC_ID = uuid.UUID("6a1b6c0e-4c4f-4b8e-9d7c-0123456789ab")


def test_registry_has_kafkas_record_types() -> None:
    assert MetadataRecordType.REGISTER_BROKER_RECORD == 0
    assert MetadataRecordType.TOPIC_RECORD == 2
    assert MetadataRecordType.PARTITION_CHANGE_RECORD == 5
    assert MetadataRecordType.FEATURE_LEVEL_RECORD == 12
    assert MetadataRecordType.NO_OP_RECORD == 20
    assert MetadataRecordType.CLEAR_ELR_RECORD == 28
    assert record_class(2) is TopicRecord
    assert {s.name for s in METADATA_RECORDS.values()} >= {
        "TopicRecord", "PartitionRecord", "PartitionChangeRecord", "ConfigRecord", "RegisterBrokerRecord",
        "UnregisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord",
        "ProducerIdsRecord", "FeatureLevelRecord", "RemoveTopicRecord", "NoOpRecord",
    }  # fmt: skip


def test_frame_bytes() -> None:
    raw = encode_metadata_record(TopicRecord(name="foo", topic_id=TOPIC_ID))
    # frame version 1, api key 2, version 0; compact string "foo"; uuid; empty tag section
    assert raw == b"\x01\x02\x00" + b"\x04foo" + TOPIC_ID.bytes + b"\x00"
    assert read_metadata_record(raw) == ApiMessageAndVersion(TopicRecord(name="foo", topic_id=TOPIC_ID), 0)
    assert read_metadata_record(raw).api_key == 2


def test_partition_change_record_tagged_fields() -> None:
    """Only the fields that changed are written (tags 0 isr, 1 leader); the rest keep Kafka's
    "no change" defaults: null arrays, leader -2, leader recovery state -1."""
    rec = PartitionChangeRecord(partition_id=3, topic_id=TOPIC_ID, isr=[1, 2], leader=1)
    raw = encode_metadata_record(rec, 0)
    assert raw == (
        b"\x01\x05\x00" + b"\x00\x00\x00\x03" + TOPIC_ID.bytes
        + b"\x02" + b"\x00\x09\x03\x00\x00\x00\x01\x00\x00\x00\x02" + b"\x01\x04\x00\x00\x00\x01"
    )  # fmt: skip
    back = decode_metadata_record(raw)
    assert back == rec and back.replicas is None and back.leader_recovery_state == -1
    assert decode_metadata_record(encode_metadata_record(PartitionChangeRecord(topic_id=TOPIC_ID))).leader == -2


def test_config_record_null_value() -> None:
    rec = ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value=None)
    assert decode_metadata_record(encode_metadata_record(rec)).value is None


CASES = [
    (f"{spec.name}-v{v}", api_key, v)
    for api_key, spec in sorted(METADATA_RECORDS.items())
    for v in range(spec.min_version, spec.max_version + 1)
]


@pytest.mark.parametrize(("case_id", "api_key", "version"), CASES, ids=[c[0] for c in CASES])
@settings(max_examples=8, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_record_round_trips(data: st.DataObject, case_id: str, api_key: int, version: int) -> None:
    module = record_module(api_key)
    record = data.draw(message_strategy(module.CLASS, version, True))
    raw = encode_metadata_record(record, version)
    assert read_metadata_record(raw) == ApiMessageAndVersion(record, version), case_id
    assert encode_metadata_record(decode_metadata_record(raw), version) == raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "cannot parse"),
        (b"\x00\x02\x00", "frame version 0"),
        (b"\x02\x02\x00", "frame version 2"),
        (b"\x01\x7f\x00", "unknown metadata record type 127"),
        (b"\x01\x02\x09", "no version 9"),
        (b"\x01\x02\x00\x04fo", "cannot parse"),
        (b"\x01\x02\x00\xff\xff\xff\xff\x7f", "cannot parse"),
    ],
)
def test_malformed_values_raise_metadata_parse_error(raw: bytes, message: str) -> None:
    with pytest.raises(MetadataParseError, match=message):
        read_metadata_record(raw)


@given(st.binary(max_size=48))
@settings(max_examples=400, deadline=None, database=None)
def test_random_bytes_never_escape_the_parse_error(raw: bytes) -> None:
    try:
        read_metadata_record(b"\x01" + raw)
    except MetadataParseError:
        pass


def test_encoding_checks_its_input() -> None:
    with pytest.raises(ValueError):
        encode_metadata_record(object())
    with pytest.raises(ValueError):
        encode_metadata_record(TopicRecord(), 3)
