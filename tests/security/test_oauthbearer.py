"""SASL/OAUTHBEARER: the sans-IO validators (unsecured JWS, JWKS-signed RS256) and a real kbroker
with two OAUTHBEARER listeners -- UNSECURED (Kafka's default validator, for development) and JWKS
(OAuthBearerValidatorCallbackHandler against a JWKS served over HTTP by the test) -- driven by
librdkafka (confluent-kafka: its built-in unsecured JWT, and an `oauth_cb` returning RS256 tokens) and
the Java client (OAuthBearerLoginModule's unsecured login).

Shows: valid tokens authenticate as `User:<sub>` (ACLs on: only the super user and the allowed user
produce); expired tokens, tokens signed by another key, a wrong audience or issuer, `alg` other than
`none` on the unsecured listener, a missing required scope are refused with Kafka's
`{"status":"invalid_token"}` JSON as the message; the broker carries on.
"""

from __future__ import annotations

import base64
import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.security.oauthbearer import (
    JwksKeys,
    JwksValidator,
    OAuthBearerServer,
    OAuthBearerValidationError,
    UnsecuredJwsValidator,
    parse_client_initial_response,
    parse_jwks,
)
from kbroker.security.sasl import SaslServerAuthenticator, SaslServerConfig
from tests.support.broker import KBroker, free_port
from tests.support.java import java_unavailable_reason, run_java_main

NOW_MS = 1_800_000_000_000


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unsecured_token(claims: dict[str, object], alg: str = "none") -> str:
    return f"{_b64(json.dumps({'alg': alg}).encode())}.{_b64(json.dumps(claims).encode())}."


@dataclass(frozen=True)
class RsaKey:
    path: Path
    kid: str

    def jwk(self) -> dict[str, str]:
        out = subprocess.run(["openssl", "rsa", "-in", str(self.path), "-noout", "-modulus"], check=True,
                             capture_output=True, text=True).stdout
        n = bytes.fromhex(out.strip().split("=", 1)[1])
        return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256", "n": _b64(n), "e": _b64(b"\x01\x00\x01")}

    def sign(self, claims: dict[str, object], kid: str | None = None) -> str:
        head = _b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": kid or self.kid}).encode())
        signed = f"{head}.{_b64(json.dumps(claims).encode())}"
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.path)], input=signed.encode(),
                             check=True, capture_output=True).stdout
        return f"{signed}.{_b64(sig)}"


def rsa_key(d: Path, kid: str) -> RsaKey:
    path = d / f"{kid}.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(path), "2048"], check=True, capture_output=True)
    return RsaKey(path, kid)


# -- sans-IO ------------------------------------------------------------------------------------------

def test_unsecured_validator_follows_kafkas_checks() -> None:
    v = UnsecuredJwsValidator.from_jaas_options({"unsecuredValidatorRequiredScope": "kafka",
                                                 "unsecuredValidatorAllowableClockSkewMs": "1000"}, lambda: NOW_MS)
    exp = NOW_MS / 1000 + 60
    ok = v.validate(unsecured_token({"sub": "alice", "exp": exp, "iat": NOW_MS / 1000, "scope": "kafka other"}))
    assert (ok.principal_name, ok.lifetime_ms) == ("alice", int(exp * 1000))
    refusals = {
        "expired": ({"sub": "a", "exp": NOW_MS / 1000 - 2, "scope": "kafka"}, "minus allowable clock skew"),
        "in skew": ({"sub": "a", "exp": NOW_MS / 1000 - 0.5, "scope": "kafka"}, None),
        "no exp": ({"sub": "a", "scope": "kafka"}, "Required claim missing: exp"),
        "no sub": ({"exp": exp, "scope": "kafka"}, "Required claim missing: sub"),
        "iat ahead": ({"sub": "a", "exp": exp, "iat": NOW_MS / 1000 + 5, "scope": "kafka"}, "Issued At"),
        "no scope": ({"sub": "a", "exp": exp, "scope": "other"}, "missing a required scope (kafka)"),
    }
    for name, (claims, message) in refusals.items():
        if message is None:
            v.validate(unsecured_token(claims))
            continue
        with pytest.raises(OAuthBearerValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
            v.validate(unsecured_token(claims))
        assert name
    with pytest.raises(OAuthBearerValidationError, match="alg none"):
        v.validate(unsecured_token({"sub": "a", "exp": exp, "scope": "kafka"}, alg="HS256"))
    with pytest.raises(OAuthBearerValidationError) as insufficient:
        v.validate(unsecured_token({"sub": "a", "exp": exp}))
    assert insufficient.value.json() == '{"status":"insufficient_scope","scope":"kafka"}'


def test_jwks_validator_checks_signature_audience_issuer_and_times(tmp_path: Path) -> None:
    key, other = rsa_key(tmp_path, "k1"), rsa_key(tmp_path, "k2")
    refreshes: list[int] = []
    keys = JwksKeys(parse_jwks(json.dumps({"keys": [key.jwk()]}).encode()), lambda: refreshes.append(1))
    v = JwksValidator(keys, lambda: NOW_MS, expected_audience=("kafka",), expected_issuer="https://idp",
                      clock_skew_ms=30000)
    good = {"sub": "svc", "aud": ["kafka", "x"], "iss": "https://idp", "exp": NOW_MS / 1000 + 300,
            "iat": NOW_MS / 1000}
    assert v.validate(key.sign(good)).principal_name == "svc"
    within_skew = {**good, "exp": NOW_MS / 1000 - 10, "iat": NOW_MS / 1000 - 60}
    assert v.validate(key.sign(within_skew)).principal_name == "svc"
    cases = [
        (other.sign(good, kid="k1"), "signature verification failed"),
        (other.sign(good), "No key in the JWKS for kid 'k2'"),
        (key.sign({**good, "aud": "elsewhere"}), "Audience"),
        (key.sign({**good, "iss": "https://evil"}), "Issuer"),
        (key.sign({**good, "exp": NOW_MS / 1000 - 31}), "Expiration Time"),
        (key.sign(good)[:-4] + "AAAA", "signature verification failed"),
        (unsecured_token(good), "Unsupported JWS algorithm"),
        ("not.a-token", "Invalid"),
    ]
    for token, message in cases:
        with pytest.raises(OAuthBearerValidationError, match=message):
            v.validate(token)
    assert refreshes == [1]  # the unknown kid asked for a JWKS refresh


def test_client_initial_response_and_error_challenge() -> None:
    token = unsecured_token({"sub": "alice", "exp": NOW_MS / 1000 + 60})
    assert parse_client_initial_response(f"n,,\x01auth=Bearer {token}\x01x=1\x01\x01".encode()) == \
        (token, "", {"x": "1"})
    assert parse_client_initial_response(f"n,a=alice,\x01auth=Bearer {token}\x01\x01".encode())[1] == "alice"
    for bad in (b"y,,\x01auth=Bearer x\x01\x01", b"n,,\x01auth=Basic x\x01\x01", b"n,,\x01auth=Bearer x\x01"):
        with pytest.raises(ValueError):
            parse_client_initial_response(bad)
    config = SaslServerConfig(("OAUTHBEARER",), {}, lambda m, u: None,
                              oauthbearer=UnsecuredJwsValidator(lambda: NOW_MS), connections_max_reauth_ms=600000)
    ok = SaslServerAuthenticator(config)
    ok.on_api_versions()
    assert ok.handshake("OAUTHBEARER").error_code == 0
    result = ok.authenticate(f"n,,\x01auth=Bearer {token}\x01\x01".encode(), NOW_MS)
    # KIP-368: the session ends with the token (60 s), before connections.max.reauth.ms (10 min)
    assert ok.complete and str(ok.principal) == "User:alice" and result.session_lifetime_ms == 60000
    bad = SaslServerAuthenticator(config)
    bad.on_api_versions()
    bad.handshake("OAUTHBEARER")
    expired = unsecured_token({"sub": "alice", "exp": NOW_MS / 1000 - 1})
    challenge = bad.authenticate(f"n,,\x01auth=Bearer {expired}\x01\x01".encode(), NOW_MS)
    assert (challenge.error_code, challenge.auth_bytes) == (0, b'{"status":"invalid_token"}')
    final = bad.authenticate(b"\x01", NOW_MS)
    assert (final.error_code, final.error_message, final.close) == (58, '{"status":"invalid_token"}', True)
    assert OAuthBearerServer  # the mechanism class the state machine runs


# -- a real broker -------------------------------------------------------------------------------

@dataclass
class OAuthBroker:
    broker: KBroker
    ports: dict[str, int]
    key: RsaKey
    other: RsaKey


class _Jwks(http.server.BaseHTTPRequestHandler):
    document = b"{}"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.document)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthBroker]:
    d = tmp_path_factory.mktemp("oauthbearer")
    key, other = rsa_key(d, "kafka-key"), rsa_key(d, "rogue")
    _Jwks.document = json.dumps({"keys": [key.jwk()]}).encode()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Jwks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ports = {"PLAINTEXT": free_port(), "UNSECURED": free_port(), "JWKS": free_port()}
    overrides = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,UNSECURED:SASL_PLAINTEXT,JWKS:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.unsecured.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            "unsecuredValidatorRequiredScope=\"\";",
        "listener.name.jwks.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.jwks.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "listener.name.jwks.sasl.oauthbearer.jwks.endpoint.url": f"http://127.0.0.1:{server.server_port}/jwks",
        "listener.name.jwks.sasl.oauthbearer.expected.audience": "kafka",
        "listener.name.jwks.sasl.oauthbearer.expected.issuer": "https://idp.example",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:alice;User:svc",
        "connection.failed.authentication.delay.ms": "50",
        "num.partitions": "1",
    }
    broker = KBroker(d, overrides=overrides, port=ports["PLAINTEXT"])
    try:
        with broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("oauth", 1, 1)])["oauth"].result(20)
            yield OAuthBroker(broker, ports, key, other)
    finally:
        server.shutdown()


def _produce(conf: dict[str, object], n: int = 3) -> None:
    errors: list[object] = []
    p = Producer({**conf, "acks": "all", "message.timeout.ms": "8000",
                  "error_cb": lambda e: errors.append(e)})
    for i in range(n):
        p.produce("oauth", value=f"v{i}".encode(), on_delivery=lambda e, m: errors.append(e) if e else None)
    # A refused login shows up at once in error_cb; waiting out message.timeout.ms for each bad token
    # cost 8 s apiece.
    deadline = time.monotonic() + 12
    while len(p) and not errors and time.monotonic() < deadline:
        p.poll(0.05)
    remaining = len(p)
    if remaining or errors:
        raise KafkaException(errors[0] if errors else "undelivered")


@pytest.mark.interop
def test_librdkafka_unsecured_jwt(oauth: OAuthBroker) -> None:
    base = {"bootstrap.servers": f"127.0.0.1:{oauth.ports['UNSECURED']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true"}
    _produce({**base, "sasl.oauthbearer.config": "principal=alice"})
    # Authenticated as User:bob, who is not a super user and has no ACL: refused by the authorizer.
    with pytest.raises(KafkaException, match="(?i)authoriz"):
        _produce({**base, "sasl.oauthbearer.config": "principal=bob"}, n=1)


@pytest.mark.interop
def test_librdkafka_jwks_signed_tokens(oauth: OAuthBroker) -> None:
    def conf(token_of: object) -> dict[str, object]:
        return {"bootstrap.servers": f"127.0.0.1:{oauth.ports['JWKS']}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER", "oauth_cb": token_of}

    def claims(**extra: object) -> dict[str, object]:
        now = time.time()
        return {"sub": "svc", "aud": "kafka", "iss": "https://idp.example", "iat": now, "exp": now + 600, **extra}

    _produce(conf(lambda _cfg: (oauth.key.sign(claims()), time.time() + 600)))
    log_before = len(oauth.broker.log_text())
    for bad in (oauth.other.sign(claims(), kid="kafka-key"), oauth.key.sign(claims(aud="other")),
                oauth.key.sign(claims(exp=time.time() - 120))):
        with pytest.raises(KafkaException, match="invalid_token"):
            _produce(conf(lambda _cfg, t=bad: (t, time.time() + 600)), n=1)
    log = oauth.broker.log_text()[log_before:]
    assert "Failed authentication with 127.0.0.1" in log and "Traceback" not in log


@pytest.mark.interop
@pytest.mark.java
def test_java_client_unsecured_login(oauth: OAuthBroker, tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        "unsecuredLoginStringClaim_sub=\"alice\";\n")
    proc = run_java_main("kafka-console-producer", [
        "--bootstrap-server", f"127.0.0.1:{oauth.ports['UNSECURED']}", "--topic", "oauth",
        "--command-config", str(props)], input="from-java-1\nfrom-java-2\n", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ERROR" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.interop
def test_kbroker_client_logs_in_with_an_unsecured_token(oauth: OAuthBroker) -> None:
    """What a kbroker broker does with sasl.mechanism.inter.broker.protocol=OAUTHBEARER and
    OAuthBearerLoginModule's unsecuredLoginStringClaim_sub (KafkaConfig.client_security)."""
    import asyncio

    from kbroker.client import AuthenticationError, ClientSecurity, NodeConnection, SaslClientCredentials
    from kbroker.config import unsecured_login_token
    from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse

    async def metadata(options: dict[str, str]) -> MetadataResponse:
        creds = SaslClientCredentials("OAUTHBEARER", token_provider=lambda: unsecured_login_token(options))
        conn = NodeConnection("127.0.0.1", oauth.ports["UNSECURED"], security=ClientSecurity("SASL_PLAINTEXT", None, creds))
        try:
            await conn.connect()
            return await conn.request(3, MetadataRequest(topics=None), MetadataResponse, version=12)
        finally:
            await conn.close()

    resp = asyncio.run(metadata({"unsecuredLoginStringClaim_sub": "alice"}))
    assert [t.name for t in resp.topics] == ["oauth"]  # alice is a super user: she sees the topic
    with pytest.raises(AuthenticationError, match="invalid_token"):
        asyncio.run(metadata({"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginLifetimeSeconds": "-10"}))


@pytest.mark.interop
def test_unreadable_jwks_stops_the_start_cleanly(tmp_path: Path) -> None:
    from tests.support.broker import KBrokerError

    port = free_port()
    kb = KBroker(tmp_path, port=port, overrides={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": f"http://127.0.0.1:{free_port()}/jwks",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "200"})
    with pytest.raises(KBrokerError, match="Cannot configure SASL on listener SASL_PLAINTEXT: cannot read the JWKS"):
        kb.start()
    assert "Traceback" not in kb.log_text()
