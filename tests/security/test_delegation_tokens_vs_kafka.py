"""Differential: the delegation token APIs (KIP-48), Kafka 4.3.1 vs kbroker, configured alike.

The same raw requests to both (tests/support/raw_client.py) over PLAIN-authenticated SASL_PLAINTEXT
connections, a PLAINTEXT listener and a token-authenticated SCRAM connection; the answers must be
equal: error codes, owners and requesters, the timestamps relative to the issue time, the HMAC (on both
it is HmacSHA512(secret, token id), checked against Python's), what each principal may describe,
renew and expire, removal at once (-1) and by the controller's sweep, and the token's SCRAM login. A
second pair of brokers without `delegation.token.secret.key` answers DELEGATION_TOKEN_AUTH_DISABLED.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from pathlib import Path

import pytest

from kbroker.protocol.messages.create_delegation_token import CreateDelegationTokenRequest
from kbroker.protocol.messages.describe_delegation_token import DescribeDelegationTokenRequest
from kbroker.protocol.messages.expire_delegation_token import ExpireDelegationTokenRequest
from kbroker.protocol.messages.renew_delegation_token import RenewDelegationTokenRequest
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from kbroker.security import scram
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import ConnectionClosed, RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

SECRET = "differential-secret"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
HOUR = 3_600_000
SECURITY = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "delegation.token.max.lifetime.ms": str(2 * HOUR),
    "delegation.token.expiry.time.ms": str(HOUR),
    "delegation.token.expiry.check.interval.ms": "500",
}
Renewer = CreateDelegationTokenRequest.CreatableRenewers
Owner = DescribeDelegationTokenRequest.DescribeDelegationTokenOwner


def _login(bootstrap: str, user: str) -> RawKafkaClient:
    c = RawKafkaClient(bootstrap)
    c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    a = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{user}-secret".encode()))
    assert a.error_code == 0, a
    return c


def _token_login(bootstrap: str, token_id: str, mac: bytes) -> tuple[RawKafkaClient, tuple[object, ...]]:
    """SCRAM-SHA-256 with tokenauth=true: the token id as user, base64(HMAC) as password."""
    c = RawKafkaClient(bootstrap)
    c.request(17, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    bare = f"n={token_id},r=differentialnonce,tokenauth=true"
    first = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=f"n,,{bare}".encode()))
    if first.error_code:
        return c, ("first", first.error_code, first.error_message)
    server_first = bytes(first.auth_bytes).decode()
    attrs = scram.parse_attributes(server_first)
    h = "sha256"
    salted = scram.salted_password(h, base64.b64encode(mac).decode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    ck = scram.client_key(h, salted)
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    proof = scram.xor(ck, scram.hmac_digest(h, hashlib.new(h, ck).digest(), auth))
    final = c.request(36, 2, SaslAuthenticateRequest(
        auth_bytes=f"{without_proof},p={base64.b64encode(proof).decode()}".encode()))
    return c, ("final", final.error_code, attrs["i"], 0 < final.session_lifetime_ms <= HOUR)


def _created(r: object) -> tuple[object, ...]:
    """A CreateDelegationTokenResponse without its random parts (token id, issue time)."""
    issue = r.issue_timestamp_ms  # type: ignore[attr-defined]
    rel = (r.expiry_timestamp_ms - issue, r.max_timestamp_ms - issue) if r.error_code == 0 else (  # type: ignore[attr-defined]
        r.issue_timestamp_ms, r.expiry_timestamp_ms, r.max_timestamp_ms)  # type: ignore[attr-defined]
    good_hmac = r.error_code != 0 or bytes(r.hmac) == hmac.new(  # type: ignore[attr-defined]
        SECRET.encode(), r.token_id.encode(), hashlib.sha512).digest()  # type: ignore[attr-defined]
    return (r.error_code, r.principal_type, r.principal_name, r.token_requester_principal_type,  # type: ignore[attr-defined]
            r.token_requester_principal_name, rel, good_hmac, len(r.token_id))  # type: ignore[attr-defined]


def _described(r: object, ids: dict[str, str]) -> tuple[object, ...]:
    tokens = sorted((ids.get(t.token_id, "?"), t.principal_name, t.token_requester_principal_name,
                     [x.principal_name for x in t.renewers], t.expiry_timestamp - t.issue_timestamp,
                     t.max_timestamp - t.issue_timestamp,
                     bytes(t.hmac) == hmac.new(SECRET.encode(), t.token_id.encode(), hashlib.sha512).digest())
                    for t in r.tokens)  # type: ignore[attr-defined]
    return (r.error_code, tokens)  # type: ignore[attr-defined]


def _answers(sasl: str, plaintext: str) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    ids: dict[str, str] = {}
    with RawKafkaClient(plaintext) as c:  # PLAINTEXT: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        out.append(("plain-create", _created(c.request(38, 3, CreateDelegationTokenRequest(max_lifetime_ms=-1)))))
        r = c.request(39, 2, RenewDelegationTokenRequest(hmac=b"x", renew_period_ms=-1))
        out.append(("plain-renew", r.error_code, r.expiry_timestamp_ms))
        r = c.request(40, 2, ExpireDelegationTokenRequest(hmac=b"x", expiry_time_period_ms=-1))
        out.append(("plain-expire", r.error_code, r.expiry_timestamp_ms))
        out.append(("plain-describe", _described(c.request(41, 3, DescribeDelegationTokenRequest(owners=None)), ids)))
    alice, bob = _login(sasl, "alice"), _login(sasl, "bob")
    try:
        r = alice.request(38, 3, CreateDelegationTokenRequest(
            renewers=[Renewer(principal_type="Group", principal_name="ops")], max_lifetime_ms=-1))
        out.append(("bad-renewer", _created(r)))
        r = alice.request(38, 3, CreateDelegationTokenRequest(
            renewers=[Renewer(principal_type="User", principal_name="bob")], max_lifetime_ms=-1))
        out.append(("create", _created(r)))
        first, first_mac = r.token_id, bytes(r.hmac)
        ids[first] = "first"
        r = alice.request(38, 1, CreateDelegationTokenRequest(max_lifetime_ms=60_000))
        out.append(("create-v1-short", _created(r)))
        ids[r.token_id] = "short"
        short_mac = bytes(r.hmac)
        # No authorizer (Kafka's default): a token for another owner is allowed (KIP-373).
        r = alice.request(38, 3, CreateDelegationTokenRequest(owner_principal_type="User",
                                                               owner_principal_name="carol", max_lifetime_ms=-1))
        out.append(("create-for-carol", _created(r)))
        ids[r.token_id] = "carol"
        # Kafka's broker learns a token from its metadata image after the controller answered the
        # client (no read-your-writes for forwarded requests): wait until the three tokens are there.
        deadline = time.monotonic() + 15
        while len(alice.request(41, 3, DescribeDelegationTokenRequest(owners=None)).tokens) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        out.append(("describe-all", _described(alice.request(41, 3, DescribeDelegationTokenRequest(owners=None)), ids)))
        out.append(("describe-none", _described(alice.request(41, 3, DescribeDelegationTokenRequest(owners=[])), ids)))
        out.append(("describe-alice-v1", _described(alice.request(41, 1, DescribeDelegationTokenRequest(
            owners=[Owner(principal_type="User", principal_name="alice")])), ids)))
        out.append(("describe-by-bob", _described(bob.request(41, 3, DescribeDelegationTokenRequest(owners=None)), ids)))
        r = alice.request(39, 2, RenewDelegationTokenRequest(hmac=b"unknown", renew_period_ms=-1))
        out.append(("renew-unknown", r.error_code, r.expiry_timestamp_ms))
        before = int(time.time() * 1000)
        r = bob.request(39, 2, RenewDelegationTokenRequest(hmac=first_mac, renew_period_ms=1000))
        out.append(("renew-by-renewer", r.error_code, 0 <= r.expiry_timestamp_ms - before - 1000 < 5000))
        r = alice.request(39, 1, RenewDelegationTokenRequest(hmac=short_mac, renew_period_ms=-1))
        out.append(("renew-capped-by-max", r.error_code))
        with _login(sasl, "admin") as admin:
            r = admin.request(40, 2, ExpireDelegationTokenRequest(hmac=first_mac, expiry_time_period_ms=-1))
            out.append(("expire-not-owner", r.error_code, r.expiry_timestamp_ms))
        token, login = _token_login(sasl, first, first_mac)
        out.append(("token-login", *login))
        with token:
            try:
                out.append(("token-create", _created(token.request(38, 3, CreateDelegationTokenRequest(
                    max_lifetime_ms=-1)))))
                out.append(("token-describe", _described(token.request(41, 3, DescribeDelegationTokenRequest(
                    owners=None)), ids)))
            except ConnectionClosed:
                out.append(("token-connection-closed",))
        bad, login = _token_login(sasl, "no-such-token", first_mac)
        bad.close()
        out.append(("unknown-token-login", *login))
        r = alice.request(40, 2, ExpireDelegationTokenRequest(hmac=first_mac, expiry_time_period_ms=-1))
        out.append(("expire-now", r.error_code))
        r = alice.request(39, 2, RenewDelegationTokenRequest(hmac=first_mac, renew_period_ms=-1))
        out.append(("renew-removed", r.error_code, r.expiry_timestamp_ms))
        time.sleep(1)  # Kafka's broker drops the token from its cache when its image has the removal
        bad, login = _token_login(sasl, first, first_mac)
        bad.close()
        out.append(("removed-token-login", *login))
        r = alice.request(40, 2, ExpireDelegationTokenRequest(hmac=short_mac, expiry_time_period_ms=200))
        out.append(("expire-soon", r.error_code))
        time.sleep(2.5)  # the controller's sweep (delegation.token.expiry.check.interval.ms=500)
        r = alice.request(39, 2, RenewDelegationTokenRequest(hmac=short_mac, renew_period_ms=-1))
        out.append(("renew-swept", r.error_code, r.expiry_timestamp_ms))
        out.append(("describe-after", _described(alice.request(41, 3, DescribeDelegationTokenRequest(owners=None)), ids)))
    finally:
        alice.close()
        bob.close()
    return out


def _disabled_answers(sasl: str) -> list[tuple[object, ...]]:
    with _login(sasl, "alice") as c:
        out: list[tuple[object, ...]] = [
            ("create", _created(c.request(38, 3, CreateDelegationTokenRequest(max_lifetime_ms=-1))))]
        r = c.request(39, 2, RenewDelegationTokenRequest(hmac=b"x", renew_period_ms=-1))
        out.append(("renew", r.error_code, r.expiry_timestamp_ms))
        r = c.request(40, 2, ExpireDelegationTokenRequest(hmac=b"x", expiry_time_period_ms=-1))
        out.append(("expire", r.error_code, r.expiry_timestamp_ms))
        out.append(("describe", _described(c.request(41, 3, DescribeDelegationTokenRequest(owners=None)), {})))
    return out


def _kafka(tmp_path: Path, security: dict[str, str]) -> tuple[str, str, object]:
    port, cport, sport = free_port(), free_port(), free_port()
    overrides = {
        **security,
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},SASL_PLAINTEXT://127.0.0.1:{sport}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sport}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    }
    _, stop = start_reference_kafka(tmp_path, port=port, overrides=overrides)
    return f"127.0.0.1:{sport}", f"127.0.0.1:{port}", stop


def _kbroker(tmp_path: Path, security: dict[str, str]) -> tuple[KBroker, str, str]:
    sport, port = free_port(), free_port()
    broker = KBroker(tmp_path, port=sport, overrides={
        **security, "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sport},PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT"})
    return broker, f"127.0.0.1:{sport}", f"127.0.0.1:{port}"


def test_delegation_token_apis_answered_as_kafka(tmp_path: Path) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    security = {**SECURITY, "delegation.token.secret.key": SECRET}
    sasl, plaintext, stop = _kafka(tmp_path / "kafka", security)
    try:
        kafka = _answers(sasl, plaintext)
    finally:
        stop()  # type: ignore[operator]
    broker, sasl, plaintext = _kbroker(tmp_path / "kbroker", security)
    with broker:
        ours = _answers(sasl, plaintext)
    assert ours == kafka


def test_tokens_disabled_answered_as_kafka(tmp_path: Path) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    sasl, _, stop = _kafka(tmp_path / "kafka", SECURITY)
    try:
        kafka = _disabled_answers(sasl)
    finally:
        stop()  # type: ignore[operator]
    broker, sasl, _ = _kbroker(tmp_path / "kbroker", SECURITY)
    with broker:
        ours = _disabled_answers(sasl)
    assert ours == kafka
