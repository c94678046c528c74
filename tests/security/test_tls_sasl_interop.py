"""A real kbroker process with PLAINTEXT, SSL, mTLS (SSL, ssl.client.auth=required), SASL_SSL and
SASL_PLAINTEXT listeners, driven by librdkafka (confluent-kafka) and raw sockets.

Shows: TLS with a PEM keystore (encrypted key on one listener, per-listener overrides), produce and
consume over TLS (the fetch path copies instead of sendfile there), mTLS refusing a client without a
trusted certificate, SASL/PLAIN accepting the JAAS users and refusing a wrong password with Kafka's
message after `connection.failed.authentication.delay.ms`, requests before authentication closing the
connection, a plaintext client on a TLS port refused while the broker carries on.
"""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.security.certs import KEY_PASSWORD, Pki, make_pki
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
LISTENERS = ("PLAINTEXT", "SSL", "MTLS", "SASL_SSL", "SASL_PLAINTEXT")


@dataclass
class Cluster:
    broker: KBroker
    pki: Pki
    ports: dict[str, int]

    def conf(self, listener: str, **extra: str) -> dict[str, str]:
        protocol = {"MTLS": "SSL"}.get(listener, listener)
        c = {"bootstrap.servers": f"127.0.0.1:{self.ports[listener]}", "security.protocol": protocol}
        if "SSL" in protocol:
            c["ssl.ca.location"] = str(self.pki.ca_cert)
        c.update(extra)
        return c


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    d = tmp_path_factory.mktemp("security")
    pki = make_pki(d / "pki")
    ports = {n: free_port() for n in LISTENERS}
    overrides = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_cert),
        # The mTLS listener: an encrypted key, client certificates required.
        "listener.name.mtls.ssl.keystore.location": str(pki.encrypted_broker_keystore),
        "listener.name.mtls.ssl.key.password": KEY_PASSWORD,
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "300",
    }
    broker = KBroker(d, overrides=overrides, port=ports["PLAINTEXT"])
    with broker:
        yield Cluster(broker, pki, ports)


def _produce_and_consume(conf: dict[str, str], n: int = 50) -> list[bytes]:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    errors: list[object] = []
    for i in range(n):
        p.produce(topic, b"x" * 2000 + str(i).encode(), on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(20) == 0 and not errors, errors
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_produce_and_consume(cluster: Cluster, listener: str) -> None:
    extra = {}
    if listener.startswith("SASL"):
        extra = {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
    got = _produce_and_consume(cluster.conf(listener, **extra))
    assert [g[2000:] for g in got] == [str(i).encode() for i in range(50)]


def test_metadata_advertises_the_listener_asked_on(cluster: Cluster) -> None:
    md = AdminClient(cluster.conf("SSL")).list_topics(timeout=10)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", cluster.ports["SSL"])]


def test_mtls_with_a_client_certificate(cluster: Cluster) -> None:
    conf = cluster.conf("MTLS", **{"ssl.certificate.location": str(cluster.pki.client_cert),
                                   "ssl.key.location": str(cluster.pki.client_key)})
    got = _produce_and_consume(conf, n=5)
    assert len(got) == 5


@pytest.mark.parametrize("cert", [None, "untrusted"])
def test_mtls_refuses_clients_without_a_trusted_certificate(cluster: Cluster, cert: str | None) -> None:
    ctx = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
    if cert == "untrusted":
        ctx.load_cert_chain(str(cluster.pki.other_client_cert), str(cluster.pki.other_client_key))
    with socket.create_connection(("127.0.0.1", cluster.ports["MTLS"]), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                # TLS 1.3: the server's verdict on the client certificate arrives with the first read.
                tls.sendall(b"\x00\x00\x00\x00")
                if tls.recv(1) == b"":
                    raise ConnectionResetError("closed")
    # The broker carries on.
    assert AdminClient(cluster.conf("SSL")).list_topics(timeout=10).brokers


def test_wrong_password_gets_kafkas_message_after_the_delay(cluster: Cluster) -> None:
    with RawKafkaClient(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}") as c:
        assert c.request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code == 0
        hs = c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert hs.error_code == 0 and hs.mechanisms[0] == "PLAIN"
        start = time.monotonic()
        r = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00wrong"))
        assert time.monotonic() - start >= 0.29
        assert (r.error_code, r.error_message) == (58, "Authentication failed: Invalid username or password")
        assert c.is_closed_by_peer()
    assert "Failed authentication with 127.0.0.1" in cluster.broker.log_text()


def test_librdkafka_reports_the_failure(cluster: Cluster) -> None:
    conf = cluster.conf("SASL_SSL", **{"sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                       "sasl.password": "wrong"})
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=3)


def test_unsupported_mechanism_lists_the_enabled_ones(cluster: Cluster) -> None:
    with RawKafkaClient(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}") as c:
        hs = c.request(17, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
        assert (hs.error_code, hs.mechanisms) == (33, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        assert c.is_closed_by_peer()


def test_requests_before_authentication_close_the_connection(cluster: Cluster) -> None:
    with RawKafkaClient(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}") as c:
        c.send(3, 12, MetadataRequest(topics=None))
        assert c.is_closed_by_peer()
    with RawKafkaClient(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}") as c:
        c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        c.send(3, 12, MetadataRequest(topics=None))  # SaslAuthenticate expected
        assert c.is_closed_by_peer()


def test_authenticated_sasl_connection_serves_requests(cluster: Cluster) -> None:
    with RawKafkaClient(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}") as c:
        c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        r = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00admin-secret"))
        assert r.error_code == 0
        md = c.request(3, 12, MetadataRequest(topics=None))
        assert [b.port for b in md.brokers] == [cluster.ports["SASL_PLAINTEXT"]]
        again = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00admin-secret"))
        assert again.error_code == 34


def test_plaintext_client_on_a_tls_port_is_refused(cluster: Cluster) -> None:
    with RawKafkaClient(f"127.0.0.1:{cluster.ports['SSL']}", timeout=10) as c:
        c.send(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert c.is_closed_by_peer(timeout=10)
    assert AdminClient(cluster.conf("SSL")).list_topics(timeout=10).brokers


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_credentials_through_the_admin_api(cluster: Cluster, mechanism: str) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    user = f"scram-{mechanism[-3:]}"
    admin = AdminClient(cluster.conf("PLAINTEXT"))
    mech = getattr(ScramMechanism, mechanism.replace("-", "_"))
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 8192), b"s3cret")
    for fut in admin.alter_user_scram_credentials([upsert]).values():
        fut.result(10)
    described = {u: f.result(10) for u, f in admin.describe_user_scram_credentials([user]).items()}
    infos = described[user].scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(mech, 8192)]
    scram_conf = {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": "s3cret"}
    got = _produce_and_consume(cluster.conf("SASL_SSL", **scram_conf), n=3)
    assert len(got) == 3
    with pytest.raises(KafkaException):
        AdminClient(cluster.conf("SASL_SSL", **{**scram_conf, "sasl.password": "wrong"})).list_topics(timeout=3)
    # Deleted: the user can no longer log in.
    for fut in admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, mech)]).values():
        fut.result(10)
    with pytest.raises(KafkaException):
        AdminClient(cluster.conf("SASL_PLAINTEXT", **scram_conf)).list_topics(timeout=3)


def test_no_tracebacks_in_the_broker_log(cluster: Cluster) -> None:
    # Runs last in this module: every refusal above was clean.
    text = cluster.broker.log_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-4000:]
