"""The SASL server state machine (kbroker.security.sasl) driven directly: no sockets, no broker."""

from __future__ import annotations

import base64
import hashlib

import pytest

from kbroker.protocol.errors import ErrorCode
from kbroker.security import scram
from kbroker.security.sasl import (
    API_VERSIONS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslServerAuthenticator,
    SaslServerConfig,
    SaslState,
    ScramServer,
)

METADATA = 3
USERS = {"alice": "alice-secret"}
CREDS: dict[tuple[str, str], scram.ScramCredential] = {}


def lookup(mechanism: str, user: str) -> scram.ScramCredential | None:
    return CREDS.get((mechanism, user))


def authenticator(*mechanisms: str) -> SaslServerAuthenticator:
    return SaslServerAuthenticator(SaslServerConfig(mechanisms or ("PLAIN",), USERS, lookup))


def test_only_api_versions_and_sasl_before_authentication() -> None:
    a = authenticator()
    assert a.allows(API_VERSIONS) and a.allows(SASL_HANDSHAKE)
    assert not a.allows(METADATA) and not a.allows(SASL_AUTHENTICATE)
    a.on_api_versions()
    assert a.state is SaslState.HANDSHAKE_REQUEST and not a.allows(API_VERSIONS)
    assert a.handshake("PLAIN").error_code == ErrorCode.NONE
    assert a.allows(SASL_AUTHENTICATE) and not a.allows(METADATA)
    r = a.authenticate(b"\x00alice\x00alice-secret")
    assert r.error_code == ErrorCode.NONE and a.complete and str(a.principal) == "User:alice"
    assert a.allows(METADATA)


def test_unsupported_mechanism_lists_the_enabled_ones_and_fails() -> None:
    a = authenticator("PLAIN", "SCRAM-SHA-512")
    r = a.handshake("GSSAPI")
    assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and r.mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    assert a.state is SaslState.FAILED and not a.allows(SASL_AUTHENTICATE)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
        (b"\x00bob\x00alice-secret", "Authentication failed: Invalid username or password"),
        (b"\x00\x00x", "Authentication failed: username not specified"),
        (b"\x00alice\x00", "Authentication failed: password not specified"),
        (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"admin\x00alice\x00alice-secret",
         "Authentication failed: Client requested an authorization id that is different from username"),
    ],
)
def test_plain_failures_carry_kafkas_messages(token: bytes, message: str) -> None:
    a = authenticator()
    a.handshake("PLAIN")
    r = a.authenticate(token)
    assert (r.error_code, r.error_message, r.close) == (ErrorCode.SASL_AUTHENTICATION_FAILED, message, True)
    assert a.state is SaslState.FAILED and a.principal is None


def test_scram_sha_256_rfc7677_vector() -> None:
    """RFC 7677 section 3: user "user", password "pencil", the RFC's nonces and salt."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram.new_credential("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    server = ScramServer("SCRAM-SHA-256", lambda m, u: cred if u == "user" else None,
                         nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


def _client_final(mechanism: str, password: str, client_first_bare: str, server_first: bytes) -> bytes:
    h = scram.MECHANISMS[mechanism]
    attrs = scram.parse_attributes(server_first.decode())
    salted = scram.salted_password(h, password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    ck = scram.client_key(h, salted)
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    proof = scram.xor(ck, scram.hmac_digest(h, hashlib.new(h, ck).digest(), auth))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_and_wrong_password(mechanism: str) -> None:
    CREDS[(mechanism, "alice")] = scram.new_credential(mechanism, "alice-secret")
    for password, ok in (("alice-secret", True), ("nope", False)):
        a = authenticator(mechanism)
        a.on_api_versions()
        a.handshake(mechanism)
        bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL"
        r1 = a.authenticate(f"n,,{bare}".encode())
        assert r1.error_code == ErrorCode.NONE and r1.auth_bytes.startswith(b"r=fyko+d2lbbFgONRv9qkxdawL")
        r2 = a.authenticate(_client_final(mechanism, password, bare, r1.auth_bytes))
        if ok:
            assert r2.error_code == ErrorCode.NONE and r2.auth_bytes.startswith(b"v=")
            assert str(a.principal) == "User:alice"
        else:
            assert r2.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and r2.close
            assert r2.error_message == ("Authentication failed during authentication due to invalid credentials "
                                        f"with SASL mechanism {mechanism}")


def test_scram_unknown_user_fails_with_the_generic_message() -> None:
    a = authenticator("SCRAM-SHA-256")
    a.handshake("SCRAM-SHA-256")
    r = a.authenticate(b"n,,n=nobody,r=abc")
    assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert r.error_message == ("Authentication failed during authentication due to invalid credentials with "
                               "SASL mechanism SCRAM-SHA-256")


@pytest.mark.parametrize("token", [b"", b"\xff\xfe", b"garbage", b"n,,r=only", b"x,,n=a,r=b"])
def test_scram_malformed_first_messages_fail_cleanly(token: bytes) -> None:
    a = authenticator("SCRAM-SHA-256")
    a.handshake("SCRAM-SHA-256")
    assert a.authenticate(token).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_scram_sasl_names_are_decoded() -> None:
    assert scram.decode_sasl_name("a=2Cb=3Dc") == "a,b=c"
    assert scram.encode_sasl_name("a,b=c") == "a=2Cb=3Dc"
    with pytest.raises(ValueError):
        scram.decode_sasl_name("a=b")
