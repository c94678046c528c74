"""Heartbeat (key 12): keeps a classic member's session alive; REBALANCE_IN_PROGRESS asks it to rejoin.

Versions 0-4 (v3 adds the group instance id).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._groups import coordinator, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from kbroker.security.acl import GROUP, READ

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


def error_response(request: HeartbeatRequest, version: int, error: ErrorCode) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: HeartbeatRequest) -> Any:
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, request.group_id):
        # KafkaApis: READ on the group, else GROUP_AUTHORIZATION_FAILED.
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    instance_id = request.group_instance_id if header.api_version >= 3 else None
    answer = coordinator(services).heartbeat(request.group_id, request.generation_id, request.member_id, instance_id)
    return then(answer, lambda error: HeartbeatResponse(error_code=error))
