"""What the handlers share for authorization: `authorize(services, ctx, operation, resource_type, name)`.

Each handler checks what Kafka's `KafkaApis` checks (the operation and resource per API, and the error
code: TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Without an authorizer (`services.authorizer is None`, Kafka's
default) every check is skipped: handlers test that once per request, before any per-topic loop.
"""

from __future__ import annotations

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.security.acl import CLUSTER, CLUSTER_NAME, GROUP, TOPIC


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
