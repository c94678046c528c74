"""AlterShareGroupOffsets (key 91, v0, KIP-932): set the start offsets of an empty share group's
share-partitions (`kafka-share-groups --reset-offsets --execute`).

Kafka 4.3.1's rules (`GroupMetadataManager.alterShareGroupOffsets`): the group coordinator creates the
share group when it does not exist, refuses a group of another type (GROUP_ID_NOT_FOUND "Group <id> is
not a share group.") and a group with members (NON_EMPTY_GROUP, top level); then, per topic, an unknown
topic answers UNKNOWN_TOPIC_OR_PARTITION for each of its partitions, as does a partition beyond the
topic's count; every other partition's share-partition starts again at the given offset with nothing in
flight (Kafka's persister `initializeState`; here the share-partition manager writes the new state to
`__share_group_state` before answering; while that topic is being created or loaded, the write is
retried for up to `share.coordinator.write.timeout.ms`). READ on the group (top-level GROUP_AUTHORIZATION_FAILED) and
on each topic (TOPIC_AUTHORIZATION_FAILED per partition) with an authorizer.

On a multi-broker cluster the group coordinator sends InitializeShareGroupState to each share-partition's
share coordinator (Kafka's `persisterInitialize`, batched per coordinator) instead of writing through
its own share-partition manager (`kbroker.api._share_offsets`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from kbroker.api import _share_offsets
from kbroker.api._authz import authorize
from kbroker.api._groups import coordinator
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)
from kbroker.security.acl import GROUP, READ, TOPIC

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0

R = AlterShareGroupOffsetsResponse
T = TypeVar("T")


def _same(error: ErrorCode) -> ErrorCode:
    return error


def error_response(request: AlterShareGroupOffsetsRequest, version: int, error: ErrorCode,
                   message: str | None = None) -> R:
    return R(error_code=error, error_message=message if message is not None else error.message, responses=[])


# While __share_group_state is created (at the first use) or loaded, a state write is retried.
STATE_RETRIABLE = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


async def retry_state(services: BrokerServices, attempt: Callable[[], T], error_of: Callable[[T], ErrorCode]) -> T:
    """`attempt()` again every 50 ms while the share coordinator is not ready, up to
    `share.coordinator.write.timeout.ms`."""
    deadline = asyncio.get_running_loop().time() + int(services.config["share.coordinator.write.timeout.ms"]) / 1000
    result = attempt()
    while error_of(result) in STATE_RETRIABLE and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        result = attempt()
    return result


def _failed(name: str, partitions: list[int], error: ErrorCode) -> Any:
    return R.AlterShareGroupOffsetsResponseTopic(topic_name=name, partitions=[
        R.AlterShareGroupOffsetsResponsePartition(partition_index=p, error_code=error, error_message=error.message)
        for p in partitions])


async def handle(services: BrokerServices, ctx: RequestContext, header: Any,
                 request: AlterShareGroupOffsetsRequest) -> R:
    gid = request.group_id
    manager = services.share_partition_manager
    if not gid:
        return error_response(request, header.api_version, ErrorCode.INVALID_GROUP_ID)
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, gid):
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if manager is None:
        return error_response(request, header.api_version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    answer = coordinator(services).share_offsets_alterable(gid, True)
    error, message = await answer if isinstance(answer, asyncio.Future) else answer
    if error != ErrorCode.NONE:
        return error_response(request, header.api_version, error, message)
    # Kafka's KafkaApis answers the unknown topics first, then the group coordinator's topics.
    topics = [_failed(t.topic_name, [p.partition_index for p in t.partitions], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
              for t in request.topics if services.metadata.topic(t.topic_name) is None]
    for t in request.topics:
        info = services.metadata.topic(t.topic_name)
        partitions = [p.partition_index for p in t.partitions]
        if info is None:
            continue
        if services.authorizer is not None and not authorize(services, ctx, READ, TOPIC, t.topic_name):
            topics.append(_failed(t.topic_name, partitions, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        rows = []
        persister = _share_offsets.network_persister(services)
        initialized: dict[int, ErrorCode] = {}
        if persister is not None:
            valid = [(info.topic_id, p.partition_index, p.start_offset) for p in t.partitions
                     if 0 <= p.partition_index < info.num_partitions]
            codes = await _share_offsets.initialize(services, persister, gid, valid)
            initialized = {p: code for (_t, p, _s), code in zip(valid, codes, strict=True)}
            done = {p for p, code in initialized.items() if code == ErrorCode.NONE}
            if done:  # recorded as initialized in the group's ShareGroupStatePartitionMetadata
                await _share_offsets.awaited(coordinator(services).share_state_initialized(gid, {info.topic_id: done}))
        for p in t.partitions:
            if not 0 <= p.partition_index < info.num_partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif persister is not None:
                code = initialized[p.partition_index]
            else:
                code = await retry_state(services, partial(manager.alter_start_offset, gid, info.topic_id,
                                                           p.partition_index, p.start_offset), _same)
            rows.append(R.AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index, error_code=code,
                error_message=code.message if code != ErrorCode.NONE else None))
        topics.append(R.AlterShareGroupOffsetsResponseTopic(topic_name=t.topic_name, topic_id=info.topic_id,
                                                            partitions=rows))
    return R(error_code=ErrorCode.NONE, error_message=None, responses=topics)
