"""Delegation tokens without processes (KIP-48): the controller's `DelegationTokenControlManager` on a
fake clock (create / renew / expire / sweep and each error code Kafka's manager answers), the image's
replay of DelegationTokenRecord / RemoveDelegationTokenRecord (and its snapshot records), the HMAC, and
SCRAM authentication with `tokenauth=true` in the SASL state machine (principal = owner, flagged
token-authenticated, session bounded by the token's expiry)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from kbroker.controller.delegation_token_control import DelegationTokenConfig, DelegationTokenControlManager
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import DelegationTokenImage, MetadataImage
from kbroker.metadata.image_writer import image_records
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.create_delegation_token import CreateDelegationTokenRequest
from kbroker.protocol.messages.expire_delegation_token import ExpireDelegationTokenRequest
from kbroker.protocol.messages.renew_delegation_token import RenewDelegationTokenRequest
from kbroker.protocol.metadata_records import DelegationTokenRecord, RemoveDelegationTokenRecord
from kbroker.security import scram
from kbroker.security.delegation_token import (
    TokenCredential,
    TokenCredentialCache,
    create_hmac,
    filter_token,
    hmac_as_base64,
)
from kbroker.security.sasl import SaslServerAuthenticator, SaslServerConfig

SECRET = "the-secret"
HOUR = 3_600_000
Renewer = CreateDelegationTokenRequest.CreatableRenewers


class Stack:
    """A control manager over an image that the records it returns are replayed into."""

    def __init__(self, config: DelegationTokenConfig | None = None) -> None:
        self.now = 1_000_000
        self.image = MetadataImage.EMPTY
        self.manager = DelegationTokenControlManager(
            lambda: self.image.delegation_tokens,
            config or DelegationTokenConfig(SECRET, max_lifetime_ms=10 * HOUR, expiry_time_ms=HOUR),
            lambda: self.now)

    def apply(self, records: list[object]) -> None:
        delta = MetadataDelta(self.image)
        delta.replay_all(records)
        self.image = delta.apply()

    def create(self, requester: str = "User:alice", **kw: object) -> tuple[str, bytes]:
        result = self.manager.create_delegation_token(requester, CreateDelegationTokenRequest(**kw))  # type: ignore[arg-type]
        assert result.response.error_code == 0, result.response
        self.apply(result.records)
        return result.response.token_id, result.response.hmac


def test_hmac_is_hmac_sha512_of_the_token_id_keyed_with_the_secret() -> None:
    mac = create_hmac("d7c2a4e1-token", "k€y")
    assert mac == hmac.new("k€y".encode(), b"d7c2a4e1-token", hashlib.sha512).digest()
    assert len(mac) == 64
    assert hmac_as_base64(mac) == base64.b64encode(mac).decode()


def test_create_writes_a_token_record_with_kafkas_timestamps() -> None:
    s = Stack()
    result = s.manager.create_delegation_token("User:alice", CreateDelegationTokenRequest(
        renewers=[Renewer(principal_type="User", principal_name="bob")], max_lifetime_ms=-1))
    r = result.response
    assert (r.error_code, r.principal_type, r.principal_name) == (0, "User", "alice")
    assert (r.token_requester_principal_type, r.token_requester_principal_name) == ("User", "alice")
    assert r.issue_timestamp_ms == s.now
    assert r.max_timestamp_ms == s.now + 10 * HOUR
    assert r.expiry_timestamp_ms == s.now + HOUR
    assert r.hmac == create_hmac(r.token_id, SECRET)
    [record] = result.records
    assert isinstance(record, DelegationTokenRecord)
    assert (record.owner, record.requester, record.renewers, record.token_id) == (
        "User:alice", "User:alice", ["User:bob"], r.token_id)
    # A shorter max lifetime asked by the client caps both timestamps.
    short = s.manager.create_delegation_token("User:alice", CreateDelegationTokenRequest(max_lifetime_ms=60_000))
    assert short.response.max_timestamp_ms == short.response.expiry_timestamp_ms == s.now + 60_000


def test_owner_other_than_requester_kip_373() -> None:
    s = Stack()
    result = s.manager.create_delegation_token("User:admin", CreateDelegationTokenRequest(
        owner_principal_type="User", owner_principal_name="carol"))
    assert (result.response.principal_name, result.response.token_requester_principal_name) == ("carol", "admin")
    s.apply(result.records)
    token = s.image.delegation_tokens.tokens[result.response.token_id]
    assert (token.owner, token.requester) == ("User:carol", "User:admin")


def test_errors_disabled_and_invalid_renewer() -> None:
    off = Stack(DelegationTokenConfig(None))
    r = off.manager.create_delegation_token("User:alice", CreateDelegationTokenRequest())
    assert r.response.error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED and not r.records
    assert off.manager.renew_delegation_token("User:alice", RenewDelegationTokenRequest(hmac=b"x")
                                              ).response.error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    assert off.manager.expire_delegation_token("User:alice", ExpireDelegationTokenRequest(hmac=b"x")
                                               ).response.error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    old = DelegationTokenControlManager(lambda: DelegationTokenImage.EMPTY, DelegationTokenConfig(SECRET),
                                        lambda: 0, lambda: 13)  # metadata.version 3.6-IV1
    assert old.create_delegation_token("User:alice", CreateDelegationTokenRequest()
                                       ).response.error_code == ErrorCode.UNSUPPORTED_VERSION
    s = Stack()
    r = s.manager.create_delegation_token("User:alice", CreateDelegationTokenRequest(
        renewers=[Renewer(principal_type="Group", principal_name="ops")]))
    assert r.response.error_code == ErrorCode.INVALID_PRINCIPAL_TYPE and not r.records


def test_renew_extends_the_expiry_up_to_the_max_timestamp() -> None:
    s = Stack()
    token_id, mac = s.create(renewers=[Renewer(principal_type="User", principal_name="bob")])
    s.now += HOUR // 2
    r = s.manager.renew_delegation_token("User:bob", RenewDelegationTokenRequest(hmac=mac, renew_period_ms=-1))
    assert r.response.error_code == 0 and r.response.expiry_timestamp_ms == s.now + HOUR
    s.apply(r.records)
    assert s.image.delegation_tokens.tokens[token_id].expiration_timestamp == s.now + HOUR
    # A shorter renew period than delegation.token.expiry.time.ms is honoured; never past the max timestamp.
    r = s.manager.renew_delegation_token("User:alice", RenewDelegationTokenRequest(hmac=mac, renew_period_ms=1000))
    assert r.response.expiry_timestamp_ms == s.now + 1000
    capped = Stack(DelegationTokenConfig(SECRET, max_lifetime_ms=2 * HOUR, expiry_time_ms=3 * HOUR // 2))
    _, mac = capped.create()
    capped.now += HOUR
    r = capped.manager.renew_delegation_token("User:alice", RenewDelegationTokenRequest(hmac=mac))
    assert r.response.expiry_timestamp_ms == 1_000_000 + 2 * HOUR


def test_renew_and_expire_errors() -> None:
    s = Stack()
    _, mac = s.create()
    assert s.manager.renew_delegation_token("User:alice", RenewDelegationTokenRequest(hmac=b"nope")
                                            ).response.error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    assert s.manager.renew_delegation_token("User:mallory", RenewDelegationTokenRequest(hmac=mac)
                                            ).response.error_code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    assert s.manager.expire_delegation_token("User:mallory", ExpireDelegationTokenRequest(hmac=mac)
                                             ).response.error_code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    s.now += HOUR + 1
    assert s.manager.renew_delegation_token("User:alice", RenewDelegationTokenRequest(hmac=mac)
                                            ).response.error_code == ErrorCode.DELEGATION_TOKEN_EXPIRED
    assert s.manager.expire_delegation_token("User:alice", ExpireDelegationTokenRequest(
        hmac=mac, expiry_time_period_ms=1000)).response.error_code == ErrorCode.DELEGATION_TOKEN_EXPIRED
    # A negative period removes even an expired token at once.
    r = s.manager.expire_delegation_token("User:alice", ExpireDelegationTokenRequest(hmac=mac,
                                                                                    expiry_time_period_ms=-1))
    assert r.response.error_code == 0 and r.response.expiry_timestamp_ms == s.now
    assert [type(x) for x in r.records] == [RemoveDelegationTokenRecord]
    s.apply(r.records)
    assert s.image.delegation_tokens.is_empty()


def test_expire_with_a_period_shortens_the_token() -> None:
    s = Stack()
    token_id, mac = s.create()
    r = s.manager.expire_delegation_token("User:alice", ExpireDelegationTokenRequest(hmac=mac,
                                                                                    expiry_time_period_ms=5000))
    assert r.response.expiry_timestamp_ms == s.now + 5000
    s.apply(r.records)
    assert s.image.delegation_tokens.tokens[token_id].expiration_timestamp == s.now + 5000


def test_sweep_removes_tokens_past_their_expiry() -> None:
    s = Stack()
    old, _ = s.create()
    s.now += HOUR // 2
    young, _ = s.create()
    assert s.manager.sweep_expired_delegation_tokens() == []
    s.now += HOUR // 2 + 1
    records = s.manager.sweep_expired_delegation_tokens()
    assert records == [RemoveDelegationTokenRecord(token_id=old)]
    s.apply(records)
    assert set(s.image.delegation_tokens.tokens) == {young}


def test_tokens_survive_a_snapshot() -> None:
    s = Stack()
    token_id, _ = s.create(renewers=[Renewer(principal_type="User", principal_name="bob")])
    records = [r for r in image_records(s.image) if isinstance(r, DelegationTokenRecord)]
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay_all(records)
    assert delta.apply().delegation_tokens == s.image.delegation_tokens
    assert s.image.delegation_tokens.tokens[token_id].renewers == ("User:bob",)
    assert DelegationTokenImage.EMPTY.is_empty()


def test_describe_filter_kip_373() -> None:
    def no(_: str) -> bool:
        return False

    args = ("tok", "User:alice", "User:admin", ["User:bob"])
    assert filter_token("User:alice", None, *args, no, no)
    assert filter_token("User:bob", None, *args, no, no)
    assert not filter_token("User:carol", None, *args, no, no)
    assert filter_token("User:carol", None, *args, lambda t: t == "tok", no)
    assert filter_token("User:carol", None, *args, no, lambda o: o == "User:alice")
    assert not filter_token("User:alice", ["User:dave"], *args, no, no)
    assert filter_token("User:alice", ["User:bob"], *args, no, no)
    # KIP-373: the requester of a token made for another owner sees it, and matches as an owner filter.
    assert filter_token("User:admin", None, *args, no, no)
    assert filter_token("User:alice", ["User:admin"], *args, no, no)


# -- SCRAM with tokenauth=true -------------------------------------------------------------------------

def _client_final(mechanism: str, password: str, client_first_bare: str, server_first: bytes) -> bytes:
    h = scram.MECHANISMS[mechanism]
    attrs = scram.parse_attributes(server_first.decode())
    salted = scram.salted_password(h, password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    ck = scram.client_key(h, salted)
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    proof = scram.xor(ck, scram.hmac_digest(h, hashlib.new(h, ck).digest(), auth))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def _token_auth(token_id: str, password: str, *, tokens_enabled: bool = True, expiry: int = 10_000_000,
                reauth_ms: int = 0, now: int = 1_000_000) -> SaslServerAuthenticator:
    cache = TokenCredentialCache()
    mac = create_hmac("tok-1", SECRET)

    def tokens(mechanism: str, tid: str) -> TokenCredential | None:
        if tid != "tok-1":
            return None
        return TokenCredential(cache.credential(mechanism, tid, mac), "alice", expiry)

    config = SaslServerConfig(("SCRAM-SHA-256",), {}, lambda m, u: None, connections_max_reauth_ms=reauth_ms,
                              token_credentials=tokens if tokens_enabled else None)
    a = SaslServerAuthenticator(config)
    a.on_api_versions()
    a.handshake("SCRAM-SHA-256")
    bare = f"n={token_id},r=abcdefgh,tokenauth=true"
    r1 = a.authenticate(f"n,,{bare}".encode(), now_ms=now)
    if r1.error_code:
        return a
    a.authenticate(_client_final("SCRAM-SHA-256", password, bare, r1.auth_bytes), now_ms=now)
    return a


def test_token_authentication_makes_the_owner_the_principal() -> None:
    password = hmac_as_base64(create_hmac("tok-1", SECRET))
    a = _token_auth("tok-1", password)
    assert a.complete and str(a.principal) == "User:alice" and a.token_authenticated
    # Kafka's SCRAM server bounds the session by the token's expiry, with or without re-authentication.
    assert a.session_expiration_ms == 10_000_000
    assert _token_auth("tok-1", password, reauth_ms=60_000).session_expiration_ms == 1_060_000


def test_token_authentication_failures() -> None:
    password = hmac_as_base64(create_hmac("tok-1", SECRET))
    assert _token_auth("tok-1", "wrong").state.name == "FAILED"
    unknown = _token_auth("tok-2", password)
    assert unknown.state.name == "FAILED" and unknown.failure_message == "Token Authentication failed: Invalid tokenId : tok-2"
    assert _token_auth("tok-1", password, tokens_enabled=False).state.name == "FAILED"
    # An expired token not swept yet authenticates, but its session ends at once (Kafka's zeroIfNegative).
    expired = _token_auth("tok-1", password, expiry=500_000)
    assert expired.complete and expired.session_expired(1_000_000)


def test_unknown_or_malformed_scram_extensions_fail() -> None:
    for bare in ("n=tok-1,r=abcdefgh,foo=bar", "n=tok-1,r=abcdefgh,tokenauth"):
        a = SaslServerAuthenticator(SaslServerConfig(("SCRAM-SHA-256",), {}, lambda m, u: None))
        a.on_api_versions()
        a.handshake("SCRAM-SHA-256")
        r = a.authenticate(f"n,,{bare}".encode())
        assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and r.close
