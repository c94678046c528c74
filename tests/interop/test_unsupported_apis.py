"""Admin clients get a clear error at once for what kbroker does not serve (issue 19, the peer suites).

ACLs without an authorizer answer SECURITY_DISABLED, as Kafka 4.3.1 does (the raw answers are compared
with Kafka's in tests/differential/test_api_versions_vs_kafka.py); an API kbroker does not advertise
is refused by the client itself from the ApiVersions ranges, without a timeout.
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


def test_an_api_kbroker_does_not_advertise_fails_fast(kbroker: KBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        # ElectLeaders: served on kbroker's controller listener only (api/elect_leaders.py).
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("t", 0)]).result(timeout=30)
    assert raised.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE, raised.value
    assert time.monotonic() - started < 10
