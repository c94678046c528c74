"""The controller mutation quota of an admin request (not a handler: the dispatcher skips `_` modules).

CreateTopics, CreatePartitions and DeleteTopics take one token per partition created or deleted from
the client's `controller_mutation_rate` bucket (kbroker/cluster/quotas.py). From CreateTopics v6,
CreatePartitions v3 and DeleteTopics v5 the quota is strict: a topic asked for while the bucket is
negative fails with THROTTLING_QUOTA_EXCEEDED "The throttling quota has been exceeded." and the
response carries the throttle time; older versions are permissive (KIP-599).
"""

from __future__ import annotations

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.cluster.quotas import ControllerMutationQuota
from kbroker.protocol.headers import RequestHeader


def controller_mutation_quota(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                              strict_since_version: int) -> ControllerMutationQuota:
    quotas = services.quotas
    user, client_id = ctx.principal.partition(":")[2], header.client_id or ""
    if quotas is None:
        return ControllerMutationQuota(None, user, client_id, False)
    return quotas.controller_mutation.new_quota_for(user, client_id, header.api_version, strict_since_version)
