"""What ShareFetch (78) and ShareAcknowledge (79) check and decode the same way: the share-partition
manager is there, READ on the group (a refusal is the response's top-level GROUP_AUTHORIZATION_FAILED,
as Kafka's KafkaApis), READ on each topic (a refused topic's partitions are answered
TOPIC_AUTHORIZATION_FAILED, in request order), and each partition's acknowledgement batches.
Must not import net/ or the broker wiring.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Iterable
from typing import Any

from kbroker.api._authz import authorize
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.share_partition import AcknowledgementBatch
from kbroker.coord.share_partition_manager import (
    ShareFetchOutcome,
    SharePartitionManager,
    SharePartitionRequest,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.security.acl import GROUP, READ, TOPIC


def share_group_check(services: BrokerServices, ctx: RequestContext,
                      group_id: str) -> tuple[ErrorCode, SharePartitionManager | None]:
    """(NONE, the manager), or the top-level error: UNSUPPORTED_VERSION without share groups,
    GROUP_AUTHORIZATION_FAILED without READ on the group."""
    manager = services.share_partition_manager
    if manager is None:
        return ErrorCode.UNSUPPORTED_VERSION, None
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    return ErrorCode.NONE, manager


def share_partitions(services: BrokerServices, ctx: RequestContext,
                     topics: Iterable[Any]) -> tuple[list[SharePartitionRequest], list[tuple[uuid.UUID, int]]]:
    """The requested partitions with their acknowledgement batches (None when there are none), and
    the partitions of topics this principal may not READ (Kafka's per-topic authorization)."""
    requested: list[SharePartitionRequest] = []
    denied: list[tuple[uuid.UUID, int]] = []
    for t in topics:
        info = services.metadata.topic_by_id(t.topic_id)
        allowed = services.authorizer is None or (info is not None and authorize(services, ctx, READ, TOPIC, info.name))
        for p in t.partitions:
            if not allowed:
                denied.append((t.topic_id, p.partition_index))
                continue
            acks = [AcknowledgementBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                    for b in p.acknowledgement_batches]
            requested.append(SharePartitionRequest(t.topic_id, p.partition_index, acks or None))
    return requested, denied


# Kafka's SharePartition.fetchPersisterError: what an acknowledgement answers when its state write failed.
_PERSISTER_ERRORS = {
    ErrorCode.NOT_COORDINATOR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.FENCED_STATE_EPOCH: ErrorCode.FENCED_STATE_EPOCH,
    ErrorCode.FENCED_LEADER_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


def pending_acknowledgement_writes(manager: SharePartitionManager, group_id: str,
                                   outcome: ShareFetchOutcome) -> list[tuple[tuple[uuid.UUID, int], Awaitable[ErrorCode]]]:
    """The state writes the request's successful acknowledgements wait for (network persister)."""
    keys = [k for k, r in outcome.partitions.items() if r.acknowledged and r.acknowledge_error == ErrorCode.NONE]
    return manager.pending_writes(group_id, keys) if keys else []


async def await_acknowledgement_writes(manager: SharePartitionManager, group_id: str, outcome: ShareFetchOutcome,
                                       pending: list[tuple[tuple[uuid.UUID, int], Awaitable[ErrorCode]]]) -> None:
    """Kafka completes an acknowledgement once its state is written to the share coordinator: wait for
    the writes; a failed one answers the partition's acknowledgement with Kafka's persister error, and
    the share-partition is read again from the coordinator at its next use."""
    for key, write in pending:
        error = await write
        if error != ErrorCode.NONE:
            result = outcome.partitions[key]
            result.acknowledge_error = _PERSISTER_ERRORS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR)
            manager.on_write_failed(group_id, key)
