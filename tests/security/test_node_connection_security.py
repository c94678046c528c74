"""`NodeConnection` over TLS and SASL (the client side every inter-node path uses), against a real
kbroker process with SSL, SASL_SSL and SASL_PLAINTEXT listeners, plus the sans-IO client mechanisms
against kbroker's server state machines and `KafkaConfig.client_security` (which listener, which
mechanism, which JAAS login).

Shows: PLAIN and SCRAM-SHA-256/512 logins succeed and the connection then serves requests; a wrong
password raises `AuthenticationError` with the broker's message; an untrusted server certificate and a
host name the certificate does not name fail the TLS handshake; a SCRAM server that does not know the
password (a forged server signature) is refused by the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kbroker.client import (
    AuthenticationError,
    ClientSecurity,
    NodeConnection,
    SaslClientCredentials,
    TlsClientSettings,
    build_client_context,
)
from kbroker.client.security import PlainClient, SaslClientError, ScramClient
from kbroker.config import KafkaConfig
from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from kbroker.security import scram
from kbroker.security.sasl import SaslServerAuthenticator, SaslServerConfig, SaslState
from tests.security.certs import Pki, make_pki
from tests.support.broker import KBroker, free_port

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_broker="broker-secret";')
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")


# -- sans-IO: the client mechanisms against the server state machines --------------------------------

def _exchange(server: SaslServerAuthenticator, client: PlainClient | ScramClient) -> SaslServerAuthenticator:
    server.on_api_versions()
    assert server.handshake(server.config.enabled_mechanisms[0]).error_code == 0
    challenge = b""
    while not server.complete:
        token = client.evaluate(challenge)
        result = server.authenticate(token)
        if result.error_code != 0:
            return server
        challenge = result.auth_bytes
    client.evaluate(challenge)
    assert client.complete
    return server


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_against_the_server(mechanism: str) -> None:
    cred = scram.new_credential(mechanism, "pw", iterations=4096)
    config = SaslServerConfig((mechanism,), {}, lambda m, u: cred if u == "broker" else None)
    ok = _exchange(SaslServerAuthenticator(config), ScramClient(mechanism, "broker", "pw"))
    assert ok.complete and str(ok.principal) == "User:broker"
    bad = _exchange(SaslServerAuthenticator(config), ScramClient(mechanism, "broker", "wrong"))
    assert bad.state is SaslState.FAILED


def test_scram_client_refuses_a_forged_server_signature() -> None:
    client = ScramClient("SCRAM-SHA-256", "broker", "pw", nonce="abc")
    client.evaluate(b"")
    client.evaluate(b"r=abcdef,s=c2FsdA==,i=4096")
    with pytest.raises(SaslClientError, match="server signature"):
        client.evaluate(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    with pytest.raises(SaslClientError, match="nonce"):
        other = ScramClient("SCRAM-SHA-256", "broker", "pw", nonce="abc")
        other.evaluate(b"")
        other.evaluate(b"r=zzz,s=c2FsdA==,i=4096")


def test_plain_client_against_the_server() -> None:
    config = SaslServerConfig(("PLAIN",), {"broker": "s"}, lambda m, u: None)
    ok = _exchange(SaslServerAuthenticator(config), PlainClient("broker", "s"))
    assert ok.complete and str(ok.principal) == "User:broker"


# -- KafkaConfig.client_security: Kafka's keys ------------------------------------------------------

def test_client_security_from_kafka_keys(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    props = {
        "listeners": "EXTERNAL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-pw";',
        "log.dirs": str(tmp_path / "data"),
    }
    security = KafkaConfig(props).inter_broker_security()
    assert security.protocol == "SASL_SSL" and security.ssl_context is not None and security.error is None
    assert security.sasl == SaslClientCredentials("SCRAM-SHA-512", "broker", "b-pw")
    # No JAAS entry for the inter-broker mechanism: the node starts, each connection fails saying why.
    props["sasl.mechanism.inter.broker.protocol"] = "SCRAM-SHA-256"
    missing = KafkaConfig(props).inter_broker_security()
    assert missing.error is not None and "listener.name.internal.scram-sha-256.sasl.jaas.config" in missing.error
    # The default: PLAINTEXT, nothing to configure.
    plain = KafkaConfig({"log.dirs": str(tmp_path / "d2")}).inter_broker_security()
    assert (plain.protocol, plain.ssl_context, plain.sasl, plain.error) == ("PLAINTEXT", None, None, None)


# -- a real broker -----------------------------------------------------------------------------------

@dataclass
class Secured:
    broker: KBroker
    pki: Pki
    ports: dict[str, int]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    d = tmp_path_factory.mktemp("node-conn-security")
    pki = make_pki(d / "pki")
    ports = {n: free_port() for n in LISTENERS}
    overrides = {
        # SSL on every address, so that 127.0.0.2 (a name the certificate does not carry) reaches it.
        "listeners": ",".join(f"{n}://{'0.0.0.0' if n == 'SSL' else '127.0.0.1'}:{p}" for n, p in ports.items()),
        "advertised.listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": ",".join(f"{n}:{n}" for n in LISTENERS),
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "50",
    }
    broker = KBroker(d, overrides=overrides, port=ports["PLAINTEXT"])
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upsert = UserScramCredentialUpsertion("broker", ScramCredentialInfo(mech, 4096), b"scram-secret")
            for fut in admin.alter_user_scram_credentials([upsert]).values():
                fut.result(10)
        yield Secured(broker, pki, ports)


def _tls(pki: Pki, *, trusted: bool = True, check_hostname: bool = True) -> TlsClientSettings:
    return TlsClientSettings(truststore_location=str(pki.ca_cert if trusted else pki.other_client_cert),
                             endpoint_identification_algorithm="https" if check_hostname else "")


async def _metadata(port: int, security: ClientSecurity, host: str = "127.0.0.1") -> MetadataResponse:
    conn = NodeConnection(host, port, security=security, connect_timeout_s=10)
    try:
        await conn.connect()
        return await conn.request(3, MetadataRequest(topics=[]), MetadataResponse, version=12)
    finally:
        await conn.close()


@pytest.mark.interop
@pytest.mark.parametrize("protocol,mechanism,user,password", [
    ("SSL", None, "", ""),
    ("SASL_SSL", "PLAIN", "broker", "broker-secret"),
    ("SASL_PLAINTEXT", "PLAIN", "broker", "broker-secret"),
    ("SASL_SSL", "SCRAM-SHA-256", "broker", "scram-secret"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", "broker", "scram-secret"),
])
def test_secured_connection_serves_requests(secured: Secured, protocol: str, mechanism: str | None, user: str,
                                            password: str) -> None:
    ctx = build_client_context(_tls(secured.pki)) if "SSL" in protocol else None
    sasl = SaslClientCredentials(mechanism, user, password) if mechanism else None
    resp = asyncio.run(_metadata(secured.ports[protocol], ClientSecurity(protocol, ctx, sasl)))
    assert [b.port for b in resp.brokers] == [secured.ports[protocol]]


@pytest.mark.interop
@pytest.mark.parametrize("protocol,mechanism,message", [
    ("SASL_SSL", "PLAIN", "Invalid username or password"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
])
def test_wrong_password_is_refused(secured: Secured, protocol: str, mechanism: str, message: str) -> None:
    ctx = build_client_context(_tls(secured.pki)) if "SSL" in protocol else None
    security = ClientSecurity(protocol, ctx, SaslClientCredentials(mechanism, "broker", "nope"))
    with pytest.raises(AuthenticationError, match=message):
        asyncio.run(_metadata(secured.ports[protocol], security))


@pytest.mark.interop
def test_unenabled_mechanism_is_refused(secured: Secured) -> None:
    security = ClientSecurity("SASL_PLAINTEXT", None, SaslClientCredentials("OAUTHBEARER", token_provider=lambda: "x"))
    with pytest.raises(AuthenticationError, match="UNSUPPORTED_SASL_MECHANISM"):
        asyncio.run(_metadata(secured.ports["SASL_PLAINTEXT"], security))


@pytest.mark.interop
def test_untrusted_or_misnamed_server_certificate_fails_the_handshake(secured: Secured) -> None:
    untrusted = ClientSecurity("SSL", build_client_context(_tls(secured.pki, trusted=False)))
    with pytest.raises(AuthenticationError, match="SSL handshake"):
        asyncio.run(_metadata(secured.ports["SSL"], untrusted))
    # The certificate names localhost and 127.0.0.1, not 127.0.0.2 (ssl.endpoint.identification.algorithm=https).
    checked = ClientSecurity("SSL", build_client_context(_tls(secured.pki)))
    with pytest.raises(AuthenticationError, match="SSL handshake"):
        asyncio.run(_metadata(secured.ports["SSL"], checked, host="127.0.0.2"))
    # Without host name verification the same address is accepted.
    unchecked = ClientSecurity("SSL", build_client_context(_tls(secured.pki, check_hostname=False)))
    asyncio.run(_metadata(secured.ports["SSL"], unchecked, host="127.0.0.2"))
    # A configuration error surfaces at connect with its message.
    with pytest.raises(AuthenticationError, match="no JAAS"):
        asyncio.run(_metadata(secured.ports["SASL_SSL"], ClientSecurity("SASL_SSL", error="no JAAS")))
