"""ConsumerGroupHeartbeat (key 68): the KIP-848 consumer rebalance protocol's only request.

Versions 0-1 (v1: the consumer generates its member id, KIP-1082, and may subscribe by regular
expression). Joins (epoch 0), heartbeats, leaves (-1, static -2) and acknowledges revocations; the
answer carries the member's epoch and, when it changed or on a full request, its assignment. The group
state machine is `kbroker.coord.consumer_coordinator`; this module only converts the frames.
"""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.api._authz import authorize, filter_authorized
from kbroker.api._groups import client_host, coordinator, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.consumer_coordinator import HeartbeatRequestData, HeartbeatResult
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kbroker.security.acl import DESCRIBE, GROUP, READ, TOPIC

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1

R = ConsumerGroupHeartbeatResponse


def error_response(request: ConsumerGroupHeartbeatRequest, version: int, error: ErrorCode) -> R:
    return R(error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: ConsumerGroupHeartbeatRequest) -> Any:
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, request.group_id):
        # KafkaApis: READ on the group, else GROUP_AUTHORIZATION_FAILED.
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if services.authorizer is not None and request.subscribed_topic_names:
        # KafkaApis: DESCRIBE on every subscribed topic, else TOPIC_AUTHORIZATION_FAILED.
        names = set(request.subscribed_topic_names)
        if len(filter_authorized(services, ctx, DESCRIBE, TOPIC, names)) < len(names):
            return error_response(request, header.api_version, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    describe_filter = None
    if services.authorizer is not None and request.subscribed_topic_regex:
        # Kafka's TopicRegexResolver.filterTopicDescribeAuthorizedTopics: a regex subscription only
        # ever resolves to topics this member's principal may DESCRIBE.
        def describe_filter(names: set[str]) -> set[str]:
            return filter_authorized(services, ctx, DESCRIBE, TOPIC, names)
    owned: dict[uuid.UUID, set[int]] | None = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            owned.setdefault(tp.topic_id, set()).update(tp.partitions)
    answer = coordinator(services).consumer_group_heartbeat(HeartbeatRequestData(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if header.api_version >= 1 else None,
        server_assignor=request.server_assignor, owned=owned,
        client_id=header.client_id or "", client_host=client_host(ctx), api_version=header.api_version,
        topic_describe_filter=describe_filter,
    ))
    return then(answer, to_response)


def to_response(result: HeartbeatResult) -> R:
    if result.error != ErrorCode.NONE:
        return R(error_code=result.error, error_message=result.message)
    assignment = None
    if result.assignment is not None:
        assignment = R.Assignment(topic_partitions=[
            R.TopicPartitions(topic_id=tid, partitions=sorted(ps))
            for tid, ps in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))
        ])
    return R(error_code=ErrorCode.NONE, member_id=result.member_id, member_epoch=result.member_epoch,
             heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)
