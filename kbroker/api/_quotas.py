"""The controller mutation quota of an admin request (not a handler: the dispatcher skips `_` modules).

CreateTopics, CreatePartitions and DeleteTopics take one token per partition created or deleted from
the client's `controller_mutation_rate` bucket (kbroker/cluster/quotas.py). From CreateTopics v6,
CreatePartitions v3 and DeleteTopics v5 the quota is strict: a topic asked for while the bucket is
negative fails with THROTTLING_QUOTA_EXCEEDED "The throttling quota has been exceeded." and the
response carries the throttle time; older versions are permissive (KIP-599).
"""

from __future__ import annotations

from collections.abc import Callable

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.cluster.quotas import ControllerMutationQuota, ThrottlingQuotaExceeded
from kbroker.protocol.errors import ErrorCode, KafkaError, error_fields
from kbroker.protocol.headers import RequestHeader


def controller_mutation_quota(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                              strict_since_version: int) -> ControllerMutationQuota:
    quotas = services.quotas
    user, client_id = ctx.principal.partition(":")[2], header.client_id or ""
    if quotas is None:
        return ControllerMutationQuota(None, user, client_id, False)
    return quotas.controller_mutation.new_quota_for(user, client_id, header.api_version, strict_since_version)


class QuotaExceededError(KafkaError):
    """A topic refused by the controller mutation quota inside a whole-request controller write (Kafka's
    ThrottlingQuotaExceededException, which always carries its message)."""

    error_code = ErrorCode.THROTTLING_QUOTA_EXCEEDED


def partition_change_quota(quota: ControllerMutationQuota, validate_only: bool) -> Callable[[int], None]:
    """Kafka's `ControllerRequestContext.applyPartitionChangeQuota` over this request's quota: a topic
    that passed its checks fails once the quota is spent; else its partitions are recorded (not for
    validate-only)."""
    def apply(partitions: int) -> None:
        try:
            quota.check()
        except ThrottlingQuotaExceeded as e:
            raise QuotaExceededError(str(e)) from e
        if not validate_only:
            quota.record(partitions)
    return apply


def topic_error_fields(exc: BaseException) -> tuple[int, str | None]:
    """`error_fields`, but a quota refusal keeps its message as Kafka's does."""
    if isinstance(exc, QuotaExceededError):
        return int(exc.error_code), str(exc)
    return error_fields(exc)
