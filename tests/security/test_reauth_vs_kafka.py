"""Differential: KIP-368 re-authentication on a SASL_PLAINTEXT listener with
`connections.max.reauth.ms=1500`, Kafka 4.3.1 vs kbroker configured alike, the same raw requests.

Compared: SaslAuthenticate's `session_lifetime_ms`; a SaslHandshake after authentication (a
re-authentication, not ILLEGAL_SASL_STATE) and the re-authentication's answer; a request after
re-authenticating; re-authenticating as another principal (the error and the close); a request after
the session ended without re-authentication (the close).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import ConnectionClosed, RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SECURITY = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "connection.failed.authentication.delay.ms": "100",
    "connections.max.reauth.ms": "1500",
}


def _login(c: RawKafkaClient, user: bytes) -> tuple[object, ...]:
    h = c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    a = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0" + user + b"\0" + user + b"-secret"))
    return h.error_code, sorted(h.mechanisms), a.error_code, a.error_message, a.session_lifetime_ms


def _metadata_answered(c: RawKafkaClient) -> bool:
    c.send(3, 12, MetadataRequest(topics=[]))
    try:
        c.recv_frame()
        return True
    except (ConnectionClosed, ConnectionResetError):
        return False


def _answers(bootstrap: str) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    with RawKafkaClient(bootstrap) as c:  # log in, re-authenticate, carry on
        out.append(("login", *_login(c, b"alice")))
        out.append(("reauth", *_login(c, b"alice")))
        out.append(("after-reauth", _metadata_answered(c)))
    with RawKafkaClient(bootstrap) as c:  # re-authenticate as someone else
        _login(c, b"alice")
        h = c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        a = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0admin\0admin-secret"))
        out.append(("other-principal", h.error_code, a.error_code, c.is_closed_by_peer(timeout=5)))
    with RawKafkaClient(bootstrap) as c:  # no re-authentication: closed after the lifetime
        _login(c, b"alice")
        out.append(("before-expiry", _metadata_answered(c)))
        time.sleep(1.8)
        out.append(("after-expiry", _metadata_answered(c)))
    return out


def test_reauthentication_answered_as_kafka(tmp_path: Path) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    port, cport, sport = free_port(), free_port(), free_port()
    _, stop = start_reference_kafka(tmp_path / "kafka", port=port, overrides={
        **SECURITY,
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},SASL_PLAINTEXT://127.0.0.1:{sport}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sport}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    })
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
    assert ("login", 0, ["PLAIN"], 0, "", 1500) in ours  # not vacuous: Kafka gave a lifetime
