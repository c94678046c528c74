"""ACLs end to end: kbroker with `authorizer.class.name=...StandardAuthorizer` on a SASL/PLAIN listener,
ACLs created, described and deleted with librdkafka's admin API, and enforced on produce, consume,
Metadata and topic creation with Kafka's error codes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.support.broker import KBroker, free_port

pytestmark = pytest.mark.interop

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-pw" user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";')


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d: Path = tmp_path_factory.mktemp("acl")
    port = free_port()
    broker = KBroker(d, port=port, overrides={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "offsets.topic.replication.factor": "1",
    })
    with broker:
        yield broker.bootstrap


def conf(bootstrap: str, user: str, **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-pw", **extra}


def acl(name: str, op: AclOperation, permission: AclPermissionType = AclPermissionType.ALLOW,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
        rtype: ResourceType = ResourceType.TOPIC, principal: str = "User:alice") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def produce_error(bootstrap: str, user: str, topic: str) -> KafkaError | None:
    p = Producer(conf(bootstrap, user, **{"message.timeout.ms": "5000"}))
    errors: list[KafkaError | None] = []
    p.produce(topic, b"v", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    return errors[0] if errors else None


@pytest.fixture(scope="module")
def acls(bootstrap: str) -> AdminClient:
    admin = AdminClient(conf(bootstrap, "admin"))
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in ("alice-t", "alice-secret", "other")]).values():
        fut.result(10)
    bindings = [
        acl("alice-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        acl("alice-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        acl("alice-secret", AclOperation.READ, AclPermissionType.DENY),
        acl("*", AclOperation.READ, rtype=ResourceType.GROUP),
    ]
    for fut in admin.create_acls(bindings).values():
        fut.result(10)
    return admin


def test_describe_acls_lists_what_was_created(acls: AdminClient) -> None:
    got = acls.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                              AclOperation.ANY, AclPermissionType.ANY)).result(10)
    assert len(got) == 4
    assert {(b.name, b.operation, b.permission_type) for b in got} >= {
        ("alice-secret", AclOperation.READ, AclPermissionType.DENY)}


def test_metadata_hides_topics_without_describe(bootstrap: str, acls: AdminClient) -> None:
    topics = set(AdminClient(conf(bootstrap, "alice")).list_topics(timeout=10).topics)
    # DESCRIBE is implied by WRITE/READ on the prefix; "other" has no ACL for alice.
    assert {"alice-t", "alice-secret"} <= topics and "other" not in topics
    assert "other" in set(acls.list_topics(timeout=10).topics)  # the super user sees everything
    assert set(AdminClient(conf(bootstrap, "bob")).list_topics(timeout=10).topics) == set()


def test_produce_needs_write(bootstrap: str, acls: AdminClient) -> None:
    assert produce_error(bootstrap, "alice", "alice-t") is None
    err = produce_error(bootstrap, "alice", "other")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_beats_allow_on_fetch(bootstrap: str, acls: AdminClient) -> None:
    assert produce_error(bootstrap, "alice", "alice-secret") is None  # WRITE allowed
    c = Consumer(conf(bootstrap, "alice", **{"group.id": "g-secret", "auto.offset.reset": "earliest"}))
    c.assign([TopicPartition("alice-secret", 0, 0)])
    error = None
    deadline = time.monotonic() + 20
    while error is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is not None:
            error = m.error()
    c.close()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_allowed_consume(bootstrap: str, acls: AdminClient) -> None:
    assert produce_error(bootstrap, "alice", "alice-t") is None
    c = Consumer(conf(bootstrap, "alice", **{"group.id": "g-ok", "auto.offset.reset": "earliest"}))
    c.subscribe(["alice-t"])
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got = m.value()
    c.close()
    assert got == b"v"


def test_create_topics_and_acls_need_cluster_rights(bootstrap: str, acls: AdminClient) -> None:
    bob = AdminClient(conf(bootstrap, "bob"))
    with pytest.raises(KafkaException) as e:
        bob.create_topics([NewTopic("bobs", 1, 1)])["bobs"].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        list(bob.create_acls([acl("x", AclOperation.READ, principal="User:bob")]).values())[0].result(10)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # A topic ACL for CREATE lets bob create that topic.
    for fut in acls.create_acls([acl("bobs", AclOperation.CREATE, principal="User:bob")]).values():
        fut.result(10)
    bob.create_topics([NewTopic("bobs", 1, 1)])["bobs"].result(10)


def test_delete_acls_removes_the_matching_ones(bootstrap: str, acls: AdminClient) -> None:
    f = AclBindingFilter(ResourceType.TOPIC, "alice-secret", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.DENY)
    deleted = list(acls.delete_acls([f]).values())[0].result(10)
    assert [(b.name, b.permission_type) for b in deleted] == [("alice-secret", AclPermissionType.DENY)]
    assert acls.describe_acls(f).result(10) == []


def test_groups_need_read_on_the_group(bootstrap: str, acls: AdminClient) -> None:
    for fut in acls.create_acls([acl("alice-t", AclOperation.READ, principal="User:bob")]).values():
        fut.result(10)
    c = Consumer(conf(bootstrap, "bob", **{"group.id": "bobs-group", "auto.offset.reset": "earliest"}))
    c.subscribe(["alice-t"])
    error = None
    deadline = time.monotonic() + 20
    while error is None and time.monotonic() < deadline:
        try:
            m = c.poll(0.5)
        except KafkaException as e:
            error = e.args[0]
            break
        if m is not None and m.error() is not None:
            error = m.error()
    c.close()
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_configs_offsets_and_scram_apis_are_checked(bootstrap: str, acls: AdminClient) -> None:
    from confluent_kafka.admin import (
        ConfigResource,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    alice = AdminClient(conf(bootstrap, "alice"))
    with pytest.raises(KafkaException) as e:
        list(alice.describe_configs([ConfigResource("TOPIC", "other")]).values())[0].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        list(alice.describe_configs([ConfigResource("BROKER", "1")]).values())[0].result(10)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # librdkafka asks Metadata first (which hides "other"): ListOffsets itself, over a raw SASL connection.
    from kbroker.protocol.messages.list_offsets import ListOffsetsRequest
    from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest
    from tests.support.raw_client import RawKafkaClient

    with RawKafkaClient(bootstrap) as c:
        c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert c.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-pw")).error_code == 0
        topics = [ListOffsetsRequest.ListOffsetsTopic(name=n, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)]) for n in ("other", "alice-t")]
        r = c.request(2, 7, ListOffsetsRequest(replica_id=-1, topics=topics))
        assert [(t.name, t.partitions[0].error_code) for t in r.topics] == [
            ("other", KafkaError.TOPIC_AUTHORIZATION_FAILED), ("alice-t", 0)]
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"x")
    with pytest.raises(KafkaException) as e:
        list(alice.alter_user_scram_credentials([upsert]).values())[0].result(10)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_describe_groups_and_offset_fetch_need_describe_on_the_group(bootstrap: str, acls: AdminClient) -> None:
    from kbroker.protocol.messages.describe_groups import DescribeGroupsRequest
    from kbroker.protocol.messages.offset_fetch import OffsetFetchRequest
    from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest
    from tests.support.raw_client import RawKafkaClient

    for user, expected in (("bob", KafkaError.GROUP_AUTHORIZATION_FAILED), ("alice", 0)):
        with RawKafkaClient(bootstrap) as c:
            c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
            auth = f"\0{user}\0{user}-pw".encode()
            assert c.request(36, 2, SaslAuthenticateRequest(auth_bytes=auth)).error_code == 0
            d = c.request(15, 5, DescribeGroupsRequest(groups=["g-ok"], include_authorized_operations=False))
            assert d.groups[0].error_code == expected
            f = c.request(9, 8, OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id="g-ok", topics=None)], require_stable=False))
            assert f.groups[0].error_code == expected
