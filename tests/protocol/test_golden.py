"""Golden bytes: requests and responses captured off real clients talking to Apache Kafka 4.3.

tests/golden/README.md says how the captures were made (a recording proxy between the real
clients — Java kafka-clients/tools 4.3.1, librdkafka via confluent-kafka, kafka-python, aiokafka —
and a real Kafka 4.3.1 broker). Every captured frame must decode with our generated codecs, and
re-encoding the decoded object must give back the very same bytes: that checks field order, types,
nullability, compact/flexible encodings and tagged fields against real peers, in both directions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbroker.protocol import API_SPECS, decode_request_frame, decode_response_frame, encode_request_frame
from kbroker.protocol.frames import encode_response_frame
from kbroker.protocol.types import join_parts

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
INDEX = json.loads((GOLDEN / "index.json").read_text())
CAPTURES = INDEX["captures"]


def _id(c: dict[str, object]) -> str:
    return str(c["request"]).removeprefix("captures/")


def test_captures_cover_every_client() -> None:
    clients = {c["client"] for c in CAPTURES}
    assert {"java", "confluent-kafka", "kafka-python", "aiokafka"} <= clients
    # Produce requests from every client: the hot path must decode what each one really sends.
    producers = {c["client"] for c in CAPTURES if c["api_name"] == "Produce"}
    assert {"java", "confluent-kafka", "kafka-python", "aiokafka"} <= producers


@pytest.mark.parametrize("cap", CAPTURES, ids=_id)
def test_request_decodes_and_reencodes_byte_exact(cap: dict[str, object]) -> None:
    frame = (GOLDEN / str(cap["request"])).read_bytes()
    header, body = decode_request_frame(memoryview(frame))
    assert header.api_key == cap["api_key"]
    assert header.api_version == cap["api_version"]
    assert header.correlation_id == cap["correlation_id"]
    assert API_SPECS[header.api_key].name == cap["api_name"]
    again = encode_request_frame(header, body)
    assert again[4:] == frame


@pytest.mark.parametrize("cap", [c for c in CAPTURES if c.get("response")], ids=_id)
def test_response_decodes_and_reencodes_byte_exact(cap: dict[str, object]) -> None:
    frame = (GOLDEN / str(cap["response"])).read_bytes()
    key, version = int(cap["api_key"]), int(cap["api_version"])  # type: ignore[call-overload]
    correlation_id, body = decode_response_frame(key, version, memoryview(frame))
    assert correlation_id == cap["correlation_id"]
    again = join_parts(encode_response_frame(key, version, correlation_id, body))
    assert bytes(again[4:]) == frame
