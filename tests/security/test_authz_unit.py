"""Authorization pieces Kafka's broker listener cannot show differentially (tests/security/
test_authz_vs_kafka.py covers those): `authorizeByResourceType` (KIP-679, what an idempotent
InitProducerId needs), the KIP-430 bit fields of each resource type, and the controller listener's
checks (BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds, UnregisterBroker,
ElectLeaders, partition reassignments, the Raft APIs, Envelope), run in process through the
dispatcher with a principal that has no right, one that has it and a super user.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.dispatcher import ApiDispatcher
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.allocate_producer_ids import AllocateProducerIdsRequest
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest
from kbroker.protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest
from kbroker.protocol.messages.broker_registration import BrokerRegistrationRequest
from kbroker.protocol.messages.describe_quorum import DescribeQuorumRequest
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest
from kbroker.protocol.messages.envelope import EnvelopeRequest
from kbroker.protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest
from kbroker.protocol.messages.unregister_broker import UnregisterBrokerRequest
from kbroker.protocol.messages.vote import VoteRequest
from kbroker.security.acl import (
    ALL,
    ALLOW,
    ALTER,
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_NAME,
    DENY,
    DESCRIBE,
    GROUP,
    IDEMPOTENT_WRITE,
    LITERAL,
    PREFIXED,
    READ,
    SUPPORTED_OPERATIONS,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    StandardAcl,
    StandardAuthorizer,
    operations_bit_field,
)
from kbroker.server.controller_apis import ControllerApis


def _authorizer(*acls: tuple[int, str, int, str, int, int], allow_everyone: bool = False,
                host: str = "*") -> StandardAuthorizer:
    a = StandardAuthorizer(super_users=["User:admin"], allow_everyone_if_no_acl_found=allow_everyone)
    a.update({uuid.uuid4(): StandardAcl(rt, name, pattern, principal, host, op, perm)
              for rt, name, pattern, principal, op, perm in acls})
    return a


def _by_type(a: StandardAuthorizer, principal: str = "User:alice", op: int = WRITE, host: str = "10.0.0.1") -> bool:
    return a.authorize_by_resource_type(principal, host, op, TOPIC)


def test_authorize_by_resource_type_follows_kafkas_authorizer_default() -> None:
    assert not _by_type(_authorizer())  # no ACL at all, allow.everyone false
    assert _by_type(_authorizer(allow_everyone=True))  # the "hardcode" resource has no ACL
    assert _by_type(_authorizer(), "User:admin")  # super user
    assert _by_type(_authorizer((TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW)))
    assert _by_type(_authorizer((TOPIC, "ord", PREFIXED, "User:*", ALL, ALLOW)))
    # only the operation itself or ALL: READ (or DESCRIBE) does not give WRITE
    assert not _by_type(_authorizer((TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW)))
    # another principal or another host
    assert not _by_type(_authorizer((TOPIC, "orders", LITERAL, "User:bob", WRITE, ALLOW)))
    assert not _by_type(_authorizer((TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW), host="10.9.9.9"))
    # a wildcard DENY wins over everything (even allow.everyone's "hardcode" check does not reach it
    # when the deny applies to "hardcode" too)
    assert not _by_type(_authorizer((TOPIC, "*", LITERAL, "User:alice", WRITE, DENY),
                                    (TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW)))
    # an ALLOW dominated by a DENY of the same literal name, or by a PREFIXED deny of its prefix
    assert not _by_type(_authorizer((TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW),
                                    (TOPIC, "orders", LITERAL, "User:alice", WRITE, DENY)))
    assert not _by_type(_authorizer((TOPIC, "orders-eu", PREFIXED, "User:alice", WRITE, ALLOW),
                                    (TOPIC, "ord", PREFIXED, "User:alice", ALL, DENY)))
    # ... but a deny of something else leaves another allow standing
    assert _by_type(_authorizer((TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW),
                                (TOPIC, "billing", PREFIXED, "User:alice", WRITE, DENY)))
    # a wildcard ALLOW
    assert _by_type(_authorizer((TOPIC, "*", LITERAL, "User:alice", WRITE, ALLOW),
                                (TOPIC, "orders", LITERAL, "User:alice", WRITE, DENY)))


def test_authorized_operations_bit_fields() -> None:
    # Without an authorizer, Kafka reports every supported operation: the values Kafka 4.3.1 sends.
    assert operations_bit_field(SUPPORTED_OPERATIONS[TOPIC]) == 3576
    assert operations_bit_field(SUPPORTED_OPERATIONS[GROUP]) == 3400
    assert operations_bit_field(SUPPORTED_OPERATIONS[CLUSTER]) == 8096
    a = _authorizer((TOPIC, "t", LITERAL, "User:alice", READ, ALLOW), (GROUP, "g", LITERAL, "User:alice", ALL, ALLOW),
                    (TRANSACTIONAL_ID, "x", LITERAL, "User:alice", WRITE, ALLOW))
    assert a.authorized_operations("User:alice", "h", TOPIC, "t") == (1 << READ) | (1 << DESCRIBE)
    assert a.authorized_operations("User:alice", "h", GROUP, "g") == 3400
    assert a.authorized_operations("User:alice", "h", TRANSACTIONAL_ID, "x") == (1 << WRITE) | (1 << DESCRIBE)
    assert a.authorized_operations("User:bob", "h", TOPIC, "t") == 0


class _Controller:
    """Reached only when the check passes: every call is answered NOT_CONTROLLER."""

    def __getattr__(self, name: str) -> Any:
        async def refuse(*args: object, **kwargs: object) -> Any:
            raise KafkaError("not here", error_code=ErrorCode.NOT_CONTROLLER)
        return refuse


class _Raft:
    def __init__(self) -> None:
        self.inbound: list[int] = []

    def handle_inbound(self, api_key: int, body: object) -> str:
        self.inbound.append(api_key)
        return "raft answered"


def _services(authorizer: StandardAuthorizer) -> BrokerServices:
    # The handlers read the ACLs from the metadata image (authorizer.update): hand it the same map.
    metadata = SimpleNamespace(image=SimpleNamespace(acls=SimpleNamespace(acls=authorizer._source)))
    services = BrokerServices(config=None, log_manager=None, metadata=metadata,  # type: ignore[arg-type]
                              configs=None, controller=_Controller(), producer_id_manager=None,  # type: ignore[arg-type]
                              replica_manager=None, group_coordinator=None,  # type: ignore[arg-type]
                              transaction_coordinator=None, cluster_id="c", node_id=1,  # type: ignore[arg-type]
                              authorizer=authorizer)
    return services


def _call(dispatcher: ApiDispatcher, principal: str, api_key: int, version: int, body: Any) -> Any:
    ctx = RequestContext(listener_name="CONTROLLER", principal=principal, peer=("127.0.0.1", 5000))
    result = dispatcher.handle(ctx, RequestHeader(api_key=api_key, api_version=version, correlation_id=1,
                                                  client_id="t"), body)
    if asyncio.iscoroutine(result) or asyncio.isfuture(result):
        return asyncio.run(_await(result))
    return result


async def _await(result: Any) -> Any:
    return await result


CAF = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
# api key, version, request, the operation Kafka's ControllerApis checks
CONTROLLER_APIS = [
    (62, 4, BrokerRegistrationRequest(broker_id=2, cluster_id="c"), CLUSTER_ACTION),
    (63, 1, BrokerHeartbeatRequest(broker_id=2, broker_epoch=1), CLUSTER_ACTION),
    (56, 3, AlterPartitionRequest(broker_id=2, broker_epoch=1, topics=[]), CLUSTER_ACTION),
    (67, 0, AllocateProducerIdsRequest(broker_id=2, broker_epoch=1), CLUSTER_ACTION),
    (64, 0, UnregisterBrokerRequest(broker_id=2), ALTER),
    (43, 2, ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=1000), ALTER),
    (45, 0, AlterPartitionReassignmentsRequest(timeout_ms=1000, topics=[]), ALTER),
    (46, 0, ListPartitionReassignmentsRequest(timeout_ms=1000, topics=None), DESCRIBE),
]


@pytest.mark.parametrize(("api_key", "version", "body", "operation"), CONTROLLER_APIS,
                         ids=[str(c[0]) for c in CONTROLLER_APIS])
def test_controller_listener_apis_need_their_cluster_operation(api_key: int, version: int, body: Any,
                                                               operation: int) -> None:
    other = CLUSTER_ACTION if operation in (ALTER, DESCRIBE) else ALTER  # an operation not implying it
    authorizer = _authorizer((CLUSTER, CLUSTER_NAME, LITERAL, "User:broker", operation, ALLOW),
                             (CLUSTER, CLUSTER_NAME, LITERAL, "User:bob", other, ALLOW),
                             (CLUSTER, CLUSTER_NAME, LITERAL, "User:eve", ALL, ALLOW),
                             (CLUSTER, CLUSTER_NAME, LITERAL, "User:eve", operation, DENY))
    dispatcher = ApiDispatcher(_services(authorizer), listener="controller")
    assert dispatcher.handlers[api_key]
    for principal in ("User:bob", "User:eve", "User:nobody"):
        assert _call(dispatcher, principal, api_key, version, body).error_code == CAF, principal
    for principal in ("User:broker", "User:admin"):  # passes the check, reaches the controller
        assert _call(dispatcher, principal, api_key, version, body).error_code == ErrorCode.NOT_CONTROLLER


def test_raft_apis_and_envelope_on_the_controller_listener() -> None:
    authorizer = _authorizer((CLUSTER, CLUSTER_NAME, LITERAL, "User:voter", CLUSTER_ACTION, ALLOW),
                             (CLUSTER, CLUSTER_NAME, LITERAL, "User:ops", DESCRIBE, ALLOW))
    raft = _Raft()
    apis = ControllerApis(_services(authorizer), raft)  # type: ignore[arg-type]
    vote = VoteRequest(cluster_id="c", voter_id=1, topics=[])
    assert _call(apis, "User:ops", 52, 1, vote).error_code == CAF
    assert _call(apis, "User:voter", 52, 1, vote) == "raft answered"
    quorum = DescribeQuorumRequest(topics=[])
    assert _call(apis, "User:voter", 55, 2, quorum).error_code == CAF  # DescribeQuorum: DESCRIBE
    assert _call(apis, "User:ops", 55, 2, quorum) == "raft answered"
    assert raft.inbound == [52, 55]
    envelope = EnvelopeRequest(request_data=b"", request_principal=b"", client_host_address=b"\x7f\0\0\1")
    refused = _call(apis, "User:ops", 58, 0, envelope)
    assert refused.error_code == CAF and refused.response_data is None
    # a broker (CLUSTER_ACTION) gets past the check: the empty inner request is then INVALID_REQUEST
    assert _call(apis, "User:voter", 58, 0, envelope).error_code == ErrorCode.INVALID_REQUEST


def test_idempotent_write_or_any_topic_write_lets_init_producer_id_through() -> None:
    a = _authorizer((CLUSTER, CLUSTER_NAME, LITERAL, "User:p", IDEMPOTENT_WRITE, ALLOW),
                    (TOPIC, "logs-", PREFIXED, "User:q", WRITE, ALLOW))
    assert a.authorize("User:p", "h", IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
    assert not a.authorize_by_resource_type("User:p", "h", WRITE, TOPIC)
    assert a.authorize_by_resource_type("User:q", "h", WRITE, TOPIC)
    assert not a.authorize("User:q", "h", IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
