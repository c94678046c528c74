"""Kafka's own Java tools against kbroker's security: `kafka-configs` stores a SCRAM credential,
`kafka-acls` grants rights, the Java console producer and consumer authenticate with SCRAM-SHA-512
over SASL_SSL (PEM truststore) and are authorized by those ACLs; a wrong password fails with
Kafka's message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.certs import make_pki
from tests.support.broker import KBroker, free_port
from tests.support.java import java_unavailable_reason, run_java_main

pytestmark = [pytest.mark.interop, pytest.mark.java]

ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("java-sec")
    pki = make_pki(d / "pki")
    internal, external = free_port(), free_port()
    broker = KBroker(d, port=internal, overrides={
        "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_keystore),
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": ADMIN_JAAS,
        "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    })
    admin = d / "admin.properties"
    admin.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={ADMIN_JAAS}\n")

    def client(name: str, password: str) -> Path:
        p = d / name
        p.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca_cert}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{password}";\n')
        return p

    client("alice.properties", "alice-secret")
    client("wrong.properties", "nope")
    with broker:
        yield f"127.0.0.1:{internal}", f"127.0.0.1:{external}", d


def test_scram_acls_and_console_clients(setup: tuple[str, str, Path]) -> None:
    internal, external, d = setup
    admin = ["--bootstrap-server", internal, "--command-config", str(d / "admin.properties")]
    r = run_java_main("kafka-configs", [*admin, "--alter", "--entity-type", "users", "--entity-name", "alice",
                                        "--add-config", "SCRAM-SHA-512=[iterations=8192,password=alice-secret]"],
                      timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-topics", [*admin, "--create", "--topic", "orders", "--partitions", "1"], timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-acls", [*admin, "--add", "--allow-principal", "User:alice", "--operation", "Write",
                                     "--operation", "Read", "--topic", "orders"], timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-acls", [*admin, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                                     "--group", "orders-app"], timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-acls", [*admin, "--list", "--topic", "orders"], timeout=120)
    assert r.returncode == 0 and "principal=User:alice" in r.stdout and "operation=WRITE" in r.stdout, r.stdout
    alice = ["--bootstrap-server", external]
    r = run_java_main("kafka-console-producer", [*alice, "--topic", "orders", "--command-config",
                                                 str(d / "alice.properties")], input="one\ntwo\n", timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-console-consumer", [*alice, "--topic", "orders", "--group", "orders-app",
                                                 "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000",
                                                 "--command-config", str(d / "alice.properties")], timeout=120)
    assert r.stdout.split() == ["one", "two"], r.stderr


def test_wrong_password_fails_with_kafkas_message(setup: tuple[str, str, Path]) -> None:
    _, external, d = setup
    r = run_java_main("kafka-topics", ["--bootstrap-server", external, "--list", "--command-config",
                                       str(d / "wrong.properties")], timeout=120)
    assert r.returncode != 0
    assert ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-512") in r.stdout + r.stderr
