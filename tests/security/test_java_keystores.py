"""JKS and PKCS12 key and trust stores made by the JDK's `keytool` (Kafka's `ssl.keystore.type` /
`ssl.truststore.type`, `ssl.keystore.password`, `ssl.key.password`, `ssl.truststore.password`).

Shows: the stores read into PEM (key matching the leaf certificate, the chain, the trusted CA);
a TLS handshake between a listener context and an outbound (inter-broker) client context built from
them, mutual authentication included; a real kbroker with a PKCS12 mTLS listener and a JKS mTLS
listener (separate key password, truststore without a password) served to the Java console producer
and consumer (client keystores in PKCS12 and JKS) and to librdkafka (a PKCS12 keystore); a wrong
keystore or key password stops the broker at start-up with Kafka's message, no traceback.
"""

from __future__ import annotations

import socket
import ssl
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from kbroker.client.security import TlsClientSettings, build_client_context
from kbroker.client.ssl_stores import SslStoreError, load_key_material, load_trusted_certificates
from kbroker.net.tls import TlsConfigError, TlsSettings, build_server_context
from tests.security.keytool_stores import (
    JKS_KEY_PASSWORD,
    STORE_PASSWORD,
    Stores,
    keytool_unavailable_reason,
    make_stores,
)
from tests.support.broker import KBroker, KBrokerError, free_port
from tests.support.java import java_unavailable_reason, run_java_main

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    reason = keytool_unavailable_reason()
    if reason:
        pytest.skip(reason)
    return make_stores(tmp_path_factory.mktemp("keytool"))


def test_stores_read_into_pem(stores: Stores) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    for store_type, path, key_password in (("PKCS12", stores.broker_p12, None),
                                           ("JKS", stores.broker_jks, JKS_KEY_PASSWORD)):
        material = load_key_material(store_type, str(path), STORE_PASSWORD, key_password)
        key = serialization.load_pem_private_key(material.key_pem, password=None)
        chain = x509.load_pem_x509_certificates(material.chain_pem)
        assert chain[0].subject.rfc4514_string() == "CN=localhost"
        assert chain[0].public_key().public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]
        assert any(c.subject.rfc4514_string() == "CN=test-ca" for c in chain[1:])
    for store_type, path, password in (("PKCS12", stores.trust_p12, STORE_PASSWORD), ("JKS", stores.trust_jks, None),
                                       ("JKS", stores.trust_jks, STORE_PASSWORD)):
        certs = x509.load_pem_x509_certificates(load_trusted_certificates(store_type, str(path), password).encode())
        assert [c.subject.rfc4514_string() for c in certs] == ["CN=test-ca"]


@pytest.mark.parametrize(("store_type", "which", "store_password", "key_password", "message"), [
    ("JKS", "broker_jks", "wrong", JKS_KEY_PASSWORD, "Keystore was tampered with, or password was incorrect"),
    ("JKS", "broker_jks", STORE_PASSWORD, None, "Cannot recover key"),  # the key has its own password
    ("JKS", "broker_jks", None, JKS_KEY_PASSWORD, "key store password is not specified"),
    ("PKCS12", "broker_p12", "wrong", None, "password was incorrect"),
    ("JKS", "broker_p12", STORE_PASSWORD, None, "not a JKS store"),
    ("PKCS12", "ca_pem", STORE_PASSWORD, None, "of type PKCS12"),
])
def test_bad_stores_name_file_and_type(stores: Stores, store_type: str, which: str, store_password: str | None,
                                       key_password: str | None, message: str) -> None:
    path = str(getattr(stores, which))
    with pytest.raises(SslStoreError) as e:
        load_key_material(store_type, path, store_password, key_password)
    assert message in str(e.value)
    if store_password is not None:  # else Kafka's "SSL key store is specified, but key store password ..."
        assert f"Failed to load SSL keystore {path} of type {store_type}" in str(e.value)


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> dict[str, object]:
    a, b = socket.socketpair()
    peer: dict[str, object] = {}

    def serve() -> None:
        with server.wrap_socket(a, server_side=True) as s:
            peer.update(s.getpeercert() or {})
            s.sendall(b"ok")

    t = threading.Thread(target=serve)
    t.start()
    with client.wrap_socket(b, server_hostname="localhost") as c:
        assert c.recv(2) == b"ok"
    t.join(10)
    return peer


def test_listener_and_inter_broker_contexts_from_stores(stores: Stores) -> None:
    server = build_server_context(TlsSettings(
        keystore_type="JKS", keystore_location=str(stores.broker_jks), keystore_password=STORE_PASSWORD,
        key_password=JKS_KEY_PASSWORD, truststore_type="PKCS12", truststore_location=str(stores.trust_p12),
        truststore_password=STORE_PASSWORD, client_auth="required"))
    client = build_client_context(TlsClientSettings(
        keystore_type="PKCS12", keystore_location=str(stores.client_p12), keystore_password=STORE_PASSWORD,
        truststore_type="JKS", truststore_location=str(stores.trust_jks)))
    peer = _handshake(server, client)
    assert (("commonName", "alice"),) in peer["subject"]  # type: ignore[operator]
    with pytest.raises(TlsConfigError, match="Failed to load SSL truststore"):
        build_server_context(TlsSettings(keystore_type="PKCS12", keystore_location=str(stores.broker_p12),
                                         keystore_password=STORE_PASSWORD, truststore_type="PKCS12",
                                         truststore_location=str(stores.trust_p12), truststore_password="wrong"))


@dataclass
class Broker:
    broker: KBroker
    stores: Stores
    ports: dict[str, int]


@pytest.fixture(scope="module")
def broker(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    d = tmp_path_factory.mktemp("keystore-broker")
    ports = {n: free_port() for n in ("PLAINTEXT", "P12", "JKS")}
    overrides = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,P12:SSL,JKS:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.client.auth": "required",
        # PKCS12 keystore and truststore.
        "listener.name.p12.ssl.keystore.type": "PKCS12",
        "listener.name.p12.ssl.keystore.location": str(stores.broker_p12),
        "listener.name.p12.ssl.keystore.password": STORE_PASSWORD,
        "listener.name.p12.ssl.truststore.type": "PKCS12",
        "listener.name.p12.ssl.truststore.location": str(stores.trust_p12),
        "listener.name.p12.ssl.truststore.password": STORE_PASSWORD,
        # JKS (the default type): a key password of its own, a truststore without a password.
        "listener.name.jks.ssl.keystore.location": str(stores.broker_jks),
        "listener.name.jks.ssl.keystore.password": STORE_PASSWORD,
        "listener.name.jks.ssl.key.password": JKS_KEY_PASSWORD,
        "listener.name.jks.ssl.truststore.location": str(stores.trust_jks),
    }
    b = KBroker(d, overrides=overrides, port=ports["PLAINTEXT"])
    with b:
        yield Broker(b, stores, ports)


def _java_client_props(path: Path, store_type: str, keystore: Path, truststore: Path, key_password: str) -> Path:
    path.write_text(
        "security.protocol=SSL\n"
        f"ssl.keystore.type={store_type}\nssl.keystore.location={keystore}\n"
        f"ssl.keystore.password={STORE_PASSWORD}\nssl.key.password={key_password}\n"
        f"ssl.truststore.type={store_type}\nssl.truststore.location={truststore}\n"
        f"ssl.truststore.password={STORE_PASSWORD}\n")
    return path


def test_java_console_clients_over_pkcs12_and_jks_mtls(broker: Broker, tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    s = broker.stores
    p12 = _java_client_props(tmp_path / "p12.properties", "PKCS12", s.client_p12, s.trust_p12, STORE_PASSWORD)
    jks = _java_client_props(tmp_path / "jks.properties", "JKS", s.client_jks, s.trust_jks, JKS_KEY_PASSWORD)
    topic = f"ks-{uuid.uuid4().hex[:8]}"
    r = run_java_main("kafka-console-producer", [
        "--bootstrap-server", f"localhost:{broker.ports['P12']}", "--topic", topic, "--command-config", str(p12)],
        input="one\ntwo\n", timeout=180)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-console-consumer", [
        "--bootstrap-server", f"localhost:{broker.ports['JKS']}", "--topic", topic, "--from-beginning",
        "--max-messages", "2", "--timeout-ms", "60000", "--command-config", str(jks)], timeout=180)
    assert r.stdout.split() == ["one", "two"], r.stderr


def test_librdkafka_with_a_pkcs12_keystore(broker: Broker) -> None:
    s = broker.stores
    topic = f"ks-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": f"localhost:{broker.ports['P12']}", "security.protocol": "SSL",
            "ssl.ca.location": str(s.ca_pem), "ssl.keystore.location": str(s.client_p12),
            "ssl.keystore.password": STORE_PASSWORD}
    p = Producer(conf)
    for i in range(20):
        p.produce(topic, f"m{i}".encode())
    assert p.flush(30) == 0
    # And the JKS listener, with the client's key and certificate as PEM (librdkafka reads no JKS).
    c = Consumer({"bootstrap.servers": f"localhost:{broker.ports['JKS']}", "security.protocol": "SSL",
                  "ssl.ca.location": str(s.ca_pem), "ssl.key.location": str(s.client_key_pem),
                  "ssl.certificate.location": str(s.client_cert_pem),
                  "group.id": "ks", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
            if len(got) == 20:
                break
    finally:
        c.close()
    assert got == [f"m{i}".encode() for i in range(20)]


@pytest.mark.parametrize(("key", "value", "message"), [
    ("ssl.keystore.password", "wrong", "Keystore was tampered with, or password was incorrect"),
    ("ssl.key.password", "wrong", "Cannot recover key"),
    ("ssl.keystore.type", "PKCS12", "of type PKCS12"),
])
def test_wrong_password_is_a_clear_start_up_error(stores: Stores, tmp_path: Path, key: str, value: str,
                                                  message: str) -> None:
    port, tls = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{tls}",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(stores.broker_jks), "ssl.keystore.password": STORE_PASSWORD,
        "ssl.key.password": JKS_KEY_PASSWORD,
    }
    overrides[key] = value
    b = KBroker(tmp_path, overrides=overrides, port=port)
    with pytest.raises(KBrokerError) as e:
        b.start(timeout=60)
    b.kill()
    text = str(e.value)
    assert "exited with code" in text, text
    assert message in text and f"Failed to load SSL keystore {stores.broker_jks}" in text, text
    assert "Traceback" not in text, text
