"""ACLs and SCRAM credentials through two kbroker brokers under an Apache Kafka 4.3.1 controller with
StandardAuthorizer (`super.users=User:broker;User:admin`, SASL_PLAINTEXT controller listener).

The kbroker brokers forward CreateAcls, DeleteAcls and AlterUserScramCredentials in an Envelope with
the client's request as it came (header, version) and the client's principal; Kafka's
ControllerApis authorizes that principal (ALTER on the cluster) and writes the records; each kbroker
broker's authorizer and SCRAM store follow its image:
- an ACL added through broker A lets alice produce on broker B; deleted through B, A refuses her;
- alice's own CreateAcls: Kafka's controller answers CLUSTER_AUTHORIZATION_FAILED;
- a SCRAM-SHA-256 user created through A logs in on B; a CreateAcls v1 is answered at v1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
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
from tests.security.test_acl_scram_forwarding_kraft import (
    AUTHORIZER,
    PLAIN,
    SUPER,
    USERS,
    _alice_write_acl,
    _eventually,
    _logs_in,
    _plain,
    _produce_error,
    _raw,
    _scram,
)
from tests.support.broker import KBroker
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason

# One Kafka JVM and two kafka-storage runs: ~55 s, so outside the default suite (the kbroker-controller
# variant, test_acl_scram_forwarding_kraft.py, is in it).
pytestmark = [pytest.mark.interop, pytest.mark.java, pytest.mark.slow]


def _broker_overrides(port: int) -> dict[str, str]:
    return {
        "listeners": f"CLIENTS://127.0.0.1:{port}",
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
        "inter.broker.listener.name": "CLIENTS",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.clients.plain.sasl.jaas.config": f'{PLAIN} username="broker" password="broker-secret" {USERS};',
        "listener.name.controller.plain.sasl.jaas.config": f'{PLAIN} username="broker" password="broker-secret";',
        "authorizer.class.name": AUTHORIZER,
        "super.users": SUPER,
    }


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KBroker, KBroker]]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    work: Path = tmp_path_factory.mktemp("acl-scram-kafka-controller")
    c = KafkaCluster(work, controller_overrides={
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config":
            f'{PLAIN} username="broker" password="broker-secret" {USERS};',
        "authorizer.class.name": AUTHORIZER,
        "super.users": SUPER,
    })
    try:
        c.start_controllers()
        for node_id in (2, 3):
            kb = c.kbroker(node_id)
            kb.overrides.update(_broker_overrides(kb.port))
            kb.start(timeout=90)
        yield c.kbrokers[0], c.kbrokers[1]
    finally:
        c.stop_all()


def test_acls_and_scram_through_kbroker_brokers_under_kafkas_controller(brokers: tuple[KBroker, KBroker]) -> None:
    a, b = brokers
    admin_a, admin_b = AdminClient(_plain(a, "admin")), AdminClient(_plain(b, "admin"))
    topic = "orders"
    admin_a.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    alice_b = _plain(b, "alice")
    _eventually(lambda: _produce_error(alice_b, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED,
                "alice not refused on B before the ACL")
    acl = _alice_write_acl(topic)
    admin_a.create_acls([acl])[acl].result(30)
    _eventually(lambda: _produce_error(alice_b, topic) is None, "alice refused on B after the ACL")
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    assert admin_b.delete_acls([flt])[flt].result(30) == [acl]
    _eventually(lambda: _produce_error(_plain(a, "alice"), topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED,
                "alice still allowed on A after the deletion")
    # Kafka's controller refuses a non-super user's CreateAcls.
    alice = AdminClient(_plain(a, "alice"))
    own = AclBinding(ResourceType.TOPIC, "alice-own", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.ALL, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as info:
        alice.create_acls([own])[own].result(30)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, info.value
    # SCRAM through A, login on B.
    upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"bob-secret")
    admin_a.alter_user_scram_credentials([upsert])["bob"].result(30)
    bob_b = AdminClient(_scram(b, "bob", "bob-secret"))
    _eventually(lambda: _logs_in(bob_b), "bob cannot log in on broker B")
    # The client's version is what Kafka's controller answers at: CreateAcls v1, one valid and one
    # invalid creation (Kafka's AclControlManager: INVALID_REQUEST for a principal without a type).
    with _raw(a, "admin") as raw:
        creation = CreateAclsRequest.AclCreation
        resp = raw.request(30, 1, CreateAclsRequest(creations=[
            creation(resource_type=2, resource_name="v1-topic", resource_pattern_type=3, principal="User:dave",
                     host="*", operation=3, permission_type=3),
            creation(resource_type=2, resource_name="v1-topic", resource_pattern_type=3, principal="dave",
                     host="*", operation=3, permission_type=3)]))
        assert isinstance(resp, CreateAclsResponse)
        assert [r.error_code for r in resp.results] == [0, 42], resp
    for kb in (a, b):
        assert "Traceback" not in kb.log_text()
