"""Differential: SaslHandshake and SaslAuthenticate on a PLAINTEXT listener, Kafka 4.3.1 vs kbroker.

Kafka advertises both APIs on every broker listener and answers them on a PLAINTEXT one with
ILLEGAL_SASL_STATE (SaslHandshake: no mechanisms; SaslAuthenticate: "SaslAuthenticate request received
after successful authentication"), so a client configured for SASL fails at once with a clear error.
kbroker must answer byte for byte the same fields (kbroker/api/sasl_handshake.py, sasl_authenticate.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient, request_class
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]


def _answers(bootstrap: str) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    with RawKafkaClient(bootstrap) as c:
        for v in (0, 1):
            r = c.request(17, v, request_class(17)(mechanism="PLAIN"))
            out.append(("SaslHandshake", v, r.error_code, list(r.mechanisms)))
        for v in (0, 1, 2):
            r = c.request(36, v, request_class(36)(auth_bytes=b"\0user\0secret"))
            out.append(("SaslAuthenticate", v, r.error_code, r.error_message, bytes(r.auth_bytes)))
    return out


def test_sasl_requests_on_plaintext_answered_as_kafka(tmp_path: Path) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap, stop = start_reference_kafka(tmp_path / "kafka")
    try:
        kafka = _answers(bootstrap)
    finally:
        stop()
    with KBroker(tmp_path / "kbroker") as broker:
        ours = _answers(broker.bootstrap)
    assert ours == kafka
    assert kafka[0][2] == 34  # ILLEGAL_SASL_STATE: the reference really answers (no silent close)
