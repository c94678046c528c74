"""What the share coordinator's RPCs (InitializeShareGroupState 83, ReadShareGroupState 84,
WriteShareGroupState 85, DeleteShareGroupState 86, ReadShareGroupStateSummary 87) have in common.

Kafka's KafkaApis + ShareCoordinatorService: CLUSTER_ACTION on the cluster (else
CLUSTER_AUTHORIZATION_FAILED on every partition); an empty group id or no topics answers an empty
response; every (topic id, partition) is one operation on the shard of `__share_group_state`
partition `abs(hashCode("group:topicId:partition")) % partitions`, answered together grouped by topic.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.share_coordinator import ShareCoordinatorService, ShareRpcResult
from kbroker.protocol.errors import ErrorCode
from kbroker.security.acl import CLUSTER_ACTION

NOT_AVAILABLE = ShareRpcResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, "Share coordinator is not available.")


def authorize_cluster_action(services: BrokerServices, ctx: RequestContext) -> None:
    if services.authorizer is not None:
        check_cluster(services, ctx, CLUSTER_ACTION)  # raises CLUSTER_AUTHORIZATION_FAILED


async def per_partition(services: BrokerServices, topics: list[Any],
                        call: Callable[[ShareCoordinatorService, uuid.UUID, Any],
                                       Coroutine[Any, Any, ShareRpcResult]]) -> list[tuple[uuid.UUID, list[tuple[Any, ShareRpcResult]]]]:
    """Run `call(service, topic_id, partition_data)` for every partition of every topic, concurrently."""
    sc = services.share_coordinator
    jobs: list[tuple[uuid.UUID, Any, asyncio.Future[ShareRpcResult] | ShareRpcResult]] = []
    for t in topics:
        for p in t.partitions:
            if sc is None or not sc.active:
                jobs.append((t.topic_id, p, NOT_AVAILABLE))
            else:
                jobs.append((t.topic_id, p, asyncio.ensure_future(call(sc, t.topic_id, p))))
    out: dict[uuid.UUID, list[tuple[Any, ShareRpcResult]]] = {}
    for topic_id, p, job in jobs:
        result = job if isinstance(job, ShareRpcResult) else await job
        out.setdefault(topic_id, []).append((p, result))
    return list(out.items())
