"""Differential: the SASL exchange on a SASL_PLAINTEXT listener, Kafka 4.3.1 vs kbroker, configured alike.

Same raw requests to both (tests/support/raw_client.py); the answers (error codes, mechanism lists,
error messages, whether the broker then closes the connection) must be equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import ConnectionClosed, RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
SECURITY = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "connection.failed.authentication.delay.ms": "100",
}


def _closed(c: RawKafkaClient) -> bool:
    return c.is_closed_by_peer(timeout=5)


def _answers(bootstrap: str) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    av = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    with RawKafkaClient(bootstrap) as c:  # an unsupported mechanism
        out.append(("apiversions", c.request(18, 3, av).error_code))
        r = c.request(17, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
        out.append(("gssapi", r.error_code, sorted(r.mechanisms), _closed(c)))
    with RawKafkaClient(bootstrap) as c:  # a wrong PLAIN password
        r = c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        out.append(("handshake", r.error_code, sorted(r.mechanisms)))
        a = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"))
        out.append(("plain-wrong", a.error_code, a.error_message, _closed(c)))
    with RawKafkaClient(bootstrap) as c:  # an unknown SCRAM user
        c.request(17, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        a = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"n,,n=nobody,r=abcdefgh"))
        out.append(("scram-unknown", a.error_code, a.error_message, _closed(c)))
    with RawKafkaClient(bootstrap) as c:  # a request before authentication
        c.send(3, 12, MetadataRequest(topics=None))
        try:
            c.recv_frame()
            closed = False
        except (ConnectionClosed, ConnectionResetError):
            closed = True
        out.append(("metadata-first", closed))
    with RawKafkaClient(bootstrap) as c:  # success, then a second SaslAuthenticate
        c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        a = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
        out.append(("plain-ok", a.error_code, a.error_message, bytes(a.auth_bytes), a.session_lifetime_ms))
        a = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
        out.append(("again", a.error_code, a.error_message))
        h = c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        out.append(("handshake-again", h.error_code, list(h.mechanisms)))
    return out


def test_sasl_exchange_answered_as_kafka(tmp_path: Path) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    port, cport, sport = free_port(), free_port(), free_port()
    kafka_overrides = {
        **SECURITY,
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},SASL_PLAINTEXT://127.0.0.1:{sport}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sport}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    }
    _, stop = start_reference_kafka(tmp_path / "kafka", port=port, overrides=kafka_overrides)
    try:
        kafka = _answers(f"127.0.0.1:{sport}")
    finally:
        stop()
    ours_port = free_port()
    with KBroker(tmp_path / "kbroker", port=ours_port, overrides={
            **SECURITY, "listeners": f"SASL_PLAINTEXT://127.0.0.1:{ours_port}",
            "inter.broker.listener.name": "SASL_PLAINTEXT"}) as broker:
        ours = _answers(broker.bootstrap)
    assert ours == kafka
