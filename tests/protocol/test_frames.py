"""Frame API: request/response headers, correlation ids, the ApiVersions header quirk, unsupported versions."""

from __future__ import annotations

import struct
import tempfile
import uuid

import pytest

from kbroker.protocol import (
    API_SPECS,
    ApiKey,
    EncodeError,
    FileRegion,
    ProtocolError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request_frame,
    decode_response_frame,
    encode_request_frame,
    encode_response_frame,
    request_header_version,
    response_header_version,
)
from kbroker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kbroker.protocol.messages.fetch import FetchResponse
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.produce import ProduceRequest, ProduceResponse
from kbroker.protocol.types import join_parts


def _roundtrip_request(header: RequestHeader, body: object) -> tuple[RequestHeader, object]:
    data = encode_request_frame(header, body)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    return decode_request_frame(memoryview(data)[4:])


def test_header_versions_follow_flexible_versions() -> None:
    assert request_header_version(ApiKey.PRODUCE, 8) == 1
    assert request_header_version(ApiKey.PRODUCE, 9) == 2
    assert response_header_version(ApiKey.PRODUCE, 8) == 0
    assert response_header_version(ApiKey.PRODUCE, 9) == 1
    assert request_header_version(ApiKey.API_VERSIONS, 2) == 1
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    # KIP-511: ApiVersions responses always use header v0.
    for v in range(0, 6):
        assert response_header_version(ApiKey.API_VERSIONS, v) == 0
    # Unknown keys are parsed as header v1.
    assert request_header_version(9999, 0) == 1
    spec = API_SPECS[ApiKey.METADATA]
    assert spec.request_header_version(9) == 2 and spec.response_header_version(9) == 1


@pytest.mark.parametrize("version", [4, 8, 9, 12])
@pytest.mark.parametrize("client_id", [None, "", "client-\u00e9"])
def test_request_header_roundtrip(version: int, client_id: str | None) -> None:
    header = RequestHeader(
        api_key=ApiKey.METADATA, api_version=version, correlation_id=2**31 - 1, client_id=client_id
    )
    body = MetadataRequest(topics=None, allow_auto_topic_creation=True)
    h, b = _roundtrip_request(header, body)
    assert h == header
    assert h.header_version == (2 if version >= 9 else 1)
    assert b == body


def test_header_v2_unknown_tagged_fields_roundtrip() -> None:
    header = RequestHeader(
        api_key=ApiKey.METADATA,
        api_version=12,
        correlation_id=-5,
        client_id="c",
        unknown_tagged_fields={7: b"xyz"},
    )
    h, _ = _roundtrip_request(header, MetadataRequest())
    assert h.unknown_tagged_fields == {7: b"xyz"}
    assert h.correlation_id == -5


def test_client_id_keeps_int16_length_in_header_v2() -> None:
    header = RequestHeader(api_key=ApiKey.API_VERSIONS, api_version=3, correlation_id=1, client_id="abc")
    data = encode_request_frame(
        header, ApiVersionsRequest(client_software_name="n", client_software_version="1")
    )
    # size(4) key(2) version(2) correlation(4) then int16 length 3, not a compact varint.
    assert data[12:17] == b"\x00\x03abc"


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_uses_header_v0(version: int) -> None:
    resp = ApiVersionsResponse(
        error_code=0, api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, min_version=3, max_version=13)]
    )
    parts = encode_response_frame(ApiKey.API_VERSIONS, version, 42, resp)
    data = join_parts(parts)
    assert struct.unpack_from(">ii", data) == (len(data) - 4, 42)
    # No tagged-field byte after the correlation id: the body's error_code follows at once.
    assert data[8:10] == b"\x00\x00"
    cid, back = decode_response_frame(ApiKey.API_VERSIONS, version, data[4:])
    assert cid == 42 and back == resp


def test_flexible_response_has_empty_header_tagged_fields() -> None:
    parts = encode_response_frame(ApiKey.PRODUCE, 9, 77, ProduceResponse())
    data = join_parts(parts)
    assert data[4:8] == struct.pack(">i", 77)
    assert data[8] == 0  # response header v1: empty tagged-field section
    assert decode_response_frame(ApiKey.PRODUCE, 9, data[4:]) == (77, ProduceResponse())


def test_unknown_api_key_raises_with_header() -> None:
    frame = struct.pack(">hhih", 9999, 0, 123, 3) + b"cli"
    with pytest.raises(UnsupportedVersionError) as err:
        decode_request_frame(frame)
    assert err.value.header.api_key == 9999 and err.value.header.correlation_id == 123
    assert err.value.header.client_id == "cli"


@pytest.mark.parametrize("version", [0, 2, 14, 200])
def test_unsupported_produce_version_raises_with_header(version: int) -> None:
    frame = struct.pack(">hhih", ApiKey.PRODUCE, version, 9, -1) + b"\x00" * 16
    with pytest.raises(UnsupportedVersionError) as err:
        decode_request_frame(frame)
    assert err.value.header.api_version == version and err.value.header.correlation_id == 9
    assert isinstance(err.value, ProtocolError)


def test_newer_api_versions_request_header_is_parsed_as_v2() -> None:
    """A client may send an ApiVersions version newer than ours (KIP-511): we still get the header."""
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 99, 31, 2) + b"cc" + b"\x00" + b"\x05newer\x021\x00"
    with pytest.raises(UnsupportedVersionError) as err:
        decode_request_frame(frame)
    h = err.value.header
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.header_version) == (
        18,
        99,
        31,
        "cc",
        2,
    )
    # The broker answers with a v0 body, header v0.
    data = join_parts(
        encode_response_frame(ApiKey.API_VERSIONS, 0, h.correlation_id, ApiVersionsResponse(error_code=35))
    )
    assert data[4:10] == struct.pack(">ih", 31, 35)


def test_trailing_bytes_after_body_are_ignored() -> None:
    header = RequestHeader(api_key=ApiKey.METADATA, api_version=12, correlation_id=1, client_id="c")
    data = encode_request_frame(header, MetadataRequest()) + b"\x00\x01trailing"
    h, b = decode_request_frame(memoryview(data)[4:])
    assert h.correlation_id == 1 and b == MetadataRequest()


@pytest.mark.parametrize("version", [3, 9, 13])
def test_produce_records_decode_as_zero_copy_slices(version: int) -> None:
    batch = bytes(range(256)) * 4
    topic = ProduceRequest.TopicProduceData(
        name="t" if version < 13 else "",
        topic_id=uuid.uuid4() if version >= 13 else uuid.UUID(int=0),
        partition_data=[ProduceRequest.PartitionProduceData(index=3, records=batch)],
    )
    req = ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=30000, topic_data=[topic])
    data = encode_request_frame(
        RequestHeader(api_key=0, api_version=version, correlation_id=5, client_id="p"), req
    )
    frame = memoryview(data)[4:]
    _, body = decode_request_frame(frame)
    records = body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is data
    assert records == batch and body == req


@pytest.mark.parametrize("version", [4, 11, 12, 16, 18])
def test_fetch_response_passes_file_regions_through(version: int) -> None:
    with tempfile.TemporaryFile() as f:
        f.write(b"0123456789" * 1000)
        f.flush()
        regions = [FileRegion(f, 10 * i, 500 + i) for i in range(3)]
        topic = FetchResponse.FetchableTopicResponse(
            topic="t" if version < 13 else "",
            topic_id=uuid.uuid4() if version >= 13 else uuid.UUID(int=0),
            partitions=[
                FetchResponse.PartitionData(partition_index=i, high_watermark=100, records=r)
                for i, r in enumerate(regions)
            ]
            + [FetchResponse.PartitionData(partition_index=9, records=None)],
        )
        resp = FetchResponse(responses=[topic])
        parts = encode_response_frame(ApiKey.FETCH, version, 11, resp)
        assert [p for p in parts if isinstance(p, FileRegion)] == regions
        assert isinstance(parts[0], (bytearray, memoryview))
        data = join_parts(parts)
        assert struct.unpack_from(">i", data)[0] == len(data) - 4
        cid, back = decode_response_frame(ApiKey.FETCH, version, data[4:])
        assert cid == 11
        got = [p.records for p in back.responses[0].partitions]
        assert [bytes(g) for g in got[:3]] == [r.read_bytes() for r in regions] and got[3] is None


def test_records_may_be_a_list_of_parts() -> None:
    with tempfile.TemporaryFile() as f:
        f.write(b"A" * 4096)
        f.flush()
        records = [b"head", FileRegion(f, 0, 2048), bytearray(b"tail")]
        resp = FetchResponse(
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic="t", partitions=[FetchResponse.PartitionData(records=records)]
                )
            ]
        )
        data = join_parts(encode_response_frame(ApiKey.FETCH, 12, 1, resp))
        _, back = decode_response_frame(ApiKey.FETCH, 12, data[4:])
        assert bytes(back.responses[0].partitions[0].records) == b"head" + b"A" * 2048 + b"tail"


def test_non_default_value_in_missing_field_raises_unless_ignorable() -> None:
    # ProduceResponse.current_leader (tagged, v10+) is not ignorable: writing it at v9 is an error.
    p = ProduceResponse.PartitionProduceResponse(current_leader=ProduceResponse.LeaderIdAndEpoch(leader_id=1))
    resp = ProduceResponse(
        responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[p])]
    )
    with pytest.raises(EncodeError):
        encode_response_frame(ApiKey.PRODUCE, 9, 1, resp)
    encode_response_frame(ApiKey.PRODUCE, 10, 1, resp)
    # log_start_offset (v5+) is ignorable: silently dropped at v3.
    p2 = ProduceResponse.PartitionProduceResponse(log_start_offset=5)
    resp2 = ProduceResponse(
        responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[p2])]
    )
    _, back = decode_response_frame(
        ApiKey.PRODUCE, 3, join_parts(encode_response_frame(ApiKey.PRODUCE, 3, 1, resp2))[4:]
    )
    assert back.responses[0].partition_responses[0].log_start_offset == -1


def test_null_in_non_nullable_field_raises_encode_error() -> None:
    resp = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name=None)])  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        encode_response_frame(ApiKey.PRODUCE, 9, 1, resp)
    with pytest.raises(EncodeError):
        encode_response_frame(ApiKey.PRODUCE, 9, 1, ProduceResponse(throttle_time_ms=2**40))


def test_tagged_fields_are_written_only_when_not_default() -> None:
    p = FetchResponse.PartitionData(partition_index=0)
    resp = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[p])])
    plain = join_parts(encode_response_frame(ApiKey.FETCH, 12, 1, resp))
    p.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=5)
    tagged = join_parts(encode_response_frame(ApiKey.FETCH, 12, 1, resp))
    # tag count 1, tag 1, size 8 (two int32) then the struct's own empty tag section (+1).
    assert len(tagged) - len(plain) == 1 + 1 + 8 + 1
    _, back = decode_response_frame(ApiKey.FETCH, 12, tagged[4:])
    assert back.responses[0].partitions[0].current_leader == p.current_leader


def test_mutable_defaults_are_fresh_per_instance() -> None:
    a, b = ProduceRequest(), ProduceRequest()
    a.topic_data.append(ProduceRequest.TopicProduceData(name="x"))
    assert b.topic_data == [] and a.unknown_tagged_fields is not b.unknown_tagged_fields
    assert FetchResponse.PartitionData().current_leader is not FetchResponse.PartitionData().current_leader
