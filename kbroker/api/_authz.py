"""What the handlers share for authorization: `authorize(services, ctx, operation, resource_type, name)`.

Each handler checks what Kafka's `KafkaApis` checks (the operation and resource per API, and the error
code: TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Without an authorizer (`services.authorizer is None`, Kafka's
default) every check is skipped: handlers test that once per request, before any per-topic loop.
"""

from __future__ import annotations

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.security.acl import CLUSTER, CLUSTER_NAME


def authorize(services: BrokerServices, ctx: RequestContext, operation: int, resource_type: int, name: str) -> bool:
    authorizer = services.authorizer
    if authorizer is None:
        return True
    authorizer.update(services.metadata.image.acls.acls)
    return authorizer.authorize(ctx.principal, ctx.peer[0], operation, resource_type, name)


def authorize_cluster(services: BrokerServices, ctx: RequestContext, operation: int) -> bool:
    return authorize(services, ctx, operation, CLUSTER, CLUSTER_NAME)
