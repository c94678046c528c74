"""ACLs and SCRAM credentials in a KRaft cluster of kbroker nodes: one kbroker controller
(process.roles=controller, SASL_PLAINTEXT controller listener, StandardAuthorizer with
`super.users=User:broker;User:admin`) and two kbroker brokers (process.roles=broker, a SASL_PLAINTEXT
listener with PLAIN and SCRAM-SHA-256, StandardAuthorizer).

Shows Kafka's forwarding (KafkaApis.forwardToController, ForwardingManager):
- CreateAcls through broker A goes to the controller in an Envelope with the client's principal; the
  controller authorizes it (ALTER on the cluster) and writes an AccessControlEntryRecord; broker B's
  authorizer follows its image, so alice, refused on B before, may produce on B after; DeleteAcls
  through B removes it and A refuses her again.
- A non-super user's CreateAcls is refused by the controller (CLUSTER_AUTHORIZATION_FAILED) although
  the forwarding broker may forward anything.
- AlterUserScramCredentials through A writes a UserScramCredentialRecord; bob logs in with
  SCRAM-SHA-256 on B; DescribeUserScramCredentials and DescribeAcls on B answer from B's image.
- The forwarded request keeps the client's version: a CreateAcls v1 / DeleteAcls v1 (raw client)
  is answered at v1 with the controller's results.
The Java tools (`kafka-acls --add`, `kafka-configs --add-config SCRAM-SHA-256=[...]`) do the same in
the `java` test. JVM-free otherwise: three Python processes, ~15 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kbroker.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from kbroker.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.cluster.test_kbroker_quorum import Quorum
from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.raw_client import RawKafkaClient
from tests.support.sasl_kraft_cluster import PLAIN, sasl_kraft_quorum

pytestmark = [pytest.mark.interop]

USERS = ('user_broker="broker-secret" user_admin="admin-secret" user_alice="alice-secret" '
         'user_carol="carol-secret"')
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SUPER = "User:broker;User:admin"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    authz = {"authorizer.class.name": AUTHORIZER, "super.users": SUPER}
    with sasl_kraft_quorum(tmp_path_factory.mktemp("acl-scram-kraft"), USERS, authz, authz) as q:
        yield q


def _plain(b: KBroker, user: str, password: str | None = None) -> dict[str, str]:
    return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password or f"{user}-secret"}


def _scram(b: KBroker, user: str, password: str) -> dict[str, str]:
    return {**_plain(b, user, password), "sasl.mechanism": "SCRAM-SHA-256"}


def _produce_error(conf: dict[str, str], topic: str) -> int | None:
    """The error of one produce (None: delivered)."""
    errors: list[KafkaError | None] = []
    p = Producer({**conf, "message.timeout.ms": "5000", "retries": "0"})
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors, "no delivery report"
    return None if errors[0] is None else errors[0].code()


def _eventually(check: Callable[[], bool], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _alice_write_acl(topic: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                      AclOperation.WRITE, AclPermissionType.ALLOW)


def test_acl_created_through_one_broker_is_enforced_on_the_other(cluster: Quorum) -> None:
    a, b = cluster.brokers[2], cluster.brokers[3]
    admin_a, admin_b = AdminClient(_plain(a, "admin")), AdminClient(_plain(b, "admin"))
    topic = "orders"
    admin_a.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    _eventually(lambda: topic in admin_b.list_topics(timeout=10).topics, "topic not on broker B")
    alice_b = _plain(b, "alice")
    assert _produce_error(alice_b, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Through broker A: forwarded to the controller, authorized as User:admin (a super user there).
    admin_a.create_acls([_alice_write_acl(topic)])[_alice_write_acl(topic)].result(30)
    _eventually(lambda: _produce_error(alice_b, topic) is None, "alice still refused on broker B")
    # DescribeAcls on broker B: from B's image.
    described = admin_b.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                       AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert _alice_write_acl(topic) in described
    # DeleteAcls through broker B: broker A refuses alice again.
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin_b.delete_acls([flt])[flt].result(30)
    assert deleted == [_alice_write_acl(topic)]
    _eventually(lambda: _produce_error(_plain(a, "alice"), topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED,
                "alice still allowed on broker A")
    for node in (a, b, cluster.controllers[1]):
        assert "Traceback" not in node.log_text()


def test_non_super_user_create_acls_is_refused_by_the_controller(cluster: Quorum) -> None:
    a = cluster.brokers[2]
    alice = AdminClient(_plain(a, "alice"))
    acl = AclBinding(ResourceType.TOPIC, "alice-own", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.ALL, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as info:
        alice.create_acls([acl])[acl].result(30)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, info.value
    admin = AdminClient(_plain(a, "admin"))
    any_filter = AclBindingFilter(ResourceType.TOPIC, "alice-own", ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(any_filter).result(30) == []


def test_scram_user_created_through_one_broker_logs_in_on_the_other(cluster: Quorum) -> None:
    a, b = cluster.brokers[2], cluster.brokers[3]
    admin_a = AdminClient(_plain(a, "admin"))
    upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"bob-secret")
    admin_a.alter_user_scram_credentials([upsert])["bob"].result(30)
    # Broker B's SCRAM store is its image: bob logs in there once the record reached it.
    bob_b = AdminClient(_scram(b, "bob", "bob-secret"))
    _eventually(lambda: _logs_in(bob_b), "bob cannot log in on broker B")
    assert not _logs_in(AdminClient(_scram(b, "bob", "nope")))
    assert "(Invalid client credentials)" in b.log_text()
    admin_b = AdminClient(_plain(b, "admin"))
    described = admin_b.describe_user_scram_credentials(["bob"])["bob"].result(30)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    # A non-super user may not alter credentials (ALTER on the cluster, checked by the controller).
    carol = AdminClient(_plain(b, "carol"))
    with pytest.raises(KafkaException) as info:
        carol.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"x")])["carol"].result(30)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, info.value


def _logs_in(admin: AdminClient) -> bool:
    try:
        admin.list_topics(timeout=3)
    except KafkaException:
        return False
    return True


def _raw(b: KBroker, user: str) -> RawKafkaClient:
    client = RawKafkaClient(b.bootstrap)
    client.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    auth = f"\x00{user}\x00{user}-secret".encode()
    assert client.request(36, 2, SaslAuthenticateRequest(auth_bytes=auth)).error_code == 0
    return client


def test_forwarded_at_the_clients_version(cluster: Quorum) -> None:
    """CreateAcls v1 and DeleteAcls v1 (not the newest, v3) are forwarded as they came and answered at
    v1 with the controller's results: an invalid ACL (principal without a type) gets the controller's
    INVALID_REQUEST, the valid one is created, and DeleteAcls v1 lists it."""
    a = cluster.brokers[2]
    with _raw(a, "admin") as c:
        creation = CreateAclsRequest.AclCreation
        resp = c.request(30, 1, CreateAclsRequest(creations=[
            creation(resource_type=2, resource_name="v1-topic", resource_pattern_type=3, principal="User:dave",
                     host="*", operation=3, permission_type=3),
            creation(resource_type=2, resource_name="v1-topic", resource_pattern_type=3, principal="dave",
                     host="*", operation=3, permission_type=3)]))
        assert isinstance(resp, CreateAclsResponse)
        assert [r.error_code for r in resp.results] == [0, 42], resp
        flt = DeleteAclsRequest.DeleteAclsFilter
        resp = c.request(31, 1, DeleteAclsRequest(filters=[flt(
            resource_type_filter=2, resource_name_filter="v1-topic", pattern_type_filter=3,
            principal_filter=None, host_filter=None, operation=1, permission_type=1)]))
        assert isinstance(resp, DeleteAclsResponse)
        [result] = resp.filter_results
        assert result.error_code == 0
        assert [(m.principal, m.operation) for m in result.matching_acls] == [("User:dave", 3)]


@pytest.mark.java
def test_kafka_acls_and_kafka_configs_through_one_broker(cluster: Quorum, tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    a, b = cluster.brokers[2], cluster.brokers[3]
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     f'sasl.jaas.config={PLAIN} username="admin" password="admin-secret";\n')
    admin = ["--bootstrap-server", a.bootstrap, "--command-config", str(props)]
    topic = "java-orders"
    admin_client = AdminClient(_plain(a, "admin"))
    admin_client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    alice_b = _plain(b, "alice")
    _eventually(lambda: _produce_error(alice_b, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED,
                "no refusal before the ACL")
    r = run_java_main("kafka-acls", [*admin, "--add", "--allow-principal", "User:alice", "--operation", "Write",
                                     "--topic", topic], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    _eventually(lambda: _produce_error(alice_b, topic) is None, "alice refused on B after kafka-acls on A")
    r = run_java_main("kafka-configs", [*admin, "--alter", "--entity-type", "users", "--entity-name", "erin",
                                        "--add-config", "SCRAM-SHA-256=[iterations=8192,password=erin-secret]"],
                      timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    _eventually(lambda: _logs_in(AdminClient(_scram(b, "erin", "erin-secret"))), "erin cannot log in on B")
