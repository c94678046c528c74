"""OffsetDelete (key 47): delete committed offsets of a group (kafka-consumer-groups --delete-offsets).

Version 0. GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for an active non-consumer group,
GROUP_SUBSCRIBED_TO_TOPIC per partition of a topic an active consumer group still subscribes to.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize, filter_authorized
from kbroker.api._groups import coordinator, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from kbroker.security.acl import DELETE, GROUP, READ, TOPIC

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0

R = OffsetDeleteResponse


def error_response(request: OffsetDeleteRequest, version: int, error: ErrorCode) -> OffsetDeleteResponse:
    return R(error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: OffsetDeleteRequest) -> Any:
    if services.authorizer is not None and not authorize(services, ctx, DELETE, GROUP, request.group_id):
        # KafkaApis: DELETE on the group, else GROUP_AUTHORIZATION_FAILED.
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    errors: dict[tuple[str, int], ErrorCode] = {}
    known: list[tuple[str, int]] = []
    # KafkaApis.handleOffsetDeleteRequest: READ on each topic, else TOPIC_AUTHORIZATION_FAILED on its
    # partitions (existing or not).
    allowed = filter_authorized(services, ctx, READ, TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        exists = services.metadata.topic(t.name) is not None
        for p in t.partitions:
            if t.name not in allowed:
                errors[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif exists:
                known.append((t.name, p.partition_index))
            else:
                errors[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    answer = coordinator(services).delete_offsets(request.group_id, known)
    return then(answer, lambda a: to_response(request, errors, known, *a))


def to_response(request: OffsetDeleteRequest, errors: dict[tuple[str, int], ErrorCode], known: list[tuple[str, int]],
                error: ErrorCode, results: list[ErrorCode]) -> OffsetDeleteResponse:
    if error != ErrorCode.NONE:
        return R(error_code=error)
    errors.update(zip(known, results, strict=True))
    return R(error_code=ErrorCode.NONE, topics=[
        R.OffsetDeleteResponseTopic(name=t.name, partitions=[
            R.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                            error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions
        ])
        for t in request.topics
    ])
