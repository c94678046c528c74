"""Admin clients get a clear error at once for what kbroker does not serve (issue 19, the peer suites).

ACLs without an authorizer answer SECURITY_DISABLED, as Kafka 4.3.1 does (the raw answers are compared
with Kafka's in tests/differential/test_api_versions_vs_kafka.py); ElectLeaders, which the old single node
did not advertise, is answered as Kafka answers it.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.support.broker import KBroker

pytestmark = pytest.mark.interop


def test_acl_admin_calls_say_security_is_disabled(kbroker: KBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    started = time.monotonic()
    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    # librdkafka reports DescribeAcls' SECURITY_DISABLED as "no ACLs" (the same bytes as Kafka's answer,
    # compared in the differential test); creations and deletions raise it.
    assert admin.describe_acls(any_filter, request_timeout=20).result(timeout=30) == []
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as created:
        admin.create_acls([binding], request_timeout=20)[binding].result(timeout=30)
    assert created.value.args[0].code() == KafkaError.SECURITY_DISABLED
    with pytest.raises(KafkaException) as deleted:
        admin.delete_acls([any_filter], request_timeout=20)[any_filter].result(timeout=30)
    assert deleted.value.args[0].code() == KafkaError.SECURITY_DISABLED
    assert time.monotonic() - started < 10


def test_kafka_python_acls_raise_security_disabled(kbroker: KBroker) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import SecurityDisabledError

    admin = KafkaAdminClient(bootstrap_servers=kbroker.bootstrap, request_timeout_ms=10000)
    try:
        acl_filter = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                               permission_type=ACLPermissionType.ANY,
                               resource_pattern=ResourcePatternFilter(KResourceType.TOPIC, None, ACLResourcePatternType.ANY))
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(acl_filter)
    finally:
        admin.close()


def test_elect_leaders_is_answered_as_kafka_answers_it(kbroker: KBroker) -> None:
    """ElectLeaders was the one API confluent-kafka's admin client could send that kbroker's old single node
    did not advertise (the client refused it at once, _UNSUPPORTED_FEATURE). The default node is now a
    one-voter KRaft combined node whose broker listener forwards it to the controller, as Kafka's brokers
    do: a preferred election on a partition led by its preferred replica is ELECTION_NOT_NEEDED."""
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    for f in admin.create_topics([NewTopic("elect", 1, 1)]).values():
        f.result(30)
    started = time.monotonic()
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elect", 0)]).result(timeout=30)
    errors = {(tp.topic, tp.partition): e for tp, e in result.items()}
    assert set(errors) == {("elect", 0)}, result
    assert errors[("elect", 0)] is not None and errors[("elect", 0)].code() == KafkaError.ELECTION_NOT_NEEDED, result
    assert time.monotonic() - started < 10
