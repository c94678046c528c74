"""Malformed input: every bad frame raises ProtocolError quickly, never hangs or over-allocates."""

from __future__ import annotations

import random
import struct
import time
import tracemalloc
import uuid

import pytest

from kbroker.protocol import (
    ApiKey,
    ProtocolError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request_frame,
    decode_response_frame,
    encode_request_frame,
    encode_response_frame,
)
from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.create_topics import CreateTopicsRequest
from kbroker.protocol.messages.fetch import FetchRequest, FetchResponse
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.produce import ProduceRequest
from kbroker.protocol.types import join_parts


def _hdr(api_key: int, version: int, client_id: str | None = "c") -> bytes:
    h = struct.pack(">hhi", api_key, version, 1)
    if client_id is None:
        return h + b"\xff\xff"
    raw = client_id.encode()
    h += struct.pack(">h", len(raw)) + raw
    return h


def _flex_hdr(api_key: int, version: int) -> bytes:
    return _hdr(api_key, version) + b"\x00"


def _valid_frames() -> list[bytes]:
    """A few valid request frames (without the size prefix) spanning flexible and old versions."""
    produce = ProduceRequest(
        transactional_id="tx",
        acks=1,
        timeout_ms=100,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="topic",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=b"\x00" * 70),
                    ProduceRequest.PartitionProduceData(index=1, records=None),
                ],
            )
        ],
    )
    fetch = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                topic_id=uuid.UUID(int=7),
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=10, partition_max_bytes=1 << 20)
                ],
            )
        ],
        rack_id="r1",
    )
    create = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name="n",
                num_partitions=3,
                replication_factor=1,
                configs=[CreateTopicsRequest.CreatableTopicConfig(name="cleanup.policy", value="compact")],
            )
        ]
    )
    frames = []
    for key, version, body in (
        (ApiKey.PRODUCE, 3, produce),
        (ApiKey.PRODUCE, 9, produce),
        (ApiKey.FETCH, 4, fetch),
        (ApiKey.FETCH, 12, fetch),
        (ApiKey.FETCH, 15, fetch),
        (ApiKey.METADATA, 4, MetadataRequest(topics=None)),
        (ApiKey.METADATA, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a")])),
        (ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="x", client_software_version="1")),
        (ApiKey.CREATE_TOPICS, 4, create),
        (ApiKey.CREATE_TOPICS, 7, create),
    ):
        data = encode_request_frame(
            RequestHeader(api_key=key, api_version=version, correlation_id=3, client_id="c"), body
        )
        frames.append(data[4:])
    return frames


VALID = _valid_frames()


@pytest.mark.parametrize("frame", VALID, ids=range(len(VALID)))
def test_every_truncation_raises_protocol_error(frame: bytes) -> None:
    decode_request_frame(frame)
    for n in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request_frame(frame[:n])


def test_truncated_response_raises_protocol_error() -> None:
    resp = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t", partitions=[FetchResponse.PartitionData(records=b"x" * 30)]
            )
        ]
    )
    data = join_parts(encode_response_frame(ApiKey.FETCH, 12, 1, resp))[4:]
    for n in range(len(data)):
        with pytest.raises(ProtocolError):
            decode_response_frame(ApiKey.FETCH, 12, data[:n])


@pytest.mark.parametrize("length", [-2, -100, -32768])
def test_negative_string_length_other_than_minus_one_is_rejected(length: int) -> None:
    # Produce v3 transactional_id is a nullable string: -1 is null, anything else negative is malformed.
    body = struct.pack(">h", length) + struct.pack(">hi", 1, 100) + struct.pack(">i", 0)
    with pytest.raises(ProtocolError):
        decode_request_frame(_hdr(ApiKey.PRODUCE, 3) + body)
    ok = struct.pack(">h", -1) + struct.pack(">hi", 1, 100) + struct.pack(">i", 0)
    _, req = decode_request_frame(_hdr(ApiKey.PRODUCE, 3) + ok)
    assert req.transactional_id is None and req.topic_data == []


def test_negative_client_id_length_is_rejected() -> None:
    frame = struct.pack(">hhih", ApiKey.METADATA, 4, 1, -7) + struct.pack(">i", -1) + b"\x00"
    with pytest.raises(ProtocolError):
        decode_request_frame(frame)


def test_null_in_non_nullable_string_is_rejected() -> None:
    # Metadata v4 topic name is a non-nullable string.
    body = struct.pack(">i", 1) + struct.pack(">h", -1) + b"\x01"
    with pytest.raises(ProtocolError):
        decode_request_frame(_hdr(ApiKey.METADATA, 4) + body)


@pytest.mark.parametrize("length", [-2, -(2**31)])
def test_negative_array_and_bytes_lengths_are_rejected(length: int) -> None:
    with pytest.raises(ProtocolError):  # Produce v3 topic_data count
        decode_request_frame(_hdr(ApiKey.PRODUCE, 3) + b"\xff\xff" + struct.pack(">hii", 1, 100, length))
    rec = struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", 1) + struct.pack(">ii", 0, length)
    with pytest.raises(ProtocolError):  # records length
        decode_request_frame(_hdr(ApiKey.PRODUCE, 3) + b"\xff\xff" + struct.pack(">hi", 1, 100) + rec)


def test_null_in_non_nullable_array_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        decode_request_frame(_hdr(ApiKey.PRODUCE, 3) + b"\xff\xff" + struct.pack(">hii", 1, 100, -1))


def _assert_fast_and_small(frame: bytes) -> None:
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ProtocolError):
            decode_request_frame(frame)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 2.0, f"took {elapsed:.3f}s"  # microseconds when idle; slack for a loaded machine
    assert peak < 1 << 20, f"allocated {peak} bytes"


def test_absurd_struct_array_size_fails_fast() -> None:
    body = b"\xff\xff" + struct.pack(">hii", 1, 100, 2**31 - 1) + b"\x00" * 6
    assert len(body) <= 20
    _assert_fast_and_small(_hdr(ApiKey.PRODUCE, 3) + body)


def test_absurd_compact_array_size_fails_fast() -> None:
    # Produce v9: compact array count as a 5-byte varint (2^32 - 1).
    body = b"\x00" + struct.pack(">hi", 1, 100) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 4
    _assert_fast_and_small(_flex_hdr(ApiKey.PRODUCE, 9) + body)


def test_absurd_primitive_array_size_fails_fast() -> None:
    # CreateTopics v4 replica assignment broker_ids is []int32 inside an assignment struct.
    topic = b"\x00\x01n" + struct.pack(">ih", 1, 1) + struct.pack(">i", 1) + struct.pack(">ii", 0, 2**31 - 1)
    body = struct.pack(">i", 1) + topic + b"\x00" * 8
    _assert_fast_and_small(_hdr(ApiKey.CREATE_TOPICS, 4) + body)


def test_absurd_tag_count_fails_fast() -> None:
    body = b"\x02a\x021" + b"\xff\xff\xff\xff\x0f" + b"\x00\x00"
    _assert_fast_and_small(_flex_hdr(ApiKey.API_VERSIONS, 3) + body)


@pytest.mark.parametrize("varint", [b"\xff\xff\xff\xff\xff\x01", b"\x80\x80", b"\xff"])
def test_invalid_varints_are_rejected(varint: bytes) -> None:
    # Compact string length of ApiVersions v3 client_software_name.
    with pytest.raises(ProtocolError):
        decode_request_frame(_flex_hdr(ApiKey.API_VERSIONS, 3) + varint + b"abc")


def test_bad_utf8_is_rejected() -> None:
    with pytest.raises(ProtocolError):  # in the body
        decode_request_frame(_flex_hdr(ApiKey.API_VERSIONS, 3) + b"\x03\xff\xfe\x021\x00")
    frame = struct.pack(">hhih", ApiKey.METADATA, 4, 1, 2) + b"\xc3\x28" + struct.pack(">i", -1) + b"\x00"
    with pytest.raises(ProtocolError):  # in the header's client id
        decode_request_frame(frame)


def test_oversized_compact_string_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        decode_request_frame(_flex_hdr(ApiKey.API_VERSIONS, 3) + b"\x82\x80\x02" + b"a" * 10)


def test_tagged_field_overrunning_its_size_is_rejected() -> None:
    # Fetch v12 response partition with tag 1 (CurrentLeader) declared as 2 bytes but needing 9.
    resp = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    FetchResponse.PartitionData(current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=1))
                ],
            )
        ]
    )
    data = bytearray(join_parts(encode_response_frame(ApiKey.FETCH, 12, 1, resp))[4:])
    idx = data.find(b"\x01\x01\x09")  # count=1, tag=1, size=9
    assert idx > 0
    data[idx + 2] = 2
    with pytest.raises(ProtocolError):
        decode_response_frame(ApiKey.FETCH, 12, bytes(data))


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        i = rng.randrange(len(data)) if data else 0
        if op == 0 and data:
            data[i] = rng.randrange(256)
        elif op == 1 and data:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 2:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 5)))
        elif op == 3 and data:
            del data[i : i + rng.randint(1, 5)]
        elif data:
            data[i] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
    return bytes(data)


def test_fuzzed_frames_raise_only_protocol_errors() -> None:
    """Random mutations of valid frames: decoding either succeeds or raises ProtocolError, within a deadline."""
    rng = random.Random(20261125)
    deadline = time.monotonic() + 3.0
    count = decoded = rejected = 0
    while time.monotonic() < deadline:
        frame = _mutate(rng, rng.choice(VALID))
        count += 1
        try:
            decode_request_frame(frame)
            decoded += 1
        except UnsupportedVersionError:
            rejected += 1
        except ProtocolError:
            rejected += 1
    # Typically tens of thousands; kept low so a heavily loaded machine does not make this flaky.
    assert count > 50, "fuzzer made too little progress"
    assert rejected > 0 and decoded > 0


def test_every_decoder_raises_only_protocol_errors_on_garbage() -> None:
    """Every request and response decoder of every API and version, fed random and mutated bytes."""
    from kbroker.protocol.messages import API_SPECS

    rng = random.Random(7)
    # Generous: about 1 s on an idle machine; the point is that nothing hangs or blows up.
    deadline = time.monotonic() + 60.0
    checked = 0
    for key, spec in sorted(API_SPECS.items()):
        for version in range(spec.min_version, spec.max_version + 1):
            header = RequestHeader(api_key=key, api_version=version, correlation_id=1, client_id="f")
            valid = encode_request_frame(header, spec.request_class())[4:]
            resp_valid = join_parts(encode_response_frame(key, version, 1, spec.response_class()))[4:]
            for _ in range(30):
                garbage = valid[: rng.randrange(len(valid) + 1)] + rng.randbytes(rng.randrange(24))
                for frame in (garbage, _mutate(rng, valid)):
                    try:
                        decode_request_frame(frame)
                    except ProtocolError:
                        pass
                for frame in (_mutate(rng, resp_valid), rng.randbytes(rng.randrange(32))):
                    try:
                        decode_response_frame(key, version, frame)
                    except ProtocolError:
                        pass
                checked += 1
    assert time.monotonic() < deadline, "decoding garbage is unexpectedly slow"
    assert checked > 5000
