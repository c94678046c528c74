"""What the handlers share for authorization: `authorize(services, ctx, operation, resource_type, name)`.

Each handler checks what Kafka's `KafkaApis` / `ControllerApis` check (the operation and resource per
API, and the error code: TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED), with the helpers of Kafka's
`AuthHelper`: `filter_authorized` (filterByAuthorized), `authorize_by_resource_type`,
`authorized_operations` and `cluster_authorized_operations` (KIP-430 bit fields), `check_cluster`
(authorizeClusterOperation: raises, so the API's `error_response` answers). Without an authorizer
(`services.authorizer is None`, Kafka's default) every check passes: handlers test that once per
request, before any per-topic loop. The table of checks is in docs/security.md; the answers are
compared with Kafka 4.3.1's in tests/security/test_authz_vs_kafka.py.
"""

from __future__ import annotations

from collections.abc import Iterable

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.security.acl import (
    CLUSTER,
    CLUSTER_NAME,
    DESCRIBE,
    GROUP,
    SUPPORTED_OPERATIONS,
    TOPIC,
    operations_bit_field,
)


def authorize(services: BrokerServices, ctx: RequestContext, operation: int, resource_type: int, name: str) -> bool:
    authorizer = services.authorizer
    if authorizer is None:
        return True
    authorizer.update(services.metadata.image.acls.acls)
    return authorizer.authorize(ctx.principal, ctx.peer[0], operation, resource_type, name)


def authorize_cluster(services: BrokerServices, ctx: RequestContext, operation: int) -> bool:
    return authorize(services, ctx, operation, CLUSTER, CLUSTER_NAME)


# ConfigResource types (DescribeConfigs / AlterConfigs / IncrementalAlterConfigs) -> the ACL resource
# checked and the error of a refusal (KafkaApis.authorizeConfigResource): a topic by its name, a group
# by its id, the broker and its loggers as the cluster.
_CONFIG_RESOURCES = {2: (TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED), 32: (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
                     4: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                     8: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)}


def check_config_resource(services: BrokerServices, ctx: RequestContext, operation: int,
                          config_resource_type: int, name: str) -> None:
    """Raise the KafkaError Kafka answers for a config resource this principal may not `operation`
    (DESCRIBE_CONFIGS or ALTER_CONFIGS); nothing without an authorizer."""
    if services.authorizer is None:
        return
    target = _CONFIG_RESOURCES.get(config_resource_type)
    if target is None:
        return
    resource_type, error = target
    resource_name = CLUSTER_NAME if resource_type == CLUSTER else name
    if not authorize(services, ctx, operation, resource_type, resource_name):
        raise KafkaError(error.message, error_code=error)


def check_topic(services: BrokerServices, ctx: RequestContext, operation: int, name: str) -> None:
    """Raise TOPIC_AUTHORIZATION_FAILED when this principal may not `operation` the topic."""
    if services.authorizer is not None and not authorize(services, ctx, operation, TOPIC, name):
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED.message, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def filter_authorized(services: BrokerServices, ctx: RequestContext, operation: int, resource_type: int,
                      names: Iterable[str]) -> set[str]:
    """Kafka's `AuthHelper.filterByAuthorized`: the names (once each) this principal may `operation`."""
    distinct = set(names)
    if services.authorizer is None:
        return distinct
    return {n for n in distinct if authorize(services, ctx, operation, resource_type, n)}


def partition_groups_by_authorization(services: BrokerServices, ctx: RequestContext,
                                      group_ids: Iterable[str]) -> tuple[list[str], list[str]]:
    """The describe APIs' split (KafkaApis: DescribeGroups, ConsumerGroupDescribe,
    ShareGroupDescribe): (the ids this principal may DESCRIBE, in request order; the refused ones,
    answered first with GROUP_AUTHORIZATION_FAILED). Without an authorizer nothing is refused."""
    ids = list(group_ids)
    if services.authorizer is None:
        return ids, []
    refused = [g for g in ids if not authorize(services, ctx, DESCRIBE, GROUP, g)]
    denied = set(refused)
    return [g for g in ids if g not in denied], refused


def authorize_by_resource_type(services: BrokerServices, ctx: RequestContext, operation: int,
                               resource_type: int) -> bool:
    """Kafka's `AuthHelper.authorizeByResourceType`: `operation` on at least one resource of the type."""
    authorizer = services.authorizer
    if authorizer is None:
        return True
    authorizer.update(services.metadata.image.acls.acls)
    return authorizer.authorize_by_resource_type(ctx.principal, ctx.peer[0], operation, resource_type)


def authorized_operations(services: BrokerServices, ctx: RequestContext, resource_type: int, name: str) -> int:
    """Kafka's `AuthHelper.authorizedOperations` (KIP-430): the bit field of the resource type's
    supported operations this principal may do; without an authorizer all of them."""
    authorizer = services.authorizer
    if authorizer is None:
        return operations_bit_field(SUPPORTED_OPERATIONS[resource_type])
    authorizer.update(services.metadata.image.acls.acls)
    return authorizer.authorized_operations(ctx.principal, ctx.peer[0], resource_type, name)


def cluster_authorized_operations(services: BrokerServices, ctx: RequestContext) -> int:
    """Metadata v8-10 / DescribeCluster `cluster_authorized_operations`: 0 unless the principal may
    DESCRIBE the cluster (KafkaApis / AuthHelper.computeDescribeClusterResponse), else the bit field."""
    if not authorize_cluster(services, ctx, DESCRIBE):
        return 0
    return authorized_operations(services, ctx, CLUSTER, CLUSTER_NAME)


def check_cluster(services: BrokerServices, ctx: RequestContext, operation: int) -> None:
    """Kafka's `AuthHelper.authorizeClusterOperation`: raise CLUSTER_AUTHORIZATION_FAILED (the
    handler's `error_response` answers it) when this principal may not `operation` the cluster."""
    if services.authorizer is not None and not authorize_cluster(services, ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED.message,
                         error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
