"""ShareGroupHeartbeat (key 76): the KIP-932 share group protocol's membership request.

Version 1 (Kafka 4.3 serves only v1: the member generates its member id). Joins (epoch 0), heartbeats
and leaves (-1); the answer carries the member's epoch, the heartbeat interval and, on a join or when
it changed, the member's assignment (partitions shared with other members). The group state machine is
`kbroker.coord.share_group_protocol`; this module only converts the frames.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._groups import client_host, coordinator, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.consumer_coordinator import HeartbeatResult
from kbroker.coord.share_group_protocol import ShareHeartbeatRequestData
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from kbroker.security.acl import GROUP, READ

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1
VERSION_NOTES = ("Share groups (KIP-932): members, epochs and assignments written to __consumer_offsets "
                 "(share-group records 10-14), the `simple` assignor.")

R = ShareGroupHeartbeatResponse


def error_response(request: ShareGroupHeartbeatRequest, version: int, error: ErrorCode) -> R:
    return R(error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: ShareGroupHeartbeatRequest) -> Any:
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, request.group_id or ""):
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    answer = coordinator(services).share_group_heartbeat(ShareHeartbeatRequestData(
        group_id=request.group_id or "", member_id=request.member_id or "", member_epoch=request.member_epoch,
        rack_id=request.rack_id, subscribed_topic_names=request.subscribed_topic_names,
        client_id=header.client_id or "", client_host=client_host(ctx),
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
