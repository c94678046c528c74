"""DeleteShareGroupOffsets (key 92, v0, KIP-932): forget the share-partitions of an empty share group
for whole topics (`kafka-share-groups --delete-offsets`).

Kafka 4.3.1's rules (`GroupCoordinatorShard.initiateDeleteShareGroupOffsets`): the group must be an
existing share group (GROUP_ID_NOT_FOUND "Group <id> not found." / "Group <id> is not a share
group.") without members (NON_EMPTY_GROUP), both top level; per topic, an unknown topic answers
UNKNOWN_TOPIC_OR_PARTITION, a topic of which the group has initialized no share-partition
UNKNOWN_TOPIC_OR_PARTITION "There is no offset information to delete."; otherwise the state of every
initialized share-partition of the topic is deleted from `__share_group_state` (Kafka's persister
`deleteState`) and the topic answers NONE with its id. A later fetch initializes the share-partitions
again by `share.auto.offset.reset`. DELETE on the group and READ on each topic with an authorizer.

On a multi-broker cluster the group coordinator finds the initialized share-partitions with
ReadShareGroupStateSummary and deletes their states with DeleteShareGroupState at their share
coordinators (Kafka's persister `deleteState`), not through its own share-partition manager
(`kbroker.api._share_offsets`).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from kbroker.api import _share_offsets
from kbroker.api._authz import authorize
from kbroker.api._groups import coordinator
from kbroker.api.alter_share_group_offsets import retry_state
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)
from kbroker.security.acl import DELETE, GROUP, READ, TOPIC

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0

R = DeleteShareGroupOffsetsResponse
NO_OFFSETS = "There is no offset information to delete."


def error_response(request: DeleteShareGroupOffsetsRequest, version: int, error: ErrorCode,
                   message: str | None = None) -> R:
    return R(error_code=error, error_message=message if message is not None else error.message, responses=[])


async def handle(services: BrokerServices, ctx: RequestContext, header: Any,
                 request: DeleteShareGroupOffsetsRequest) -> R:
    gid = request.group_id
    manager = services.share_partition_manager
    if not gid:
        return error_response(request, header.api_version, ErrorCode.INVALID_GROUP_ID)
    if services.authorizer is not None and not authorize(services, ctx, DELETE, GROUP, gid):
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if manager is None:
        return error_response(request, header.api_version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    answer = coordinator(services).share_offsets_alterable(gid, False)
    error, message = await answer if isinstance(answer, asyncio.Future) else answer
    if error != ErrorCode.NONE:
        return error_response(request, header.api_version, error, message)
    topics = []
    for t in request.topics:
        name = t.topic_name
        info = services.metadata.topic(name)
        if info is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(R.DeleteShareGroupOffsetsResponseTopic(topic_name=name, error_code=code,
                                                                 error_message=code.message))
            continue
        if services.authorizer is not None and not authorize(services, ctx, READ, TOPIC, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            topics.append(R.DeleteShareGroupOffsetsResponseTopic(topic_name=name, error_code=code,
                                                                 error_message=code.message))
            continue
        persister = _share_offsets.network_persister(services)
        if persister is not None:
            found = await _share_offsets.summaries(persister, gid, [(info.topic_id, p)
                                                                    for p in range(info.num_partitions)])
            failed = [o.error for o in found.values() if o.error != ErrorCode.NONE]
            code = failed[0] if failed else ErrorCode.NONE
            partitions = [k[2] for k, o in sorted(found.items(), key=lambda kv: kv[0][2])
                          if _share_offsets.has_state(o)]
        else:
            code, partitions = await retry_state(
                services, partial(manager.initialized_partitions, gid, info.topic_id, info.num_partitions),
                lambda found: found[0])
        text: str | None = code.message
        if code == ErrorCode.NONE and not partitions:  # Kafka names the topic only, without its id
            topics.append(R.DeleteShareGroupOffsetsResponseTopic(
                topic_name=name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=NO_OFFSETS))
            continue
        if code == ErrorCode.NONE:
            if persister is not None:
                code = await _share_offsets.delete(services, persister, gid, [(info.topic_id, p) for p in partitions])
                if code == ErrorCode.NONE:  # the topic leaves the group's ShareGroupStatePartitionMetadata
                    await _share_offsets.awaited(coordinator(services).share_state_deleted(gid, {info.topic_id}))
            else:
                code = await retry_state(services, partial(manager.delete_start_offsets, gid, info.topic_id,
                                                           partitions), lambda e: e)
            text = None if code == ErrorCode.NONE else code.message
        topics.append(R.DeleteShareGroupOffsetsResponseTopic(topic_name=name, topic_id=info.topic_id,
                                                             error_code=code, error_message=text))
    return R(error_code=ErrorCode.NONE, error_message=None, responses=topics)
