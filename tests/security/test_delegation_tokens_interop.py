"""Delegation tokens (KIP-48) with Kafka's own tools and Java clients against one kbroker node.

`kafka-delegation-tokens.sh` (DelegationTokenCommand, 4.3.1) over SASL_PLAINTEXT with SCRAM-SHA-512
creates, describes, renews and expires tokens; the HMAC it prints is Kafka's (HmacSHA512 of the token
id keyed with `delegation.token.secret.key`); the Java console producer and consumer authenticate with
the token (SCRAM-SHA-256, `tokenauth="true"`) as its owner and are authorized by the owner's ACLs; a
token-authenticated connection may not ask for tokens; a renewed token's expiry moves forward; a token
expired with -1 is refused at once, one whose expiry passed is swept by the controller
(`delegation.token.expiry.check.interval.ms`) and refused. Errors: a PLAINTEXT listener refuses token
requests, another owner needs CreateTokens on its USER resource (KIP-373), and a broker without the
secret key answers DELEGATION_TOKEN_AUTH_DISABLED.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.support.broker import KBroker, free_port
from tests.support.java import java_unavailable_reason, run_java_main

pytestmark = [pytest.mark.interop, pytest.mark.java]

TOKENS_TOOL = "org.apache.kafka.tools.DelegationTokenCommand"  # bin/kafka-delegation-tokens.sh
SECRET = "kbroker-delegation-secret"
ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret";')
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, GROUP = "token-orders", "token-app"


@dataclass
class Setup:
    sasl: str
    plaintext: str
    work: Path

    def props(self, name: str, text: str) -> Path:
        p = self.work / name
        p.write_text(text)
        return p

    def scram(self, name: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
              tokenauth: bool = False) -> Path:
        extra = ' tokenauth="true"' if tokenauth else ""
        return self.props(name, f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                                f'sasl.jaas.config={SCRAM} username="{user}" password="{password}"{extra};\n')


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("delegation-tokens")
    sasl, plain = free_port(), free_port()
    broker = KBroker(d, port=sasl, overrides={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": ADMIN_JAAS,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
        "delegation.token.secret.key": SECRET,
        "delegation.token.expiry.time.ms": str(3 * 3600 * 1000),
        "delegation.token.expiry.check.interval.ms": "300",
    })
    with broker:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
        for user in ("alice", "bob"):
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), f"{user}-secret".encode())]
            )[user].result(30)
        acls = [AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.ALL,)]
        acls.append(AclBinding(ResourceType.GROUP, GROUP, ResourcePatternType.LITERAL, "User:alice", "*",
                               AclOperation.READ, AclPermissionType.ALLOW))
        for f in admin.create_acls(acls).values():
            f.result(30)
        s = Setup(f"127.0.0.1:{sasl}", f"127.0.0.1:{plain}", d)
        s.props("admin.properties", f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                                    f"sasl.jaas.config={ADMIN_JAAS}\n")
        s.scram("alice.properties", "alice", "alice-secret")
        s.scram("bob.properties", "bob", "bob-secret")
        s.props("plaintext.properties", "security.protocol=PLAINTEXT\n")
        yield s


def tokens(bootstrap: str, config: Path, *args: str) -> tuple[int, str]:
    r = run_java_main(TOKENS_TOOL, ["--bootstrap-server", bootstrap, "--command-config", str(config), *args],
                      timeout=120)
    return r.returncode, r.stdout + r.stderr


@dataclass(frozen=True)
class Row:
    token_id: str
    hmac: str
    owner: str
    requester: str
    renewers: str
    issued: datetime
    expiry: datetime
    max: datetime


def rows(output: str) -> list[Row]:
    """The token table DelegationTokenCommand prints (dates are yyyy-MM-dd'T'HH:mm)."""
    out = []
    for m in re.finditer(r"^([A-Za-z0-9_-]{22}) (\S+) +(\S+) +(\S+) +(\[.*?\]) +(\S+) +(\S+) +(\S+)", output, re.M):
        dates = [datetime.strptime(x, "%Y-%m-%dT%H:%M") for x in m.groups()[5:]]
        out.append(Row(*m.groups()[:5], *dates))
    return out


def create(s: Setup, config: str, *args: str) -> Row:
    rc, out = tokens(s.sasl, s.work / config, "--create", "--max-life-time-period", "-1", *args)
    assert rc == 0, out
    [row] = rows(out)
    return row


def token_client(s: Setup, row: Row, name: str) -> Path:
    return s.scram(name, row.token_id, row.hmac, mechanism="SCRAM-SHA-256", tokenauth=True)


def list_topics(s: Setup, config: Path) -> tuple[int, str]:
    r = run_java_main("kafka-topics", ["--bootstrap-server", s.sasl, "--list", "--command-config", str(config)],
                      timeout=120)
    return r.returncode, r.stdout + r.stderr


AUTH_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"


def test_create_describe_and_produce_consume_with_the_token(setup: Setup) -> None:
    s = setup
    row = create(s, "alice.properties", "--renewer-principal", "User:bob")
    assert (row.owner, row.requester, row.renewers) == ("User:alice", "User:alice", "[User:bob]")
    # The HMAC (the token's SCRAM password) is what any Kafka node with this secret computes.
    expected = hmac.new(SECRET.encode(), row.token_id.encode(), hashlib.sha512).digest()
    assert base64.b64decode(row.hmac) == expected
    rc, out = tokens(s.sasl, s.work / "alice.properties", "--describe", "--owner-principal", "User:alice")
    assert rc == 0 and [(r.token_id, r.hmac) for r in rows(out)] == [(row.token_id, row.hmac)], out
    # The renewer sees it too; an unrelated user (no DESCRIBE on the token, no DESCRIBE_TOKENS) does not.
    rc, out = tokens(s.sasl, s.work / "bob.properties", "--describe", "--owner-principal", "User:alice")
    assert rc == 0 and [r.token_id for r in rows(out)] == [row.token_id], out

    client = token_client(s, row, "token.properties")
    r = run_java_main("kafka-console-producer", ["--bootstrap-server", s.sasl, "--topic", TOPIC,
                                                 "--command-config", str(client)], input="one\ntwo\n", timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-console-consumer", ["--bootstrap-server", s.sasl, "--topic", TOPIC, "--group", GROUP,
                                                 "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000",
                                                 "--command-config", str(client)], timeout=120)
    assert r.stdout.split() == ["one", "two"], r.stderr
    # A token-authenticated connection may not ask for tokens (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).
    rc, out = tokens(s.sasl, client, "--describe", "--owner-principal", "User:alice")
    assert rc != 0 and "UnsupportedByAuthenticationException" in out, out

    # Expire at once (-1): the next authentication with it is refused.
    rc, out = tokens(s.sasl, s.work / "alice.properties", "--expire", "--hmac", row.hmac,
                     "--expiry-time-period", "-1")
    assert rc == 0, out
    rc, out = list_topics(s, client)
    assert rc != 0 and AUTH_FAILED in out, out


def test_renew_moves_the_expiry_and_an_expired_token_is_swept(setup: Setup) -> None:
    s = setup
    row = create(s, "bob.properties")
    assert row.owner == "User:bob"
    assert 179 <= (row.expiry - row.issued).total_seconds() / 60 <= 181  # delegation.token.expiry.time.ms: 3 h
    # Shorten it to one minute, then renew: the expiry moves forward again by delegation.token.expiry.time.ms.
    rc, out = tokens(s.sasl, s.work / "bob.properties", "--expire", "--hmac", row.hmac, "--expiry-time-period", "60000")
    assert rc == 0, out
    rc, out = tokens(s.sasl, s.work / "bob.properties", "--describe", "--owner-principal", "User:bob")
    [shortened] = rows(out)
    assert (shortened.expiry - shortened.issued).total_seconds() <= 120, out
    rc, out = tokens(s.sasl, s.work / "bob.properties", "--renew", "--hmac", row.hmac, "--renew-time-period", "-1")
    assert rc == 0 and "Completed renew operation" in out, out
    rc, out = tokens(s.sasl, s.work / "bob.properties", "--describe", "--owner-principal", "User:bob")
    [renewed] = rows(out)
    assert renewed.expiry > shortened.expiry and (renewed.expiry - renewed.issued).total_seconds() >= 179 * 60, out
    client = token_client(s, row, "bob-token.properties")
    rc, out = list_topics(s, client)
    assert rc == 0, out
    # A one-second expiry: the controller's sweep removes the token, and authentication is refused.
    rc, out = tokens(s.sasl, s.work / "bob.properties", "--expire", "--hmac", row.hmac, "--expiry-time-period", "1000")
    assert rc == 0, out
    time.sleep(2)
    rc, out = tokens(s.sasl, s.work / "bob.properties", "--describe", "--owner-principal", "User:bob")
    assert rc == 0 and rows(out) == [], out
    rc, out = list_topics(s, client)
    assert rc != 0 and AUTH_FAILED in out, out


def test_plaintext_listener_and_other_owner_rules(setup: Setup) -> None:
    s = setup
    # Token requests need an authenticated channel (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on PLAINTEXT).
    rc, out = tokens(s.plaintext, s.work / "plaintext.properties", "--create", "--max-life-time-period", "-1")
    assert rc != 0 and "UnsupportedByAuthenticationException" in out, out
    # KIP-373: a token for another owner needs CreateTokens on that USER resource.
    rc, out = tokens(s.sasl, s.work / "alice.properties", "--create", "--max-life-time-period", "-1",
                     "--owner-principal", "User:carol")
    assert rc != 0 and "DelegationTokenAuthorizationException" in out, out
    r = run_java_main("kafka-acls", ["--bootstrap-server", s.sasl, "--command-config", str(s.work / "admin.properties"),
                                     "--add", "--allow-principal", "User:alice", "--operation", "CreateTokens",
                                     "--user-principal", "User:carol"], timeout=120)
    assert r.returncode == 0, r.stderr
    row = create(s, "alice.properties", "--owner-principal", "User:carol")
    assert (row.owner, row.requester) == ("User:carol", "User:alice")


def test_tokens_disabled_without_the_secret_key(tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    port = free_port()
    broker = KBroker(tmp_path, port=port, overrides={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": ADMIN_JAAS})
    admin = tmp_path / "admin.properties"
    admin.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={ADMIN_JAAS}\n")
    with broker:
        rc, out = tokens(f"127.0.0.1:{port}", admin, "--create", "--max-life-time-period", "-1")
        assert rc != 0 and "DelegationTokenDisabledException" in out, out
        rc, out = tokens(f"127.0.0.1:{port}", admin, "--describe", "--owner-principal", "User:admin")
        assert rc != 0 and "DelegationTokenDisabledException" in out, out
